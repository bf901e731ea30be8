#!/usr/bin/python3
"""Independent PyTorch reference for Llama-style decoders (Hugging Face's LlamaForCausalLM), trained by the rules of
docs/gpt-model.md.

The model is written with plain torch ops (no Hugging Face code): RMSNorm, rotary embeddings (rope_theta, optional
`llama3` scaling), grouped-query attention, a SwiGLU MLP, optional q/k/v biases (as Qwen2ForCausalLM has), a tied or
untied LM head. Everything else is gpt2_reference.py's, imported from it: the data windows, the simulated ranks and
gradient accumulation, the global norm and clipping, AdamW by hand, safetensors, the training loop, the JSON files and
greedy decoding. float32 throughout, one thread, `torch.use_deterministic_algorithms(True)`.

Modes (tests/reference/README.md, "Llama reference", has the exact commands that produced tests/data/llama_*):
  --make-init FILE [model flags] --seed S            init weights, safetensors F32 with the config in __metadata__
  --write-config DIR [model flags] [--init FILE]     DIR/config.json (transformers') and DIR/model.safetensors
  --selfcheck [model flags] [--init FILE --data FILE]
                                                     float64 finite differences, RMSNorm, RoPE, GQA, causality, ...
  --generate N --prompt IDS --init FILE [--out FILE.json]
                                                     greedy decoding by full forwards (no KV cache), as for the GPT
  (default) train: --init FILE --data FILE --steps ... [--out FILE.json]
Model flags: --layers --hidden --heads --kv-heads --head-dim --intermediate --vocab --ctx --rope-theta --rms-eps
--tie/--untie --qkv-bias [--rope-scaling llama3 --rope-factor --rope-low-freq-factor --rope-high-freq-factor
--rope-original-ctx]. A file that records its config (every --make-init file) must agree with them.

Needs torch: Debian's /usr/bin/python3 with python3-torch, as gpt2_reference.py.
"""

import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as g2  # noqa: E402  (the shared training rules, data, AdamW, safetensors)

GENERATOR = "tests/reference/llama_reference.py"
SPEC = "Hugging Face LlamaForCausalLM; training rules of docs/gpt-model.md"
BIAS_STD = 0.02  # --qkv-bias: the biases are drawn (not zeros), so that the forward depends on them

# --------------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------------

# the model's keys, in the order the JSON files list them
MODEL_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "ctx", "rope_theta",
              "rms_eps", "tie", "qkv_bias", "rope_scaling")


def model_config(args):
    """The model's config from the flags, as a dict of MODEL_KEYS (head_dim resolved, rope_scaling a dict or None)."""
    head_dim = args.head_dim
    if head_dim is None:
        if args.hidden % args.heads:
            raise ValueError(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}: give --head-dim")
        head_dim = args.hidden // args.heads
    scaling = None
    if args.rope_scaling == "llama3":
        scaling = {"rope_type": "llama3", "factor": args.rope_factor, "low_freq_factor": args.rope_low_freq_factor,
                   "high_freq_factor": args.rope_high_freq_factor,
                   "original_max_position_embeddings": args.rope_original_ctx}
    c = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
         "head_dim": head_dim, "intermediate": args.intermediate, "vocab": args.vocab, "ctx": args.ctx,
         "rope_theta": args.rope_theta, "rms_eps": args.rms_eps, "tie": args.tie, "qkv_bias": args.qkv_bias,
         "rope_scaling": scaling}
    check_config(c)
    return c


def check_config(c):
    for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "ctx"):
        if c[k] < 1:
            raise ValueError(f"{k} must be >= 1, got {c[k]}")
    if c["heads"] % c["kv_heads"]:
        raise ValueError(f"kv_heads {c['kv_heads']} must divide heads {c['heads']}")
    if c["head_dim"] % 2:
        raise ValueError(f"head_dim {c['head_dim']} must be even (rotary pairs)")
    s = c["rope_scaling"]
    if s is not None and not (s["high_freq_factor"] > s["low_freq_factor"] > 0 and s["factor"] > 0):
        raise ValueError(f"rope_scaling {s}: needs high_freq_factor > low_freq_factor > 0 and factor > 0")


