#!/usr/bin/env bash
# The main job (scripts/run.sh) killed with kill -9 half-way and resumed with --resume: the losses after the resume
# equal the uninterrupted run's, bitwise. Runs the job three times (about 3 minutes on 2 cores):
#   1. uninterrupted, 500 steps;
#   2. with --checkpoint-dir and --checkpoint-every 50, killed (kill -9 of one rank) once it has printed step 250;
#   3. the same command with --resume, to step 500.
# Usage: scripts/check_resume.sh   (after scripts/setup.sh; STRATA_TRAIN_GPT=PATH to use another train_gpt)
set -euo pipefail
cd "$(dirname "$0")/.."
export STRATA_TRAIN_GPT=${STRATA_TRAIN_GPT:-build/bin/train_gpt}
work=$(mktemp -d /tmp/strata-resume.XXXXXX)
trap 'rm -rf "$work"' EXIT
ckpt="$work/checkpoints"
common=(--no-progress --checkpoint-every 50)

echo "check_resume: 1/3 the uninterrupted job"
scripts/run.sh --no-progress --metrics "$work/full.jsonl" >"$work/full.log" 2>&1

echo "check_resume: 2/3 the job with checkpoints, killed half-way"
scripts/run.sh "${common[@]}" --checkpoint-dir "$ckpt" --metrics "$work/killed.jsonl" >"$work/killed.log" 2>&1 &
job=$!
until grep -q '^step 250 ' "$work/killed.log" 2>/dev/null; do
  if ! kill -0 "$job" 2>/dev/null; then echo "check_resume: the job ended before step 250" >&2; exit 1; fi
  sleep 0.2
done
# One rank dies as under a node failure; mpirun then ends the others.
victim=$(pgrep -f -n -- "--checkpoint-dir $ckpt" | head -n 1)
kill -9 "$victim"
status=0
wait "$job" || status=$?
echo "check_resume: killed rank pid $victim at step $(grep -c '^step ' "$work/killed.log"); the job exited with $status"
[ "$status" -ne 0 ] || { echo "check_resume: the killed job reported success" >&2; exit 1; }
latest=$(cat "$ckpt/latest")
echo "check_resume: latest committed checkpoint: $latest"

echo "check_resume: 3/3 --resume"
scripts/run.sh "${common[@]}" --checkpoint-dir "$ckpt" --resume --metrics "$work/resumed.jsonl" >"$work/resumed.log" 2>&1
grep '^train_gpt: resumed from' "$work/resumed.log"

# Every step the resumed job ran, against the uninterrupted job's same step: loss and grad_norm as JSON prints them
# (the shortest text that reads back to the same double).
fields() { grep -o '"\(grad_norm\|loss\|step\)":[^,}]*' "$1" | paste -d' ' - - -; }
first=$(head -n 1 "$work/resumed.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
steps=$(wc -l <"$work/resumed.jsonl")
if diff <(fields "$work/full.jsonl" | tail -n "$steps") <(fields "$work/resumed.jsonl") >"$work/diff.txt"; then
  echo "check_resume: PASS: steps $first-$((first + steps - 1)) after the resume equal the uninterrupted run bitwise" \
       "($steps losses and gradient norms)"
else
  echo "check_resume: FAIL: the resumed losses differ:" >&2
  head -n 10 "$work/diff.txt" >&2
  exit 1
fi
