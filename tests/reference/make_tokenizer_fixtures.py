#!/usr/bin/env python3
"""Builds tests/data/tokenizers: three small byte-level BPE tokenizer.json files trained by Hugging Face `tokenizers`
(GPT-2, Llama-3 and Qwen2 style pre-tokenizers), one SentencePiece model trained by the `sentencepiece` module
(Llama-2 style: BPE, byte fallback, digits split), and expected.json: every corpus case with the ids of each tokenizer.

    ~/.cache/strata-hf-venv/bin/python tests/reference/make_tokenizer_fixtures.py [--out tests/data/tokenizers]

then update tests/data/SHA256SUMS (the ctest reference_files_match_their_checksums says which lines changed).
Needs tokenizers (0.21.4 made the shipped files) and sentencepiece (0.2.3).

The training text is public domain (the Gettysburg Address, 1863; the preamble of the US Constitution, 1787) plus a
few sentences written for this script (dedicated to the public domain).

Invalid UTF-8: HF `tokenizers` takes str, so it cannot see such bytes. The byte-level tokenizers of Strata treat each
maximal run of bytes that is not valid UTF-8 as a word of its own that the pre-tokenizer's pattern never matches
(a boundary on both sides) and the normalizer leaves alone; its bytes are BPE-merged like any word. The expected ids
of such a case are built the same way from HF pieces: each valid run encoded by the HF tokenizer, each invalid run
by the HF model's BPE over its byte-level characters. The SentencePiece module takes bytes, so its ids are its own.
"""
import argparse
import io
import json
import os

import sentencepiece as spm
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")

TRAINING_TEXT = [
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in Liberty, "
    "and dedicated to the proposition that all men are created equal.",
    "Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived and so "
    "dedicated, can long endure. We are met on a great battle-field of that war. We have come to dedicate a portion "
    "of that field, as a final resting place for those who here gave their lives that that nation might live. It is "
    "altogether fitting and proper that we should do this.",
    "But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- this ground. The "
    "brave men, living and dead, who struggled here, have consecrated it, far above our poor power to add or "
    "detract. The world will little note, nor long remember what we say here, but it can never forget what they did "
    "here. It is for us the living, rather, to be dedicated here to the unfinished work which they who fought here "
    "have thus far so nobly advanced. It is rather for us to be here dedicated to the great task remaining before "
    "us -- that from these honored dead we take increased devotion to that cause for which they gave the last full "
    "measure of devotion -- that we here highly resolve that these dead shall not have died in vain -- that this "
    "nation, under God, shall have a new birth of freedom -- and that government of the people, by the people, for "
    "the people, shall not perish from the earth.",
    "We the People of the United States, in Order to form a more perfect Union, establish Justice, insure domestic "
    "Tranquility, provide for the common defence, promote the general Welfare, and secure the Blessings of Liberty "
    "to ourselves and our Posterity, do ordain and establish this Constitution for the United States of America.",
    "In 1863 the address took about 2 minutes; it's 272 words long, and they're still read in 2024.",
    "Le café est très bon, n'est-ce pas? Die Straße ist schön. El niño comió piña. Ελληνικά και русский текст.",
    "def main():\n    for i in range(10):\n        print(i * 2)\n\treturn 0\n",
    "中文字符和日本語のテキスト、그리고 한국어. 😀 👍 🎉",
]

# The corpus: (name, text or bytes). The specials of every tokenizer appear in one case: to the others they are text.
CORPUS = [
    ("empty", ""),
    ("ascii", "Hello world! The quick brown fox jumps over the lazy dog."),
    ("contractions", "It's his; they're HERE. I'LL go, we've, you'd, I'm, DON'T, 'T 's 're 'Ve"),
    ("letters", "café naïve Ångström Ελληνικά русский текст 中文字符 日本語のテキスト 한국어 العربية עברית हिन्दी"),
    ("combining_marks", "cafe\u0301 n\u0303o A\u030angstro\u0308m Z\u0351\u0313a\u0308\u0327lgo e\u0301\u0301"),
    ("emoji", "😀 👍🏽 👨\u200d👩\u200d👧\u200d👦 🇫🇷 ❤️ 🎉🎉🎉"),
    ("digits", "12345678901234567890 3.14159 1,000,000 2024-01-01 x86_64 ١٢٣ ４５６ ½"),
    ("whitespace", "a  b   c\t\td\n\ne \r\n f      \n\n\n   g"),
    ("lead_trail", "   leading and trailing   "),
    ("spaces_only", "     "),
    ("newlines_only", "\n\n\n"),
    ("tabs", "\t\tx\t"),
    ("unicode_spaces", "a\u0085b a\u00a0b a\u3000b a\u2028b a\u2009b x \u0085\u0085 y!\u0085 a\u180eb a\u200bb !\u0085 z"),
    ("specials", "x<|endoftext|>y<|im_start|>system\nhi<|im_end|><|begin_of_text|>z<|eot_id|> <|end_of_text|>"),
    ("special_edges", "<|endoftext|><|endoftext|> <|endoftext| <|<|endoftext|>|> <|im_end|>\n"),
    ("long_word", "supercalifragilisticexpialidocious" * 4),
    ("code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"),
    ("controls", "a\x00b\x01c\x7fd"),
    ("mixed", "In 1863, Lincoln's 272 words 🇺🇸 — «liberté» & 自由!!!   \n\tEnd."),
    ("invalid_lone", b"abc\xffdef"),
    ("invalid_pairs", b"\xc3\x28 and \xe2\x82 x"),
    ("invalid_latin1", b"caf\xe9 na\xefve"),
    ("invalid_surrogate", b"a\xed\xa0\x80b"),
    ("invalid_too_large", b"\xf4\x90\x80\x80 z"),
    ("invalid_overlong", b"\xc0\xaf\xe0\x80\xaf"),
    ("invalid_spaces", b"  \xff\xfe  x   \x80"),
    ("invalid_specials", b"<|endoftext|>\x80<|endoftext|>\xfe<|im_end|>"),
    ("invalid_truncated", b"smile \xf0\x9f\x98"),
    ("invalid_marks", b"\xff\xcc\x81e\xcc\x81"),
]

