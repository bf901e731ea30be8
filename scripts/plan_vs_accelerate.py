#!/usr/bin/env python3
"""strata-plan --config beside accelerate's `estimate-memory` for the same Hugging Face config.json files.

accelerate's command fetches a model from the hub; this builds the same empty model from a local config.json with
accelerate's own pieces (init_empty_weights, calculate_maximum_sizes) and prints its rows as `accelerate
estimate-memory` does (total size; "training using Adam" = 4 x total size), beside strata-plan's prediction on one
device at ZeRO 0 for f32 parameters and reductions (parameters, gradients, Adam's two moments, activations, buffers)
and for bf16 parameters with an f32 master.

    ~/.cache/strata-tf-venv/bin/python scripts/plan_vs_accelerate.py [--plan build/bin/strata-plan] CONFIG_DIR...
(a Python with torch, transformers and accelerate; 0.27.2 was measured)
"""
import argparse
import re
import subprocess

from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes
from transformers import AutoConfig, AutoModelForCausalLM


def plan(binary, config, *flags):
    out = subprocess.run([binary, "--config", config, "--dp", "1", "--devices-per-node", "1",
                          "--device-memory", "100000GB", *flags], capture_output=True, text=True).stdout
    rows = dict(re.findall(r"^(\S.*?)\s{2,}([\d.]+)\s+\d+$", out, re.M))
    count = re.search(r"model: ([\d,]+) parameters", out).group(1)
    return count, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", default="build/bin/strata-plan")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    for config in args.configs:
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config))
        total, largest = calculate_maximum_sizes(model)
        params = sum(p.numel() for p in model.parameters())
        print(f"# {config}: accelerate counts {params:,} parameters, {total / 1e9:.2f} GB in float32 "
              f"(largest layer {largest[0] / 1e9:.2f} GB)")
        print(f"accelerate float32: total {total / 1e9:.2f} GB, training using Adam {4 * total / 1e9:.2f} GB")
        print(f"accelerate float16: total {total / 2e9:.2f} GB, training using Adam {4 * total / 2e9:.2f} GB")
        for label, flags in (("f32", ("--zero-stage", "0", "--param-dtype", "f32", "--reduce-dtype", "f32")),
                             ("bf16", ("--zero-stage", "0", "--param-dtype", "bf16", "--reduce-dtype", "f32"))):
            count, rows = plan(args.plan, config, *flags)
            parts = ", ".join(f"{k.strip()} {v}" for k, v in rows.items() if k.strip() != "total (device)")
            print(f"strata-plan {label}, ZeRO 0, 1 device, micro-batch 1 at the config's context: {count} parameters; "
                  f"total {rows.get('total (device)')} GB = {parts}")


if __name__ == "__main__":
    main()
