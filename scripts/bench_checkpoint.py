#!/usr/bin/env python3
"""Checkpoint save and load speed of the 6-layer GPT, beside a plain sequential write of the same bytes, in one run.

For each rank count: train_gpt (6 layers, 384 wide, 6 heads, vocab 8192, sequence 256, ZeRO-3) writes its final
checkpoint; the same command with --resume loads it; `dd conv=fsync` writes the same bytes per rank, all ranks' worth at
once, into the same directory. Then, at the largest rank count, a checkpoint every step synchronously and
asynchronously: the step's stall for checkpointing and the step time. Prints Markdown tables.
Usage: scripts/bench_checkpoint.py [--np 1,2,4] [--dir /tmp] [--bin build/bin/train_gpt]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--vocab", "8192", "--ctx", "256", "--seq", "256",
         "--batch", "2", "--zero-stage", "3", "--no-progress", "--lr", "1e-4"]


def mpirun(np_, args, binary, env=None):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    out = subprocess.run(cmd + [binary] + MODEL + args, check=True, capture_output=True, text=True,
                         env=dict(os.environ, STRATA_BACKEND="cpu", STRATA_LOG_LEVEL="warn", **(env or {}))).stdout
    return json.loads(out.strip().splitlines()[-1]), out


def dd(paths, nbytes):
    """Writes nbytes to each path at once (one dd per rank), fsync included; returns the wall time in ms."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={max(1, nbytes // (1 << 20))}",
                               "conv=fsync", "status=none"]) for p in paths]
    for p in procs:
        p.wait()
    ms = (time.perf_counter() - t0) * 1e3
    for p in paths:
        os.unlink(p)
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", default="1,2,4")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--bin", default="build/bin/train_gpt")
    a = ap.parse_args()
    ranks = [int(x) for x in a.np.split(",")]
    root = tempfile.mkdtemp(prefix="strata-bench-ckpt-", dir=a.dir)
    try:
        print("| np | MB per rank | save ms | save GB/s per rank | dd ms | dd GB/s per rank | save / dd | load ms | "
              "load GB/s per rank |")
        print("|---|---|---|---|---|---|---|---|---|")
        for np_ in ranks:
            ckpt = os.path.join(root, f"np{np_}")
            saved, _ = mpirun(np_, ["--steps", "1", "--checkpoint-dir", ckpt], a.bin)
            loaded, _ = mpirun(np_, ["--steps", "1", "--checkpoint-dir", ckpt, "--resume"], a.bin)
            c, l = saved["checkpoint"], loaded["checkpoint"]
            nbytes = c["bytes_rank0"]
            dd_ms = dd([os.path.join(root, f"dd{r}") for r in range(np_)], nbytes)
            gbs = lambda b, ms: b / (ms / 1e3) / 1e9 if ms > 0 else float("nan")
            print(f"| {np_} | {nbytes / 1e6:.1f} | {c['stall_ms']:.0f} | {gbs(nbytes, c['stall_ms']):.2f} | "
                  f"{dd_ms:.0f} | {gbs(nbytes, dd_ms):.2f} | {c['stall_ms'] / dd_ms:.2f} | {l['load_ms']:.0f} | "
                  f"{gbs(l['load_bytes_rank0'], l['load_ms']):.2f} |")
            shutil.rmtree(ckpt)
        np_ = ranks[-1]
        print()
        print(f"Checkpoint every step, np {np_}, 6 steps (steps 2-5 averaged):")
        print()
        print("| mode | mean step ms | mean checkpoint stall ms per step |")
        print("|---|---|---|")
        for mode, extra in [("none", []), ("synchronous", []), ("asynchronous", ["--checkpoint-async"])]:
            ckpt = os.path.join(root, f"every-{mode}")
            metrics = os.path.join(root, f"{mode}.jsonl")
            args = ["--steps", "6", "--metrics", metrics]
            if mode != "none":
                args += ["--checkpoint-dir", ckpt, "--checkpoint-every", "1"] + extra
            mpirun(np_, args, a.bin)
            rows = [json.loads(line) for line in open(metrics)][2:]
            step_ms = sum(r["time_ms"] for r in rows) / len(rows)
            stall = sum(r["checkpoint_ms"] for r in rows) / len(rows)
            print(f"| {mode} | {step_ms:.0f} | {stall:.1f} |")
            shutil.rmtree(ckpt, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
