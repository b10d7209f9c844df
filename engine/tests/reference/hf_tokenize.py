#!/usr/bin/env python3
"""Reference token IDs from a Hugging Face tokenizer.json, via the Python
`tokenizers` package (the library's own Python build, independent of the Rust
crate the engine links). Used by engine/tests/integration/tokenizer_real.rs.

Usage: hf_tokenize.py tokenizer.json < texts.json
Prints {"ids": [[...], ...], "decoded": [...]} for encode(text,
add_special_tokens=False) and decode(ids, skip_special_tokens=False).
"""

import json
import sys

from tokenizers import Tokenizer


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tok = Tokenizer.from_file(sys.argv[1])
    texts = json.load(sys.stdin)
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
    json.dump({"ids": ids, "decoded": decoded}, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