def hf_config(c):
    """transformers' config.json for the model (LlamaConfig's names). The tiny vocabularies have no special tokens,
    so bos/eos are null (LlamaConfig's defaults 1 and 2 would stop generate() at token 2). With q/k/v biases it is
    Qwen2's (Qwen2ForCausalLM: the same names, q/k/v biases and no others): LlamaForCausalLM's attention_bias also
    gives o_proj a bias, which this family has not."""
    h = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["hidden"],
            "intermediate_size": c["intermediate"], "num_hidden_layers": c["layers"],
            "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"], "head_dim": c["head_dim"],
            "rms_norm_eps": c["rms_eps"], "rope_theta": c["rope_theta"], "rope_scaling": c["rope_scaling"],
            "max_position_embeddings": c["ctx"], "vocab_size": c["vocab"], "tie_word_embeddings": c["tie"],
            "attention_bias": c["qkv_bias"], "mlp_bias": False, "hidden_act": "silu", "torch_dtype": "float32",
            "bos_token_id": None, "eos_token_id": None}
    if c["qkv_bias"]:
        h.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False, sliding_window=None)
    return h


def config_from_hf(h):
    """The inverse of hf_config (also for a transformers config.json of this family)."""
    if h.get("hidden_act", "silu") != "silu" or h.get("mlp_bias", False):
        raise ValueError("only hidden_act silu and mlp_bias false are modelled")
    qwen2 = h.get("model_type") == "qwen2"
    if qwen2 and h.get("use_sliding_window", False):
        raise ValueError("Qwen2's sliding window is not modelled")
    if not qwen2 and h.get("attention_bias", False):
        raise ValueError("LlamaForCausalLM's attention_bias gives q, k, v and o_proj biases; only q/k/v biases "
                         "(Qwen2's, model_type qwen2) are modelled")
    scaling = h.get("rope_scaling")
    if scaling is not None:
        scaling = dict(scaling)
        kind = scaling.pop("rope_type", scaling.pop("type", None))
        if kind != "llama3":
            raise ValueError(f"rope_scaling type {kind!r}: only llama3 is modelled")
        scaling = {"rope_type": "llama3", "factor": float(scaling["factor"]),
                   "low_freq_factor": float(scaling["low_freq_factor"]),
                   "high_freq_factor": float(scaling["high_freq_factor"]),
                   "original_max_position_embeddings": int(scaling["original_max_position_embeddings"])}
    heads = h["num_attention_heads"]
    c = {"layers": h["num_hidden_layers"], "hidden": h["hidden_size"], "heads": heads,
         "kv_heads": h.get("num_key_value_heads") or heads,
         "head_dim": h.get("head_dim") or h["hidden_size"] // heads, "intermediate": h["intermediate_size"],
         "vocab": h["vocab_size"], "ctx": h["max_position_embeddings"], "rope_theta": float(h.get("rope_theta", 1e4)),
         "rms_eps": float(h.get("rms_norm_eps", 1e-6)), "tie": bool(h.get("tie_word_embeddings", False)),
         "qkv_bias": qwen2, "rope_scaling": scaling}
    check_config(c)
    return c


def config_flags(c):
    """The command-line flags that give config c."""
    out = ["--layers", str(c["layers"]), "--hidden", str(c["hidden"]), "--heads", str(c["heads"]), "--kv-heads",
           str(c["kv_heads"]), "--head-dim", str(c["head_dim"]), "--intermediate", str(c["intermediate"]), "--vocab",
           str(c["vocab"]), "--ctx", str(c["ctx"]), "--rope-theta", repr(c["rope_theta"]), "--rms-eps",
           repr(c["rms_eps"]), "--tie" if c["tie"] else "--untie"] + (["--qkv-bias"] if c["qkv_bias"] else [])
    s = c["rope_scaling"]
    if s is not None:
        out += ["--rope-scaling", "llama3", "--rope-factor", repr(s["factor"]), "--rope-low-freq-factor",
                repr(s["low_freq_factor"]), "--rope-high-freq-factor", repr(s["high_freq_factor"]),
                "--rope-original-ctx", str(s["original_max_position_embeddings"])]
    return out


def file_config(path):
    """The config an init file records in its __metadata__ (None if it records none)."""
    _, meta = g2.read_safetensors(path)
    return config_from_hf(json.loads(meta["config"])) if "config" in meta else None


# --------------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------------


