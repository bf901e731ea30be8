#!/usr/bin/env python3
"""Measures per-rank memory by category for ZeRO stages 0-3 at np 1-4 on the custom_trainer MLP (bf16 parameters,
f32 reductions) and prints a Markdown table beside the ZeRO paper's 2 + 2 + 12 bytes per parameter model.

Usage: scripts/bench_memory.py [--hidden 512] [--layers 4] > table.md   (after scripts/setup.sh)
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

CATEGORIES = ["param_shard", "master", "grad_shard", "optim_state", "unsharded_params", "unsharded_grads",
              "comm_buffer"]


def run(np_, stage, hidden, layers):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = ["mpirun", "--oversubscribe", "-np", str(np_)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["build/bin/custom_trainer", "--zero-stage", str(stage), "--steps", "2", "--param-dtype", "bf16",
            "--hidden", str(hidden), "--layers", str(layers), "--ledger-json", path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    params = int(re.search(r"(\d+) parameters", out).group(1))
    with open(path) as f:
        ledger = json.load(f)
    os.unlink(path)
    return params, ledger["ranks"][0]["peak"]


def paper(stage, n):
    """The ZeRO paper's bytes per parameter (2 param + 2 grad + 12 optimizer) under each stage."""
    return {0: 2 + 2 + 12, 1: 2 + 2 + 12 / n, 2: 2 + (2 + 12) / n, 3: (2 + 2 + 12) / n}[stage]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    print("| ZeRO | np | " + " | ".join(CATEGORIES) + " | total B/param | persistent B/param | paper B/param |")
    print("|---|---|" + "---|" * (len(CATEGORIES) + 3))
    for stage in range(4):
        for n in range(1, 5):
            params, peak = run(n, stage, a.hidden, a.layers)
            per = {c: peak.get(c, 0) / params for c in CATEGORIES}
            persistent = sum(per[c] for c in ["param_shard", "master", "grad_shard", "optim_state"])
            if stage < 3:
                persistent += per["unsharded_params"]
            if stage < 2:
                persistent += per["unsharded_grads"]
            total = sum(per.values())
            cells = " | ".join(f"{per[c]:.2f}" for c in CATEGORIES)
            print(f"| {stage} | {n} | {cells} | {total:.2f} | {persistent:.2f} | {paper(stage, n):.2f} |")
    print(f"\n{params} parameters (MLP hidden {a.hidden}, {a.layers} hidden layers); peak bytes per category on "
          "rank 0 divided by the parameter count.")


if __name__ == "__main__":
    main()
