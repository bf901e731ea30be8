#!/usr/bin/env python3
"""Encoding rate of strata-data tokenize beside Hugging Face `tokenizers`, on the same documents and tokenizer file.

The text: this Python's own standard-library .py sources (sorted by path, each file one document, files that are not
UTF-8 skipped) until --mb megabytes (10^6 bytes), written as one JSONL file. The tokenizer: --tokenizer FILE, or a
16k-id GPT-2-style byte-level BPE (ByteLevel pre-tokenizer and decoder, no normalizer, <|endoftext|> added) trained
here with `tokenizers` on the same text. Each round runs:
  hf        Tokenizer.from_file(FILE).encode_batch_fast(documents, add_special_tokens=False) (encode_batch without
            offsets, the faster) with RAYON_NUM_THREADS=1 (one thread), timed around that call alone: the documents
            are already in memory and nothing is written
  strata-1  strata-data tokenize --threads 1, timed as a process: loading the tokenizer, reading and parsing the JSONL,
            encoding, writing and fsyncing the shard
  strata-N  the same with --threads N (default: every core)
MB/s is the documents' UTF-8 bytes (the text alone, not its JSON) over the seconds. The first round also checks that
Strata's shard holds Hugging Face's ids, each document followed by <|endoftext|>. Prints each round, then the
medians and the ratios strata-1 / hf and strata-N / hf.

Run with a Python that has `tokenizers` (0.21.4 was measured):
  ~/.cache/strata-hf-venv/bin/python scripts/bench_tokenizer.py [--mb 16] [--rounds 3] [--threads N]
      [--tokenizer FILE] [--bin build/bin/strata-data] [--work DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its thread pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402


def stdlib_documents(megabytes):
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in ("site-packages", "__pycache__"))
        paths.extend(os.path.join(d, f) for f in files if f.endswith(".py"))
    docs, total = [], 0
    for p in sorted(paths):
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(text)
        total += len(text.encode("utf-8"))
        if total >= megabytes * 1e6:
            break
    return docs, total


def train_tokenizer(docs, path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=16384, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(path)


def run_hf(tok, docs):
    # encode_batch_fast (tokenizers >= 0.20) skips the offsets that encode_batch computes: the faster of the two.
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    start = time.perf_counter()
    encodings = encode(docs, add_special_tokens=False)
    return time.perf_counter() - start, encodings


def run_strata(binary, tokenizer, jsonl, out, threads):
    cmd = [binary, "tokenize", "--tokenizer", tokenizer, "--out", out, "--force", "--no-progress",
           "--threads", str(threads), jsonl]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return seconds, proc.stdout.strip()


def shard_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"STRATATK", path
    width = int.from_bytes(data[12:16], "little")
    body = data[64:]
    return [int.from_bytes(body[i:i + width], "little") for i in range(0, len(body), width)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--tokenizer", help="a tokenizer.json (default: train a 16k GPT-2-style BPE on the text)")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "strata-data"))
    ap.add_argument("--work", help="directory for the text, tokenizer and shards (default: a temporary one)")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="bench_tokenizer.")
    os.makedirs(work, exist_ok=True)
    docs, text_bytes = stdlib_documents(args.mb)
    jsonl = os.path.join(work, "docs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    tokenizer = args.tokenizer
    if not tokenizer:
        tokenizer = os.path.join(work, "tokenizer.json")
        train_tokenizer(docs, tokenizer)
    hf = Tokenizer.from_file(tokenizer)
    eot = hf.token_to_id("<|endoftext|>")
    print(f"# {len(docs)} documents, {text_bytes / 1e6:.2f} MB of {sysconfig.get_paths()['stdlib']}/**.py; "
          f"tokenizer {tokenizer} ({hf.get_vocab_size()} ids); strata-data {os.path.abspath(args.bin)}")

    rates = {"hf": [], "strata-1": [], f"strata-{args.threads}": []}
    for r in range(args.rounds):
        hf_s, encodings = run_hf(hf, docs)
        s1, summary = run_strata(args.bin, tokenizer, jsonl, os.path.join(work, "s1"), 1)
        if r == 0:
            want = []
            for e in encodings:
                want.extend(e.ids)
                want.append(eot)
            got = shard_tokens(os.path.join(work, "s1_train_000000.bin"))
            if got != want:
                first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                sys.exit(f"strata's tokens differ from tokenizers' at token {first} ({len(got)} vs {len(want)})")
            print(f"# round 1: strata's shard holds tokenizers' {len(want)} ids (documents and <|endoftext|>)")
        sn, _ = run_strata(args.bin, tokenizer, jsonl, os.path.join(work, "sn"), args.threads)
        row = {"hf": hf_s, "strata-1": s1, f"strata-{args.threads}": sn}
        for k, s in row.items():
            rates[k].append(text_bytes / 1e6 / s)
        print(f"round {r + 1}: " + "  ".join(f"{k} {text_bytes / 1e6 / s:7.2f} MB/s ({s:.2f} s)" for k, s in row.items()))
        print(f"         {summary}")

    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n# medians of {args.rounds} rounds, {text_bytes / 1e6:.2f} MB")
    print(f"{'# run':<12} {'MB/s':>8} {'vs hf':>7}")
    for k, v in med.items():
        print(f"{k:<12} {v:8.2f} {v / med['hf']:6.2f}x")


if __name__ == "__main__":
    main()
