#!/usr/bin/env python3
"""The document's recomputation claim, measured: activation memory against compute for each --recompute policy.

Part 1 (measured, one run of this script): the benchmark model of scripts/bench_gpt.py (6 layers, 384 wide, 6 heads,
vocabulary 8192, sequence 256) at np 2, ZeRO 3, 2 rows a rank; every policy once per round, the rounds interleaved.
Per policy: mean step time (train_gpt's, steps >= 2; the median over the rounds), the ledger's activations and the
workspace a policy adds (the rebuilt set, offload's staging), the FLOPs run again (train_gpt's count) and activation
offload's host bytes.
Part 2 (the planner): GPT-2 124M at sequence 1024 and 4096, one sequence a device, bf16 (strata-plan: Korthikanti's
terms, the logits aside), per policy.
Part 3 (the planner checked against the ledger at a size this machine runs): GPT-2 124M at sequence 1024, 1 row, np 1,
one train_gpt step per policy: train_gpt's own prediction (f32) beside the ledger, activations and workspace.

"Activation memory" is what the blocks keep for the backward: the ledger's activations plus the workspace a policy adds
over keeping everything, so "less" is what the device saves. Each row reads "X% more compute (Y% more time) for Z% less
activation memory". Usage: scripts/bench_recompute.py [--rounds 3] [--steps 8] [--skip-124m] [--bin build/bin]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

LAYERS, WIDTH, HEADS, VOCAB, SEQ = 6, 384, 6, 8192, 256  # scripts/bench_gpt.py's model
POLICIES = [("none", []), ("mlp", ["--recompute", "mlp"]), ("attention", ["--recompute", "attention"]),
            ("full, every 2nd block", ["--recompute", "full", "--recompute-every", "2"]),
            ("full", ["--recompute", "full"]), ("offload", ["--recompute", "offload"])]


def mpirun(np_):
    return ["mpirun", "--oversubscribe", "-np", str(np_)] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def summary_of(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def pct(x):
    return f"{100 * x:+.1f}%"


def measured(a):
    model = ["--layers", str(LAYERS), "--embd", str(WIDTH), "--heads", str(HEADS), "--vocab", str(VOCAB), "--ctx",
             str(SEQ), "--seq", str(SEQ), "--batch", "2", "--steps", str(a.steps), "--tokens", "1000000",
             "--no-progress", "--zero-stage", "3"]
    runs = {name: [] for name, _ in POLICIES}
    for r in range(a.rounds):
        for name, flags in POLICIES:
            s = summary_of(mpirun(2) + [os.path.join(a.bin, "train_gpt")] + model + flags)
            runs[name].append(s)
            print(f"round {r + 1}: {name}: {s['mean_step_ms']:.1f} ms/step", file=sys.stderr)
    base = runs["none"][0]
    peak0 = base["step0_memory_rank0"]["measured"]
    acts0, work0 = peak0["activations"], peak0["workspace"]
    time0 = statistics.median(s["mean_step_ms"] for s in runs["none"])
    print(f"### Measured: {LAYERS} layers x {WIDTH}, sequence {SEQ}, 2 rows a rank, np 2, ZeRO 3 "
          f"(median of {a.rounds} interleaved rounds of {a.steps} steps)\n")
    print("| policy | step (ms) | time | FLOPs run again | activations (MiB) | + workspace (MiB) | activation memory "
          "| host (MiB) | losses equal to none |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _ in POLICIES:
        s = runs[name][0]
        m = s["step0_memory_rank0"]["measured"]
        t = statistics.median(x["mean_step_ms"] for x in runs[name])
        extra = s["recompute"]["flops_per_token"] / s["flops_per_token"]
        act = m["activations"] + m["workspace"] - work0
        same = all(x["final_loss"] == base["final_loss"] for x in runs[name])
        print(f"| {name} | {t:.1f} | {pct(t / time0 - 1)} | {pct(extra)} | {m['activations'] / 2**20:.2f} | "
              f"{(m['workspace'] - work0) / 2**20:.2f} | {pct(act / acts0 - 1)} | "
              f"{s['recompute']['offload_host_bytes'] / 2**20:.2f} | {'yes' if same else 'NO'} |")
    print()


def planned(a):
    print("### Planner: GPT-2 124M, 1 sequence a device, bf16 activations (strata-plan), logits aside\n")
    print("| sequence | policy | activations (GB) | of none | FLOPs run again (of the model's) |")
    print("|---|---|---|---|---|")
    for seq in (1024, 4096):
        base = None
        for name, flags in POLICIES:
            cmd = [os.path.join(a.bin, "strata-plan"), "--layers", "12", "--hidden", "768", "--heads", "12", "--vocab",
                   "0", "--seq", str(seq), "--micro-batch", "1", "--dp", "1", "--zero-stage", "0", "--json"] + flags
            p = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout)
            if base is None:
                base = p["activations"]
            h, layers = 768, 12
            params = layers * (12 * h * h + 13 * h) + 50257 * h + 2 * h  # train_gpt's count (wte, not wpe)
            model_flops = (6 * params + 12 * layers * h * seq) * seq  # per sequence, as train_gpt counts
            print(f"| {seq} | {name} | {p['activations'] / 1e9:.3f} | {pct(p['activations'] / base - 1)} | "
                  f"{pct(p['recompute_flops'] / model_flops)} |")
    print()


def ledger(a):
    print("### GPT-2 124M at sequence 1024, 1 row, np 1: train_gpt's prediction (f32) against the ledger\n")
    print("| policy | activations predicted | measured | workspace predicted | measured | activation memory | "
          "FLOPs run again |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for name, flags in POLICIES:
        cmd = mpirun(1) + [os.path.join(a.bin, "train_gpt"), "--model", "gpt2-124m", "--seq", "1024", "--batch", "1",
                           "--steps", "1", "--tokens", "100000", "--no-progress", "--zero-stage", "0"] + flags
        s = summary_of(cmd)
        p, m = s["step0_memory_rank0"]["predicted"], s["step0_memory_rank0"]["measured"]
        if base is None:
            base = m
        act = m["activations"] + m["workspace"] - base["workspace"]
        print(f"| {name} | {p['activations']} | {m['activations']} | {p['workspace']} | {m['workspace']} | "
              f"{pct(act / base['activations'] - 1)} | "
              f"{pct(s['recompute']['flops_per_token'] / s['flops_per_token'])} |", flush=True)
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--skip-124m", action="store_true", help="leave out part 3 (about 15 s a policy here)")
    a = ap.parse_args()
    measured(a)
    planned(a)
    if not a.skip_124m:
        ledger(a)


if __name__ == "__main__":
    main()