def param_specs(c):
    """(name, shape) in LlamaForCausalLM's module order (the order --make-init draws in)."""
    H, D, I = c["hidden"], c["head_dim"], c["intermediate"]
    q_out, kv_out = c["heads"] * D, c["kv_heads"] * D
    specs = [("model.embed_tokens.weight", [c["vocab"], H])]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        specs.append((p + "input_layernorm.weight", [H]))
        for proj, out in (("q", q_out), ("k", kv_out), ("v", kv_out)):
            specs.append((p + f"self_attn.{proj}_proj.weight", [out, H]))
            if c["qkv_bias"]:
                specs.append((p + f"self_attn.{proj}_proj.bias", [out]))
        specs += [(p + "self_attn.o_proj.weight", [H, q_out]), (p + "post_attention_layernorm.weight", [H]),
                  (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
                  (p + "mlp.down_proj.weight", [H, I])]
    specs.append(("model.norm.weight", [H]))
    if not c["tie"]:
        specs.append(("lm_head.weight", [c["vocab"], H]))
    return specs


def make_init(c, seed):
    """torch.manual_seed(seed), then in param_specs' order: o_proj and down_proj (they write into the residual stream)
    ~ Normal(0, 0.02/sqrt(2L)); embeddings, q/k/v, gate/up and lm_head ~ Normal(0, 0.02); q/k/v biases ~ Normal(0,
    BIAS_STD); RMSNorm weights 1 (no draw)."""
    def rule(name):
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            return 0.02 / math.sqrt(2 * c["layers"])
        if name.endswith("norm.weight"):
            return ("fill", 1.0)
        return BIAS_STD if name.endswith(".bias") else 0.02
    return g2.draw_init(param_specs(c), seed, rule)


def init_metadata(c, seed):
    return {"format": "pt", "generator": GENERATOR + " --make-init", "config": json.dumps(hf_config(c)),
            "seed": seed, "torch": torch.__version__}


def load_params(path, c, dtype):
    """Strict: every parameter of c, nothing else; an lm_head.weight in a tied file must equal the embeddings. A file
    that records a config must record c."""
    raw, meta = g2.read_safetensors(path)
    if "config" in meta:
        fc = config_from_hf(json.loads(meta["config"]))
        diff = [f"{k}: file {fc[k]!r}, flags {c[k]!r}" for k in MODEL_KEYS if fc[k] != c[k]]
        if diff:
            raise ValueError(f"{path}: the file's config differs from the flags: " + "; ".join(diff))
    if c["tie"] and "lm_head.weight" in raw:
        if not torch.equal(raw["lm_head.weight"], raw.get("model.embed_tokens.weight", torch.empty(0))):
            raise ValueError(f"{path}: tied model, but lm_head.weight differs from model.embed_tokens.weight")
        del raw["lm_head.weight"]
    return g2.take_params(path, raw, param_specs(c), dtype)


# --------------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------------


def rope_inv_freq(c):
    """float64 [head_dim/2]: theta^(-2i/D), then llama3's rescaling (transformers' _compute_llama3_parameters):
    wavelengths 2*pi/f above original/low_freq_factor are divided by factor, those below original/high_freq_factor
    kept, those between interpolated with s = (original/wavelength - low) / (high - low)."""
    D = c["head_dim"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    s = c["rope_scaling"]
    if s is None:
        return inv
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, smoothed, scaled)


def rope_tables(c, T, dtype):
    """cos, sin [T, D] of the angles p * inv_freq (float64), rounded once to dtype; column i and i + D/2 share a
    frequency (rotate_half's pairing)."""
    ang = torch.arange(T, dtype=torch.float64)[:, None] * rope_inv_freq(c)[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, cos, sin):
    """x [..., T, D]: (x_i, x_{i+D/2}) rotated by the angle of frequency i."""
    return x * cos + rotate_half(x) * sin


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def attention(q, k, v):
    """q [B, NH, T, D], k, v [B, KVH, T, D] -> [B, NH, T, D]: causal softmax(q k^T / sqrt(D)) v, kv head j serving
    q heads j*n_rep .. j*n_rep + n_rep - 1 (transformers' repeat_kv). The softmax in the residual dtype (float32; under
    autocast the scores are bf16)."""
    n_rep = q.shape[1] // k.shape[1]
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    T, D = q.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-2, -1)) * D ** -0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))  # -inf where u > t
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    return torch.softmax(s, dim=-1, dtype=dtype) @ v


