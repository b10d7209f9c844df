#!/usr/bin/env python3
"""An independent, pure-Python GPT-2 byte-level BPE over a GGUF vocabulary.

Used by engine/tests/integration/tokenizer_real.rs as the reference for the engine's
GGUF tokenizer (which builds a `tokenizers` pipeline). Nothing here uses the
`tokenizers` library: it reads `tokenizer.ggml.{tokens,token_type,merges,pre}`
with the `gguf` package and implements, as llama.cpp does:

1. special-token partition: control (type 3) and user-defined (type 4) tokens
   found in the text become their own IDs (longest match first, scanning left
   to right);
2. pre-tokenization with the `regex` module: for pre = "smollm" (and its
   llama.cpp aliases) first "\\p{N}" (every digit alone), then the GPT-2
   pattern; for "gpt2" the GPT-2 pattern only. Text between matches is kept
   as its own piece, as llama.cpp's unicode_regex_split does;
3. GPT-2's bytes_to_unicode on each piece's UTF-8 bytes;
4. BPE: repeatedly merge the adjacent pair with the lowest merge rank
   (leftmost first on ties), then map symbols to IDs.

Usage: gpt2_bpe.py PATH.gguf < texts.json  ->  prints a JSON list of ID lists.
"""

import json
import sys

import regex
from gguf import GGUFReader

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
DIGITS_FIRST = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"}


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


def regex_split(pieces, pattern):
    """Splits every piece at the pattern's matches, keeping unmatched gaps."""
    out = []
    for piece in pieces:
        pos = 0
        for m in regex.finditer(pattern, piece):
            if m.start() > pos:
                out.append(piece[pos:m.start()])
            out.append(m.group())
            pos = m.end()
        if pos < len(piece):
            out.append(piece[pos:])
    return [p for p in out if p]


class GgufBpe:
    def __init__(self, path):
        r = GGUFReader(path)
        get = lambda k: r.fields[k].contents()
        if get("tokenizer.ggml.model") != "gpt2":
            raise SystemExit("only tokenizer.ggml.model = gpt2 is implemented")
        self.pre = get("tokenizer.ggml.pre") if "tokenizer.ggml.pre" in r.fields else "default"
        if self.pre != "gpt2" and self.pre not in DIGITS_FIRST:
            raise SystemExit(f"pre-tokenizer {self.pre!r} is not implemented")
        tokens = get("tokenizer.ggml.tokens")
        types = get("tokenizer.ggml.token_type")
        self.vocab = {}
        for i, t in enumerate(tokens):
            self.vocab.setdefault(t, i)
        self.ranks = {}
        for rank, m in enumerate(get("tokenizer.ggml.merges")):
            pos = m.find(" ", 1)  # as llama.cpp: the separator is not the first character
            a, b = m[:pos], m[pos + 1:]
            self.ranks.setdefault((a, b), rank)
        self.specials = sorted({tokens[i] for i, ty in enumerate(types) if ty in (3, 4)}, key=len, reverse=True)
        self.b2u = bytes_to_unicode()

    def partition(self, text):
        """[(segment, is_special)] with special tokens cut out."""
        out, buf, i = [], [], 0
        while i < len(text):
            hit = next((s for s in self.specials if text.startswith(s, i)), None)
            if hit:
                if buf:
                    out.append(("".join(buf), False))
                    buf = []
                out.append((hit, True))
                i += len(hit)
            else:
                buf.append(text[i])
                i += 1
        if buf:
            out.append(("".join(buf), False))
        return out

    def bpe(self, word):
        syms = list(word)
        while len(syms) > 1:
            best, best_rank = None, None
            for j in range(len(syms) - 1):
                rank = self.ranks.get((syms[j], syms[j + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = j, rank
            if best is None:
                break
            a, b = syms[best], syms[best + 1]
            merged, j = [], 0
            while j < len(syms):
                if j < len(syms) - 1 and syms[j] == a and syms[j + 1] == b:
                    merged.append(a + b)
                    j += 2
                else:
                    merged.append(syms[j])
                    j += 1
            syms = merged
        return syms

    def encode(self, text):
        ids = []
        for seg, special in self.partition(text):
            if special:
                ids.append(self.vocab[seg])
                continue
            pieces = [seg]
            if self.pre in DIGITS_FIRST:
                pieces = regex_split(pieces, r"\p{N}")
            for piece in regex_split(pieces, GPT2_PATTERN):
                word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
                ids.extend(self.vocab[s] for s in self.bpe(word))
        return ids


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bpe = GgufBpe(sys.argv[1])
    texts = json.load(sys.stdin)
    json.dump([bpe.encode(t) for t in texts], sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
