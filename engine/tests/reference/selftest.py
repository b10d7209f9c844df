#!/usr/bin/env python3
"""Self-tests of forward.py (no engine involved).  python3 selftest.py [--gguf PATH]

1. naive: a literal per-position / per-head loop transcription of the HF
   Llama / Qwen3 equations (rotate_half RoPE, repeat_kv) on a random tiny
   qwen3 model (head_dim != hidden/heads, GQA, qk-norm) stored as sharded
   BF16 + F16 safetensors, and on a tiny llama model with F32 weights, versus
   forward.py's vectorised path read back through its safetensors parser.
2. kv-cache: full forward vs prompt chunk + incremental steps.
3. bf16: known bit patterns decode to the expected values.
4. gguf-vs-hf (needs the SmolLM2 GGUF): the first 4 layers of the GGUF,
   q/k un-permuted to HF layout and written as an F32 HF directory with tied
   embeddings, must give the same logits through the HF path (split-half
   RoPE) as the GGUF path (interleaved RoPE on permuted weights).
Exit code 0 when all pass.
"""

import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import forward as ref  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
DEFAULT_GGUF = os.path.join(REPO, "assets/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


# ---------------------------------------------------------------- writers


def f32_to_bf16_bits(a):
    # round-to-nearest-even from float32 bits
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: {name: (dtype_str, ndarray of matching storage dtype)}"""
    header, blobs, off = {}, [], 0
    for name, (dt, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def encode(dt, a):
    if dt == "F32":
        return (dt, np.asarray(a, np.float32))
    if dt == "F16":
        return (dt, np.asarray(a, np.float16))
    if dt == "BF16":
        return (dt, f32_to_bf16_bits(a))
    raise ValueError(dt)


def decoded(dt, a):
    """What a correct reader must return for tensor a stored as dt."""
    if dt == "BF16":
        return (f32_to_bf16_bits(a).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return encode(dt, a)[1].astype(np.float64)


# ---------------------------------------------------------------- naive model


def naive_forward(W, cfg, ids):
    """Literal loop version of HF modeling_llama / modeling_qwen3 (float64)."""
    D = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    eps = cfg["rms_norm_eps"]
    theta = cfg["rope_theta"]
    qwen3 = cfg["model_type"] == "qwen3"
    n_rep = H // KV

    def rms(v, w):
        return w * (v / np.sqrt(np.mean(v ** 2) + eps))

    def rotate_half(v):
        return np.concatenate([-v[hd // 2:], v[: hd // 2]])

    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    T = len(ids)
    x = [W["model.embed_tokens.weight"][t].copy() for t in ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        Q = [[None] * T for _ in range(H)]
        K = [[None] * T for _ in range(KV)]
        V = [[None] * T for _ in range(KV)]
        for t in range(T):
            h = rms(x[t], W[p + "input_layernorm.weight"])
            q = W[p + "self_attn.q_proj.weight"] @ h
            k = W[p + "self_attn.k_proj.weight"] @ h
            v = W[p + "self_attn.v_proj.weight"] @ h
            freqs = t * inv_freq
            emb = np.concatenate([freqs, freqs])
            cos, sin = np.cos(emb), np.sin(emb)
            for hh in range(H):
                qh = q[hh * hd:(hh + 1) * hd]
                if qwen3:
                    qh = rms(qh, W[p + "self_attn.q_norm.weight"])
                Q[hh][t] = qh * cos + rotate_half(qh) * sin
            for hh in range(KV):
                kh = k[hh * hd:(hh + 1) * hd]
                if qwen3:
                    kh = rms(kh, W[p + "self_attn.k_norm.weight"])
                K[hh][t] = kh * cos + rotate_half(kh) * sin
                V[hh][t] = v[hh * hd:(hh + 1) * hd]
        new_x = []
        for t in range(T):
            outs = []
            for hh in range(H):
                kvh = hh // n_rep
                s = np.array([Q[hh][t] @ K[kvh][j] / np.sqrt(hd) for j in range(t + 1)])
                s = np.exp(s - s.max())
                s /= s.sum()
                outs.append(sum(s[j] * V[kvh][j] for j in range(t + 1)))
            a = W[p + "self_attn.o_proj.weight"] @ np.concatenate(outs)
            xt = x[t] + a
            h = rms(xt, W[p + "post_attention_layernorm.weight"])
            g = W[p + "mlp.gate_proj.weight"] @ h
            u = W[p + "mlp.up_proj.weight"] @ h
            xt = xt + W[p + "mlp.down_proj.weight"] @ ((g / (1 + np.exp(-g))) * u)
            new_x.append(xt)
        x = new_x
    lm = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return np.stack([lm @ rms(xt, W["model.norm.weight"]) for xt in x])


def make_random_hf(d, model_type, dtypes, shard, tie, rng, cfg_over=None):
    cfg = {
        "model_type": model_type, "vocab_size": 97, "hidden_size": 40,
        "intermediate_size": 56, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 24 if model_type == "qwen3" else None,
        "rope_theta": 1000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": tie,
        "rope_scaling": None,
    }
    cfg.update(cfg_over or {})
    if cfg["head_dim"] is None:
        del cfg["head_dim"]
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not tie:
        shapes["lm_head.weight"] = (V, D)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
            p + "self_attn.q_proj.weight": (H * hd, D), p + "self_attn.k_proj.weight": (KV * hd, D),
            p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.o_proj.weight": (D, H * hd),
            p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
            p + "mlp.down_proj.weight": (D, F),
        })
        if model_type == "qwen3":
            shapes[p + "self_attn.q_norm.weight"] = (hd,)
            shapes[p + "self_attn.k_norm.weight"] = (hd,)
    W, enc = {}, {}
    for i, (n, s) in enumerate(sorted(shapes.items())):
        if n.endswith("norm.weight"):
            a = 1.0 + 0.3 * rng.standard_normal(s)
        else:
            a = rng.standard_normal(s) / np.sqrt(s[-1]) * (3.0 if "embed" in n else 1.0)
        dt = dtypes[i % len(dtypes)]
        enc[n] = encode(dt, a)
        W[n] = decoded(dt, a)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    names = sorted(enc)
    if shard:
        half = len(names) // 2
        parts = {"model-00001-of-00002.safetensors": names[:half],
                 "model-00002-of-00002.safetensors": names[half:]}
        wm = {}
        for fn, ns in parts.items():
            write_safetensors(os.path.join(d, fn), {n: enc[n] for n in ns})
            wm.update({n: fn for n in ns})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
            json.dump({"metadata": {}, "weight_map": wm}, fh)
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), enc)
    return W, cfg


# ---------------------------------------------------------------- tests


def check(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    return ok


def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    a = ap.parse_args()
    rng = np.random.default_rng(1234)
    ok = True

    # 3. bf16 decoding
    bits = np.array([0x3F80, 0xC000, 0x0000, 0x8000, 0x4049, 0x7F80], dtype=np.uint16)
    got = ref._bf16_to_f32(bits).astype(np.float64)
    exp = np.array([1.0, -2.0, 0.0, -0.0, 3.140625, np.inf])
    ok &= check("bf16-bits", np.array_equal(got, exp), got.tolist())

    # permute / unpermute are inverses
    w = rng.standard_normal((3 * 64, 5))
    ok &= check("unpermute", np.array_equal(unpermute(permute(w, 3), 3), w), "inverse of converter permute")

    with tempfile.TemporaryDirectory() as tmp:
        ids = rng.integers(0, 97, size=11).tolist()
        cases = [
            ("qwen3-bf16/f16-sharded-untied", "qwen3", ["BF16", "F16"], True, False, None),
            ("qwen3-f32-tied", "qwen3", ["F32"], False, True, {"num_key_value_heads": 1}),
            ("llama-f32-tied", "llama", ["F32"], False, True, None),
            ("llama-bf16-untied-mha", "llama", ["BF16"], False, False, {"num_key_value_heads": 4}),
        ]
        for i, (name, mt, dts, shard, tie, over) in enumerate(cases):
            d = os.path.join(tmp, f"m{i}")
            W, cfg = make_random_hf(d, mt, dts, shard, tie, rng, over)
            m = ref.load_model(hf_dir=d)
            got, _ = ref.forward(m, ids)
            exp = naive_forward(W, cfg, ids)
            err = np.abs(got - exp).max()
            ok &= check(f"naive {name}", err < 1e-10, f"max|dlogit|={err:.2e} (logit scale {np.abs(exp).max():.1f})")

            # 2. kv cache: chunk of 5, then 6 single steps
            l1, c = ref.forward(m, ids[:5])
            rows = [l1]
            for t in ids[5:]:
                lt, c = ref.forward(m, [t], c)
                rows.append(lt)
            err = np.abs(np.concatenate(rows) - got).max()
            ok &= check(f"kv-cache {name}", err < 1e-10, f"max|dlogit|={err:.2e}")

        # 4. GGUF (interleaved RoPE, permuted q/k) vs HF dir (split-half RoPE)
        if os.path.exists(a.gguf):
            g = ref.load_model(gguf=a.gguf)
            nl = 4
            g.layers = g.layers[:nl]
            g.n_layers = nl
            T = {"model.embed_tokens.weight": g.embed, "model.norm.weight": g.final_norm}
            for l, L in enumerate(g.layers):
                p = f"model.layers.{l}."
                T.update({
                    p + "input_layernorm.weight": L["attn_norm"],
                    p + "post_attention_layernorm.weight": L["ffn_norm"],
                    p + "self_attn.q_proj.weight": unpermute(L["wq"], g.n_heads),
                    p + "self_attn.k_proj.weight": unpermute(L["wk"], g.n_kv_heads),
                    p + "self_attn.v_proj.weight": L["wv"],
                    p + "self_attn.o_proj.weight": L["wo"],
                    p + "mlp.gate_proj.weight": L["w_gate"],
                    p + "mlp.up_proj.weight": L["w_up"],
                    p + "mlp.down_proj.weight": L["w_down"],
                })
            d = os.path.join(tmp, "smol4")
            os.makedirs(d)
            # dequantized Q4_1/Q8_0/F32 values are exact in float32
            write_safetensors(os.path.join(d, "model.safetensors"),
                              {n: ("F32", v.astype(np.float32)) for n, v in T.items()})
            with open(os.path.join(d, "config.json"), "w") as fh:
                json.dump({"model_type": "llama", "vocab_size": g.vocab_size,
                           "hidden_size": g.hidden_size, "intermediate_size": g.intermediate_size,
                           "num_hidden_layers": nl, "num_attention_heads": g.n_heads,
                           "num_key_value_heads": g.n_kv_heads, "rope_theta": g.rope_theta,
                           "rms_norm_eps": g.eps, "tie_word_embeddings": True}, fh)
            h = ref.load_model(hf_dir=d)
            ids = rng.integers(0, g.vocab_size, size=40).tolist()
            lg, _ = ref.forward(g, ids)
            lh, _ = ref.forward(h, ids)
            err = np.abs(lg - lh).max()
            ok &= check("gguf-interleaved vs hf-splithalf (SmolLM2, 4 layers)", err < 1e-9,
                        f"max|dlogit|={err:.2e} (logit scale {np.abs(lg).max():.1f})")
            # and the permutation matters: split-half RoPE on the permuted
            # weights must NOT match (guards against a no-op test)
            g.rope_mode = "neox"
            lw, _ = ref.forward(g, ids)
            err = np.abs(lw - lh).max()
            ok &= check("wrong-rope-mode differs", err > 1e-3, f"max|dlogit|={err:.2e}")
        else:
            print(f"SKIP gguf-vs-hf: {a.gguf} missing")

    print("ALL PASS" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
