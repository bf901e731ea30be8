#!/usr/bin/env python3
"""Hugging Face model directories for the tests, written by transformers' own save_pretrained.

tests/data/hf/gpt2_tiny: GPT2LMHeadModel with gpt_gen_init.safetensors' weights (2 layers, 2 heads, width 32,
vocabulary 64, 80 positions), saved in shards of at most 40 KB with their model.safetensors.index.json. Its greedy
tokens for gpt_gen_ref.json's prompt, by transformers' generate(), are checked against that file's (made by full
forwards of an independent PyTorch GPT-2), so the directory is the model the generation tests already hold.
tests/data/hf/gpt2_tiny_bf16: the same model saved in bfloat16, and gpt2_tiny_bf16_ref.json: the greedy tokens of
its weights widened back to float32.

tests/data/hf/llama_tiny: LlamaForCausalLM (2 layers, width 32, 4 heads of which 2 key-value, MLP 64, vocabulary 64,
untied head, seeded), saved in shards the same way, and tests/data/hf/llama_tiny_ref.json: its greedy tokens for the
same prompt.

Run with a Python that has torch and transformers 4.x (Debian's python3-torch and `pip install transformers==4.40.2`
in a venv made with --system-site-packages):
    python tests/data/make_hf_fixtures.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf")
SHARD = "40KB"


def save(model, name):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, max_shard_size=SHARD, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(path, extra)):
            os.remove(os.path.join(path, extra))
    return path


def greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def gpt2():
    ref = json.load(open(os.path.join(HERE, "gpt_gen_ref.json")))
    weights = load_file(os.path.join(HERE, "gpt_gen_init.safetensors"))
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=80, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    missing, unexpected = model.load_state_dict({"transformer." + k: v for k, v in weights.items()}, strict=False)
    assert not unexpected and all(m == "lm_head.weight" or m.endswith(".attn.bias") or m.endswith(".masked_bias")
                                  for m in missing), (missing, unexpected)
    model.tie_weights()
    tokens = greedy(model, ref["prompt"], len(ref["tokens"]))
    assert tokens == ref["tokens"], (tokens, ref["tokens"])
    path = save(model, "gpt2_tiny")
    print(path, sorted(os.listdir(path)))
    # The same model saved in bfloat16, and the greedy tokens of its weights widened back to float32 (what a reader
    # that converts BF16 to f32 computes with).
    model.to(torch.bfloat16)
    path = save(model, "gpt2_tiny_bf16")
    model.to(torch.float32)
    tokens = greedy(model, ref["prompt"], len(ref["tokens"]))
    with open(os.path.join(OUT, "gpt2_tiny_bf16_ref.json"), "w") as f:
        json.dump({"prompt": ref["prompt"], "tokens": tokens, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__}, f)
        f.write("\n")
    print(path, sorted(os.listdir(path)), tokens)


def llama():
    torch.manual_seed(1234)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64, max_position_embeddings=80, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the default init, so that the greedy tokens differ
            p.normal_(0.0, 0.2)
    prompt = [5, 17, 42]
    tokens = greedy(model, prompt, 16)
    path = save(model, "llama_tiny")
    with open(os.path.join(OUT, "llama_tiny_ref.json"), "w") as f:
        json.dump({"prompt": prompt, "tokens": tokens, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__}, f)
        f.write("\n")
    print(path, sorted(os.listdir(path)), tokens)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    gpt2()
    llama()
