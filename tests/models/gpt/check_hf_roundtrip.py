#!/usr/bin/env python3
"""transformers' from_pretrained of a model directory Strata wrote against the directory it came from.

    check_hf_roundtrip.py ORIGINAL WRITTEN [ORIGINAL WRITTEN ...]

For each pair: the same tensor names, every tensor bitwise equal (f32), and the logits of a prompt equal within 1e-5
of the row's largest. Exit 0 when every pair holds, 1 naming the first difference.
"""
import sys

import torch
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()


def main(args):
    if len(args) % 2 or not args:
        print(__doc__)
        return 2
    prompt = torch.tensor([[5, 17, 42, 9, 33, 1, 60, 28]])
    for original, written in zip(args[0::2], args[1::2]):
        a, b = load(original), load(written)
        sa, sb = a.state_dict(), b.state_dict()
        if set(sa) != set(sb):
            print(f"{written}: tensors {sorted(set(sa) ^ set(sb))} are in one of the two only")
            return 1
        for name in sa:
            if not torch.equal(sa[name], sb[name]):
                print(f"{written}: tensor {name} differs from {original}'s")
                return 1
        with torch.no_grad():
            la, lb = a(prompt).logits, b(prompt).logits
        worst = ((la - lb).abs().amax(-1) / la.abs().amax(-1)).max().item()
        if worst > 1e-5:
            print(f"{written}: logits differ from {original}'s by {worst:.3g} of the row's largest")
            return 1
        print(f"{written}: {len(sa)} tensors bitwise equal to {original}'s; logits within {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
