#!/usr/bin/env bash
# Compares the Debian BLAS candidates on the GPT-2 example's sgemm shapes; see docs/notes/cpu-blas.md.
# Usage: scripts/bench_blas.sh [THREADS...]   (default: 1 2)
#        LIBS="onednn blis-openmp" scripts/bench_blas.sh 2     (only the named cases)
# Env: N C V (rows, width, vocab; default 512 384 8192), REPS (default 20), ROUNDS (runs per case, default 3),
#      BENCH_DIR (build dir, default /tmp/strata-bench-blas), CORETYPES (OpenBLAS OPENBLAS_CORETYPE values to try,
#      default "Haswell Zen"; the library's own detection is always run too), NAIVE=0 skips the no-BLAS baseline,
#      BUSY=1 runs one competing busy-loop process meanwhile (how a library copes with a core it does not own).
# Installs nothing: candidates are libopenblas0-openmp, libopenblas0-pthread, libblis4-openmp, libblis4-pthread and
# libdnnl2 (libdnnl-dev); the ones not installed are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2)
n=${N:-512} c=${C:-384} v=${V:-8192} reps=${REPS:-20} rounds=${ROUNDS:-3}
dir=${BENCH_DIR:-/tmp/strata-bench-blas}
mkdir -p "$dir"
g++ -O3 -march=native -std=c++20 -fopenmp -Wall -Wextra tools/bench_blas.cc -o "$dir/bench_blas" -ldl

lib=/usr/lib/x86_64-linux-gnu
# name | path | api | environment template ({T} = thread count)
cases=(
  "openblas-openmp|$lib/openblas-openmp/libopenblas.so.0|cblas|OMP_NUM_THREADS={T}"
  "openblas-pthread|$lib/openblas-pthread/libopenblas.so.0|cblas|OPENBLAS_NUM_THREADS={T} OMP_NUM_THREADS=1"
  "blis-openmp|$lib/blis-openmp/libblis.so.4|cblas|OMP_NUM_THREADS={T} BLIS_NUM_THREADS={T}"
  "blis-pthread|$lib/blis-pthread/libblis.so.4|cblas|BLIS_NUM_THREADS={T} OMP_NUM_THREADS=1"
  "onednn|$lib/libdnnl.so.2|dnnl|OMP_NUM_THREADS={T}"
)
[ "${NAIVE:-1}" = 1 ] && cases=("naive-omp|-|naive|OMP_NUM_THREADS={T}" "${cases[@]}")
for ct in ${CORETYPES-Haswell Zen}; do
  cases+=("openblas-openmp[$ct]|$lib/openblas-openmp/libopenblas.so.0|cblas|OMP_NUM_THREADS={T} OPENBLAS_CORETYPE=$ct")
done

if [ -n "${LIBS:-}" ]; then
  selected=()
  for cs in "${cases[@]}"; do
    for want in $LIBS; do [ "${cs%%|*}" = "$want" ] && selected+=("$cs"); done
  done
  cases=("${selected[@]}")
fi

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; N=$n C=$c V=$v reps=$reps"
if [ "${BUSY:-0}" = 1 ]; then
  (while :; do :; done) &
  busy_pid=$!
  trap 'kill "$busy_pid"' EXIT
  echo "# BUSY: a busy loop (pid $busy_pid) competes for the cores"
fi

# Rounds are the outer loop so that a burst of load from elsewhere hits every library alike, not one of them.
for r in $(seq 1 "$rounds"); do
  for t in "${threads[@]}"; do
    for cs in "${cases[@]}"; do
      IFS='|' read -r name path api envt <<<"$cs"
      if [ "$path" != "-" ] && [ ! -e "$path" ]; then
        [ "$r" = 1 ] && echo "## $name: $path not installed, skipped"
        continue
      fi
      # The naive loop is ~20x slower than a BLAS: one round of 3 calls is enough to place it.
      case_reps=$reps
      if [ "$api" = naive ]; then
        [ "$r" != 1 ] && continue
        case_reps=3
      fi
      echo "## $name threads=$t round=$r env: ${envt//\{T\}/$t}"
      env ${envt//\{T\}/$t} OMP_PROC_BIND=false "$dir/bench_blas" "$path" "$api" "$t" "$n" "$c" "$v" "$case_reps"
    done
  done
done
