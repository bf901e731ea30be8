#!/usr/bin/python3
"""Independent PyTorch reference for the GPT-2 training rules of docs/gpt-model.md.

Plain torch ops only (no Hugging Face code), float32 throughout. It simulates W data-parallel ranks with B
rows each and A gradient-accumulation micro-batches per step on one process, and writes the per-step losses
(and pre-clip global gradient norms) that the C++ trainer's tests compare against.

Modes (see tests/reference/README.md for the exact commands that produced tests/data/):
  --make-data FILE --tokens N --vocab V --seed S     synthetic uint16 token file (spec's splitmix64 rule)
  --make-init FILE --layers L --heads H --embd C --vocab V --ctx Tctx --seed S
                                                     init weights (spec's distributions), safetensors F32
  --selfcheck [--init FILE --data FILE ...]          float64 finite-difference gradient check and more
  --generate N --prompt IDS --init FILE [--out FILE.json]
                                                     greedy decoding of N tokens after the prompt, each step a full
                                                     forward over the whole sequence (no KV cache): the tokens, every
                                                     step's logits and the smallest top-1 / top-2 margin
  (default) train: --init FILE --data FILE --steps ... [--out FILE.json]

Run with Debian's python (/usr/bin/python3, package python3-torch); a pyenv `python3` on PATH may lack torch.
"""

import argparse
import json
import math
import struct
import sys
import time
import types

import numpy as np
import torch
import torch.nn.functional as F

MASK64 = 0xFFFFFFFFFFFFFFFF

# --------------------------------------------------------------------------------------------------------
# safetensors (tiny reader / writer; the `safetensors` package is not required)
# --------------------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "F32": (np.dtype("<f4"), 4),
    "F64": (np.dtype("<f8"), 8),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (None, 2),  # converted by hand below
}


def read_safetensors(path):
    """Returns {name: float32 torch tensor} and the __metadata__ dict (or {})."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} past end of file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dtype = info["dtype"]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        if dtype not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        npdt, size = _ST_DTYPES[dtype]
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * size or end > len(data) or begin < 0:
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {begin},{end} for {dtype}{shape}")
        buf = data[begin:end]
        if dtype == "BF16":
            u16 = np.frombuffer(buf, dtype="<u2").astype(np.uint32)
            arr = (u16 << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=npdt).astype(np.float32)
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor) written in that order as little-endian F32."""
    header = {}
    blobs = []
    off = 0
    for name, t in tensors:
        arr = t.detach().to(torch.float32).contiguous().numpy().astype("<f4")
        b = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)  # pad with spaces to a multiple of 8
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


# --------------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------------


def param_specs(L, C, V, Tctx):
    """(name, shape) in the spec's table order."""
    specs = [("wte.weight", [V, C]), ("wpe.weight", [Tctx, C])]
    for i in range(L):
        p = f"h.{i}."
        specs += [
            (p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]),
            (p + "attn.c_attn.weight", [C, 3 * C]), (p + "attn.c_attn.bias", [3 * C]),
            (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
            (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]),
            (p + "mlp.c_fc.weight", [C, 4 * C]), (p + "mlp.c_fc.bias", [4 * C]),
            (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C]),
        ]
    specs += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    return specs


def make_init(L, C, V, Tctx, seed):
    """Spec init: Normal(0,0.02) for wte/wpe/c_attn.weight/c_fc.weight, Normal(0,0.02/sqrt(2L)) for both
    c_proj weights, biases 0, LayerNorm weights 1. Drawn in the spec's table order from torch.manual_seed(seed)."""
    proj_std = 0.02 / math.sqrt(2 * L)

    def rule(name):
        if name.endswith("c_proj.weight"):
            return proj_std
        if name in ("wte.weight", "wpe.weight") or name.endswith("c_attn.weight") or name.endswith("c_fc.weight"):
            return 0.02
        if name.endswith(".bias"):
            return ("fill", 0.0)
        if ".ln_" in name or name.startswith("ln_f"):
            return ("fill", 1.0)
        raise AssertionError(name)
    return draw_init(param_specs(L, C, V, Tctx), seed, rule)


