#!/usr/bin/env python3
"""Loading a sharded Hugging Face model directory into train_gpt at np 2, ZeRO 3, beside the disk's cold read rate.

The directory: GPT-2 of --layers 24, --embd 1024, vocabulary 50257, 1024 positions (about 355M parameters, 1.42 GB of
F32), written once by `train_gpt --steps 0 --save-hf DIR --save-shard-size 200MB` (8 shards). Each round:
  disk   the page cache of every shard dropped (posix_fadvise DONTNEED), then every shard read whole, in order, by
         one process in 16 MiB reads: bytes / seconds
  load   the page cache dropped again, then `mpirun -np 2 train_gpt --init DIR --steps 0 --zero-stage 3`: the ranks'
         own timing of their init ("per rank, bytes read and elements held: ... in T ms (R ms reading)"), all bytes
         over the slower rank's T, and over the slower rank's R (the time inside the reader alone); and each rank's
         bytes read against the elements it holds (4 bytes each: only its shard)
Prints each round, then the medians and load / disk. The page cache is dropped per file, which needs no privilege.

    python3 scripts/bench_hf_load.py [--rounds 3] [--bin build/bin] [--work DIR]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def drop_cache(directory):
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cold_read_rate(directory):
    drop_cache(directory)
    total = 0
    start = time.perf_counter()
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, name), "rb", buffering=0) as f:
            while True:
                chunk = f.read(16 << 20)
                if not chunk:
                    break
                total += len(chunk)
    return total, time.perf_counter() - start


def mpirun(np_):
    cmd = ["mpirun", "-np", str(np_), "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    train = os.path.abspath(os.path.join(args.bin, "train_gpt"))
    work = args.work or tempfile.mkdtemp(prefix="strata-hf-load.")
    model = os.path.join(work, "gpt2_355m")
    shape = ["--layers", "24", "--embd", "1024", "--heads", "16", "--vocab", "50257", "--ctx", "1024", "--seq", "64",
             "--batch", "1", "--no-progress"]
    if not os.path.isdir(model):
        subprocess.run(mpirun(1) + [train] + shape + ["--steps", "0", "--save-hf", model, "--save-shard-size",
                                                      "200MB"], check=True, stdout=subprocess.DEVNULL)
    shards = [n for n in os.listdir(model) if n.endswith(".safetensors")]
    print(f"# {model}: {len(shards)} shards, "
          f"{sum(os.path.getsize(os.path.join(model, n)) for n in shards) / 1e9:.3f} GB; {os.cpu_count()} cores")
    disk, load, reads = [], [], []
    pattern = re.compile(r"(\d+) bytes for (\d+) elements in ([\d.]+) ms \(([\d.]+) ms reading\)")
    for r in range(args.rounds):
        total, seconds = cold_read_rate(model)
        disk.append(total / seconds / 1e9)
        drop_cache(model)
        env = dict(os.environ, STRATA_LOG_LEVEL="info")
        out = subprocess.run(mpirun(2) + [train, "--init", model, "--steps", "0", "--zero-stage", "3", "--seq", "64",
                                          "--batch", "1", "--no-progress"],
                             check=True, capture_output=True, text=True, env=env)
        ranks = pattern.findall(out.stdout + out.stderr)
        if len(ranks) != 2:
            sys.exit("bench_hf_load: no per-rank read line in train_gpt's output")
        read = [int(b) for b, _, _, _ in ranks]
        held = [int(e) for _, e, _, _ in ranks]
        slowest = max(float(t) for _, _, t, _ in ranks) / 1e3
        reading = max(float(r) for _, _, _, r in ranks) / 1e3
        if any(b != 4 * e for b, e in zip(read, held)):
            sys.exit(f"bench_hf_load: a rank read other than its shard: {ranks}")
        load.append(sum(read) / slowest / 1e9)
        reads.append(sum(read) / reading / 1e9)
        print(f"round {r}: disk cold {disk[-1]:.3f} GB/s ({total / 1e9:.3f} GB in {seconds:.2f} s); load np 2 ZeRO 3 "
              f"{load[-1]:.3f} GB/s (ranks read {read[0] / 1e9:.3f} + {read[1] / 1e9:.3f} GB, each its shard, "
              f"in {slowest:.2f} s, of which {reading:.2f} s inside the reader: {reads[-1]:.3f} GB/s)")
    d, l, rd = statistics.median(disk), statistics.median(load), statistics.median(reads)
    print(f"median: disk cold {d:.3f} GB/s, load {l:.3f} GB/s, load / disk {l / d:.2f}; the reads alone "
          f"{rd:.3f} GB/s, {rd / d:.2f} of the disk")
    if not args.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
