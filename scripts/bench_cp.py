#!/usr/bin/env python3
"""Context parallelism on the 6-layer GPT at np 2: dp 2 vs cp 2 at a long sequence, in one run.

The layouts train the same 6-layer model (384 wide, 6 heads, vocab 8192, ZeRO-3). dp 2 and cp 2 take the same 2 rows
of SEQ tokens a step: dp 2 gives each rank a whole row, cp 2 gives each rank half of both rows (two mirrored chunks of
each) and runs ring attention. "cp 2, one row a step" holds half of one row per rank: what a row needs per rank when it
is split, against a whole row per rank under dp. The script prints, per layout, tokens/s (median over the runs of the
mean after the second step), the peak memory per rank by category (the ledger, rank 0) and the final loss; for cp 2,
the bytes each step sent round the ring beside the prediction (train_gpt --metrics: cp_bytes, predicted_cp_bytes).
Prints Markdown tables.
Usage: scripts/bench_cp.py [--seq 2048] [--steps 4] [--bin build/bin/train_gpt] [--repeat 1]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tp import mib, train_gpt  # noqa: E402  (the same runner and units as the tp benchmark)

MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--vocab", "8192", "--zero-stage", "3", "--no-progress",
         "--lr", "1e-4"]
LAYOUTS = [("dp 2", ["--batch", "1"]), ("cp 2", ["--cp", "2", "--batch", "2"]),
           ("cp 2, one row a step", ["--cp", "2", "--batch", "1"])]


def run(args, binary, steps, seq):
    return train_gpt(2, MODEL + ["--seq", str(seq), "--ctx", str(seq), "--steps", str(steps)] + args, binary)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--bin", default="build/bin/train_gpt")
    ap.add_argument("--repeat", type=int, default=1, help="run the two layouts this many times, interleaved")
    a = ap.parse_args()
    results = {name: [] for name, _ in LAYOUTS}
    for _ in range(a.repeat):
        for name, args in LAYOUTS:
            results[name].append(run(args, a.bin, a.steps, a.seq))
    print(f"| layout (np 2, sequence {a.seq}) | tokens/s, median (range) | vs dp 2 | peak MiB per rank | "
          "activations MiB | comm_buffer MiB | workspace MiB | final loss |")
    print("|---|---|---|---|---|---|---|---|")
    base = None
    for name, _ in LAYOUTS:
        runs = results[name]
        toks = sorted(s["tokens_per_s"] for s, _ in runs)
        median = toks[len(toks) // 2]
        base = base or median
        summary, _ = runs[0]
        peak = summary["peak_memory"][0]["peak_bytes"]
        print(f"| {name} | {median:.0f} ({toks[0]:.0f}-{toks[-1]:.0f}) | {median / base:.2f} | "
              f"{mib(peak['total']):.1f} | {mib(peak.get('activations', 0)):.1f} | "
              f"{mib(peak.get('comm_buffer', 0)):.1f} | {mib(peak.get('workspace', 0)):.1f} | "
              f"{summary['final_loss']:.4f} |")
    print()
    print("| layout | ring bytes sent per step (rank 0) | predicted | measured / predicted |")
    print("|---|---|---|---|")
    _, records = results["cp 2"][0]
    s = records[-1]
    print(f"| cp 2 | {s['cp_bytes']} | {s['predicted_cp_bytes']} | {s['cp_bytes'] / s['predicted_cp_bytes']:.4f} |")


if __name__ == "__main__":
    main()