SPECIALS = {
    "gpt2": ["<|endoftext|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
}


def train_byte_level(style):
    tok = Tokenizer(models.BPE(ignore_merges=(style == "llama3")))
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pattern = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAINING_TEXT, trainer)
    tok.add_special_tokens(SPECIALS[style])
    return tok


def train_sentencepiece():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT), model_writer=model, model_type="bpe", vocab_size=500,
        character_coverage=1.0, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity", add_dummy_prefix=True,
        user_defined_symbols=["<|endoftext|>"], unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=100000, minloglevel=2)
    return model.getvalue()


def byte_runs(data):
    """Splits bytes into (valid: bool, bytes) maximal runs of valid UTF-8 and of bytes that are not."""
    text = data.decode("utf-8", errors="surrogateescape")
    runs = []
    for ch in text:
        bad = 0xDC80 <= ord(ch) <= 0xDCFF
        piece = bytes([ord(ch) - 0xDC00]) if bad else ch.encode("utf-8")
        if runs and runs[-1][0] == (not bad):
            runs[-1][1] += piece
        else:
            runs.append([not bad, bytearray(piece)])
    return [(valid, bytes(b)) for valid, b in runs]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def hf_ids(tok, data):
    if isinstance(data, str):
        return tok.encode(data, add_special_tokens=False).ids
    table = bytes_to_unicode()
    ids = []
    for valid, run in byte_runs(data):
        if valid:
            ids += tok.encode(run.decode("utf-8"), add_special_tokens=False).ids
        else:
            ids += [t.id for t in tok.model.tokenize("".join(table[b] for b in run))]
    return ids


def hf_token_bytes(tok):
    """Each id's bytes, as Strata's decode writes them (a token whose characters are not all byte-level: its UTF-8)."""
    inverse = {c: b for b, c in bytes_to_unicode().items()}
    out = {}
    for token, i in tok.get_vocab(with_added_tokens=True).items():
        out[i] = bytes(inverse[c] for c in token) if all(c in inverse for c in token) else token.encode("utf-8")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data", "tokenizers"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    hf = {style: train_byte_level(style) for style in ("gpt2", "llama3", "qwen2")}
    for style, tok in hf.items():
        tok.save(os.path.join(args.out, f"{style}_tokenizer.json"), pretty=False)
        hf[style] = Tokenizer.from_file(os.path.join(args.out, f"{style}_tokenizer.json"))  # what the tests load
    sp_path = os.path.join(args.out, "llama2_tokenizer.model")
    with open(sp_path, "wb") as f:
        f.write(train_sentencepiece())
    sp = spm.SentencePieceProcessor(model_file=sp_path)

    cases = []
    for name, data in CORPUS:
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        case = {"name": name, "hex": raw.hex(), "ids": {}, "lossless": {}}
        if isinstance(data, str):
            case["text"] = data
        for style, tok in hf.items():
            ids = hf_ids(tok, data)
            case["ids"][style] = ids
            table = hf_token_bytes(tok)
            case["lossless"][style] = b"".join(table[i] for i in ids) == raw
            if isinstance(data, str):
                assert tok.decode(ids, skip_special_tokens=False).encode("utf-8") == b"".join(table[i] for i in ids)
        sp_ids = sp.encode(data)
        case["ids"]["llama2"] = sp_ids
        case["lossless"]["llama2"] = sp.decode(sp_ids).encode("utf-8", errors="surrogateescape") == raw
        case["decoded_llama2_hex"] = sp.decode(sp_ids).encode("utf-8", errors="surrogateescape").hex()
        cases.append(case)

    specials = {style: {t: hf[style].token_to_id(t) for t in SPECIALS[style]} for style in hf}
    specials["llama2"] = {"<|endoftext|>": sp.piece_to_id("<|endoftext|>"), "<s>": sp.bos_id(), "</s>": sp.eos_id()}
    vocab_sizes = {style: tok.get_vocab_size(with_added_tokens=True) for style, tok in hf.items()}
    vocab_sizes["llama2"] = sp.get_piece_size()
    expected = {"generator": "tests/reference/make_tokenizer_fixtures.py",
                "versions": {"tokenizers": __import__("tokenizers").__version__, "sentencepiece": spm.__version__},
                "vocab_size": vocab_sizes, "special_ids": specials, "cases": cases}
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")
    for style, tok in hf.items():
        print(f"{style}: vocab {tok.get_vocab_size(with_added_tokens=True)}")
    print(f"llama2: vocab {sp.get_piece_size()}")


if __name__ == "__main__":
    main()
