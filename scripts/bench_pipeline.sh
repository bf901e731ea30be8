#!/usr/bin/env bash
# Pipeline parallelism at np 2 on the CPU backend: the bubble of each schedule, and dp 2 vs pp 2 throughput.
# Usage: scripts/bench_pipeline.sh [OUT.md]   (default /tmp/bench_pipeline.md; about 2.5 minutes on 2 cores)
# Every configuration runs ROUNDS times (default 2), rounds outermost; the tables pool the rounds' steps.
# Part 1 (bubble): an 8-layer GPT (256 wide, 4 heads, seq 64, vocab 64: the LM head is small, so both stages do the
#   same work, as the theory assumes) on pp 2, gpipe and 1f1b at M = 2, 4, 8
#   micro-batches and interleaved (--pp-virtual 2) at M = 4, 8, STEPS steps each with --trace; for each rank and each
#   step >= 2, idle share = 1 - (the rank's F/B "pipeline" span time) / (the step's first action start to last action
#   end over all ranks), delimited per step by the ranks' "optimizer step" spans (scripts/pipeline_bubble.py says
#   how); the mean over ranks and steps, and the median step (its mean over ranks), beside (P-1)/(V*M+P-1).
# Part 2 (throughput): dp 2 vs pp 2 1f1b at M = 4 and 8 on the same model and global batch of BATCH rows, no trace:
#   tokens/s and step ms (mean of steps >= 2 of train_gpt's "step N" lines), peak ledger memory per rank.
# Part 3: the text timeline of one steady 1F1B step (pp 2, M = 4, step 3) from the first round's part-1 trace.
# Env: BUILD (build dir, default build), BATCH (global rows per step, default 32), STEPS (part 1, default 8),
#      TSTEPS (part 2, default 8), ROUNDS (default 2), WORK (traces and logs kept here; its *.json and *.log
#      are removed first; default /tmp/bench_pipeline).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-/tmp/bench_pipeline.md}
BUILD=${BUILD:-build}
bin=$BUILD/bin/train_gpt
batch=${BATCH:-32} steps=${STEPS:-8} tsteps=${TSTEPS:-8} rounds=${ROUNDS:-2}
work=${WORK:-/tmp/bench_pipeline}
helper=scripts/pipeline_bubble.py
model=(--layers 8 --embd 256 --heads 4 --seq 64 --ctx 64 --vocab 64 --no-progress)
mpi=(mpirun --bind-to none -np 2)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
export STRATA_BACKEND=cpu STRATA_LOG_LEVEL=warn
mkdir -p "$work"
rm -f "$work"/*.json "$work"/*.log "$work"/bubble.err

# run NAME ARGS...: one np-2 train_gpt run, its stdout and stderr kept in $work/NAME.log.
run() {
  local name=$1
  shift
  "${mpi[@]}" "$bin" "${model[@]}" "$@" >"$work/$name.log" 2>&1 || {
    tail -20 "$work/$name.log" >&2
    exit 1
  }
}

{
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, np 2 (no" \
    "oversubscription); load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)."
  echo "Model: ${model[*]}; global batch $batch rows."
  echo
  echo "## Bubble: pp 2, $steps steps x $rounds rounds, mean over ranks, rounds and steps >= 2"
  echo
  echo "| schedule | M | V | steps | step wall ms | idle, mean | idle, median step | idle rank 0 / 1 |" \
    "theory (P-1)/(V*M+P-1) | mean / theory | median / theory |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
} >"$out.tmp"
cat "$out.tmp"

bubbles=("gpipe 2 1" "gpipe 4 1" "gpipe 8 1" "1f1b 2 1" "1f1b 4 1" "1f1b 8 1" "interleaved 4 2" "interleaved 8 2")
layouts=("dp2|--batch $((batch / 2))" "pp2-1f1b-m4|--pp 2 --pp-schedule 1f1b --microbatches 4 --batch $batch"
  "pp2-1f1b-m8|--pp 2 --pp-schedule 1f1b --microbatches 8 --batch $batch")
# Rounds are the outer loop so that a burst of load from elsewhere hits every configuration alike.
for r in $(seq 1 "$rounds"); do
  for b in "${bubbles[@]}"; do
    read -r sched m v <<<"$b"
    echo "# round $r: $sched M=$m V=$v" >&2
    run "$sched-m$m-v$v-r$r" --pp 2 --pp-schedule "$sched" --pp-virtual "$v" --microbatches "$m" --batch "$batch" \
      --steps "$steps" --trace "$work/$sched-m$m-v$v-r$r.json"
  done
  for l in "${layouts[@]}"; do
    echo "# round $r: ${l%%|*}" >&2
    # shellcheck disable=SC2086 # the layout's flags are split on purpose
    run "${l%%|*}-r$r" ${l#*|} --steps "$tsteps"
  done
done

for b in "${bubbles[@]}"; do
  read -r sched m v <<<"$b"
  python3 "$helper" bubble "$work/$sched-m$m-v$v"-r*.json --pp 2 --microbatches "$m" --virtual "$v" --label "$sched" \
    2>>"$work/bubble.err" | tee -a "$out.tmp"
done

{
  echo
  echo "## Throughput: same model and global batch of $batch rows, $tsteps steps x $rounds rounds, mean of steps >= 2"
  echo
  echo "| layout (np 2) | global rows/step | steps | step ms | tokens/s | vs dp 2 | peak MiB rank 0 / 1 |" \
    "activations MiB rank 0 / 1 | final loss |"
  echo "|---|---|---|---|---|---|---|---|---|"
} | tee -a "$out.tmp"
ref=$(python3 "$helper" throughput "$work"/dp2-r*.log 2>&1 >/dev/null)
for l in "${layouts[@]}"; do
  name=${l%%|*}
  label=$(sed -e 's/^dp2$/dp 2/' -e 's/^pp2-1f1b-m\(.*\)/pp 2, 1f1b, M = \1/' <<<"$name")
  python3 "$helper" throughput "$work/$name"-r*.log --label "$label" --rows "$batch" --ref "$ref" 2>/dev/null |
    tee -a "$out.tmp"
done

{
  echo
  echo "## Timeline of one steady 1F1B step (pp 2, M = 4, step 3)"
  echo
  echo '```'
  python3 "$helper" timeline "$work/1f1b-m4-v1-r1.json" --step 3 --width 72
  echo '```'
} | tee -a "$out.tmp"
mv "$out.tmp" "$out"
echo "# steps delimited by: $(grep -h 'delimited by' "$work/bubble.err" | sed 's/.*delimited by //' | sort -u |
  paste -sd,)"
grep -h warning "$work/bubble.err" || true
echo "# tables written to $out; traces and logs in $work"
