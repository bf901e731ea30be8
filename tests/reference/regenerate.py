#!/usr/bin/python3
"""Regenerates the reference files in tests/data with gpt2_reference.py and llama_reference.py, and holds the
checked-in ones to them.

  /usr/bin/python3 tests/reference/regenerate.py           regenerate into a scratch directory and compare (ctest
                                                           reference_files_regenerate); exit 0, 1 on a difference
                                                           over its bound, 77 where torch cannot be imported (skip)
  /usr/bin/python3 tests/reference/regenerate.py --write   regenerate into tests/data (then update SHA256SUMS:
                                                           cd tests/data && sha256sum -- *.bin *.json *.safetensors)
  ... --only PREFIX                                        only the files whose names start with PREFIX (llama_)

Every file and the exact command that makes it is in FILES below (the one list: tests/reference/README.md points
here); the llama_* files are llama_reference.py's, the others gpt2_reference.py's. The bounds, relative at every
step, are what another machine or torch build reproduces (README, "What reproduces"): the init and token files bit for
bit; float32 runs within 1e-6 in loss and 2e-4 in gradient norm (a float32 run and a float64 one differ by up to
6.3e-7 and 7.4e-5 for the GPT, 2.9e-7 and 5.2e-6 for the Llama files); bf16 runs within 2e-4 and 5e-3 (bf16 rounding
at other points moves a run by up to 9.5e-5 in loss and 2.6e-3 in gradient norm: twice that; the Llama bf16 run is
4.0e-5 and 8.9e-4 from its f32 twin).
"""

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "gpt2_reference.py")
LLAMA_SCRIPT = os.path.join(HERE, "llama_reference.py")
INIT = "tests/data/gpt_tiny_init.safetensors"
TOKENS = "tests/data/gpt_tiny_tokens.bin"
MODEL = ["--layers", "2", "--heads", "2", "--embd", "32", "--vocab", "64", "--ctx", "16"]
TRAIN = MODEL + ["--seq", "8", "--steps", "20", "--init", INIT, "--data", TOKENS]
GEN_INIT = "tests/data/gpt_gen_init.safetensors"
GEN_MODEL = ["--layers", "2", "--heads", "2", "--embd", "32", "--vocab", "64", "--ctx", "80"]
F32 = (1e-6, 2e-4)   # (loss, gradient norm) bounds
GENERATE = "generate"  # greedy generation: the same tokens, every logit within 1e-6 of its row's largest
BF16 = (2e-4, 5e-3)



def llama(ctx="16", kv_heads="2", extra=()):
    """llama_reference.py's model flags: the tiny Llama (L 2, hidden 32, 4 heads of 8, MLP 64, V 64), untied unless
    extra says --tie."""
    return (["--layers", "2", "--hidden", "32", "--heads", "4", "--kv-heads", kv_heads, "--head-dim", "8",
             "--intermediate", "64", "--vocab", "64", "--ctx", ctx, "--rope-theta", "10000", "--rms-eps", "1e-5"] +
            (["--untie"] if "--tie" not in extra else []) + list(extra))


def llama_train(init, model):
    return model + ["--seq", "8", "--steps", "20", "--init", "tests/data/" + init, "--data", TOKENS]


LLAMA_FIT = ["--lr", "1e-2", "--grad-clip", "1.0", "--ranks", "1", "--batch", "4"]  # the GPT tiny run's settings
LLAMA_TIED = llama(extra=["--tie"])
LLAMA_BIAS = llama(extra=["--qkv-bias"])
LLAMA_MQA = llama(kv_heads="1")
LLAMA_ROPE = llama(ctx="128", extra=["--rope-scaling", "llama3", "--rope-factor", "8", "--rope-low-freq-factor", "1",
                                     "--rope-high-freq-factor", "4", "--rope-original-ctx", "64"])

