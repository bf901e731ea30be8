#!/usr/bin/env python3
"""Where a CPU training step goes: perf samples of train_gpt by kernel category, and sgemm's rate beside its peak.

Runs the benchmark model of docs/benchmarks.md (6 layers, 384 wide, 6 heads, vocab 8192, sequence 256, ZeRO-3,
2 rows per rank) at --np ranks under `perf record`, with oneDNN's JIT kernels named for perf (DNNL_JIT_PROFILE=1),
and sorts the samples of the train_gpt processes into categories by symbol. The samples are on-CPU time; the rest
of each rank's step (wall time x ranks minus on-CPU time) is time off the CPU: blocked waits, or a rank descheduled
because the ranks and their threads outnumber the cores.
Prints a Markdown table, and sgemm's achieved GFLOP/s (the model's matmul FLOPs over the time in sgemm) against
--peak-gflops (per core; the default is two AVX-512 FMA ports at 2.1 GHz, this VM's Xeon).
Usage: scripts/profile_cpu_step.py [--np 2] [--steps 8] [--bin build/bin/train_gpt] [-- extra train_gpt flags]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpt  # noqa: E402  the benchmark model and launcher, shared with scripts/bench_gpt.py

# First match wins: (category, regex on "dso symbol").
CATEGORIES = [
    ("start-up (init, data)", r"spec_init|__cos|__sin|__ieee754_log|__log|synthetic|TokenFile|make_gpt|_dl_|"
                              r"do_lookup|ld-linux"),
    ("sgemm (oneDNN)", r"dnnl|jit_|gemm|brgemm|\[JIT\]|perf-\d+\.map"),
    ("attention", r"attention|micro_kernel|tile_gemm"),
    ("element-wise kernels", r"layernorm|gelu|residual|crossentropy|softmax|encoder|add_bias|exp_f32|vocab_|"
                             r"position_|embedding_|to_f32|add_f32_into|matmul_forward_bias|bias"),
    ("optimizer (AdamW, norm)", r"adamw|AdamW|grad_norm|GradNorm|sum_squares|flat_ops|clip"),
    ("copies (memcpy, memset)", r"memcpy|memmove|memset|__memcpy|copy_user|clear_page|rep_movs"),
    ("collectives (shm copies, reductions)", r"reduce_native|reduce_pieces|reduce_chunks|ShmSegment|copy_streaming|"
                                             r"host_reduce"),
    ("sharding runtime (flat ops)", r"HostFlatOps|for_each_global_run|FlatOps|ShardedUnit|BufferPool"),
    ("MPI and its progress", r"libmpi|libopen-pal|libopen-rte|mca_|ompi_|opal_|pmix|libucp|libuct|btl_|vader"),
    ("threads, waits, scheduler", r"sched_yield|futex|pthread|poll|nanosleep|schedule|syscall|entry_SYSCALL|"
                                  r"do_syscall|__x64_sys|finish_task_switch|_raw_spin|cond_wait|wait_for|gomp|"
                                  r"GOMP|libgomp|omp_"),
    ("page faults", r"page_fault|do_anonymous_page|handle_mm_fault|exc_page_fault|clear_huge|alloc_pages"),
]


def categorise(line):
    for name, rx in CATEGORIES:
        if re.search(rx, line):
            return name
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--bin", default="build/bin/train_gpt")
    ap.add_argument("--peak-gflops", type=float, default=134.4,
                    help="f32 peak per core, GFLOP/s (default: two AVX-512 FMA ports at 2.1 GHz)")
    ap.add_argument("--top", type=int, default=12, help="also list this many hottest symbols")
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE for every rank (repeatable)")
    ap.add_argument("--show-other", action="store_true", help="list the hottest uncategorised symbols")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="strata-profile-")
    data = os.path.join(work, "perf.data")
    mpi = bench_gpt.mpirun(a.np) + ["-x", "DNNL_JIT_PROFILE=1"]
    for e in a.env:
        mpi += ["-x", e]
    L, C, V, T = bench_gpt.LAYERS, bench_gpt.WIDTH, bench_gpt.VOCAB, bench_gpt.SEQ
    model = bench_gpt.model_flags(a.batch, a.steps) + ["--zero-stage", "3"]
    cmd = ["perf", "record", "-q", "-F", "999", "-o", data, "--"] + mpi + [a.bin] + model + a.extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    summary = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--comms", "train_gpt",
                          "--sort", "dso,sym", "--percent-limit", "0", "-q", "-F", "sample,dso,sym"],
                         check=True, capture_output=True, text=True).stdout
    totals, symbols = {}, []
    for line in rep.splitlines():
        m = re.match(r"\s*(\d+)\s+(.*)$", line)
        if not m:
            continue
        n, what = int(m.group(1)), m.group(2).strip()
        totals[categorise(what)] = totals.get(categorise(what), 0) + n
        symbols.append((n, what))
    samples = sum(totals.values())
    if samples == 0:
        sys.exit("profile_cpu_step: perf recorded no samples of train_gpt")
    # Wall time of the profiled steps: perf samples every step, warm-up included, so use the run's whole step time.
    step_ms = summary["mean_step_ms"]
    on_cpu_s = samples / 999.0  # samples at 999 Hz per thread on the CPU
    wall_s = a.np * step_ms / 1000.0 * a.steps
    print(f"# train_gpt 6 layers x 384, vocab 8192, seq 256, ZeRO-3, np {a.np} x {a.batch} rows{''.join(' ' + e for e in a.env)}; "
          f"{a.steps} steps, mean step {step_ms:.0f} ms (steps >= 2), {summary['tokens_per_s']:.0f} tok/s")
    print(f"# {samples} samples of train_gpt at 999 Hz ({on_cpu_s:.1f} s on a CPU, start-up and every step included; "
          f"the timed steps are {wall_s:.1f} rank-seconds); exposed communication {100 * summary['exposed_comm_fraction']:.1f}% of the step, "
          f"communication {summary['mean_comm_ms']:.0f} ms per step\n")
    print("| category | share of on-CPU samples |")
    print("|---|---|")
    for name, n in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {100.0 * n / samples:.1f}% |")
    # sgemm's achieved rate: the model's matmul FLOPs per rank-step (forward 2, backward 4 per weight per token) over
    # the time sgemm was on a CPU per rank-step.
    weights = L * 12 * C * C + V * C
    tokens_per_rank_step = a.batch * T
    gemm_flops = 6 * weights * tokens_per_rank_step
    gemm_s = totals.get("sgemm (oneDNN)", 0) / 999.0 / (a.np * a.steps)
    if gemm_s > 0:
        rate = gemm_flops / gemm_s / 1e9
        print(f"\nsgemm: {gemm_flops / 1e9:.2f} GFLOP per rank-step in {1000 * gemm_s:.0f} ms on a CPU: "
              f"{rate:.1f} GFLOP/s per core, {100 * rate / a.peak_gflops:.0f}% of {a.peak_gflops:.0f}")
    if a.show_other:
        print("\nhottest uncategorised symbols:")
        for n, what in sorted((x for x in symbols if categorise(x[1]) == "other"), reverse=True)[: a.top]:
            print(f"  {n:7d}  {100.0 * n / samples:5.1f}%  {what[:110]}")
    print(f"\nhottest symbols (samples):")
    for n, what in sorted(symbols, reverse=True)[: a.top]:
        print(f"  {n:7d}  {100.0 * n / samples:5.1f}%  {what[:110]}")


if __name__ == "__main__":
    main()