def forward_logits(P, idx, c):
    """The nn.Linear layout: y = x @ W^T + b with W [out, in]; the residual stream in the parameters' dtype."""
    Bn, T = idx.shape
    NH, KVH, D, eps = c["heads"], c["kv_heads"], c["head_dim"], c["rms_eps"]
    x = P["model.embed_tokens.weight"][idx]
    cos, sin = rope_tables(c, T, x.dtype)
    for i in range(c["layers"]):
        p = f"model.layers.{i}.self_attn."
        a = rms_norm(x, P[f"model.layers.{i}.input_layernorm.weight"], eps)
        q = F.linear(a, P[p + "q_proj.weight"], P.get(p + "q_proj.bias"))
        k = F.linear(a, P[p + "k_proj.weight"], P.get(p + "k_proj.bias"))
        v = F.linear(a, P[p + "v_proj.weight"], P.get(p + "v_proj.bias"))
        q = apply_rope(q.view(Bn, T, NH, D).transpose(1, 2), cos, sin)  # head h = rows h*D .. h*D+D-1 of q_proj
        k = apply_rope(k.view(Bn, T, KVH, D).transpose(1, 2), cos, sin)
        v = v.view(Bn, T, KVH, D).transpose(1, 2)
        y = attention(q, k, v).transpose(1, 2).reshape(Bn, T, NH * D)
        x = x + F.linear(y, P[p + "o_proj.weight"])
        p = f"model.layers.{i}."
        m = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        x = x + F.linear(F.silu(F.linear(m, P[p + "mlp.gate_proj.weight"])) * F.linear(m, P[p + "mlp.up_proj.weight"]),
                         P[p + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"], eps)
    return F.linear(x, P["model.embed_tokens.weight"] if c["tie"] else P["lm_head.weight"])


def loss_fn(P, idx, tgt, c):
    logits = forward_logits(P, idx, c)
    logits = logits.to(P["model.norm.weight"].dtype)  # bf16 logits under autocast: the loss in f32, as transformers
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))  # mean, natural log


def loss_of(c):
    """grads_for_step's loss(P, idx, tgt) for config c."""
    return lambda P, idx, tgt: loss_fn(P, idx, tgt, c)


# --------------------------------------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------------------------------------


def train(args):
    c = model_config(args)
    if args.seq > c["ctx"]:
        raise ValueError("--seq must be <= --ctx")
    P = load_params(args.init, c, torch.float64 if args.dtype == "float64" else torch.float32)
    tokens = g2.load_tokens(args.data, c["vocab"])
    losses, norms = g2.train_steps(P, tokens, args, loss_of(c))
    if args.out:
        g2.write_train_json(args, c, losses, norms, SPEC, GENERATOR)


def generate(args):
    c = model_config(args)
    P = load_params(args.init, c, torch.float32)
    return g2.greedy_generate(args, lambda idx: forward_logits(P, idx, c), c)


