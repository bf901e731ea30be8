#!/usr/bin/env bash
# CPU collectives: Strata's Communicator (collectives_bench --backend cpu) beside a separate plain blocking MPI program
# (mpi_baseline_bench, which links MPI only), with the memory bound of each size, in one table per operation.
# Builds nothing.
# Usage: scripts/bench_collectives.sh   (about a minute per rank count on 2 cores at the defaults)
# Env: BUILD (build dir, default build), NP (ranks, default 2; a list such as "2 3 4" runs each in turn),
#      MIN / MAX / STEP (sizes, default 1K / 256M / 4), ITERS (timed iterations per row, default 20), MPIRUN_ARGS
#      (extra mpirun words, e.g. "--bind-to none"), STRATA_SHM (0 runs ours on the MPI path).
# Columns: size (bytes, as nccl-tests: all_gather's receive buffer, reduce_scatter's send buffer, all_reduce's
# buffer); busbw of ours and of the plain program (GB/s, the same formulas; the plain all_reduce is the faster of
# out of place and MPI_IN_PLACE, which skips Open MPI's first copy of the whole buffer); ratio, ours / plain; us,
# ours' time per operation; memcpy (GB/s of `size` bytes, every rank copying at once, measured by collectives_bench
# in the same run); bound, the busbw that moving the bytes each rank must read and write at that rate would give
# (collectives_bench.cc, bound_factor), and of_bound, ours over it; for all_reduce, rs+ag, the busbw of ours'
# reduce_scatter then all_gather of its output in each iteration (collectives_bench --op rs_ag), and ar/rs+ag;
# #wrong (ours, checked on exact data).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
nps=${NP:-2} min=${MIN:-1K} max=${MAX:-256M} step=${STEP:-4} iters=${ITERS:-20}
for b in collectives_bench mpi_baseline_bench; do
  [ -x "$BUILD/bin/$b" ] || { echo "bench_collectives.sh: $BUILD/bin/$b not built (cmake --build $BUILD)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One rank count: both programs, then the tables.
bench_np() {
  local np=$1
  local mpi=(mpirun -np "$np")
  [ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
  [ "$np" -gt "$(nproc)" ] && mpi+=(--oversubscribe)
  # shellcheck disable=SC2206
  mpi+=(${MPIRUN_ARGS:-})
  echo "# $(date -u '+%F %T UTC') $(hostname): nproc $(nproc), load average $(uptime | sed 's/.*load average: //')"
  echo "# ${mpi[*]}; STRATA_SHM=${STRATA_SHM:-1}"
  STRATA_BACKEND=cpu STRATA_LOG_LEVEL=warn "${mpi[@]}" "$BUILD/bin/collectives_bench" --backend cpu -b "$min" \
    -e "$max" -f "$step" -n "$iters" --op all_gather,reduce_scatter,all_reduce,rs_ag --no-baseline \
    --json "$work/ours.json" \
    >"$work/ours.txt" 2>&1 || { cat "$work/ours.txt" >&2; return 1; }
  "${mpi[@]}" "$BUILD/bin/mpi_baseline_bench" -b "$min" -e "$max" -f "$step" -n "$iters" >"$work/mpi.txt" 2>&1 ||
    { cat "$work/mpi.txt" >&2; return 1; }
  "${mpi[@]}" "$BUILD/bin/mpi_baseline_bench" -b "$min" -e "$max" -f "$step" -n "$iters" --op all_reduce --in-place \
    >"$work/mpi_in_place.txt" 2>&1 || { cat "$work/mpi_in_place.txt" >&2; return 1; }
  grep '^# MPI\|^# collectives_bench\|^# mpi_baseline_bench' "$work/ours.txt" "$work/mpi.txt" | sed 's/^[^:]*:#/#/' ||
    true
  python3 - "$work/ours.json" "$work/mpi.txt" "$work/mpi_in_place.txt" "$np" <<'EOF'
import json, sys

ours = {(r["op"], r["bytes"]): r for r in json.load(open(sys.argv[1]))}
n = int(sys.argv[4])


def plain_rows(path):
    rows, op = {}, None
    for line in open(path):
        words = line.split()
        if line.startswith("# ") and len(words) == 2:
            op = words[1]
        elif words and words[0].isdigit() and op:
            rows[(op, int(words[0]))] = float(words[6])  # busbw
    return rows


plain = plain_rows(sys.argv[2])
for key, busbw in plain_rows(sys.argv[3]).items():  # all_reduce: the faster of the two ways
    plain[key] = max(plain.get(key, 0.0), busbw)
nan = float("nan")
worst = 0
for name in ("all_gather", "reduce_scatter", "all_reduce"):
    halves = name == "all_reduce"
    head = f"#{'size':>11} {'busbw':>8} {'mpi_prog':>9} {'ratio':>6} {'us':>9} {'memcpy':>8} {'bound':>7} {'of_bound':>8}"
    print(f"#\n# {name}\n{head}" + (f" {'rs+ag':>7} {'ar/rs+ag':>8}" if halves else "") + f" {'#wrong':>7}")
    for (o, size), r in sorted(ours.items(), key=lambda kv: kv[0][1]):
        if o != name:
            continue
        busbw = plain.get((o, size), nan)
        ratio = r["busbw_gbs"] / busbw if busbw > 0 else nan
        wrong = r["wrong"]
        worst = max(worst, wrong or 0)
        memcpy = r.get("memcpy_gbs") or nan
        bound, of_bound = r.get("bound_gbs") or nan, r.get("of_bound") or nan
        line = (f"{size:>12} {r['busbw_gbs']:>8.2f} {busbw:>9.2f} {ratio:>6.2f} {r['time_us']:>9.1f} "
                f"{memcpy:>8.2f} {bound:>7.2f} {of_bound:>8.2f}")
        if halves:
            halves_size = size // 4 // n * n * 4  # the same buffer, rounded to whole parts (f32)
            rs_ag = ours.get(("rs_ag", halves_size))
            both = 2.0 * (n - 1) / n * size / (rs_ag["time_us"] * 1e3) if rs_ag else nan
            line += f" {both:>7.2f} {r['busbw_gbs'] / both if both > 0 else nan:>8.2f}"
        print(line + f" {wrong:>7}")
print("#\n# busbw, memcpy and bound in GB/s; ratio = ours / plain MPI program;", "OK" if worst == 0 else "WRONG VALUES")
sys.exit(1 if worst else 0)
EOF
}

rc=0
for np in $nps; do
  bench_np "$np" || rc=1
done
exit "$rc"
