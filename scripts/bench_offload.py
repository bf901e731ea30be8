#!/usr/bin/env python3
"""Device memory that CPU offload saves on the 6-layer GPT, and what it costs in step time, in one run.

Runs train_gpt (6 layers, 384 wide, 6 heads, vocab 8192, sequence 256, ZeRO-3, np 2 by default) with --offload
none, optimizer and optimizer+params, and prints a Markdown table of per-rank device peak by category, host
memory, and mean step time (steps >= 2). Losses must be identical: the script checks it and says so.
Usage: scripts/bench_offload.py [--np 2] [--steps 6] [--batch 2] [--stage 3] [-- extra train_gpt flags]
"""
import argparse
import json
import os
import subprocess
import sys

CATEGORIES = ["param_shard", "master", "grad_shard", "optim_state", "unsharded_params", "unsharded_grads",
              "comm_buffer", "activations", "workspace"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--stage", type=int, default=3)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    mpi = ["mpirun", "--oversubscribe", "-np", str(a.np)] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    model = ["--layers", "6", "--embd", "384", "--heads", "6", "--vocab", "8192", "--ctx", "256", "--seq", "256",
             "--batch", str(a.batch), "--steps", str(a.steps), "--tokens", "1000000", "--no-progress",
             "--zero-stage", str(a.stage)]
    policies = ["none", "optimizer"] + (["optimizer+params"] if a.stage == 3 else [])
    runs = {}
    for policy in policies:
        cmd = mpi + ["build/bin/train_gpt"] + model + ["--offload", policy, "--metrics", f"/tmp/offload-{policy}.jsonl"] + a.extra
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        summary = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        losses = [json.loads(l)["loss"] for l in open(f"/tmp/offload-{policy}.jsonl")]
        runs[policy] = (summary, losses)
        print(f"offload {policy}: {summary['mean_step_ms']:.0f} ms/step", file=sys.stderr)

    def device_peak(s):  # rank 0's peak bytes per category
        return s["peak_memory"][0]["peak_bytes"]

    def host_peak(s):
        return s["host_peak_memory"][0]["peak_bytes"]["total"] if s["host_peak_memory"] else 0

    mib = lambda b: f"{b / 2**20:.1f}"
    print(f"| category (rank 0, MiB) | " + " | ".join(f"offload {p}" for p in policies) + " |")
    print("|---|" + "---|" * len(policies))
    for c in CATEGORIES:
        vals = [device_peak(runs[p][0]).get(c, 0) for p in policies]
        if any(vals):
            print(f"| device {c} | " + " | ".join(mib(v) for v in vals) + " |")
    base_total = device_peak(runs["none"][0])["total"]
    print("| **device peak total** | " + " | ".join(
        f"**{mib(device_peak(runs[p][0])['total'])}** ({device_peak(runs[p][0])['total'] / base_total:.2f}x)"
        for p in policies) + " |")
    print("| host memory (offload) | " + " | ".join(mib(host_peak(runs[p][0])) for p in policies) + " |")
    base_ms = runs["none"][0]["mean_step_ms"]
    print("| mean step (ms) | " + " | ".join(
        f"{runs[p][0]['mean_step_ms']:.0f} ({runs[p][0]['mean_step_ms'] / base_ms:.2f}x)" for p in policies) + " |")
    same = all(runs[p][1] == runs["none"][1] for p in policies)
    print(f"\nlosses over {a.steps} steps identical across policies: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
