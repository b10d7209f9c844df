#!/usr/bin/env python3
"""Reference rows of GGUF tensors, dequantized independently of the engine.

Used by engine/tests/integration/gguf_real.rs. Reads a GGUF file with the `gguf` Python
package, dequantizes selected tensors with `gguf.quants.dequantize` (numpy),
converts them to Hugging Face layout -- rows = ggml ne[1], i.e. the array
`dequantize` returns -- and, for arch llama, undoes convert_hf_to_gguf's Q/K
row permutation with numpy reshapes:

    converter:  W.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2).reshape(rows, cols)
    inverse:    G.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)

(the script checks that applying the converter's permutation to the inverse
gives back the stored tensor). Prints one JSON object on stdout:

    {"architecture": ..., "n_head": ..., "n_head_kv": ...,
     "tensors": {HF name: {"gguf_name", "ggml_type", "shape", "rows": {"i": [floats]},
                           "stored_rows": {"i": [floats]} (q/k only: GGUF row order)}}}

Floats are Python reprs of float32 values, so they round-trip exactly.
Usage: gguf_rows.py PATH.gguf
"""

import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

# (gguf name, HF name, rows to report; None = a 1-D tensor, report it whole)
SELECTION = [
    ("token_embd.weight", "model.embed_tokens.weight", [0, 1, 2, 100, 12345, 49151]),
    ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", [0, 1, 31, 32, 33, 63, 64, 100, 575]),
    ("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight", [0, 1, 31, 32, 63, 64, 127, 191]),
    ("blk.29.attn_q.weight", "model.layers.29.self_attn.q_proj.weight", [5, 37, 540]),
    ("blk.29.attn_k.weight", "model.layers.29.self_attn.k_proj.weight", [0, 100, 191]),
    ("blk.12.attn_v.weight", "model.layers.12.self_attn.v_proj.weight", [0, 191]),
    ("blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight", [0, 575]),
    ("blk.7.ffn_down.weight", "model.layers.7.mlp.down_proj.weight", [0, 300, 575]),
    ("blk.3.ffn_gate.weight", "model.layers.3.mlp.gate_proj.weight", [0, 1535]),
    ("blk.3.ffn_up.weight", "model.layers.3.mlp.up_proj.weight", [777]),
    ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", None),
    ("blk.17.ffn_norm.weight", "model.layers.17.post_attention_layernorm.weight", None),
    ("output_norm.weight", "model.norm.weight", None),
]


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def converter_permute(w, n_head):
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(g, n_head):
    rows = g.shape[0]
    return g.reshape(n_head, rows // n_head // 2, 2, *g.shape[1:]).swapaxes(1, 2).reshape(g.shape)


def main(path):
    reader = GGUFReader(path)
    arch = field(reader, "general.architecture")
    n_head = int(field(reader, f"{arch}.attention.head_count"))
    n_head_kv = int(field(reader, f"{arch}.attention.head_count_kv"))
    by_name = {t.name: t for t in reader.tensors}
    out = {"architecture": arch, "n_head": n_head, "n_head_kv": n_head_kv, "tensors": {}}
    for gguf_name, hf_name, rows in SELECTION:
        t = by_name[gguf_name]
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        hf_shape = [int(d) for d in reversed(t.shape)]
        w = w.reshape(hf_shape)
        entry = {"gguf_name": gguf_name, "ggml_type": t.tensor_type.name, "shape": hf_shape}
        if rows is None:
            entry["rows"] = {"all": [float(x) for x in w]}
        else:
            stored = w
            kind = gguf_name.rsplit(".", 2)[-2]
            if arch == "llama" and kind in ("attn_q", "attn_k"):
                heads = n_head if kind == "attn_q" else n_head_kv
                w = unpermute(stored, heads)
                assert np.array_equal(converter_permute(w, heads), stored), "unpermute is not the inverse"
                entry["stored_rows"] = {str(i): [float(x) for x in stored[i]] for i in rows}
            entry["rows"] = {str(i): [float(x) for x in w[i]] for i in rows}
        out["tensors"][hf_name] = entry
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
