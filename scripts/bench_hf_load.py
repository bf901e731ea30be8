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
  memory the page cache dropped again, then two processes (as the ranks) each read its half of every tensor into
         memory of its own, fresh (anonymous, untouched: its pages are zeroed by the kernel as the reads touch
         them, as a loader's destination is): what any loader that keeps the bytes can reach here; then again with
         each tensor copied on into fresh shared memory, as a rank publishes its master weights into the parameter
         buffers its collectives read: what a loader of a model whose parameters live beside their masters can reach;
         and again with each process first holding (written) as much memory as its rank held when it began to read
         (train_gpt logs it: "resident before reading"): the same reads beside the model's own memory
Then once: the peak resident set each way, train_gpt --steps 0 at np 2 ZeRO 3 from random weights and from the
directory (the summary's peak_rss_above_start_bytes, the most any rank grew): what reading adds to the model's own
memory, against the largest tensor's bytes (one tensor's staging).
Prints each round, then the medians, load / disk and load / memory. The page cache is dropped per file, which needs
no privilege.

    python3 scripts/bench_hf_load.py [--rounds 3] [--bin build/bin] [--work DIR] [--no-shm]
"""
import argparse
import json
import mmap
import multiprocessing
import os
import struct
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


def tensor_ranges(directory):
    """(path, begin, end) byte ranges of every tensor of every shard."""
    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for key, t in header.items():
            if key != "__metadata__":
                out.append((path, 8 + n + t["data_offsets"][0], 8 + n + t["data_offsets"][1]))
    return out


def read_half_into_memory(ranges, rank, queue, publish, hold):
    held = None
    if hold:  # the rank's memory before its reads (masters, gradients, Adam state), held and touched first
        held = mmap.mmap(-1, hold, flags=mmap.MAP_PRIVATE)
        for at in range(0, hold, 1 << 26):
            held[at:min(hold, at + (1 << 26))] = bytes(min(hold, at + (1 << 26)) - at)
    halves = []
    for path, begin, end in ranges:
        mid = begin + (end - begin) // 2 // 4 * 4
        halves.append((path, begin, mid) if rank == 0 else (path, mid, end))
    size = sum(e - b for _, b, e in halves)
    start = time.perf_counter()
    dest = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # fresh anonymous pages, touched first by the reads
    view = memoryview(dest)
    # With `publish`, each tensor is then copied into shared memory (fresh too), as a rank publishes its master
    # weights into the parameter buffers the collectives read.
    shared = memoryview(mmap.mmap(-1, size, flags=mmap.MAP_SHARED)) if publish else None
    at, fds = 0, {}
    for path, begin, end in halves:
        fd = fds.get(path) or fds.setdefault(path, os.open(path, os.O_RDONLY))
        first = at
        while begin < end:
            n = os.preadv(fd, [view[at:at + end - begin]], begin)
            begin += n
            at += n
        if publish:
            shared[first:at] = view[first:at]
    queue.put((at, time.perf_counter() - start))


def cold_into_memory_rate(directory, ranges, publish, hold=(0, 0)):
    drop_cache(directory)
    queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=read_half_into_memory, args=(ranges, r, queue, publish, hold[r]))
             for r in range(2)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(b for b, _ in results), max(t for _, t in results)


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
    ap.add_argument("--no-shm", action="store_true",
                    help="STRATA_SHM=0 for train_gpt: no shared-memory buffers for the collectives")
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
    ranges = tensor_ranges(model)  # every tensor's bytes, for the plain readers
    disk, load, reads, memory, published, beside = [], [], [], [], [], []
    resident = re.compile(r"resident before reading: (\d+), (\d+) bytes")
    pattern = re.compile(r"(\d+) bytes for (\d+) elements in ([\d.]+) ms \(([\d.]+) ms reading\)")
    for r in range(args.rounds):
        total, seconds = cold_read_rate(model)
        disk.append(total / seconds / 1e9)
        drop_cache(model)
        env = dict(os.environ, STRATA_LOG_LEVEL="info", **({"STRATA_SHM": "0"} if args.no_shm else {}))
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
        mem_bytes, mem_seconds = cold_into_memory_rate(model, ranges, False)
        memory.append(mem_bytes / mem_seconds / 1e9)
        pub_bytes, pub_seconds = cold_into_memory_rate(model, ranges, True)
        published.append(pub_bytes / pub_seconds / 1e9)
        held = resident.search(out.stdout + out.stderr)
        if not held:
            sys.exit("bench_hf_load: no 'resident before reading' in train_gpt's output")
        hold = (int(held.group(1)), int(held.group(2)))
        bes_bytes, bes_seconds = cold_into_memory_rate(model, ranges, False, hold)
        beside.append(bes_bytes / bes_seconds / 1e9)
        print(f"round {r}: disk cold {disk[-1]:.3f} GB/s ({total / 1e9:.3f} GB in {seconds:.2f} s); load np 2 ZeRO 3 "
              f"{load[-1]:.3f} GB/s (ranks read {read[0] / 1e9:.3f} + {read[1] / 1e9:.3f} GB, each its shard, "
              f"in {slowest:.2f} s, of which {reading:.2f} s inside the reader: {reads[-1]:.3f} GB/s); cold into "
              f"fresh memory by 2 processes {memory[-1]:.3f} GB/s ({mem_seconds:.2f} s), and copied on into fresh shared "
              f"memory {published[-1]:.3f} GB/s ({pub_seconds:.2f} s); into fresh memory beside as much memory held "
              f"as the ranks held ({hold[0] / 1e9:.2f} + {hold[1] / 1e9:.2f} GB) {beside[-1]:.3f} GB/s "
              f"({bes_seconds:.2f} s)")
    d, l, rd, m, p, bs = (statistics.median(disk), statistics.median(load), statistics.median(reads),
                          statistics.median(memory), statistics.median(published), statistics.median(beside))
    per_round = lambda xs, ys: ", ".join(f"{a / b:.2f}" for a, b in zip(xs, ys))
    print(f"median: disk cold {d:.3f} GB/s, load {l:.3f} GB/s, load / disk {l / d:.2f}; the reads alone "
          f"{rd:.3f} GB/s, {rd / d:.2f} of the disk; into fresh memory {m:.3f} GB/s ({m / d:.2f} of the disk), "
          f"load / that {l / m:.2f}; into fresh memory and published {p:.3f} GB/s ({p / d:.2f} of the disk), "
          f"load / that {l / p:.2f}; into fresh memory beside the ranks' memory {bs:.3f} GB/s ({bs / d:.2f} of the "
          f"disk), load / that {l / bs:.2f}")
    print(f"per round: load / disk {per_round(load, disk)}; load / into memory {per_round(load, memory)}; "
          f"load / into memory and published {per_round(load, published)}; load / beside the ranks' memory "
          f"{per_round(load, beside)}")
    # What reading the directory adds to a rank's resident set beyond the model's own memory (random weights).
    peaks = {}
    for how, extra in (("random weights", []), ("the directory", ["--init", model])):
        out = subprocess.run(mpirun(2) + [train] + shape + extra + ["--steps", "0", "--zero-stage", "3"],
                             check=True, capture_output=True, text=True)
        found = re.search(r'"peak_rss_above_start_bytes":(\d+)', out.stdout)
        if not found:
            sys.exit(f"bench_hf_load: no peak_rss_above_start_bytes in train_gpt's summary ({how})")
        peaks[how] = int(found.group(1))
    largest = max(e - b for _, b, e in ranges)
    added = peaks["the directory"] - peaks["random weights"]
    print(f"peak resident set above start, largest rank: {peaks['random weights'] / 1e9:.3f} GB from random weights, "
          f"{peaks['the directory'] / 1e9:.3f} GB from the directory: reading added {added / 1e6:.1f} MB, against "
          f"the largest tensor's {largest / 1e6:.1f} MB")
    if not args.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
