#!/usr/bin/env python3
"""Tokens/s of train_gpt's Llama beside PyTorch's DDP and FSDP2 on the same model, and the step's FLOP rate beside
oneDNN's sgemm at the model's shapes, in one run (CPU).

The model of the issue: a Llama-style decoder (Hugging Face's LlamaForCausalLM) of 6 layers, hidden 384, 6 heads, 2
key-value heads, intermediate 1024, vocabulary 8192, sequence 256, an untied LM head (LlamaForCausalLM's default;
--tied for the other), f32, AdamW (lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights) with the
gradient norm clipped to 1, --batch rows per rank, synthetic tokens. Each round runs, one after the other:
  strata   mpirun -np NP train_gpt --family llama ... --zero-stage 3, one kernel thread a rank (train_gpt gives each
           rank cores / ranks threads; OMP_NUM_THREADS=1 and OMP_THREAD_LIMIT=1 hold it to one on any machine)
  ddp      torch DistributedDataParallel over gloo, NP processes, torch.set_num_threads(1) and OMP_NUM_THREADS=1
  fsdp2    torch's fully_shard (FSDP2: each decoder layer, then the root; reshard after forward) over gloo, likewise
           (torch < 2.4 has no FSDP2: FullyShardedDataParallel, each decoder layer wrapped, stands in as "fsdp1")
  sgemm    oneDNN's dnnl_sgemm (libdnnl.so.2, the library train_gpt calls) on one thread, every matrix product of one
           rank's training step at the model's shapes (count-weighted), alone on the machine; and the same with two
           copies at once, one a core, as the ranks run
The PyTorch model is transformers' LlamaForCausalLM (eager attention, or sdpa: --impls ddp:sdpa) built from
tests/reference/llama_reference.py's config of the same shape, with fused AdamW, in a virtual environment with
PyTorch 2.x from PyPI (--torch-python; made at ~/.cache/strata-torch2-venv with `pip install torch transformers numpy`
when missing: about 5.6 GB, PyPI's Linux torch wheel brings CUDA's libraries, and runs on the CPU without a GPU).
Every implementation's tokens/s is its mean step over steps >= 2 (train_gpt's own figure; the PyTorch workers time
theirs the same way, the slower rank's). The FLOP rate is the model's FLOPs per token (6 x the matrix weights + 12 x
layers x heads x head_dim x sequence: PaLM's convention, computed here for the Llama's shapes) x tokens/s per rank.
On a shared machine: --idle 90 starts each run once the CPUs were 90% idle, --max-foreign 0.05 counts a round only if
other processes took at most 5% of the CPUs during each of its runs (the others' share is printed per run).
Prints each round, then Markdown tables of medians (min-max), the ratios paired by round, and sgemm per product.

Usage: scripts/bench_llama.py [--np 2] [--steps 10] [--batch 2] [--rounds 3] [--impls strata,ddp,fsdp2,sgemm]
                              [--idle 90 --max-foreign 0.05] [--torch-python PY] [--bin build/bin/train_gpt]
                              [--min-vs-torch 1.5 --min-of-sgemm 0.85 --check] [-- extra train_gpt flags]
--check exits 1 when a bar measured in the run does not hold (the medians over the rounds).
The issue's figures (docs/benchmarks.md): --rounds 5 --impls strata,ddp,ddp:sdpa,fsdp2,sgemm --idle 90
--max-foreign 0.05.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_gpt  # noqa: E402  the mpirun launcher, shared with scripts/bench_gpt.py

# The benchmark model: layers, hidden, heads, key-value heads, intermediate (SwiGLU) width, vocabulary, sequence.
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 6, 384, 6, 2, 1024, 8192, 256
HEAD_DIM = HIDDEN // HEADS
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0  # train_gpt's defaults
DEFAULT_VENV = os.path.expanduser("~/.cache/strata-torch2-venv")
TORCH_PACKAGES = ["torch", "transformers", "numpy"]


def strata_flags(batch, steps, tied):
    return ["--family", "llama", "--layers", str(LAYERS), "--embd", str(HIDDEN), "--heads", str(HEADS), "--kv-heads",
            str(KV_HEADS), "--ffn", str(FFN), "--vocab", str(VOCAB), "--ctx", str(SEQ), "--seq", str(SEQ), "--batch",
            str(batch), "--steps", str(steps), "--tokens", "1000000", "--no-progress", "--zero-stage", "3"] + \
           ([] if tied else ["--untied"])


def products(rows):
    """Every matrix product of one rank's training step, as train_gpt runs them through dnnl_sgemm (kernels/cpu/
    matmul.cc, row-major): (name, transa, transb, M, N, K, beta, count). Linear layers in their [in, out] layout:
    forward out = x @ W (NN), dx += dout @ W^T (NT), dW += x^T @ dout (TN); q | k | v and gate | up are one product
    each; the LM head: logits = x @ W^T (NT), dx += dlogits @ W (NN), dW += dlogits^T @ x (TN)."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = []
    for name, ic, oc in (("qkv", HIDDEN, q + 2 * kv), ("o", q, HIDDEN), ("gate_up", HIDDEN, 2 * FFN),
                         ("down", FFN, HIDDEN)):
        out += [(name + "_fwd", "N", "N", rows, oc, ic, 0.0, LAYERS),
                (name + "_dx", "N", "T", rows, ic, oc, 1.0, LAYERS),
                (name + "_dw", "T", "N", ic, oc, rows, 1.0, LAYERS)]
    out += [("head_fwd", "N", "T", rows, VOCAB, HIDDEN, 0.0, 1), ("head_dx", "N", "N", rows, HIDDEN, VOCAB, 1.0, 1),
            ("head_dw", "T", "N", VOCAB, HIDDEN, rows, 1.0, 1)]
    return out


