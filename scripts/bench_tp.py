#!/usr/bin/env python3
"""Tensor parallelism on the 6-layer GPT at np 2: dp 2 vs tp 2 vs tp 2 with sequence parallelism, in one run.

Each layout trains the same 6-layer model (384 wide, 6 heads, vocab 8192, sequence 256, ZeRO-3) on the same global
batch of 4 rows per step; the script prints, per layout, tokens/s (mean over the steps after the second), the peak
memory per rank by category (the ledger, rank 0), and the bytes per step the tensor-parallel collectives moved
beside the planner's prediction (train_gpt --metrics: tp_bytes, predicted_tp_bytes). Prints Markdown tables.
Usage: scripts/bench_tp.py [--steps 8] [--bin build/bin/train_gpt] [--repeat 1]
"""
import argparse
import json
import os
import subprocess
import tempfile

MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--vocab", "8192", "--ctx", "256", "--seq", "256",
         "--zero-stage", "3", "--no-progress", "--lr", "1e-4"]
LAYOUTS = [("dp 2", ["--batch", "2"]),
           ("tp 2", ["--tp", "2", "--batch", "4"]),
           ("tp 2 + sequence parallel", ["--tp", "2", "--sequence-parallel", "--batch", "4"])]


def train_gpt(np_, flags, binary):
    """train_gpt at np_ ranks on the CPU backend with `flags`: its final JSON line and its per-step --metrics records."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        out = subprocess.run(cmd + [binary] + flags + ["--metrics", m.name], check=True, capture_output=True, text=True,
                             env=dict(os.environ, STRATA_BACKEND="cpu", STRATA_LOG_LEVEL="warn")).stdout
        steps_rec = [json.loads(line) for line in open(m.name) if line.strip()]
    return json.loads(out.strip().splitlines()[-1]), steps_rec


def run(np_, args, binary, steps):
    return train_gpt(np_, MODEL + ["--steps", str(steps)] + args, binary)


def mib(b):
    return b / (1 << 20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--bin", default="build/bin/train_gpt")
    ap.add_argument("--repeat", type=int, default=1, help="run the three layouts this many times, interleaved")
    a = ap.parse_args()
    results = {name: [] for name, _ in LAYOUTS}
    for _ in range(a.repeat):
        for name, args in LAYOUTS:
            results[name].append(run(2, args, a.bin, a.steps))
    base = None
    print("| layout (np 2) | tokens/s, median (range) | vs dp 2 | peak MiB per rank | sharded state + pools MiB | activations MiB | "
          "workspace MiB | final loss |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _ in LAYOUTS:
        runs = results[name]
        all_toks = sorted(s["tokens_per_s"] for s, _ in runs)
        toks = all_toks[len(runs) // 2]
        summary, _ = runs[0]
        peak = summary["peak_memory"][0]["peak_bytes"]
        state = sum(peak.get(k, 0) for k in ("param_shard", "master", "grad_shard", "optim_state", "unsharded_params",
                                                "unsharded_grads", "comm_buffer"))
        base = base or toks
        print(f"| {name} | {toks:.0f} ({all_toks[0]:.0f}-{all_toks[-1]:.0f}) | {toks / base:.2f} | {mib(peak['total']):.1f} | {mib(state):.1f} | "
              f"{mib(peak.get('activations', 0)):.1f} | {mib(peak.get('workspace', 0)):.1f} | "
              f"{summary['final_loss']:.4f} |")
    print()
    print("| layout | tp all-reduce bytes/step | tp all-gather bytes/step | tp reduce-scatter bytes/step | total | "
          "predicted | measured / predicted | tp collectives ms/step, median (range) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _ in LAYOUTS:
        _, steps = results[name][0]
        s = steps[-1]
        pred = s["predicted_tp_bytes"]
        ratio = f"{s['tp_bytes'] / pred:.4f}" if pred else "-"
        # The time in the tp collectives per step (rank 0; train_gpt's tp_comm_ms), median over the steps after the
        # second of every run.
        ms = sorted(r["tp_comm_ms"] for _, recs in results[name] for r in recs[2:])
        tp_ms = f"{ms[len(ms) // 2]:.1f} ({ms[0]:.1f}-{ms[-1]:.1f})" if ms and ms[-1] > 0 else "-"
        print(f"| {name} | {s['tp_all_reduce_bytes']} | {s['tp_all_gather_bytes']} | {s['tp_reduce_scatter_bytes']} | "
              f"{s['tp_bytes']} | {pred} | {ratio} | {tp_ms} |")


if __name__ == "__main__":
    main()
