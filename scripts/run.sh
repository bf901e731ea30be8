#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs Strata's main job: train_gpt trains a byte-level GPT-2 (vocab 256) on a
# text that ships with the OS (the GPL-3 licence text, its last 6000 bytes held out) on 2 ranks with ZeRO-3 for about
# a minute; the loss falls from about 5.5 (log 256) to about 2, the validation loss on the held-out bytes is printed
# every 100 steps and at the end, and strata-generate prints a sample of what the model learned. The backend is train_gpt's default, auto: CUDA + NCCL where each of the 2
# ranks has a GPU of its own, else the CPU backend (NCCL refuses two ranks on one GPU; a machine with one GPU says so
# and runs on the CPU).
# Extra arguments go to train_gpt (e.g. --steps 200, --zero-stage 2, --text FILE).
# STRATA_TRAIN_GPT=PATH runs that train_gpt without setting up, and STRATA_RUN_NP=N on N ranks (scripts/gpu/gpu_check.sh
# runs this job on one GPU so).
set -euo pipefail
cd "$(dirname "$0")/.."
train_gpt=${STRATA_TRAIN_GPT:-build/bin/train_gpt}
[ -n "${STRATA_TRAIN_GPT:-}" ] || scripts/setup.sh
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text=README.md
# A --text among the extra arguments replaces the licence (and is split the same way).
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--text" ] && [ $# -ge 2 ]; then text=$2; shift 2; else args+=("$1"); shift; fi
done
# The text's last 6000 bytes are the validation set, the rest the training set.
split=$(mktemp -d)
trap 'rm -rf "$split"' EXIT
head -c -6000 "$text" > "$split/train.txt"
tail -c 6000 "$text" > "$split/val.txt"
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
mpirun "${mpi_flags[@]}" -np "${STRATA_RUN_NP:-2}" "$train_gpt" --text "$split/train.txt" --val-text "$split/val.txt" \
  --eval-every 100 --eval-steps 8 --layers 4 --heads 4 --embd 128 --ctx 128 --seq 128 --batch 8 --steps 500 \
  --lr 2e-3 --warmup 30 --cosine --zero-stage 3 --checkpoint-dir "$split/ckpt" ${args[@]+"${args[@]}"}
# A sample of what the model learned: 300 bytes after a prompt, sampled from its final checkpoint.
generate=$(dirname "$train_gpt")/strata-generate
if [ -x "$generate" ]; then
  echo "--- sampled from the trained model (strata-generate --checkpoint, temperature 0.8, top-k 40):"
  STRATA_LOG_LEVEL=warn "$generate" --checkpoint "$split/ckpt" --prompt "This License" --max-new-tokens 300 --temperature 0.8 --top-k 40 \
    --seed 1 --quiet | cut -f2-
  echo
fi
