#!/usr/bin/env bash
# Bitwise comparison of train_gpt's per-step losses and gradient norms between this tree and another commit:
# 20 steps at ZeRO 0-3, np 1, 2 and 4, param dtype f32 and bf16 (24 runs), then the model-parallel layouts at np 4
# (tp 2 x dp 2, the same with sequence parallelism, pp 2 x tp 2 with 1F1B; 3 runs) each side. A change that must not
# alter the arithmetic (a restructuring) passes with "27/27 bitwise equal".
# Usage: scripts/compare_losses.sh COMMIT          builds COMMIT's train_gpt in build-compare/ (a git worktree)
#        scripts/compare_losses.sh --base-bin PATH  compares with an already built train_gpt
# The new side is build/bin/train_gpt (STRATA_TRAIN_GPT=PATH to override). Extra train_gpt flags: STRATA_COMPARE_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."

base_bin=""
if [ "${1:-}" = --base-bin ]; then
  base_bin=$2
elif [ -n "${1:-}" ]; then
  commit=$(git rev-parse --verify "$1^{commit}")
  tree=build-compare/src
  if [ ! -d "$tree" ] || [ "$(git -C "$tree" rev-parse HEAD 2>/dev/null)" != "$commit" ]; then
    git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
    git worktree add --detach "$tree" "$commit" >/dev/null
  fi
  cmake -S "$tree" -B build-compare/build -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF -DSTRATA_BUILD_TESTS=OFF \
    >build-compare/configure.log
  cmake --build build-compare/build -j"$(nproc)" --target train_gpt >build-compare/build.log
  base_bin=build-compare/build/bin/train_gpt
else
  echo "usage: $0 COMMIT | --base-bin PATH" >&2
  exit 2
fi
new_bin=${STRATA_TRAIN_GPT:-build/bin/train_gpt}
[ -x "$base_bin" ] && [ -x "$new_bin" ] || { echo "compare_losses: need $base_bin and $new_bin" >&2; exit 2; }

out=build-compare/runs
mkdir -p "$out"
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
export STRATA_LOG_LEVEL=warn STRATA_BACKEND=cpu
# "loss" and "grad_norm" as nlohmann::json prints them: the shortest text that reads back to the same double.
fields() { grep -o '"\(loss\|grad_norm\)":[^,}]*' "$1"; }

total=0 equal=0
# compare NAME NP FLAGS...: one run of each binary, judged bitwise on every step's loss and gradient norm.
compare() {
  local name=$1 np=$2
  shift 2
  local args=(--steps 20 --no-progress "$@" ${STRATA_COMPARE_FLAGS:-})
  "${mpi[@]}" -np "$np" "$base_bin" "${args[@]}" --metrics "$out/$name.base.jsonl" >"$out/$name.base.log" 2>&1
  "${mpi[@]}" -np "$np" "$new_bin" "${args[@]}" --metrics "$out/$name.new.jsonl" >"$out/$name.new.log" 2>&1
  total=$((total + 1))
  local steps
  steps=$(grep -c '"loss"' "$out/$name.new.jsonl" || true)
  if [ "$steps" -eq 20 ] && diff <(fields "$out/$name.base.jsonl") <(fields "$out/$name.new.jsonl") >/dev/null; then
    equal=$((equal + 1))
    printf '%-22s bitwise equal (20 losses, 20 grad norms; last loss %s)\n' "$name" \
      "$(fields "$out/$name.new.jsonl" | grep loss | tail -n 1 | cut -d: -f2)"
  else
    printf '%-22s DIFFERENT (%s steps):\n' "$name" "$steps"
    diff <(fields "$out/$name.base.jsonl") <(fields "$out/$name.new.jsonl") | head -n 6 || true
  fi
}
for np in 1 2 4; do
  for stage in 0 1 2 3; do
    for dtype in f32 bf16; do
      compare "np${np}_zero${stage}_${dtype}" "$np" --zero-stage "$stage" --param-dtype "$dtype"
    done
  done
done
compare np4_tp2_dp2 4 --zero-stage 3 --tp 2
compare np4_tp2_dp2_sp 4 --zero-stage 3 --tp 2 --sequence-parallel
compare np4_pp2_tp2 4 --zero-stage 3 --pp 2 --tp 2 --pp-schedule 1f1b --microbatches 4
echo "compare_losses: $equal/$total bitwise equal ($base_bin vs $new_bin)"
[ "$equal" -eq "$total" ]