# name: (arguments after the script, bounds; None: bit for bit)
FILES = {
    "gpt_tiny_init.safetensors": (["--make-init", "{out}"] + MODEL + ["--seed", "1234"], None),
    "gpt_tiny_tokens.bin": (["--make-data", "{out}", "--tokens", "4096", "--vocab", "64", "--seed", "7"], None),
    "gpt_tiny_ref.json": (TRAIN + ["--lr", "1e-2", "--grad-clip", "1.0", "--ranks", "1", "--batch", "4"], F32),
    "gpt_tiny_ref_accum2.json": (TRAIN + ["--lr", "1e-2", "--grad-clip", "1.0", "--ranks", "1", "--batch", "2",
                                          "--grad-accum", "2"], F32),
    # The validation loss (train_gpt --val-data): a held-out token file, evaluated every 5 steps over 2 batches.
    "gpt_tiny_val_tokens.bin": (["--make-data", "{out}", "--tokens", "1024", "--vocab", "64", "--seed", "11"], None),
    "gpt_tiny_eval_ref.json": (TRAIN + ["--lr", "1e-2", "--grad-clip", "1.0", "--ranks", "1", "--batch", "4",
                                        "--val-data", "tests/data/gpt_tiny_val_tokens.bin", "--eval-every", "5",
                                        "--eval-steps", "2"], F32),
    "gpt_tiny_ref_noclip.json": (TRAIN + ["--lr", "1e-2", "--grad-clip", "0", "--ranks", "1", "--batch", "4"], F32),
    "gpt_tiny_ref_bf16.json": (TRAIN + ["--lr", "1e-3", "--grad-clip", "1.0", "--ranks", "1", "--batch", "4",
                                        "--autocast", "bf16"], BF16),
    "gpt_tiny_ref_bf16_params_w1.json": (TRAIN + ["--lr", "1e-3", "--grad-clip", "1.0", "--ranks", "1", "--batch",
                                                  "4", "--param-dtype", "bf16"], BF16),
    "gpt_tiny_ref_bf16_params_w2.json": (TRAIN + ["--lr", "1e-3", "--grad-clip", "1.0", "--ranks", "2", "--batch",
                                                  "2", "--param-dtype", "bf16"], BF16),
    "gpt_tiny_ref_bf16_params_w4.json": (TRAIN + ["--lr", "1e-3", "--grad-clip", "1.0", "--ranks", "4", "--batch",
                                                  "1", "--param-dtype", "bf16"], BF16),
    # The decode path's reference: 64 greedy tokens after an 8-token prompt, by full forwards (no KV cache).
    "gpt_gen_init.safetensors": (["--make-init", "{out}"] + GEN_MODEL + ["--seed", "4321"], None),
    "gpt_gen_ref.json": (["--generate", "64", "--prompt", "5,17,42,9,33,1,60,28", "--init", GEN_INIT] + GEN_MODEL,
                         GENERATE),
    # Llama-style decoders (llama_reference.py): init files with their config in __metadata__, the GPT tiny run's
    # data and settings; tied embeddings, q/k/v biases (drawn nonzero), one kv head, llama3 rope scaling
    "llama_tiny_init.safetensors": (["--make-init", "{out}"] + llama() + ["--seed", "1234"], None),
    "llama_tiny_ref.json": (llama_train("llama_tiny_init.safetensors", llama()) + LLAMA_FIT, F32),
    "llama_tiny_ref_bf16.json": (llama_train("llama_tiny_init.safetensors", llama()) +
                                 ["--lr", "1e-3", "--grad-clip", "1.0", "--ranks", "1", "--batch", "4",
                                  "--autocast", "bf16"], BF16),
    "llama_tiny_tied_init.safetensors": (["--make-init", "{out}"] + LLAMA_TIED + ["--seed", "1234"], None),
    "llama_tiny_tied_ref.json": (llama_train("llama_tiny_tied_init.safetensors", LLAMA_TIED) + LLAMA_FIT, F32),
    "llama_tiny_bias_init.safetensors": (["--make-init", "{out}"] + LLAMA_BIAS + ["--seed", "1234"], None),
    "llama_tiny_bias_ref.json": (llama_train("llama_tiny_bias_init.safetensors", LLAMA_BIAS) + LLAMA_FIT, F32),
    "llama_tiny_mqa_init.safetensors": (["--make-init", "{out}"] + LLAMA_MQA + ["--seed", "1234"], None),
    "llama_tiny_mqa_ref.json": (llama_train("llama_tiny_mqa_init.safetensors", LLAMA_MQA) + LLAMA_FIT, F32),
    "llama_tiny_rope_init.safetensors": (["--make-init", "{out}"] + LLAMA_ROPE + ["--seed", "1234"], None),
    "llama_tiny_rope_ref.json": (llama_train("llama_tiny_rope_init.safetensors", LLAMA_ROPE) + LLAMA_FIT, F32),
    # the decode path's: 64 greedy tokens after an 8-token prompt, by full forwards (no KV cache)
    "llama_gen_init.safetensors": (["--make-init", "{out}"] + llama(ctx="80") + ["--seed", "4321"], None),
    "llama_gen_ref.json": (["--generate", "64", "--prompt", "5,17,42,9,33,1,60,28", "--init",
                            "tests/data/llama_gen_init.safetensors"] + llama(ctx="80"), GENERATE),
}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def worst(got, want):
    """max_i |got_i - want_i| / |want_i|; infinite on a non-finite value or a length mismatch."""
    if len(got) != len(want):
        return math.inf
    out = 0.0
    for g, w in zip(got, want):
        if not (math.isfinite(g) and math.isfinite(w)):
            return math.inf
        out = max(out, abs(g - w) / max(abs(w), 1e-30))
    return out


