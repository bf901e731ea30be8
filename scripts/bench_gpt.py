#!/usr/bin/env python3
"""Tokens/s of train_gpt for each ZeRO stage, in one run, side by side (CPU backend by default).

The model of the issue: 6 layers, 384 wide, 6 heads, vocab 8192, sequence 256, on synthetic tokens (the spec's
generator). Prints a Markdown table of mean step time (steps >= 2), tokens/s and peak memory per rank.
Usage: scripts/bench_gpt.py [--np 2] [--steps 8] [--batch 2] [--stages 0,1,2,3] [--bin build/bin/train_gpt]
                            [--variants "STRATA_SHM=0;STRATA_SHM=1"] [-- extra train_gpt flags]
--variants runs every stage once per setting (';'-separated), interleaved, so a before/after comparison comes from one
run of the script. A setting is a ','-separated list of VAR=VALUE given to every rank, or train_gpt flags when it
starts with "--" (e.g. --variants "--compute-dtype f32;--compute-dtype bf16").
"""
import argparse
import json
import os
import subprocess
import sys


# The benchmark model: layers, width, heads, vocabulary, sequence (scripts/profile_cpu_step.py uses it too).
LAYERS, WIDTH, HEADS, VOCAB, SEQ = 6, 384, 6, 8192, 256


def mpirun(np_):
    return ["mpirun", "--oversubscribe", "-np", str(np_)] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def model_flags(batch, steps):
    return ["--layers", str(LAYERS), "--embd", str(WIDTH), "--heads", str(HEADS), "--vocab", str(VOCAB),
            "--ctx", str(SEQ), "--seq", str(SEQ), "--batch", str(batch), "--steps", str(steps), "--tokens", "1000000",
            "--no-progress"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--bin", default="build/bin/train_gpt", help="the train_gpt to run")
    ap.add_argument("--variants", default="", help="';'-separated environment settings to compare")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    mpi = mpirun(a.np)
    model = model_flags(a.batch, a.steps)
    rows = []
    variants = [v for v in a.variants.split(";") if v] or [""]
    for stage, variant in [(int(s), v) for s in a.stages.split(",") for v in variants]:
        flags = variant.split() if variant.startswith("--") else []
        env = [] if flags else [x for kv in variant.split(",") if kv for x in ("-x", kv)]
        cmd = mpi + env + [a.bin] + model + ["--zero-stage", str(stage)] + flags + a.extra
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        summary = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        peak = max(r["peak_bytes"]["total"] for r in summary["peak_memory"])
        rows.append((stage, variant, summary["mean_step_ms"], summary["tokens_per_s"], peak, summary["final_loss"],
                     summary["mean_comm_ms"], summary["exposed_comm_fraction"]))
        print(f"stage {stage}{' ' + variant if variant else ''}: {summary['mean_step_ms']:.0f} ms/step, "
              f"{summary['tokens_per_s']:.0f} tok/s", file=sys.stderr)
    base = rows[0][2]
    first = f"stage {rows[0][0]}" + (f", {rows[0][1]}" if rows[0][1] else "")
    print(f"| ZeRO |{' setting |' if a.variants else ''} mean step (ms) | tokens/s | step time vs {first} | "
          f"communication (ms) | exposed communication | peak MiB per rank | loss after {a.steps} steps |")
    print("|---|" + ("---|" if a.variants else "") + "---|---|---|---|---|---|---|")
    for stage, variant, ms, tps, peak, loss, comm, exposed in rows:
        # Communication is not timed on CUDA yet: train_gpt reports it as null there.
        comm_s = "n/a" if comm is None else f"{comm:.0f}"
        exposed_s = "n/a" if exposed is None else f"{100 * exposed:.1f}%"
        print(f"| {stage} |{' ' + variant + ' |' if a.variants else ''} {ms:.0f} | {tps:.0f} | {ms / base:.2f}x | "
              f"{comm_s} | {exposed_s} | "
              f"{peak / 2**20:.1f} | {loss:.4f} |")
    print(f"\n`{' '.join(mpi + [a.bin] + model + a.extra)} --zero-stage S`, "
          f"{a.np} ranks x {a.batch} rows x 256 tokens per step.")


if __name__ == "__main__":
    main()