def draw_init(specs, seed, rule):
    """torch.manual_seed(seed), then for each (name, shape) of specs in order an F32 tensor: rule(name) is a std
    (a Normal(0, std) draw) or ("fill", value) (no draw)."""
    torch.manual_seed(seed)
    out = []
    for name, shape in specs:
        t = torch.empty(shape, dtype=torch.float32)
        how = rule(name)
        if isinstance(how, tuple):
            t.fill_(how[1])
        else:
            t.normal_(0.0, how)
        out.append((name, t))
    return out


def f64_leaves(named):
    """[(name, tensor)] -> {name: float64 copy that requires grad}."""
    return {n: t.to(torch.float64).requires_grad_(True) for n, t in named}


def load_params(path, L, C, V, Tctx, dtype):
    raw, _ = read_safetensors(path)
    named = {}
    for k, t in raw.items():
        name = k[len("transformer."):] if k.startswith("transformer.") else k
        if name == "lm_head.weight":
            continue  # tied to wte.weight, never used separately
        named[name] = t
    return take_params(path, named, param_specs(L, C, V, Tctx), dtype)


def take_params(path, named, specs, dtype):
    """Strict: the (name, shape) of specs from named, as dtype leaves that require grad; nothing else in named."""
    params = {}
    for name, shape in specs:
        if name not in named:
            raise ValueError(f"{path}: missing tensor {name}")
        t = named.pop(name)
        if list(t.shape) != shape:
            raise ValueError(f"{path}: tensor {name} has shape {list(t.shape)}, expected {shape}")
        params[name] = t.to(dtype).clone().requires_grad_(True)
    if named:
        raise ValueError(f"{path}: unexpected tensors {sorted(named)}")
    return params


def gelu_tanh(z):
    return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z * z * z)))


def layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dim=-1, keepdim=True)  # biased variance
    return xc / torch.sqrt(var + eps) * w + b


