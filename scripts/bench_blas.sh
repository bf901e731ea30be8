#!/usr/bin/env bash
# Compares the Debian BLAS candidates on the GPT-2 example's sgemm shapes; see docs/notes/cpu-blas.md.
# Usage: scripts/bench_blas.sh [THREADS...]   (default: 1 2)
# Env: N C V (rows, width, vocab; default 512 384 8192), REPS (default 15), ROUNDS (runs per case, default 2),
#      BENCH_DIR (build dir, default /tmp/strata-bench-blas), CORETYPES (OpenBLAS OPENBLAS_CORETYPE values to try,
#      default "Haswell Zen"; the library's own detection is always run too), NAIVE=0 skips the no-BLAS baseline.
# Installs nothing: candidates are libopenblas0-openmp, libopenblas0-pthread, libblis4-openmp, libblis4-pthread and
# libdnnl2 (libdnnl-dev); the ones not installed are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2)
n=${N:-512} c=${C:-384} v=${V:-8192} reps=${REPS:-15} rounds=${ROUNDS:-2}
dir=${BENCH_DIR:-/tmp/strata-bench-blas}
mkdir -p "$dir"
g++ -O3 -march=native -std=c++20 -fopenmp -Wall -Wextra scripts/bench_blas.cc -o "$dir/bench_blas" -ldl

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

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; N=$n C=$c V=$v reps=$reps"
for t in "${threads[@]}"; do
  for cs in "${cases[@]}"; do
    IFS='|' read -r name path api envt <<<"$cs"
    if [ "$path" != "-" ] && [ ! -e "$path" ]; then
      echo "## $name: $path not installed, skipped"
      continue
    fi
    # The naive loop is ~100x slower than a BLAS: one round of 3 calls is enough to place it.
    case_rounds=$rounds case_reps=$reps
    [ "$api" = naive ] && case_rounds=1 case_reps=3
    for r in $(seq 1 "$case_rounds"); do
      echo "## $name threads=$t round=$r env: ${envt//\{T\}/$t}"
      env ${envt//\{T\}/$t} OMP_PROC_BIND=false "$dir/bench_blas" "$path" "$api" "$t" "$n" "$c" "$v" "$case_reps"
    done
  done
done
