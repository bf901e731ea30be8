#!/usr/bin/python3
"""Regenerates the reference files in tests/data with gpt2_reference.py, and holds the checked-in ones to them.

  /usr/bin/python3 tests/reference/regenerate.py           regenerate into a scratch directory and compare (ctest
                                                           reference_files_regenerate); exit 0, 1 on a difference
                                                           over its bound, 77 where torch cannot be imported (skip)
  /usr/bin/python3 tests/reference/regenerate.py --write   regenerate into tests/data (then update SHA256SUMS:
                                                           cd tests/data && sha256sum -- *.bin *.json *.safetensors)

Every file and the exact command that makes it is in FILES below (the one list: tests/reference/README.md points
here). The bounds, relative at every step, are what another machine or torch build reproduces (README, "What
reproduces"): the init and token files bit for bit; float32 runs within 1e-6 in loss and 2e-4 in gradient norm (a
float32 run and a float64 one differ by up to 6.3e-7 and 7.4e-5); bf16 runs within 2e-4 and 5e-3 (bf16 rounding
at other points moves a run by up to 9.5e-5 in loss and 2.6e-3 in gradient norm: twice that).
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
INIT = "tests/data/gpt_tiny_init.safetensors"
TOKENS = "tests/data/gpt_tiny_tokens.bin"
MODEL = ["--layers", "2", "--heads", "2", "--embd", "32", "--vocab", "64", "--ctx", "16"]
TRAIN = MODEL + ["--seq", "8", "--steps", "20", "--init", INIT, "--data", TOKENS]
GEN_INIT = "tests/data/gpt_gen_init.safetensors"
GEN_MODEL = ["--layers", "2", "--heads", "2", "--embd", "32", "--vocab", "64", "--ctx", "80"]
F32 = (1e-6, 2e-4)   # (loss, gradient norm) bounds
GENERATE = "generate"  # greedy generation: the same tokens, every logit within 1e-6 of its row's largest
BF16 = (2e-4, 5e-3)

# name: (arguments after the script, bounds; None: bit for bit)
FILES = {
    "gpt_tiny_init.safetensors": (["--make-init", "{out}"] + MODEL + ["--seed", "1234"], None),
    "gpt_tiny_tokens.bin": (["--make-data", "{out}", "--tokens", "4096", "--vocab", "64", "--seed", "7"], None),
    "gpt_tiny_ref.json": (TRAIN + ["--lr", "1e-2", "--grad-clip", "1.0", "--ranks", "1", "--batch", "4"], F32),
    "gpt_tiny_ref_accum2.json": (TRAIN + ["--lr", "1e-2", "--grad-clip", "1.0", "--ranks", "1", "--batch", "2",
                                          "--grad-accum", "2"], F32),
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
    argv = [sys.executable, SCRIPT] + [a.replace("{out}", out) for a in args]
    if not name.endswith((".safetensors", ".bin")):
        argv += ["--out", out]
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="regenerate into tests/data")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401  (gpt2_reference.py needs it)
    except ImportError:
        print("regenerate: torch cannot be imported by %s (apt-get install python3-torch): skipped" % sys.executable)
        return 77
    data = os.path.join(ROOT, "tests", "data")
    if args.write:
        for name in FILES:  # the init and token files first: the training runs read them from tests/data
            make(name, data)
            print("wrote tests/data/%s" % name)
        return 0
    failed = 0
    with tempfile.TemporaryDirectory(prefix="strata_reference_") as scratch:
        for name, (_, bounds) in FILES.items():
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
            ok = loss <= bounds[0] and norm <= bounds[1]
            print("%-34s loss %.3g (bound %g), gradient norm %.3g (bound %g)%s" %
                  (name, loss, bounds[0], norm, bounds[1], "" if ok else "  OVER"))
            failed += not ok
    print("regenerate: %s (torch %s)" % ("FAIL" if failed else "every file reproduces within its bound",
                                         torch.__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