def forward_logits(P, idx, L, H):
    Bn, T = idx.shape
    wte = P["wte.weight"]
    C = wte.shape[1]
    D = C // H
    x = wte[idx] + P["wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True where u > t
    for i in range(L):
        p = f"h.{i}."
        a = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        qkv = a @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(Bn, T, H, D).transpose(1, 2)  # [B, H, T, D]; head h = columns h*D..h*D+D-1
        k = k.view(Bn, T, H, D).transpose(1, 2)
        v = v.view(Bn, T, H, D).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        s = s.masked_fill(causal, float("-inf"))
        pr = torch.softmax(s, dim=-1)
        y = (pr @ v).transpose(1, 2).contiguous().view(Bn, T, C)
        x = x + (y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"])
        m = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
        g = gelu_tanh(m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
        x = x + (g @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"])
    x = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"])
    return x @ wte.t()


def loss_fn(P, idx, tgt, L, H):
    logits = forward_logits(P, idx, L, H)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))  # mean, natural log


# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------


def splitmix64_tokens(n, vocab, seed):
    state = seed & MASK64
    out = np.empty(n, dtype="<u2")
    prev = 0
    for i in range(n):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        r = z ^ (z >> 31)
        if i == 0 or r % 4 == 0:
            t = (r >> 32) % vocab
        else:
            t = (31 * prev + 7 + (r >> 32) % 3) % vocab
        out[i] = t
        prev = t
    return out


def load_tokens(path, vocab):
    raw = np.fromfile(path, dtype="<u2")
    if raw.size == 0:
        raise ValueError(f"{path}: empty token file")
    if int(raw.max()) >= vocab:
        raise ValueError(f"{path}: token {int(raw.max())} >= vocab {vocab}")
    return torch.from_numpy(raw.astype(np.int64))


def window_rows(tokens, T, g_list):
    """Rows for global row indices g_list: offset = (g*T) mod M with M = N - T."""
    N = tokens.numel()
    M = N - T
    if M <= 0:
        raise ValueError(f"token file too short: N={N}, T={T}")
    offs = [(g * T) % M for g in g_list]
    idx = torch.stack([tokens[o:o + T] for o in offs])
    tgt = torch.stack([tokens[o + 1:o + T + 1] for o in offs])
    return idx, tgt, offs


def rank_rows(s, a, r, A, W, B):
    return [((s * A + a) * W + r) * B + b for b in range(B)]


# --------------------------------------------------------------------------------------------------------
# Training step
# --------------------------------------------------------------------------------------------------------


def to_bf16(x):
    """x rounded to the nearest bf16 (ties to even), as float32."""
    return x.to(torch.bfloat16).to(torch.float32)


def grads_for_step(P, tokens, s, args, loss_of=None):
    """Simulates W ranks: each rank accumulates sum_a grad(local_loss_a / A) over its micro-batches, then the
    gradients are all-reduced as (sum over ranks in rank order) / W. Returns (grads, reported loss).
    --param-dtype bf16: the forward and backward run on the parameters rounded to bf16 (the gathered copy), and each
    micro-batch's gradient is added into a bf16 buffer (rounded after each add) before the f32 reduction.
    loss_of(P, idx, tgt): the model's mean loss (default: this GPT-2's; llama_reference.py passes its own)."""
    T, W, B, A = args.seq, args.ranks, args.batch, args.grad_accum
    if loss_of is None:
        def loss_of(P_, idx_, tgt_):
            return loss_fn(P_, idx_, tgt_, args.layers, args.heads)
    bf16_params = getattr(args, "param_dtype", "f32") == "bf16"
    if bf16_params:
        P = {n: to_bf16(p.detach()).requires_grad_(True) for n, p in P.items()}
    names = list(P)
    total = None
    local_losses = []  # [a][r]
    for r in range(W):
        acc = None
        for a in range(A):
            idx, tgt, _ = window_rows(tokens, T, rank_rows(s, a, r, A, W, B))
            if getattr(args, "autocast", "none") == "bf16":
                # PyTorch's bf16 mixed precision: matmuls in bf16 with f32 accumulation, f32 parameters.
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = loss_of(P, idx, tgt)
                loss = loss.float()
            else:
                loss = loss_of(P, idx, tgt)
            local_losses.append(float(loss.item()))
            gs = torch.autograd.grad(loss / A if A > 1 else loss, [P[n] for n in names])
            acc = list(gs) if acc is None else [x + y for x, y in zip(acc, gs)]
            if bf16_params:
                acc = [to_bf16(x) for x in acc]
        total = acc if total is None else [x + y for x, y in zip(total, acc)]
    if W > 1:
        total = [x / W for x in total]
    # reported loss: mean over micro-batches and ranks of each rank's local mean loss
    reported = sum(local_losses) / len(local_losses)
    return dict(zip(names, total)), reported


def global_grad_norm(grads):
    # per-parameter float32 sum of squares, summed in float64 on the host
    return math.sqrt(sum(float((g * g).sum().item()) for g in grads.values()))


class AdamW:
    """The spec's AdamW, by hand (torch.optim.AdamW's lerp-based update rounds differently)."""

    def __init__(self, P, lr, wd, beta1, beta2, eps):
        self.lr, self.wd, self.b1, self.b2, self.eps = lr, wd, beta1, beta2, eps
        self.m = {n: torch.zeros_like(p) for n, p in P.items()}
        self.v = {n: torch.zeros_like(p) for n, p in P.items()}
        self.t = 0

    @torch.no_grad()
    def step(self, P, grads):
        self.t += 1
        lr, b1, b2, eps = self.lr, self.b1, self.b2, self.eps
        bc1 = 1.0 - b1 ** self.t  # float64 on the host
        bc2 = 1.0 - b2 ** self.t
        step_size = lr / bc1
        sqrt_bc2 = math.sqrt(bc2)
        for n, p in P.items():
            g = grads[n]
            if p.dim() >= 2 and self.wd != 0.0:
                p.mul_(1.0 - lr * self.wd)
            m = self.m[n]
            v = self.v[n]
            m.copy_(b1 * m + (1.0 - b1) * g)
            v.copy_(b2 * v + (1.0 - b2) * g * g)
            denom = torch.sqrt(v) / sqrt_bc2 + eps
            p.copy_(p - step_size * m / denom)


def eval_loss(P, tokens, args, loss_of=None):
    """The validation loss of the weights P: --eval-steps batches of a step's W x A x B rows of `tokens`, from row 0,
    batch k taking the rows training step k would (rank_rows); the mean of every micro-batch's mean loss."""
    T, W, B, A = args.seq, args.ranks, args.batch, args.grad_accum
    if loss_of is None:
        def loss_of(P_, idx_, tgt_):
            return loss_fn(P_, idx_, tgt_, args.layers, args.heads)
    losses = []
    with torch.no_grad():
        for k in range(args.eval_steps):
            for r in range(W):
                for a in range(A):
                    idx, tgt, _ = window_rows(tokens, T, rank_rows(k, a, r, A, W, B))
                    losses.append(float(loss_of(P, idx, tgt).item()))
    return sum(losses) / len(losses)


def train_steps(P, tokens, args, loss_of=None):
    """The training loop (grads_for_step, global norm, clipping, AdamW), printing each step and a final JSON line.
    Returns (losses, grad_norms); with --val-data, args.val_losses gets [step, loss] after every --eval-every steps
    and after the last."""
    opt = AdamW(P, args.lr, args.weight_decay, args.beta1, args.beta2, args.eps)
    losses, norms, times = [], [], []
    val = load_tokens(args.val_data, args.vocab) if getattr(args, "val_data", None) else None
    args.val_losses = []
    for s in range(args.steps):
        t0 = time.perf_counter()
        grads, loss = grads_for_step(P, tokens, s, args, loss_of)
        n = global_grad_norm(grads)
        if args.grad_clip > 0:
            coef = args.grad_clip / (n + 1e-6)
            if coef < 1.0:
                for g in grads.values():
                    g.mul_(coef)
        opt.step(P, grads)
        dt = (time.perf_counter() - t0) * 1000.0
        losses.append(loss)
        norms.append(n)
        times.append(dt)
        print(f"step {s} loss {loss:.6f} time_ms {dt:.3f} grad_norm {n:.6f}", flush=True)
        if val is not None and (s + 1 == args.steps or (args.eval_every > 0 and (s + 1) % args.eval_every == 0)):
            args.val_losses.append([s, eval_loss(P, val, args, loss_of)])
            print(f"eval step {s} val_loss {args.val_losses[-1][1]:.6f}", flush=True)
    steady = times[2:] if len(times) > 2 else times
    mean_ms = sum(steady) / len(steady) if steady else 0.0
    tok = args.ranks * args.batch * args.seq * args.grad_accum
    print(json.dumps({"final_loss": losses[-1] if losses else None, "mean_step_ms": mean_ms,
                      "tokens_per_s": tok / (mean_ms / 1000.0) if mean_ms > 0 else None,
                      "peak_memory": "n/a (reference)"}), flush=True)
    return losses, norms


def write_train_json(args, model_cfg, losses, norms, spec, generator):
    """--out: {spec, generator, torch, config (the model's keys, then the run's), losses, grad_norms}."""
    cfg = dict(model_cfg)
    cfg.update({k: getattr(args, k) for k in ("seq", "batch", "ranks", "grad_accum", "steps", "lr", "weight_decay",
                                              "beta1", "beta2", "eps", "grad_clip")})
    cfg["dtype"] = args.dtype
    if args.autocast != "none":
        cfg["autocast"] = args.autocast
    if args.param_dtype != "f32":
        cfg["param_dtype"] = args.param_dtype
    cfg["init"] = args.init
    cfg["data"] = args.data
    doc = {"spec": spec, "generator": generator, "torch": torch.__version__, "config": cfg, "losses": losses,
           "grad_norms": norms}
    if getattr(args, "val_data", None):
        cfg.update({"val_data": args.val_data, "eval_every": args.eval_every, "eval_steps": args.eval_steps})
        doc["val_losses"] = args.val_losses
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)  # floats written with repr (full precision)
        f.write("\n")


def train(args):
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    P = load_params(args.init, args.layers, args.embd, args.vocab, args.ctx, dtype)
    tokens = load_tokens(args.data, args.vocab)
    if args.seq > args.ctx:
        raise ValueError("--seq must be <= --ctx")
    if args.embd % args.heads:
        raise ValueError("--embd must be a multiple of --heads")
    losses, norms = train_steps(P, tokens, args)
    if args.out:
        # "spec" keeps the name the checked-in tests/data files carry; the rules are in docs/gpt-model.md.
        write_train_json(args, {k: getattr(args, k) for k in ("layers", "heads", "embd", "vocab", "ctx")}, losses,
                         norms, "shared/specs/gpt2-training.md", "tests/reference/gpt2_reference.py")


# --------------------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------------------


class Report:
    """report(name, err, tol) prints one selfcheck line; report.ok is False once any check failed."""

    def __init__(self):
        self.ok = True

    def __call__(self, name, err, tol):
        good = err <= tol
        self.ok &= good
        print(f"selfcheck {name}: max_err {err:.3e} (tol {tol:.0e}) {'OK' if good else 'FAIL'}", flush=True)


def fd_check(report, P, loss_of, picks, extra=None, label="finite-difference", per_param=4, seed=5):
    """Central finite differences (h = 1e-5) of loss_of(P) (float64) against autograd at per_param random entries of
    each parameter in picks, plus the (name, flat index) entries in extra."""
    loss = loss_of(P)
    grads = dict(zip(P, torch.autograd.grad(loss, list(P.values()))))
    rng = np.random.default_rng(seed)
    h = 1e-5
    worst = 0.0
    worst_abs = 0.0
    gmax = 0.0
    count = 0
    with torch.no_grad():
        for n in picks:
            p = P[n]
            flat = p.view(-1)
            entries = list(rng.choice(flat.numel(), size=min(per_param, flat.numel()), replace=False))
            entries += [e for name, e in (extra or []) if name == n]
            for e in entries:
                e = int(e)
                old = float(flat[e])
                flat[e] = old + h
                lp = float(loss_of(P))
                flat[e] = old - h
                lm = float(loss_of(P))
                flat[e] = old
                fd = (lp - lm) / (2 * h)
                an = float(grads[n].view(-1)[e])
                # error relative to the entry's gradient, floored at 1e-3 (the FD truncation/round-off error
                # is ~1e-10 absolute, so tiny gradients cannot be judged relatively)
                err = abs(fd - an) / max(1e-3, abs(an))
                worst = max(worst, err)
                worst_abs = max(worst_abs, abs(fd - an))
                gmax = max(gmax, abs(an))
                count += 1
    print(f"selfcheck {label}: {count} entries of {len(picks)} parameters, "
          f"max |grad| {gmax:.3e}", flush=True)
    suffix = label[len("finite-difference"):]
    report("fd_grad_abs" + suffix, worst_abs, 1e-9)
    report("fd_grad_err_over_max(|grad|,1e-3)" + suffix, worst, 1e-6)
    return loss


def perturb_1d(P, seed=99):
    """Moves the 1-D parameters (biases, norm weights) away from 0/1 so that their gradients are exercised
    generically."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in P.values():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return gen


def loss_and_causality_check(report, logits_of, idx, tgt, loss, vocab, label=""):
    """The loss against a manual log_softmax/gather; changing the last input token must not change the logits at
    earlier positions."""
    with torch.no_grad():
        logits = logits_of(idx)
        manual = -(logits.log_softmax(-1).gather(-1, tgt.unsqueeze(-1))).mean()
        report("cross_entropy_vs_manual" + label, abs(float(manual) - float(loss)), 1e-12)
        idx2 = idx.clone()
        idx2[:, -1] = (idx2[:, -1] + 1) % vocab
        l2 = logits_of(idx2)
        report("causal_mask" + label, float((l2[:, :-1] - logits[:, :-1]).abs().max()), 0.0)


def ranks_check(report, P, tokens, T, loss_of):
    """Simulated layouts 2x2x1, 4x1x1 and 1x2x2 (W x B x A) against 1x4x1 (float64): gradients and loss agree."""
    gl = {}
    for W_, B_, A2 in ((1, 4, 1), (2, 2, 1), (4, 1, 1), (1, 2, 2)):
        a_ = types.SimpleNamespace(seq=T, ranks=W_, batch=B_, grad_accum=A2)
        gl[(W_, B_, A2)] = grads_for_step(P, tokens, 1, a_, loss_of)
    base_g, base_l = gl[(1, 4, 1)]
    for key, (g_, l_) in gl.items():
        if key == (1, 4, 1):
            continue
        err = max(float((g_[n] - base_g[n]).abs().max()) for n in g_) + abs(l_ - base_l)
        report(f"ranks_WxBxA={key[0]}x{key[1]}x{key[2]}_vs_1x4x1_f64", err, 1e-12)


def selfcheck(args):
    report = Report()
    L, H, C, V, Tctx, T = args.layers, args.heads, args.embd, args.vocab, args.ctx, args.seq
    # 1. parameters: from --init, else the spec init with --seed (as float64 for the FD check)
    if args.init:
        P = load_params(args.init, L, C, V, Tctx, torch.float64)
    else:
        P = f64_leaves(make_init(L, C, V, Tctx, args.seed))
    # perturb biases and LN params away from 0/1 so their gradients are exercised generically
    gen = perturb_1d(P)
    if args.data:
        tokens = load_tokens(args.data, V)
    else:
        tokens = torch.from_numpy(splitmix64_tokens(512, V, 7).astype(np.int64))
    idx, tgt, _ = window_rows(tokens, T, list(range(2)))

    # 2. finite differences (float64, central, h = 1e-5) vs autograd for a few entries of each parameter kind
    picks = ["wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight",
             "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.ln_2.weight", "h.0.mlp.c_fc.weight",
             "h.0.mlp.c_fc.bias", f"h.{L - 1}.mlp.c_proj.weight", f"h.{L - 1}.mlp.c_proj.bias", "ln_f.weight",
             "ln_f.bias"]
    # include a row of wte that is an input token (both uses of the tied matrix)
    loss = fd_check(report, P, lambda P_: loss_fn(P_, idx, tgt, L, H), picks, [("wte.weight", int(idx[0, 0]) * C + 3)])

    # 3. building blocks vs torch's own ops
    z = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    report("gelu_tanh_vs_F.gelu", float((gelu_tanh(z) - F.gelu(z, approximate="tanh")).abs().max()), 1e-12)
    x = torch.randn(3, 5, C, dtype=torch.float64, generator=gen)
    w = torch.randn(C, dtype=torch.float64, generator=gen)
    b = torch.randn(C, dtype=torch.float64, generator=gen)
    report("layer_norm_vs_F.layer_norm",
           float((layer_norm(x, w, b) - F.layer_norm(x, (C,), w, b, 1e-5)).abs().max()), 1e-12)
    loss_and_causality_check(report, lambda i_: forward_logits(P, i_, L, H), idx, tgt, loss, V)

    # 4. hand-written AdamW vs torch.optim.AdamW in float64 (same math, different rounding)
    torch.manual_seed(3)
    p0 = {"w": torch.randn(4, 3, dtype=torch.float64), "b": torch.randn(3, dtype=torch.float64)}
    mine = {k: v.clone() for k, v in p0.items()}
    ref = {k: v.clone().requires_grad_(True) for k, v in p0.items()}
    topt = torch.optim.AdamW([{"params": [ref["w"]], "weight_decay": 0.1}, {"params": [ref["b"]], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    myopt = AdamW(mine, 1e-2, 0.1, 0.9, 0.95, 1e-8)
    for _ in range(5):
        gr = {k: torch.randn_like(v) for k, v in p0.items()}
        for k in ref:
            ref[k].grad = gr[k].clone()
        topt.step()
        myopt.step(mine, gr)
    report("adamw_vs_torch.optim.AdamW_f64", max(float((mine[k] - ref[k].detach()).abs().max()) for k in mine), 1e-12)

    # 5. simulated ranks: grads of 1x4 vs 2x2 vs 4x1 rows (float64) agree
    ranks_check(report, P, tokens, T, lambda P_, i_, t_: loss_fn(P_, i_, t_, L, H))

    # 6. safetensors round trip, incl. the transformer. prefix and BF16/F16 decoding
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        f1 = os.path.join(d, "a.safetensors")
        init = make_init(L, C, V, Tctx, 1)
        write_safetensors(f1, [("transformer." + n, t) for n, t in init], {"format": "pt"})
        with open(f1, "rb") as fh:
            (hn,) = struct.unpack("<Q", fh.read(8))
        report("safetensors_header_multiple_of_8", float(hn % 8), 0.0)
        back = load_params(f1, L, C, V, Tctx, torch.float32)
        report("safetensors_roundtrip", max(float((back[n] - t).abs().max()) for n, t in init), 0.0)
        t = torch.tensor([1.0, -2.5, 0.15625, 3.0e-3], dtype=torch.float32)
        bf = (t.numpy().view(np.uint32) >> 16).astype("<u2").tobytes()
        f16 = t.numpy().astype("<f2").tobytes()
        hdr = {"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
               "y": {"dtype": "F16", "shape": [4], "data_offsets": [8, 16]}}
        hj = json.dumps(hdr).encode()
        hj += b" " * ((-len(hj)) % 8)
        f2 = os.path.join(d, "b.safetensors")
        with open(f2, "wb") as fh:
            fh.write(struct.pack("<Q", len(hj)) + hj + bf + f16)
        got, _ = read_safetensors(f2)
        report("safetensors_bf16", float((got["x"] - t).abs().max()), 0.01)
        report("safetensors_f16", float((got["y"] - t).abs().max()), 0.002)

    # 7. splitmix64: known first output for seed 0 (0xE220A8397B1DCDAF, the published reference value)
    state = (0 + 0x9E3779B97F4A7C15) & MASK64
    z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    r0 = z ^ (z >> 31)
    report("splitmix64_seed0_first", float(r0 != 0xE220A8397B1DCDAF), 0.0)
    report("make_data_first_token", float(int(splitmix64_tokens(1, 1 << 16, 0)[0]) != (r0 >> 32) % (1 << 16)), 0.0)

    print("selfcheck " + ("PASSED" if report.ok else "FAILED"), flush=True)
    return 0 if report.ok else 1


# --------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------


def greedy_generate(args, logits_of, cfg):
    """Greedy decoding by full forwards over the growing sequence: what a KV-cache decoder must reproduce.
    logits_of(idx [1, t]) -> logits [1, t, V]; cfg: the model's keys for the JSON's config."""
    prompt = [int(t) for t in args.prompt.split(",")]
    if len(prompt) + args.generate > args.ctx:
        raise ValueError(f"prompt {len(prompt)} + {args.generate} tokens pass the context {args.ctx}")
    seq, tokens, logits, margins = list(prompt), [], [], []
    with torch.no_grad():
        for _ in range(args.generate):
            row = logits_of(torch.tensor([seq]))[0, -1]
            top = torch.topk(row, 2).values
            tok = int(torch.argmax(row))  # the first largest
            margins.append(float(top[0] - top[1]))
            logits.append([float(v) for v in row])
            tokens.append(tok)
            seq.append(tok)
            print(f"step {len(tokens) - 1} token {tok} margin {margins[-1]:.3g}")
    out = {"config": dict(cfg, init=args.init, torch=torch.__version__),
           "prompt": prompt, "tokens": tokens, "logits": logits, "min_margin": min(margins)}
    print(json.dumps({"tokens": tokens, "min_margin": min(margins)}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f)
    return 0


def generate(args):
    P = load_params(args.init, args.layers, args.embd, args.vocab, args.ctx, torch.float32)
    return greedy_generate(args, lambda idx: forward_logits(P, idx, args.layers, args.heads),
                           {k: getattr(args, k) for k in ("layers", "heads", "embd", "vocab", "ctx")})


def add_run_args(ap, init_help):
    """The flags of training, --selfcheck and --generate that do not describe the model."""
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4, help="rows per rank per micro-batch (B)")
    ap.add_argument("--ranks", type=int, default=1, help="simulated data-parallel ranks (W)")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step (A)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--init", help=init_help)
    ap.add_argument("--data", help="flat little-endian uint16 token file")
    ap.add_argument("--out", help="write config, per-step losses and grad norms as JSON")
    ap.add_argument("--val-data", help="held-out tokens: the validation loss every --eval-every steps and at the end")
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-steps", type=int, default=20, help="batches of the validation loss (a step's rows each)")
    ap.add_argument("--seed", type=int, default=1234, help="seed for --make-init / --make-data / --selfcheck")
    ap.add_argument("--selfcheck", action="store_true")
    ap.add_argument("--generate", type=int, metavar="N", help="greedy tokens to generate after --prompt")
    ap.add_argument("--prompt", help="--generate's prompt: token ids, '3,17,42'")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="float32 is the spec; float64 only to measure float32 round-off drift")
    ap.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: the forward under torch.autocast('cpu', bfloat16) (bf16 mixed precision)")
    ap.add_argument("--param-dtype", choices=("f32", "bf16"), default="f32",
                    help="bf16: the forward on the parameters rounded to bf16, gradients in bf16, f32 master weights "
                         "(Strata's --param-dtype bf16 with --compute-dtype f32)")


def setup_torch(args):
    """One thread (--threads), float32 default, deterministic algorithms. Returns args."""
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    return args


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--embd", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=16)
    add_run_args(ap, "safetensors init file (accepts the transformer. prefix)")
    ap.add_argument("--tokens", type=int, help="token count for --make-data")
    ap.add_argument("--make-init", metavar="FILE")
    ap.add_argument("--make-data", metavar="FILE")
    args = setup_torch(ap.parse_args(argv))

    if args.make_data:
        if args.tokens is None:
            ap.error("--make-data needs --tokens")
        splitmix64_tokens(args.tokens, args.vocab, args.seed).tofile(args.make_data)
        return 0
    if args.make_init:
        init = make_init(args.layers, args.embd, args.vocab, args.ctx, args.seed)
        meta = {"format": "pt", "generator": "tests/reference/gpt2_reference.py --make-init",
                "layers": args.layers, "heads": args.heads, "embd": args.embd, "vocab": args.vocab,
                "ctx": args.ctx, "seed": args.seed, "torch": torch.__version__}
        write_safetensors(args.make_init, init, meta)
        return 0
    return run_mode(ap, args, selfcheck, generate, train)


def run_mode(ap, args, selfcheck_, generate_, train_):
    """--selfcheck, --generate or training (the default)."""
    if args.selfcheck:
        return selfcheck_(args)
    if args.generate:
        if not args.init or not args.prompt:
            ap.error("--generate needs --init and --prompt")
        return generate_(args)
    if not args.init or not args.data:
        ap.error("training needs --init and --data")
    train_(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
