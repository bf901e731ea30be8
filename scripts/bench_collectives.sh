#!/usr/bin/env bash
# CPU collectives: Strata's Communicator (collectives_bench --backend cpu) beside a separate plain blocking MPI program
# (mpi_baseline_bench, which links MPI only) and single-thread memcpy, in one table per operation. Builds nothing.
# Usage: scripts/bench_collectives.sh   (about a minute on 2 cores at the defaults)
# Env: BUILD (build dir, default build), NP (ranks, default 2), MIN / MAX / STEP (sizes, default 1K / 256M / 4),
#      ITERS (timed iterations per row, default 20), MPIRUN_ARGS (extra mpirun words, e.g. "--bind-to none"),
#      STRATA_SHM (0 runs ours on the MPI path).
# Columns: size (bytes, as nccl-tests: all_gather's receive buffer, reduce_scatter's send buffer, all_reduce's
# buffer), busbw of ours and of the plain program (GB/s, the same formulas), ours / plain, memcpy GB/s of `size`
# bytes (every rank copying at once, the ceiling of a host copy), and #wrong (ours, checked on exact data).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
np=${NP:-2} min=${MIN:-1K} max=${MAX:-256M} step=${STEP:-4} iters=${ITERS:-20}
for b in collectives_bench mpi_baseline_bench; do
  [ -x "$BUILD/bin/$b" ] || { echo "bench_collectives.sh: $BUILD/bin/$b not built (cmake --build $BUILD)" >&2; exit 1; }
done
mpi=(mpirun -np "$np")
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
[ "$np" -gt "$(nproc)" ] && mpi+=(--oversubscribe)
# shellcheck disable=SC2206
mpi+=(${MPIRUN_ARGS:-})
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# $(date -u '+%F %T UTC') $(hostname): nproc $(nproc), load average $(uptime | sed 's/.*load average: //')"
echo "# ${mpi[*]}; STRATA_SHM=${STRATA_SHM:-1}"
STRATA_BACKEND=cpu STRATA_LOG_LEVEL=warn "${mpi[@]}" "$BUILD/bin/collectives_bench" --backend cpu -b "$min" -e "$max" \
  -f "$step" -n "$iters" --op all_gather,reduce_scatter,all_reduce --no-baseline --json "$work/ours.json" \
  >"$work/ours.txt" 2>&1 || { cat "$work/ours.txt" >&2; exit 1; }
"${mpi[@]}" "$BUILD/bin/mpi_baseline_bench" -b "$min" -e "$max" -f "$step" -n "$iters" >"$work/mpi.txt" 2>&1 ||
  { cat "$work/mpi.txt" >&2; exit 1; }
grep '^# MPI\|^# collectives_bench\|^# mpi_baseline_bench' "$work/ours.txt" "$work/mpi.txt" | sed 's/^[^:]*:#/#/' || true

python3 - "$work/ours.json" "$work/mpi.txt" <<'EOF'
import json, sys

ours = {(r["op"], r["bytes"]): r for r in json.load(open(sys.argv[1]))}
plain, op = {}, None
for line in open(sys.argv[2]):
    words = line.split()
    if line.startswith("# ") and len(words) == 2:
        op = words[1]
    elif words and words[0].isdigit() and op:
        plain[(op, int(words[0]))] = (float(words[6]), float(words[7]))  # busbw, memcpy
worst = 0
for name in ("all_gather", "reduce_scatter", "all_reduce"):
    print(f"#\n# {name}\n#{'size':>11} {'busbw':>8} {'mpi_prog':>9} {'ratio':>6} {'memcpy':>8} {'#wrong':>7}")
    for (o, size), r in sorted(ours.items(), key=lambda kv: kv[0][1]):
        if o != name:
            continue
        busbw, memcpy = plain.get((o, size), (float("nan"), float("nan")))
        ratio = r["busbw_gbs"] / busbw if busbw > 0 else float("nan")
        wrong = r["wrong"]
        worst = max(worst, wrong or 0)
        print(f"{size:>12} {r['busbw_gbs']:>8.2f} {busbw:>9.2f} {ratio:>6.2f} {memcpy:>8.2f} {wrong:>7}")
print("#\n# busbw and memcpy in GB/s; ratio = ours / plain MPI program;", "OK" if worst == 0 else "WRONG VALUES")
sys.exit(1 if worst else 0)
EOF
