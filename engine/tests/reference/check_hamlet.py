#!/usr/bin/env python3
"""Validation of forward.py on the real SmolLM2-135M GGUF (no engine involved).

  (a) Hamlet: characters 2000..4000 of assets/texts/hamlet_gut.txt, tokenized
      with a minimal GPT-2 byte-level BPE built from the GGUF's own
      tokenizer.ggml.tokens / tokenizer.ggml.merges, first 256 tokens ->
      mean NLL (expected about 3.85 nats).
  (b) Chat prompt "What is the capital of France?", greedy 20 tokens ->
      should mention Paris.

Usage: python3 check_hamlet.py [--gguf PATH] [--text PATH]
Prints a JSON summary on stdout.  The tokenizer here is a small test helper,
independent of both the engine and forward.py.  If the `tokenizers` package is
installed, the encoding is cross-checked against a tokenizers.BPE model built
from the same vocab/merges.
"""

import argparse
import json
import os
import sys
import time

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import forward as ref  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
DEFAULT_GGUF = os.path.join(REPO, "assets/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_TEXT = os.path.join(REPO, "assets/texts/hamlet_gut.txt")

GPT2_PAT = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
DIGIT_PAT = regex.compile(r"\p{N}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class MiniBPE:
    def __init__(self, tokens, merges, specials):
        self.tokens = tokens
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.specials = specials  # {text: id}
        self.cache = {}
        if specials:
            self.special_pat = regex.compile(
                "(" + "|".join(regex.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")"
            )
        else:
            self.special_pat = None

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            a, b = parts[best], parts[best + 1]
            merged, i = [], 0
            while i < len(parts):
                if i < len(parts) - 1 and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def _pretokenize(self, text):
        # SmolLM2: split digits one per piece first, then GPT-2 regex.
        pieces = []
        pos = 0
        for mt in DIGIT_PAT.finditer(text):
            if mt.start() > pos:
                pieces.extend(GPT2_PAT.findall(text[pos : mt.start()]))
            pieces.append(mt.group())
            pos = mt.end()
        if pos < len(text):
            pieces.extend(GPT2_PAT.findall(text[pos:]))
        return pieces

    def encode_plain(self, text):
        out = []
        for piece in self._pretokenize(text):
            word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
            out.extend(self._bpe(word))
        return out

    def encode(self, text):
        if self.special_pat is None:
            return self.encode_plain(text)
        out = []
        for chunk in self.special_pat.split(text):
            if chunk == "":
                continue
            if chunk in self.specials:
                out.append(self.specials[chunk])
            else:
                out.extend(self.encode_plain(chunk))
        return out

    def decode(self, ids):
        s = "".join(self.tokens[i] for i in ids)
        bs = bytearray()
        for ch in s:
            if ch in self.u2b:
                bs.append(self.u2b[ch])
            else:
                bs.extend(ch.encode("utf-8"))
        return bs.decode("utf-8", errors="replace")


def tokenizers_crosscheck(tokens, merges, texts):
    """Encode with HF `tokenizers` built from the same vocab/merges, if available."""
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError:
        return None
    vocab = {t: i for i, t in enumerate(tokens)}
    mg = [tuple(m.split(" ")) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=mg))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    return [tk.encode(t, add_special_tokens=False).ids for t in texts]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--n-tokens", type=int, default=256)
    ap.add_argument("--greedy", type=int, default=20)
    a = ap.parse_args()

    import gguf

    r = gguf.GGUFReader(a.gguf)
    tokens = list(r.fields["tokenizer.ggml.tokens"].contents())
    merges = list(r.fields["tokenizer.ggml.merges"].contents())
    ttype = list(r.fields["tokenizer.ggml.token_type"].contents())
    assert tokens[1] == "<|im_start|>" and tokens[2] == "<|im_end|>", tokens[:3]
    # control tokens (type 3) are matched verbatim in text
    specials = {t: i for i, t in enumerate(tokens) if ttype[i] == 3}
    bpe = MiniBPE(tokens, merges, specials)

    raw = open(a.text, "rb").read()
    try:
        text = raw.decode("utf-8")
        enc_used = "utf-8"
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        enc_used = "latin-1"
    passage = text[2000:4000]
    ham_ids_full = bpe.encode_plain(passage)
    ham_ids = ham_ids_full[: a.n_tokens]
    assert bpe.decode(ham_ids_full) == passage, "BPE round-trip failed"

    chat = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
            "<|im_end|>\n<|im_start|>assistant\n")
    chat_ids = bpe.encode(chat)

    cross = tokenizers_crosscheck(tokens, merges, [passage])
    cross_ok = None if cross is None else (cross[0] == ham_ids_full)

    t0 = time.time()
    m = ref.load_model(gguf=a.gguf)
    t1 = time.time()
    ham = ref.run(m, ham_ids, logits_mode="none", top_k=5)
    t2 = time.time()
    ch = ref.run(m, chat_ids, logits_mode="none", top_k=5, greedy=a.greedy)
    t3 = time.time()

    out = {
        "text_encoding": enc_used,
        "hamlet_tokens_in_passage": len(ham_ids_full),
        "hamlet_ids": ham_ids,
        "tokenizers_crosscheck_equal": cross_ok,
        "hamlet_n_tokens": ham["n_tokens"],
        "hamlet_mean_nll": ham["mean_nll"],
        "chat_ids": chat_ids,
        "chat_generated": ch["generated"],
        "chat_generated_margin": ch["generated_margin"],
        "chat_generated_text": bpe.decode(ch["generated"]),
        "mentions_paris": "Paris" in bpe.decode(ch["generated"]),
        "seconds": {"load": round(t1 - t0, 2), "hamlet_forward": round(t2 - t1, 2),
                    "chat_prompt_plus_greedy": round(t3 - t2, 2)},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