def make(name, out_dir):
    args, _ = FILES[name]
    out = os.path.join(out_dir, name)
    script = LLAMA_SCRIPT if name.startswith("llama_") else SCRIPT
    argv = [sys.executable, script] + [a.replace("{out}", out) for a in args]
    if not name.endswith((".safetensors", ".bin")):
        argv += ["--out", out]
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="regenerate into tests/data")
    ap.add_argument("--only", metavar="PREFIX", default="", help="only the files whose names start with PREFIX")
    args = ap.parse_args()
    names = [name for name in FILES if name.startswith(args.only)]
    try:
        import torch  # noqa: F401  (the reference scripts need it)
    except ImportError:
        print("regenerate: torch cannot be imported by %s (apt-get install python3-torch): skipped" % sys.executable)
        return 77
    data = os.path.join(ROOT, "tests", "data")
    if args.write:
        for name in names:  # the init and token files first: the training runs read them from tests/data
            make(name, data)
            print("wrote tests/data/%s" % name)
        return 0
    failed = 0
    with tempfile.TemporaryDirectory(prefix="strata_reference_") as scratch:
        for name in names:
            bounds = FILES[name][1]
            got, want = make(name, scratch), os.path.join(data, name)
            if bounds is None:
                same = sha256(got) == sha256(want)
                print("%-34s %s" % (name, "bit for bit" if same else "DIFFERS (sha256)"))
                failed += not same
                continue
            a, b = json.load(open(got)), json.load(open(want))
            if bounds == GENERATE:
                diff = max(max(abs(x - y) for x, y in zip(r, w)) / max(abs(v) for v in w)
                           for r, w in zip(a["logits"], b["logits"]))
                ok = a["tokens"] == b["tokens"] and len(a["logits"]) == len(b["logits"]) and diff <= 1e-6
                print("%-34s tokens %s, logits %.3g of the row's largest (bound 1e-6)%s" %
                      (name, "equal" if a["tokens"] == b["tokens"] else "DIFFER", diff, "" if ok else "  OVER"))
                failed += not ok
                continue
            loss, norm = worst(a["losses"], b["losses"]), worst(a["grad_norms"], b["grad_norms"])
            if "val_losses" in b:  # the validation losses within the loss bound, at the same steps
                same_steps = [s for s, _ in a.get("val_losses", [])] == [s for s, _ in b["val_losses"]]
                loss = max(loss, worst([v for _, v in a["val_losses"]], [v for _, v in b["val_losses"]])
                           if same_steps else math.inf)
            ok = loss <= bounds[0] and norm <= bounds[1]
            print("%-34s loss %.3g (bound %g), gradient norm %.3g (bound %g)%s" %
                  (name, loss, bounds[0], norm, bounds[1], "" if ok else "  OVER"))
            failed += not ok
    print("regenerate: %s (torch %s)" % ("FAIL" if failed else "every file reproduces within its bound",
                                         torch.__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
