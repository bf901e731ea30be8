#!/usr/bin/python3
"""Checks llama_reference.py against Hugging Face transformers' LlamaForCausalLM on every llama_*_init file.

  /usr/bin/python3 tests/reference/check_llama_transformers.py [--venv DIR] [--python PY]

Not run by ctest: it installs transformers from PyPI. It makes (or reuses) a virtual environment in --venv (default
~/.cache/strata-hf-venv) from --python (default /usr/bin/python3) with --system-site-packages, so that torch is
Debian's python3-torch (`apt-get install python3-torch python3-numpy python3-venv`), and pip-installs `transformers`
and `safetensors` into it. If the transformers pip picks cannot run LlamaForCausalLM on that torch (transformers 5
wants torch >= 2.6; 4.52 to 4.57 refuse torch < 2.1; 4.50 and 4.51 import torch.distributed.tensor, torch >= 2.5),
the environment is made again with TRANSFORMERS_FOR_OLD_TORCH, the newest release that runs on torch 1.13. Then it
runs itself again with the environment's python, and for each init file:

- writes it out with `llama_reference.py --write-config DIR --init FILE` (config.json from the file's __metadata__)
  and loads DIR with `LlamaForCausalLM.from_pretrained(DIR, attn_implementation="eager", torch_dtype=float32)`:
  no missing or unexpected keys, every parameter equal to the file's (a tied lm_head is the embeddings);
- logits of a prompt of ctx tokens: within 1e-5 of each row's largest logit of llama_reference.py's forward;
- the loss and gradients of the first training batch (rows 0..3 of T = 8 of gpt_tiny_tokens.bin): transformers' own
  loss (`labels=`, the T+1-token windows, shifted inside) within 1e-5 relative of the reference's, every parameter's
  gradient within 1e-5 of that parameter's largest;
- llama_gen_init: model.generate (greedy, transformers' KV cache) gives llama_gen_ref.json's 64 tokens, each step's
  logits within 1e-5 of the row's largest.
- the same loss under torch.autocast("cpu", bfloat16) (llama_tiny_ref_bf16.json's precision): within 2e-4 relative.
The file with q/k/v biases is Qwen2ForCausalLM's (its config.json says so); it is also loaded into LlamaForCausalLM
with attention_bias, whose o_proj.bias is then set to 0. One verdict line; exit 0 or 1 (2: no environment).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "data")
TRANSFORMERS_FOR_OLD_TORCH = "transformers==4.49.0"  # the newest release whose LlamaForCausalLM runs on torch 1.13
INITS = ["llama_tiny_init.safetensors", "llama_tiny_tied_init.safetensors", "llama_tiny_bias_init.safetensors",
         "llama_tiny_mqa_init.safetensors", "llama_tiny_rope_init.safetensors", "llama_gen_init.safetensors"]
BOUND = 1e-5
BF16_BOUND = 2e-4  # regenerate.py's bf16 loss bound: two bf16 implementations that round at other points

# a tiny LlamaForCausalLM's forward and backward: what the environment must run
PROBE = """
import torch, transformers
from transformers import LlamaConfig, LlamaForCausalLM
c = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, head_dim=8, vocab_size=32, max_position_embeddings=16)
m = LlamaForCausalLM._from_config(c, attn_implementation="eager", torch_dtype=torch.float32)
m(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
print("transformers", transformers.__version__, "torch", torch.__version__)
"""


def probe(py):
    r = subprocess.run([py, "-c", PROBE], capture_output=True, text=True)
    if r.returncode == 0:
        print("check_llama_transformers: environment has " + r.stdout.strip(), flush=True)
        return True
    lines = r.stderr.strip().splitlines() or ["?"]
    why = next((line for line in lines if "requires" in line), lines[-1])  # transformers' own message, else the error
    print(f"check_llama_transformers: this environment cannot run LlamaForCausalLM: {why}", flush=True)
    return False


def make_env(venv, python, requirement, clear):
    print(f"check_llama_transformers: making {venv} from {python} (--system-site-packages), pip install "
          f"{requirement} safetensors", flush=True)
    subprocess.run([python, "-m", "venv", "--system-site-packages"] + (["--clear"] if clear else []) + [venv],
                   check=True)
    py = os.path.join(venv, "bin", "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement, "safetensors"],
                   check=True)
    return py


def ensure_env(venv, python):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and probe(py):
        return py
    if probe(make_env(venv, python, "transformers", clear=os.path.exists(py))):
        return py
    if probe(make_env(venv, python, TRANSFORMERS_FOR_OLD_TORCH, clear=True)):
        return py
    return None


# --------------------------------------------------------------------------------------------------------
# The checks (run with the environment's python)
# --------------------------------------------------------------------------------------------------------


def rel_to_row_max(got, want):
    """max over rows of max|got - want| / max|want| (rows: the last dimension)."""
    return float(((got - want).abs().amax(-1) / want.abs().amax(-1)).max())


def checks():
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, HERE)
    import gpt2_reference as g2
    import llama_reference as lr

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    tokens = g2.load_tokens(os.path.join(DATA, "gpt_tiny_tokens.bin"), 64)
    failed = []
    worst = {"logits": 0.0, "loss": 0.0, "grads": 0.0, "gen_logits": 0.0, "bf16_loss": 0.0}

    def judge(what, name, err, bound=BOUND):
        worst[what] = max(worst[what], err)
        if not err <= bound:
            failed.append(f"{name} {what} {err:.3g}")

    for name in INITS:
        path = os.path.join(DATA, name)
        c = lr.file_config(path)
        P = lr.load_params(path, c, torch.float32)
        with tempfile.TemporaryDirectory(prefix="strata_hf_") as d:
            lr.main(["--write-config", d, "--init", path] + lr.config_flags(c))
            arch = json.load(open(os.path.join(d, "config.json")))["architectures"][0]
            model, info = getattr(transformers, arch).from_pretrained(d, attn_implementation="eager",
                                                                      torch_dtype=torch.float32,
                                                                      output_loading_info=True)
        model.eval()
        bad_keys = [f"{k}: {v}" for k, v in info.items() if v]
        hf = dict(model.named_parameters())
        same = set(hf) == set(P) and all(torch.equal(hf[n].detach(), P[n].detach()) for n in P)
        tied = (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) == c["tie"]
        if bad_keys or not same or not tied:
            failed.append(f"{name} loading ({bad_keys}, parameters equal {same}, tie as the config {tied})")
            continue

        # logits of a prompt of the full context
        prompt = tokens[:c["ctx"]].unsqueeze(0)
        with torch.no_grad():
            ref = lr.forward_logits(P, prompt, c)
            got = model(prompt).logits
        judge("logits", name, rel_to_row_max(got, ref))

        # the first training batch's loss and gradients: the reference's, and transformers' own (labels=)
        idx, tgt, _ = g2.window_rows(tokens, 8, list(range(4)))
        loss = lr.loss_fn(P, idx, tgt, c)
        grads = dict(zip(P, torch.autograd.grad(loss, list(P.values()))))
        seq = torch.cat((idx, tgt[:, -1:]), dim=1)  # the T+1-token windows
        model.zero_grad()
        hf_loss = model(seq, labels=seq).loss
        hf_loss.backward()
        judge("loss", name, abs(float(hf_loss) - float(loss)) / abs(float(loss)))
        judge("grads", name, max(float((hf[n].grad - grads[n]).abs().max() / grads[n].abs().max()) for n in P))

        # the same loss under torch.autocast(bf16): llama_tiny_ref_bf16.json's mixed precision is transformers'
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            ref16 = float(lr.loss_fn(P, idx, tgt, c))
            hf16 = float(model(seq, labels=seq).loss)
        judge("bf16_loss", name, abs(hf16 - ref16) / abs(ref16), BF16_BOUND)

        line = (f"{name} ({arch}): logits {rel_to_row_max(got, ref):.3g} of the row's largest, loss "
                f"{float(loss):.7f} vs {float(hf_loss):.7f}, autocast bf16 loss {ref16:.6f} vs {hf16:.6f}")
        if c["qkv_bias"]:
            # LlamaForCausalLM's attention_bias: q/k/v and o_proj biases; with o_proj.bias 0 it is the same model
            lm = LlamaForCausalLM._from_config(LlamaConfig.from_dict(dict(lr.hf_config(dict(c, qkv_bias=False)),
                                                                          attention_bias=True)),
                                               attn_implementation="eager", torch_dtype=torch.float32).eval()
            missing, unexpected = lm.load_state_dict({n: t.detach() for n, t in P.items()}, strict=False)
            with torch.no_grad():
                for i in range(c["layers"]):
                    lm.model.layers[i].self_attn.o_proj.bias.zero_()
                err = rel_to_row_max(lm(prompt).logits, ref)
            judge("logits", name + " as LlamaForCausalLM with o_proj.bias 0", err)
            if unexpected or sorted(missing) != sorted(f"model.layers.{i}.self_attn.o_proj.bias"
                                                       for i in range(c["layers"])):
                failed.append(f"{name} as LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
            line += f"; as LlamaForCausalLM(attention_bias) with o_proj.bias 0: logits {err:.3g}"
        if name == "llama_gen_init.safetensors":
            # greedy decoding with transformers' KV cache, one token per forward, as generate() does it (generate()
            # itself imports torch.distributed.fsdp, which torch 1.13 cannot import on Python 3.11)
            want = json.load(open(os.path.join(DATA, "llama_gen_ref.json")))
            toks, rows = [], []
            with torch.no_grad():
                out = model(torch.tensor([want["prompt"]]), use_cache=True)
                for _ in want["tokens"]:
                    row = out.logits[0, -1].float()
                    rows.append(row)
                    toks.append(int(torch.argmax(row)))
                    out = model(torch.tensor([[toks[-1]]]), past_key_values=out.past_key_values, use_cache=True)
            gl = torch.stack(rows)
            judge("gen_logits", name, rel_to_row_max(gl, torch.tensor(want["logits"])))
            if toks != want["tokens"]:
                failed.append(f"{name}: generate's tokens differ from llama_gen_ref.json's at step "
                              f"{next(i for i, (a, b) in enumerate(zip(toks, want['tokens'])) if a != b)}")
            line += (f"; generate: {len(toks)} tokens {'equal' if toks == want['tokens'] else 'DIFFER'}, logits "
                     f"{rel_to_row_max(gl, torch.tensor(want['logits'])):.3g} of the row's largest")
        print(line, flush=True)

    summary = (f"logits {worst['logits']:.3g} of the row's largest, loss {worst['loss']:.3g}, gradients "
               f"{worst['grads']:.3g} of each parameter's largest, generate's logits {worst['gen_logits']:.3g} "
               f"(bounds {BOUND:g}); loss under bf16 autocast {worst['bf16_loss']:.3g} (bound {BF16_BOUND:g}); "
               f"transformers {transformers.__version__}, torch {torch.__version__}")
    if failed:
        print("check_llama_transformers: FAILED: " + "; ".join(failed) + "; " + summary)
        return 1
    print("check_llama_transformers: PASSED: " + summary)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv", default=os.path.expanduser("~/.cache/strata-hf-venv"),
                    help="the virtual environment to make or reuse")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                    help="the python the environment is made from (one with torch)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # run the checks in this interpreter
    args = ap.parse_args()
    if args.inner:
        return checks()
    py = ensure_env(os.path.abspath(args.venv), args.python)
    if py is None:
        print("check_llama_transformers: FAILED: no environment with a working LlamaForCausalLM could be made")
        return 2
    return subprocess.run([py, os.path.abspath(__file__), "--inner"], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