def write_config(args):
    """DIR/config.json and DIR/model.safetensors (the --init file's tensors, else --make-init's draw from --seed):
    a directory LlamaForCausalLM.from_pretrained loads."""
    c = model_config(args)
    if args.init:
        P = load_params(args.init, c, torch.float32)
        tensors = [(n, P[n].detach()) for n, _ in param_specs(c)]
    else:
        tensors = make_init(c, args.seed)
    os.makedirs(args.write_config, exist_ok=True)
    meta = init_metadata(c, args.seed)
    if args.init:
        meta["generator"] = f"{GENERATOR} --write-config from {args.init}"
        del meta["seed"]
    g2.write_safetensors(os.path.join(args.write_config, "model.safetensors"), tensors, meta)
    with open(os.path.join(args.write_config, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
        f.write("\n")
    return 0


# --------------------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------------------


def feature_config(c):
    """A variant of c with every optional feature the other way or on: tied/untied swapped, q/k/v biases, one kv
    head, llama3 scaling with all three of its frequency bands present (theta 100, original context 32)."""
    return dict(c, tie=not c["tie"], qkv_bias=True, kv_heads=1, rope_theta=100.0, ctx=max(c["ctx"], 64),
                rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 32})


def f64_params(c, seed, init=None):
    """float64 parameters (from init, else make_init), the 1-D ones moved away from 1 and 0 so that their gradients
    are generic."""
    P = load_params(init, c, torch.float64) if init else g2.f64_leaves(make_init(c, seed))
    g2.perturb_1d(P)
    return P


def naive_attention(q, k, v):
    """attention() by loops over rows, heads and positions, kv head h // n_rep (the definition, for the check)."""
    Bn, NH, T, D = q.shape
    n_rep = NH // k.shape[1]
    out = torch.zeros_like(q)
    for b in range(Bn):
        for h in range(NH):
            for t in range(T):
                sc = torch.stack([q[b, h, t].dot(k[b, h // n_rep, u]) / math.sqrt(D) for u in range(t + 1)])
                w = torch.exp(sc - sc.max())
                out[b, h, t] = (w[:, None] * v[b, h // n_rep, :t + 1]).sum(0) / w.sum()
    return out


def selfcheck(args):
    report = g2.Report()
    c = model_config(args)
    if args.init:
        fc = file_config(args.init)
        c = fc if fc is not None else c
    T = args.seq
    tokens = (g2.load_tokens(args.data, c["vocab"]) if args.data else
              torch.from_numpy(g2.splitmix64_tokens(512, c["vocab"], 7).astype(np.int64)))
    idx, tgt, _ = g2.window_rows(tokens, T, list(range(2)))
    gen = torch.Generator().manual_seed(7)

    # 1. finite differences (float64) at entries of every parameter of the first layer, the last layer's output
    # projections, the embeddings (rows that are input tokens included), the final norm and lm_head; for the given
    # config and for its feature variant (tie swapped, q/k/v biases, 1 kv head, llama3 scaling)
    cf = feature_config(c)
    for label, cc, init in (("", c, args.init), ("_features", cf, None)):
        P = f64_params(cc, args.seed, init)
        L = cc["layers"]
        picks = [n for n, _ in param_specs(cc) if n.startswith("model.layers.0.") or not n.startswith("model.layers.")]
        picks += [f"model.layers.{L - 1}.self_attn.o_proj.weight", f"model.layers.{L - 1}.mlp.down_proj.weight"]
        H = cc["hidden"]
        extra = [("model.embed_tokens.weight", int(idx[0, 0]) * H + 3), ("model.embed_tokens.weight",
                                                                          int(idx[1, 5]) * H + H - 1)]
        loss = g2.fd_check(report, P, lambda P_: loss_fn(P_, idx, tgt, cc), sorted(set(picks)), extra,
                           "finite-difference" + label)
        g2.loss_and_causality_check(report, lambda i_: forward_logits(P, i_, cc), idx, tgt, loss, cc["vocab"], label)
        if label == "":
            P_base = P

    # 2. building blocks against their definitions
    x = torch.randn(3, 5, c["hidden"], dtype=torch.float64, generator=gen)
    w = torch.randn(c["hidden"], dtype=torch.float64, generator=gen)
    xn, wn = x.numpy(), w.numpy()
    manual = xn / np.sqrt((xn ** 2).sum(-1, keepdims=True) / xn.shape[-1] + c["rms_eps"]) * wn
    report("rms_norm_vs_manual", float(np.abs(rms_norm(x, w, c["rms_eps"]).numpy() - manual).max()), 1e-12)
    z = torch.linspace(-8, 8, 1001, dtype=torch.float64)
    report("silu_vs_z*sigmoid(z)", float((F.silu(z) - z / (1 + torch.exp(-z))).abs().max()), 1e-12)
    Bq, NH, KVH, D = 2, c["heads"], c["kv_heads"], c["head_dim"]
    q = torch.randn(Bq, NH, 6, D, dtype=torch.float64, generator=gen)
    k = torch.randn(Bq, KVH, 6, D, dtype=torch.float64, generator=gen)
    v = torch.randn(Bq, KVH, 6, D, dtype=torch.float64, generator=gen)
    report("attention_vs_loops_gqa", float((attention(q, k, v) - naive_attention(q, k, v)).abs().max()), 1e-12)
    kf = torch.randn(Bq, NH, 6, D, dtype=torch.float64, generator=gen)
    vf = torch.randn(Bq, NH, 6, D, dtype=torch.float64, generator=gen)
    report("attention_vs_loops_mha", float((attention(q, kf, vf) - naive_attention(q, kf, vf)).abs().max()), 1e-12)

    # 3. GQA: the model equals the MHA model (kv_heads = heads) whose k/v rows of q head h are kv head h // n_rep's
    n_rep = NH // KVH
    P_mha = {}
    for n, p in P_base.items():
        p = p.detach()
        if ".k_proj." in n or ".v_proj." in n:
            heads = p.view(KVH, D, *p.shape[1:])
            p = torch.cat([heads[h // n_rep] for h in range(NH)])
        P_mha[n] = p
    with torch.no_grad():
        err = (forward_logits(P_mha, idx, dict(c, kv_heads=NH)) - forward_logits(P_base, idx, c)).abs().max()
    report(f"gqa_{KVH}_kv_heads_vs_mha_with_repeated_kv", float(err), 1e-12)

    # 4. RoPE: the table is the exact angle's cos/sin rounded once; rotations are orthogonal (norms kept, cos^2 +
    # sin^2 = 1); the pairing is rotate_half's (pair (i, i + D/2) is the complex number x_i + j x_{i+D/2} times
    # e^{j p f_i}); scores depend on positions only through their difference
    for label, cc in (("", c), ("_llama3", cf)):
        Tn = cc["ctx"]
        cos, sin = rope_tables(cc, Tn, torch.float64)
        f = [float(v_) for v_ in rope_inv_freq(cc)]
        exact = max(abs(math.cos(p_ * f[i % (D // 2)]) - float(cos[p_, i])) +
                    abs(math.sin(p_ * f[i % (D // 2)]) - float(sin[p_, i])) for p_ in range(Tn) for i in range(D))
        report("rope_table_vs_math" + label, exact, 1e-12)
        c32, s32 = rope_tables(cc, Tn, torch.float32)
        rel = max(float(((t32.double() - t64).abs() / t64.abs().clamp_min(1e-30)).max())
                  for t32, t64 in ((c32, cos), (s32, sin)))
        report("rope_table_f32_rel_err_in_units_of_2^-24" + label, rel / 2 ** -24, 1.0)  # rounded once
        xr = torch.randn(Tn, D, dtype=torch.float64, generator=gen)
        rot = apply_rope(xr, cos, sin)
        report("rope_keeps_norms" + label, float((rot.norm(dim=-1) - xr.norm(dim=-1)).abs().max()), 1e-12)
        zc = torch.complex(xr[:, :D // 2], xr[:, D // 2:]) * torch.polar(
            torch.ones(Tn, D // 2, dtype=torch.float64), torch.arange(Tn, dtype=torch.float64)[:, None] *
            rope_inv_freq(cc)[None, :])
        report("rope_rotate_half_pairing" + label,
               float((torch.cat((zc.real, zc.imag), -1) - rot).abs().max()), 1e-12)
        qv, kv = torch.randn(D, dtype=torch.float64, generator=gen), torch.randn(D, dtype=torch.float64, generator=gen)
        rq, rk = apply_rope(qv.expand(Tn, D), cos, sin), apply_rope(kv.expand(Tn, D), cos, sin)
        rel = max(abs(float(rq[m_].dot(rk[n_]) - rq[m_ - n_].dot(rk[0]))) for m_ in range(Tn) for n_ in range(m_ + 1))
        report("rope_scores_depend_on_distance_only" + label, rel, 1e-12)

    # 5. llama3 scaling: against the rule written per frequency; the variant has all three bands; factor 1 is identity
    s = cf["rope_scaling"]
    old, lo, hi, fac = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    want, bands = [], set()
    for i in range(0, D, 2):
        f = 1.0 / cf["rope_theta"] ** (i / D)
        wl = 2 * math.pi / f
        if wl < old / hi:
            want.append(f)
            bands.add("kept")
        elif wl > old / lo:
            want.append(f / fac)
            bands.add("divided")
        else:
            sm = (old / wl - lo) / (hi - lo)
            want.append((1 - sm) * f / fac + sm * f)
            bands.add("interpolated")
    got = rope_inv_freq(cf)
    report("llama3_inv_freq_vs_rule", max(abs(float(g) - w_) / w_ for g, w_ in zip(got, want)), 1e-15)
    report("llama3_variant_has_3_bands", float(3 - len(bands)), 0.0)
    one = dict(cf, rope_scaling=dict(s, factor=1.0))
    report("llama3_factor_1_is_identity",
           float((rope_inv_freq(one) - rope_inv_freq(dict(cf, rope_scaling=None))).abs().max()), 1e-16)

    # 6. simulated ranks (float64): 2x2x1, 4x1x1 and 1x2x2 (W x B x A) against 1x4x1
    g2.ranks_check(report, P_base, tokens, T, loss_of(c))

    # 7. --make-init: draws in order, the spec's std per kind; safetensors round trip with the config in
    # __metadata__; a tied file holds no lm_head; a config that differs from the file's is refused
    for cc in (c, cf):
        init = make_init(cc, 1)
        worst = 0.0
        for n, t in init:
            if n.endswith("norm.weight"):
                worst = max(worst, float((t - 1).abs().max()))
                continue
            std = (0.02 / math.sqrt(2 * cc["layers"]) if n.endswith(("o_proj.weight", "down_proj.weight")) else
                   BIAS_STD if n.endswith(".bias") else 0.02)
            if t.numel() >= 256:  # sample std within 15% (about 5 standard errors at 256 draws)
                worst = max(worst, abs(float(t.std()) / std - 1) / 0.15)
        suffix = "_features" if cc is cf else ""
        report("init_std_per_kind_over_15%" + suffix, worst, 1.0)
        with tempfile.TemporaryDirectory() as d:
            f1 = os.path.join(d, "a.safetensors")
            g2.write_safetensors(f1, init, init_metadata(cc, 1))
            back = load_params(f1, cc, torch.float32)
            report("safetensors_roundtrip" + suffix,
                   max(float((back[n] - t).abs().max()) for n, t in init) + float(file_config(f1) != cc) +
                   float(("lm_head.weight" in back) == cc["tie"]), 0.0)
            try:
                load_params(f1, dict(cc, rope_theta=cc["rope_theta"] + 1), torch.float32)
                refused = 0.0
            except ValueError:
                refused = 1.0
            report("config_mismatch_refused" + suffix, 1.0 - refused, 0.0)

    print("selfcheck " + ("PASSED" if report.ok else "FAILED"), flush=True)
    return 0 if report.ok else 1


# --------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------


def add_model_args(ap):
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=32, help="hidden_size")
    ap.add_argument("--heads", type=int, default=4, help="num_attention_heads")
    ap.add_argument("--kv-heads", type=int, default=2, help="num_key_value_heads (divides --heads)")
    ap.add_argument("--head-dim", type=int, help="head_dim (default hidden / heads)")
    ap.add_argument("--intermediate", type=int, default=64, help="intermediate_size (the MLP's width)")
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=16, help="max_position_embeddings")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--tie", dest="tie", action="store_true", help="lm_head is model.embed_tokens.weight")
    ap.add_argument("--untie", dest="tie", action="store_false", help="a separate lm_head.weight (the default)")
    ap.set_defaults(tie=False)
    ap.add_argument("--qkv-bias", action="store_true", help="q/k/v projections with biases (Qwen2's)")
    ap.add_argument("--rope-scaling", choices=("none", "llama3"), default="none")
    ap.add_argument("--rope-factor", type=float, default=8.0)
    ap.add_argument("--rope-low-freq-factor", type=float, default=1.0)
    ap.add_argument("--rope-high-freq-factor", type=float, default=4.0)
    ap.add_argument("--rope-original-ctx", type=int, default=8192, help="original_max_position_embeddings")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    g2.add_run_args(ap, "safetensors init file with Hugging Face's Llama names")
    ap.add_argument("--make-init", metavar="FILE")
    ap.add_argument("--write-config", metavar="DIR")
    args = g2.setup_torch(ap.parse_args(argv))

    if args.make_init:
        c = model_config(args)
        g2.write_safetensors(args.make_init, make_init(c, args.seed), init_metadata(c, args.seed))
        return 0
    if args.write_config:
        return write_config(args)
    return g2.run_mode(ap, args, selfcheck, generate, train)


if __name__ == "__main__":
    sys.exit(main())
