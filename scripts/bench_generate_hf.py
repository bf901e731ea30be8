#!/usr/bin/env python3
"""strata-generate beside Hugging Face transformers' generate on the same weights, in one run (CPU, greedy, f32).

The weights: one train_gpt step of a 12-layer, 768-wide GPT (12 heads, vocab 8192, context 512: 0.37 GB of f32),
saved as safetensors, which transformers' GPT2LMHeadModel loads as they are (the same Conv1D layout, tanh GELU,
LayerNorm eps 1e-5, tied head). Each engine generates the same greedy tokens after the same prompts, twice: every
weight resident in memory, and every block offloaded (strata-generate --resident-layers 0 --weights-from disk: each
block read from the file every pass on an upload stream with a prefetch; accelerate's disk_offload: each block's
weights memory-mapped from an offload folder and loaded just before its forward, synchronously). The page cache is
warm for both. Decode tokens/s: strata-generate's own decode line; for transformers, (N - 1) / (t(N) - t(1)) over
generations of N and 1 new tokens (the prefill cancels). Prints a Markdown table and whether the tokens agree.

transformers and accelerate are installed, if missing, into a virtual environment over Debian's torch
(python3-torch): transformers 4.38 is the last release that supports torch 1.13.
Usage: scripts/bench_generate_hf.py [--new 64] [--batch 1] [--bin build/bin] [--venv /tmp/strata-hf-venv]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

MODEL = dict(layers=12, heads=12, embd=768, vocab=8192, ctx=512)
HF_PACKAGES = ["transformers==4.38.2", "accelerate==0.27.2"]


def ensure_venv(venv):
    """A virtual environment over Debian's python (which has torch) with transformers and accelerate."""
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import transformers, accelerate, torch"]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q"] + HF_PACKAGES, check=True)
    subprocess.run(probe, check=True)
    return python


def mpirun(np_):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def make_weights(bin_dir, path):
    m = MODEL
    subprocess.run(mpirun(1) + [os.path.join(bin_dir, "train_gpt"), "--steps", "1", "--no-progress", "--layers",
                                str(m["layers"]), "--heads", str(m["heads"]), "--embd", str(m["embd"]), "--vocab",
                                str(m["vocab"]), "--ctx", str(m["ctx"]), "--seq", "64", "--batch", "1", "--save",
                                path], check=True, capture_output=True,
                   env=dict(os.environ, STRATA_BACKEND="cpu", STRATA_LOG_LEVEL="warn"))


def strata(bin_dir, weights, prompts, new, offload):
    cmd = mpirun(1) + [os.path.join(bin_dir, "strata-generate"), "--weights", weights, "--heads",
                       str(MODEL["heads"]), "--max-new-tokens", str(new)]
    for p in prompts:
        cmd += ["--tokens", ",".join(map(str, p))]
    if offload:
        cmd += ["--resident-layers", "0", "--weights-from", "disk"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ, STRATA_BACKEND="cpu", STRATA_LOG_LEVEL="warn"))
    tokens = [list(map(int, m.group(2).split(","))) for m in re.finditer(r"^(\d+): ([0-9,]+)$", out.stdout, re.M)]
    rate = float(re.search(r"decode: ([0-9.]+) tokens/s", out.stderr).group(1))
    return tokens, rate


HF_RUN = r"""
import json, sys, time, torch
from transformers import GPT2Config, GPT2LMHeadModel
from safetensors.torch import load_file
a = json.loads(sys.argv[1])
m = a["model"]
torch.set_num_threads(a["threads"])
cfg = GPT2Config(vocab_size=m["vocab"], n_positions=m["ctx"], n_embd=m["embd"], n_layer=m["layers"],
                 n_head=m["heads"], activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                 embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=None,
                 eos_token_id=None)
model = GPT2LMHeadModel(cfg).eval()
state = {"transformer." + k: v for k, v in load_file(a["weights"]).items()}
missing, unexpected = model.load_state_dict(state, strict=False)
assert not unexpected and all(k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias"))
                              for k in missing), (missing, unexpected)
model.tie_weights()
if a["offload"]:
    from accelerate import disk_offload
    disk_offload(model, offload_dir=a["offload_dir"], execution_device=torch.device("cpu"))
ids = torch.tensor(a["prompts"])
def run(n):
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             pad_token_id=0)
    return time.perf_counter() - t0, out[:, ids.shape[1]:].tolist()
run(2)  # warm-up
t1, _ = run(1)
tn, tokens = run(a["new"])
print(json.dumps({"tokens": tokens, "rate": ids.shape[0] * (a["new"] - 1) / (tn - t1)}))
"""


def hf(python, weights, prompts, new, offload, workdir):
    arg = dict(model=MODEL, weights=weights, prompts=prompts, new=new, offload=offload,
               offload_dir=os.path.join(workdir, "offload"), threads=os.cpu_count())
    out = subprocess.run([python, "-c", HF_RUN, json.dumps(arg)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("transformers run failed:\n" + out.stderr[-3000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["tokens"], r["rate"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new", type=int, default=64, help="tokens generated per prompt")
    ap.add_argument("--batch", type=int, default=1, help="prompts decoded together (each 16 tokens)")
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--venv", default="/tmp/strata-hf-venv")
    args = ap.parse_args()
    python = ensure_venv(args.venv)
    prompts = [[(7 * b + 13 * i + 3) % MODEL["vocab"] for i in range(16)] for b in range(args.batch)]
    with tempfile.TemporaryDirectory(prefix="strata_hf_") as work:
        weights = os.path.join(work, "weights.safetensors")
        make_weights(args.bin, weights)
        rows = []
        for offload in (False, True):
            s_tokens, s_rate = strata(args.bin, weights, prompts, args.new, offload)
            h_tokens, h_rate = hf(python, weights, prompts, args.new, offload, work)
            same = sum(a == b for x, y in zip(s_tokens, h_tokens) for a, b in zip(x, y))
            rows.append((("every block offloaded to disk" if offload else "resident"), s_rate, h_rate, same,
                         len(prompts) * args.new))
    m = MODEL
    print(f"model: {m['layers']} layers, {m['embd']} wide, {m['heads']} heads, vocab {m['vocab']}, context "
          f"{m['ctx']}, f32; batch {args.batch}, 16-token prompts, {args.new} greedy tokens; {os.cpu_count()} cores")
    print("| weights | strata-generate decode tokens/s | transformers decode tokens/s | ratio | same tokens |")
    print("|---|---|---|---|---|")
    for name, s, h, same, total in rows:
        print(f"| {name} | {s:.1f} | {h:.1f} | {s / h:.2f} | {same} of {total} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