def model_flops_per_token():
    """(per token, the matrix products' part): 6 x matrix weights (forward 2, backward 4) + 12 x L x NH x D x T
    (q k^T and the weighted sum of v, forward and backward, the whole T x T: PaLM's appendix B)."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    weights = LAYERS * (HIDDEN * (q + 2 * kv) + q * HIDDEN + 3 * HIDDEN * FFN) + VOCAB * HIDDEN
    matmul = 6 * weights
    return matmul + 12 * LAYERS * q * SEQ, matmul


# --------------------------------------------------------------------------------------------------------
# sgemm: dnnl_sgemm through ctypes (no numpy needed), one thread (run with OMP_NUM_THREADS=1)
# --------------------------------------------------------------------------------------------------------


def sgemm_worker(rows, reps):
    import array
    import ctypes
    lib = ctypes.CDLL(os.environ.get("STRATA_DNNL", "libdnnl.so.2"))
    f = lib.dnnl_sgemm
    i64, fl, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, fl, ptr, i64, ptr, i64, fl, ptr, i64]
    f.restype = ctypes.c_int
    pattern = array.array("f", [((i * 7919) % 1999) / 1999.0 - 0.5 for i in range(4096)])

    def buf(n):  # n floats of a fixed pattern in [-0.5, 0.5): no zeros, no denormals
        a = pattern * (n // 4096 + 1)
        return a, ctypes.cast((ctypes.c_float * len(a)).from_buffer(a), ptr)

    res, flop, secs = [], 0.0, 0.0
    for name, ta, tb, m, n, k, beta, count in products(rows):
        (ka, a), (kb, b), (kc, c) = buf(m * k), buf(k * n), buf(m * n)
        lda, ldb = (m if ta == "T" else k), (k if tb == "T" else n)
        call = lambda: f(ta.encode(), tb.encode(), m, n, k, 1.0, a, lda, b, ldb, beta, c, n)  # noqa: E731
        for _ in range(3):
            if call() != 0:
                sys.exit(f"dnnl_sgemm failed on {name}")
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            ts.append(time.perf_counter() - t0)
        med = statistics.median(ts)
        res.append({"name": name, "op": ta + tb, "m": m, "n": n, "k": k, "count": count, "median_s": med,
                    "gflops": 2.0 * m * n * k / med / 1e9})
        flop += 2.0 * m * n * k * count
        secs += med * count
        del ka, kb, kc
    print(json.dumps({"gflops": flop / secs / 1e9, "step_gemm_s": secs, "step_gemm_flop": flop, "products": res}))


def sgemm_rates(rows, reps, copies):
    """GFLOP/s of one rank-step's products on one thread, `copies` processes at once (their mean)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_THREAD_LIMIT="1", OMP_PROC_BIND="false")
    cmd = ["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, os.path.abspath(__file__),
           "--sgemm-worker", "--rows", str(rows), "--reps", str(reps)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("bench_llama: the sgemm worker failed")
    return statistics.mean(o["gflops"] for o in outs), outs[0]


# --------------------------------------------------------------------------------------------------------
# PyTorch: DDP / FSDP2 over transformers' LlamaForCausalLM, gloo, one thread a process
# --------------------------------------------------------------------------------------------------------


def torch_worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import llama_reference as lr  # the repository's shape -> LlamaConfig mapping

    c = {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
         "intermediate": FFN, "vocab": VOCAB, "ctx": SEQ, "rope_theta": 10000.0, "rms_eps": 1e-5, "tie": a.tied,
         "qkv_bias": False, "rope_scaling": None}
    cfg = LlamaConfig.from_dict(dict(lr.hf_config(c), use_cache=False))
    torch.manual_seed(1234)  # the same init on every rank (DDP broadcasts rank 0's anyway)
    model = LlamaForCausalLM._from_config(cfg, attn_implementation=a.attn).train()
    mode = a.torch_worker
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        # The rotary table is a constant buffer: broadcasting it every forward would be wasted work.
        model = DDP(model, broadcast_buffers=False, gradient_as_bucket_view=True)
    elif mode == "fsdp2":
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif mode == "fsdp1":
        import functools
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer
        model = FSDP(model, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                               transformer_layer_cls={LlamaDecoderLayer}),
                     use_orig_params=True)
    else:
        sys.exit(f"unknown torch mode {mode}")
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}]
    kind = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[a.adamw]
    try:
        opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, **kind)
    except (RuntimeError, ValueError, TypeError):  # torch < 2.4 has no fused AdamW on the CPU
        a.adamw = "loop (no fused AdamW on the CPU in this torch)"
        opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, foreach=False)
    gen = torch.Generator().manual_seed(100 + rank)
    windows = [torch.randint(VOCAB, (a.batch, SEQ + 1), generator=gen) for _ in range(a.steps)]
    dist.barrier()
    ends, losses = [time.perf_counter()], []
    for step in range(a.steps):
        x, y = windows[step][:, :-1], windows[step][:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(float(loss))
        ends.append(time.perf_counter())
    times = [ends[i + 1] - ends[i] for i in range(2, a.steps)]  # steps >= 2, as train_gpt
    step_s = torch.tensor([statistics.mean(times)])
    dist.all_reduce(step_s, op=dist.ReduceOp.MAX)  # the slower rank's mean step
    if rank == 0:
        import resource
        print(json.dumps({"mode": mode, "attn": a.attn, "adamw": a.adamw, "mean_step_ms": 1000 * float(step_s),
                          "tokens_per_s": world * a.batch * SEQ / float(step_s), "final_loss": losses[-1],
                          "torch": torch.__version__, "transformers": transformers.__version__,
                          "peak_rss_mib_rank0": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(a, py, mode, attn, tries=3):
    """One PyTorch run's JSON; a run that fails is tried again (FSDP2 over gloo has ended in "terminate called without
    an active exception" once in about 35 runs here), up to `tries` times, each failure reported."""
    for t in range(tries):
        result, err = run_torch_once(a, py, mode, attn)
        if result is not None:
            return result
        print(f"bench_llama: torch {mode} failed (try {t + 1} of {tries}):\n{err}", file=sys.stderr, flush=True)
    sys.exit(f"bench_llama: torch {mode} failed {tries} times")


def run_torch_once(a, py, mode, attn):
    port = str(free_port())
    procs = []
    for r in range(a.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.np), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                   TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
        cmd = [py, os.path.abspath(__file__), "--torch-worker", mode, "--batch", str(a.batch), "--steps",
               str(a.steps), "--attn", attn, "--adamw", a.adamw] + (["--tied"] if a.tied else [])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate() for p in procs]
    if any(p.returncode for p in procs):
        return None, "\n".join(f"rank {r} exit {p.returncode}: {e[-2000:]}" for r, (p, (_, e)) in
                               enumerate(zip(procs, outs)))
    return json.loads([l for l in outs[0][0].splitlines() if l.startswith("{")][-1]), None


def torch_version(py):
    r = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_torch_env(py):
    """The PyTorch to compare with: --torch-python, or the venv at DEFAULT_VENV, made from PyPI when missing."""
    if py:
        return py
    py = os.path.join(DEFAULT_VENV, "bin", "python")
    if not (os.path.exists(py) and torch_version(py)):
        print(f"bench_llama: making {DEFAULT_VENV} and `pip install {' '.join(TORCH_PACKAGES)}` from PyPI (about "
              f"5.6 GB: the Linux torch wheel brings CUDA's libraries)", file=sys.stderr, flush=True)
        subprocess.run(["/usr/bin/python3", "-m", "venv", DEFAULT_VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q"] + TORCH_PACKAGES, check=True)
    return py


# --------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------


def run_strata(a):
    env = ["-x", "OMP_NUM_THREADS=1", "-x", "OMP_THREAD_LIMIT=1"]
    cmd = bench_gpt.mpirun(a.np) + env + [a.bin] + strata_flags(a.batch, a.steps, a.tied) + a.extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    s = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    return {"mean_step_ms": s["mean_step_ms"], "tokens_per_s": s["tokens_per_s"], "final_loss": s["final_loss"],
            "flops_per_token": s["flops_per_token"], "exposed": s["exposed_comm_fraction"],
            "parameters": s["parameters"]}, cmd


def cpu_idle(seconds):
    """The share of the machine's CPU time that was idle over the next `seconds` (Linux /proc/stat)."""
    def read():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
        return sum(v), v[3] + v[4]
    t0, i0 = read()
    time.sleep(seconds)
    t1, i1 = read()
    return (i1 - i0) / max(1, t1 - t0)


def wait_idle(share, timeout):
    """Wait until the CPUs were at least `share` idle over 5 s twice in a row (at most `timeout` s); the last share
    seen. A shared machine's neighbours move single runs by 2x: each run starts on a quiet machine, or says it did
    not."""
    deadline, ok, idle = time.time() + timeout, 0, 1.0
    while time.time() < deadline:
        idle = cpu_idle(5)
        ok = ok + 1 if idle >= share else 0
        if ok >= 2:
            break
    return idle


class Foreign:
    """The share of the machine's CPU time over a run that went to processes other than this script's: the CPUs' busy
    time (/proc/stat, steal left out) less what this script's children used (getrusage of the reaped children), over
    wall time x cores. A neighbour that starts in the middle of a run shows here, where waiting for idle CPUs first
    cannot see it."""

    def __enter__(self):
        self.t0, self.busy0, self.kids0 = time.time(), self.busy(), self.kids()
        return self

    def __exit__(self, *exc):
        wall = time.time() - self.t0
        foreign = (self.busy() - self.busy0) - (self.kids() - self.kids0)
        self.share = max(0.0, foreign / (wall * os.cpu_count()))

    @staticmethod
    def busy():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:8]]  # user nice system idle iowait irq softirq
        return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def kids():
        t = os.times()
        return t.children_user + t.children_system


def med_range(xs, fmt="{:.0f}"):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=2, help="rows per rank per step (scripts/bench_gpt.py's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--impls", default="strata,ddp,fsdp2,sgemm",
                    help="in each round, in this order: strata, sgemm, and PyTorch runs MODE[:ATTENTION] (MODE ddp, "
                         "fsdp2 or fsdp1; ATTENTION transformers' attn_implementation, eager or sdpa)")
    ap.add_argument("--attn", default="eager", help="the PyTorch runs' attention when an entry names none")
    ap.add_argument("--adamw", default="fused", choices=("fused", "foreach", "loop"),
                    help="torch.optim.AdamW's implementation (fused: one kernel over every tensor, the fastest on "
                         "the CPU)")
    ap.add_argument("--tied", action="store_true", help="tie the LM head to the embeddings (both sides)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per sgemm product")
    ap.add_argument("--idle", type=float, default=0,
                    help="before each run wait until the CPUs are this %% idle over 5 s, twice (0: do not wait)")
    ap.add_argument("--max-foreign", type=float, default=1.0,
                    help="count a round only if other processes took at most this share of the CPUs in each of its "
                         "runs (e.g. 0.05; default 1: count every round)")
    ap.add_argument("--max-rounds", type=int, default=50, help="give up after this many rounds, counted or not")
    ap.add_argument("--idle-timeout", type=float, default=300, help="the longest wait of --idle, s")
    ap.add_argument("--torch-python", help=f"python with torch and transformers (default {DEFAULT_VENV})")
    ap.add_argument("--bin", default="build/bin/train_gpt")
    ap.add_argument("--min-vs-torch", type=float, default=1.5,
                    help="the bar for Strata / the fastest PyTorch run, median of the rounds (the issue's 1.5)")
    ap.add_argument("--min-of-sgemm", type=float, default=0.85,
                    help="the bar for Strata's model FLOP rate / sgemm alone, median of the rounds (the issue's 0.85)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a bar measured in the run does not hold (each is printed with holds / no)")
    ap.add_argument("--sgemm-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    if a.sgemm_worker:
        return sgemm_worker(a.rows, a.reps)
    if a.torch_worker:
        return torch_worker(a)

    impls = [i for i in a.impls.split(",") if i]
    for i in impls:
        if i not in ("strata", "sgemm") and i.split(":")[0] not in ("ddp", "fsdp2", "fsdp1"):
            sys.exit(f"bench_llama: unknown implementation {i} (strata, sgemm, ddp, fsdp2, fsdp1, MODE:ATTENTION)")
    py, tv = None, None
    if any(i not in ("strata", "sgemm") for i in impls):
        py = ensure_torch_env(a.torch_python)
        tv = torch_version(py)
        if tv is None:
            sys.exit(f"bench_llama: {py} cannot import torch")
        if tuple(int(x) for x in tv.split("+")[0].split(".")[:2]) < (2, 4):
            if any(i.split(":")[0] == "fsdp2" for i in impls):
                print(f"bench_llama: torch {tv} has no FSDP2 (fully_shard, torch >= 2.4): FSDP1 stands in",
                      file=sys.stderr)
            impls = [i.replace("fsdp2", "fsdp1") for i in impls]
        if any(i.startswith("fsdp") for i in impls):
            probe = subprocess.run([py, "-c", "import torch.distributed.fsdp"], capture_output=True, text=True)
            if probe.returncode:  # Debian's torch 1.13 on Python 3.11: a dataclass that Python 3.11 refuses
                why = (probe.stderr.strip().splitlines() or ["?"])[-1]
                print(f"bench_llama: torch {tv} cannot import torch.distributed.fsdp ({why}): no FSDP run",
                      file=sys.stderr)
                impls = [i for i in impls if not i.startswith("fsdp")]
    # a PyTorch run is MODE or MODE:ATTENTION (transformers' attn_implementation; --attn when not given)
    impls = [i if i in ("strata", "sgemm") or ":" in i else f"{i}:{a.attn}" for i in impls]
    torch_runs = [i for i in impls if ":" in i]
    flops, matmul_flops = model_flops_per_token()
    rows_per_rank = a.batch * SEQ
    res = {k: [] for k in ["strata"] + torch_runs + ["sgemm1", "sgemm2"]}
    meta, strata_cmd, sgemm_detail = {}, None, None
    r, counted = 0, 0
    while counted < a.rounds and r < a.max_rounds:
        r += 1
        line, busy, got = [f"round {r} (load {os.getloadavg()[0]:.2f}):"], False, {}
        for impl in impls:
            if a.idle:
                line.append(f"[idle {100 * wait_idle(a.idle / 100, a.idle_timeout):.0f}%]")
            with Foreign() as f:
                if impl == "strata":
                    s, strata_cmd = run_strata(a)
                    got["strata"] = s
                    line.append(f"strata {s['mean_step_ms']:.0f} ms {s['tokens_per_s']:.0f} tok/s")
                elif impl == "sgemm":
                    g1, detail = sgemm_rates(rows_per_rank, a.reps, 1)
                    g2, _ = sgemm_rates(rows_per_rank, a.reps, a.np)
                    got["sgemm1"], got["sgemm2"], got["detail"] = g1, g2, detail
                    line.append(f"sgemm {g1:.1f} GFLOP/s alone, {g2:.1f} with {a.np} at once")
                else:
                    mode, attn = impl.split(":")
                    t = run_torch(a, py, mode, attn)
                    got[impl] = meta = t
                    line.append(f"{impl} {t['mean_step_ms']:.0f} ms {t['tokens_per_s']:.0f} tok/s")
            line.append(f"(others {100 * f.share:.0f}%)")
            busy = busy or f.share > a.max_foreign
        if busy:
            line.append(f"-- not counted: other processes took over {100 * a.max_foreign:.0f}% of the CPUs in a run")
        else:
            counted += 1
            for k, v in got.items():
                if k == "detail":
                    sgemm_detail = sgemm_detail or v
                else:
                    res[k].append(v)
        print(" ".join(line), file=sys.stderr, flush=True)
    if counted == 0:
        sys.exit("bench_llama: every round was disturbed by other processes (see --max-foreign)")

    # Report
    failed = []  # the bars (--min-vs-torch, --min-of-sgemm) measured in this run that do not hold
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# {cpu}, {os.cpu_count()} cores; np {a.np} x {a.batch} rows x {SEQ} tokens a step, {a.steps} steps "
          f"(mean over steps >= 2), {counted} of {r} rounds counted; torch {tv or '-'}"
          + (f", transformers {meta.get('transformers')}, AdamW {meta.get('adamw')}" if meta else ""))
    print(f"# model FLOPs per token {flops:,} ({matmul_flops:,} in matrix products)"
          + (f"; train_gpt reports {res['strata'][0]['flops_per_token']:,}" if res["strata"] else ""))
    print("\n| implementation | mean step (ms) | tokens/s, median (min-max) | Strata / it, paired by round |")
    print("|---|---|---|---|")
    names = {"strata": "Strata train_gpt, ZeRO-3", "ddp": "DDP (gloo)", "fsdp2": "FSDP2 (fully_shard, gloo)",
             "fsdp1": "FSDP (FullyShardedDataParallel, gloo)"}
    st = [x["tokens_per_s"] for x in res["strata"]]
    for k in ["strata"] + torch_runs:
        if not res[k]:
            continue
        name = names[k] if k == "strata" else \
            f"PyTorch {tv} {names[k.split(':')[0]]}, LlamaForCausalLM {k.split(':')[1]} attention"
        tps = [x["tokens_per_s"] for x in res[k]]
        ms = [x["mean_step_ms"] for x in res[k]]
        ratio = "-" if k == "strata" or not st else med_range([s / t for s, t in zip(st, tps)], "{:.2f}x")
        print(f"| {name} | {med_range(ms)} | {med_range(tps)} | {ratio} |")
    if st and torch_runs and all(res[k] for k in torch_runs):
        best = [max(res[k][i]["tokens_per_s"] for k in torch_runs) for i in range(len(st))]
        vs_torch = [s / b for s, b in zip(st, best)]
        held = statistics.median(vs_torch) >= a.min_vs_torch
        failed += [] if held else ["Strata / the fastest PyTorch"]
        print(f"\nStrata / the fastest PyTorch run of each round: {med_range(vs_torch, '{:.2f}x')} (the bar: "
              f"{a.min_vs_torch:g}x, {'holds' if held else 'no'})")
    if res["strata"]:
        print(f"\nStrata: exposed communication {med_range([100 * x['exposed'] for x in res['strata']], '{:.1f}')}% "
              f"of the step, loss after {a.steps} steps {res['strata'][0]['final_loss']:.4f}")
    if res["sgemm1"]:
        print(f"\nsgemm (dnnl_sgemm, one thread, the step's {len(products(rows_per_rank))} product shapes at "
              f"{rows_per_rank} rows, count-weighted): {med_range(res['sgemm1'], '{:.1f}')} GFLOP/s alone, "
              f"{med_range(res['sgemm2'], '{:.1f}')} GFLOP/s a copy with {a.np} at once")
        if st:
            rate = [flops * s / a.np / 1e9 for s in st]
            mrate = [matmul_flops * s / a.np / 1e9 for s in st]
            of_sgemm = [x / g for x, g in zip(rate, res["sgemm1"])]
            alone = med_range(of_sgemm, "{:.2f}")
            together = med_range([x / g for x, g in zip(rate, res["sgemm2"])], "{:.2f}")
            held = statistics.median(of_sgemm) >= a.min_of_sgemm
            failed += [] if held else ["the FLOP rate / sgemm"]
            print(f"Strata's step: {med_range(rate, '{:.1f}')} model GFLOP/s a rank ({med_range(mrate, '{:.1f}')} "
                  f"of matrix products); against sgemm alone {alone}, against {a.np} at once {together} "
                  f"(paired by round; the bar: {a.min_of_sgemm:g} of sgemm alone, {'holds' if held else 'no'})")
        if sgemm_detail:
            print("\n| product | op | M | N | K | per step | GFLOP/s (first counted round, alone) |")
            print("|---|---|---|---|---|---|---|")
            for p in sgemm_detail["products"]:
                print(f"| {p['name']} | {p['op']} | {p['m']} | {p['n']} | {p['k']} | {p['count']} | "
                      f"{p['gflops']:.1f} |")
    if strata_cmd:
        print(f"\n`{' '.join(strata_cmd)}`")
    if a.check and failed:
        sys.exit(f"bench_llama: below its bar: {', '.join(failed)}")


if __name__ == "__main__":
    main()
