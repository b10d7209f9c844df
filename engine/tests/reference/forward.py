#!/usr/bin/env python3
"""Independent float64 numpy reference forward pass for dense decoder LLMs.

Supported: Llama-family (`llama`, e.g. SmolLM2) and `qwen3`, loaded either from
a GGUF file (via the `gguf` python package) or from a Hugging Face model
directory (config.json + *.safetensors, parsed here with plain numpy).

This file deliberately shares NO code with the Rust engine.  See README.md in
this directory for what is independent and how.

CLI (prints exactly one JSON object on stdout):

    python3 forward.py (--gguf PATH | --hf-dir DIR)
        (--ids 1,2,3 | --ids-file F.json)
        [--logits last|all|none] [--top-k 5]
        [--greedy N] [--stop-ids 2,0]

Library use:

    import forward as ref
    model = ref.load_model(gguf="model.gguf")          # or hf_dir="dir"
    logits, _ = ref.forward(model, ids)                # [T, vocab] float64
    out = ref.run(model, ids, logits_mode="last", top_k=5, greedy=20)
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

F64 = np.float64


# --------------------------------------------------------------------------
# Model container
# --------------------------------------------------------------------------


class Model:
    """Plain container: config values + float64 weights in HF [out, in] layout.

    rope_mode:
      "neox"        split-half rotation (HF rotate_half); pairs (i, i + d/2).
      "interleaved" llama.cpp's original/NORM rotation; pairs (2i, 2i+1).
                    Used for llama-arch GGUF files, whose q/k rows were
                    permuted by convert_hf_to_gguf.py; we keep that layout.
    """

    def __init__(self):
        self.arch = None
        self.vocab_size = 0
        self.hidden_size = 0
        self.intermediate_size = 0
        self.n_layers = 0
        self.n_heads = 0
        self.n_kv_heads = 0
        self.head_dim = 0
        self.rope_theta = 10000.0
        self.eps = 1e-6
        self.rope_mode = "neox"
        self.qk_norm = False
        self.source = None
        self.embed = None  # [vocab, hidden]
        self.lm_head = None  # [vocab, hidden]
        self.final_norm = None  # [hidden]
        self.layers = []  # list of dicts


def _f64(a):
    return np.ascontiguousarray(np.asarray(a, dtype=F64))


# --------------------------------------------------------------------------
# GGUF loader
# --------------------------------------------------------------------------


def _gguf_field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


def load_gguf(path):
    import gguf  # the python package from llama.cpp; not the engine's parser

    reader = gguf.GGUFReader(path)
    arch = _gguf_field(reader, "general.architecture")
    if arch not in ("llama", "qwen3"):
        raise SystemExit(f"unsupported GGUF architecture: {arch!r}")

    tensors = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        # t.shape is ggml 'ne' order (fastest-varying first); numpy row-major
        # wants the reverse, which for matrices is HF's [out, in].
        shape = tuple(int(s) for s in reversed(list(t.shape)))
        tensors[t.name] = _f64(np.asarray(w).reshape(shape))

    def kv(name, default=None):
        return _gguf_field(reader, f"{arch}.{name}", default)

    m = Model()
    m.arch = arch
    m.source = os.path.abspath(path)
    m.hidden_size = int(kv("embedding_length"))
    m.intermediate_size = int(kv("feed_forward_length"))
    m.n_layers = int(kv("block_count"))
    m.n_heads = int(kv("attention.head_count"))
    m.n_kv_heads = int(kv("attention.head_count_kv", m.n_heads))
    m.head_dim = int(kv("attention.key_length", m.hidden_size // m.n_heads))
    rope_dims = int(kv("rope.dimension_count", m.head_dim))
    if rope_dims != m.head_dim:
        raise SystemExit(f"partial rotary ({rope_dims} of {m.head_dim}) unsupported")
    if kv("rope.scaling.type") not in (None, "none"):
        raise SystemExit(f"rope scaling {kv('rope.scaling.type')!r} unsupported")
    m.rope_theta = float(kv("rope.freq_base", 10000.0))
    # GGUF stores eps as float32; keep the stored value (that is what every
    # GGUF consumer sees).
    m.eps = float(kv("attention.layer_norm_rms_epsilon"))
    # llama: converter permuted q/k rows -> interleaved (adjacent-pair) RoPE
    # with the weights as stored.  qwen3: not permuted, NEOX rope.
    m.rope_mode = "interleaved" if arch == "llama" else "neox"
    m.qk_norm = arch == "qwen3"

    m.embed = tensors["token_embd.weight"]
    m.vocab_size = m.embed.shape[0]
    m.lm_head = tensors.get("output.weight", m.embed)
    m.final_norm = tensors["output_norm.weight"]
    for i in range(m.n_layers):
        p = f"blk.{i}."
        L = {
            "attn_norm": tensors[p + "attn_norm.weight"],
            "wq": tensors[p + "attn_q.weight"],
            "wk": tensors[p + "attn_k.weight"],
            "wv": tensors[p + "attn_v.weight"],
            "wo": tensors[p + "attn_output.weight"],
            "ffn_norm": tensors[p + "ffn_norm.weight"],
            "w_gate": tensors[p + "ffn_gate.weight"],
            "w_up": tensors[p + "ffn_up.weight"],
            "w_down": tensors[p + "ffn_down.weight"],
        }
        for b, gname in (("bq", "attn_q.bias"), ("bk", "attn_k.bias"), ("bv", "attn_v.bias")):
            if p + gname in tensors:
                L[b] = tensors[p + gname]
        if m.qk_norm:
            L["q_norm"] = tensors[p + "attn_q_norm.weight"]
            L["k_norm"] = tensors[p + "attn_k_norm.weight"]
        m.layers.append(L)
    _check_shapes(m)
    return m


# --------------------------------------------------------------------------
# Safetensors (numpy only) + HF directory loader
# --------------------------------------------------------------------------


def _bf16_to_f32(raw_u16):
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


_ST_DTYPES = {
    "F64": ("<f8", None),
    "F32": ("<f4", None),
    "F16": ("<f2", None),
    "BF16": ("<u2", _bf16_to_f32),
}


def read_safetensors(path):
    """Return {name: float64 ndarray} from one .safetensors file."""
    out = {}
    with open(path, "rb") as fh:
        (hlen,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(hlen).decode("utf-8"))
        data = fh.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _ST_DTYPES:
            raise SystemExit(f"{path}: tensor {name}: dtype {dt} unsupported")
        np_dt, conv = _ST_DTYPES[dt]
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        n = int(np.prod(shape)) if shape else 1
        itemsize = np.dtype(np_dt).itemsize
        if end - start != n * itemsize or end > len(data):
            raise SystemExit(f"{path}: tensor {name}: bad data_offsets")
        a = np.frombuffer(data, dtype=np_dt, count=n, offset=start)
        if conv is not None:
            a = conv(a)
        out[name] = _f64(a.reshape(shape))
    return out


def load_hf_dir(d):
    with open(os.path.join(d, "config.json")) as fh:
        cfg = json.load(fh)
    mt = cfg.get("model_type")
    if mt not in ("llama", "qwen3"):
        raise SystemExit(f"unsupported model_type: {mt!r}")
    rs = cfg.get("rope_scaling")
    if rs not in (None, {}) and (rs.get("rope_type") or rs.get("type")) not in (None, "default"):
        raise SystemExit(f"rope_scaling {rs!r} unsupported")

    files = []
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        files = [os.path.join(d, "model.safetensors")]
    elif os.path.exists(idx):
        with open(idx) as fh:
            wm = json.load(fh)["weight_map"]
        files = [os.path.join(d, f) for f in sorted(set(wm.values()))]
    else:
        raise SystemExit(f"no model.safetensors(.index.json) in {d}")
    T = {}
    for f in files:
        T.update(read_safetensors(f))

    m = Model()
    m.arch = mt
    m.source = os.path.abspath(d)
    m.hidden_size = int(cfg["hidden_size"])
    m.intermediate_size = int(cfg["intermediate_size"])
    m.n_layers = int(cfg["num_hidden_layers"])
    m.n_heads = int(cfg["num_attention_heads"])
    m.n_kv_heads = int(cfg.get("num_key_value_heads") or m.n_heads)
    m.head_dim = int(cfg.get("head_dim") or (m.hidden_size // m.n_heads))
    m.rope_theta = float(cfg.get("rope_theta", 10000.0))
    m.eps = float(cfg.get("rms_norm_eps", 1e-6))
    m.rope_mode = "neox"  # HF rotate_half
    m.qk_norm = mt == "qwen3"

    m.embed = T["model.embed_tokens.weight"]
    m.vocab_size = m.embed.shape[0]
    if "vocab_size" in cfg and int(cfg["vocab_size"]) != m.vocab_size:
        raise SystemExit("config vocab_size != embed_tokens rows")
    if "lm_head.weight" in T:
        m.lm_head = T["lm_head.weight"]
    else:
        # HF ties when tie_word_embeddings (default True in PretrainedConfig).
        m.lm_head = m.embed
    m.final_norm = T["model.norm.weight"]
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        L = {
            "attn_norm": T[p + "input_layernorm.weight"],
            "wq": T[p + "self_attn.q_proj.weight"],
            "wk": T[p + "self_attn.k_proj.weight"],
            "wv": T[p + "self_attn.v_proj.weight"],
            "wo": T[p + "self_attn.o_proj.weight"],
            "ffn_norm": T[p + "post_attention_layernorm.weight"],
            "w_gate": T[p + "mlp.gate_proj.weight"],
            "w_up": T[p + "mlp.up_proj.weight"],
            "w_down": T[p + "mlp.down_proj.weight"],
        }
        for b, hname in (("bq", "q_proj"), ("bk", "k_proj"), ("bv", "v_proj")):
            if p + f"self_attn.{hname}.bias" in T:
                L[b] = T[p + f"self_attn.{hname}.bias"]
        if m.qk_norm:
            L["q_norm"] = T[p + "self_attn.q_norm.weight"]
            L["k_norm"] = T[p + "self_attn.k_norm.weight"]
        m.layers.append(L)
    _check_shapes(m)
    return m


def _check_shapes(m):
    D, H, KV, hd, F = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    assert H % KV == 0, "heads must be a multiple of kv heads"
    assert m.embed.shape == (m.vocab_size, D), m.embed.shape
    assert m.lm_head.shape == (m.vocab_size, D), m.lm_head.shape
    for i, L in enumerate(m.layers):
        exp = {
            "attn_norm": (D,), "ffn_norm": (D,),
            "wq": (H * hd, D), "wk": (KV * hd, D), "wv": (KV * hd, D), "wo": (D, H * hd),
            "w_gate": (F, D), "w_up": (F, D), "w_down": (D, F),
            "q_norm": (hd,), "k_norm": (hd,),
            "bq": (H * hd,), "bk": (KV * hd,), "bv": (KV * hd,),
        }
        for k, v in L.items():
            if v.shape != exp[k]:
                raise SystemExit(f"layer {i} {k}: shape {v.shape}, expected {exp[k]}")


def load_model(gguf=None, hf_dir=None):
    if (gguf is None) == (hf_dir is None):
        raise ValueError("give exactly one of gguf / hf_dir")
    return load_gguf(gguf) if gguf is not None else load_hf_dir(hf_dir)


# --------------------------------------------------------------------------
# Math (all float64)
# --------------------------------------------------------------------------


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    # x * sigmoid(x), with sigmoid(x) = (1 + tanh(x/2)) / 2 (no overflow)
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))


def rope_tables(positions, head_dim, theta):
    half = head_dim // 2
    inv_freq = theta ** (-(np.arange(half, dtype=F64) * 2.0) / head_dim)  # [half]
    ang = np.asarray(positions, dtype=F64)[:, None] * inv_freq[None, :]  # [T, half]
    return np.cos(ang), np.sin(ang)


def apply_rope(x, cos, sin, mode):
    """x: [T, n_heads, head_dim]; cos/sin: [T, head_dim/2]."""
    c = cos[:, None, :]
    s = sin[:, None, :]
    out = np.empty_like(x)
    if mode == "neox":
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        out[..., :half] = x1 * c - x2 * s
        out[..., half:] = x2 * c + x1 * s
    elif mode == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x1 * c - x2 * s
        out[..., 1::2] = x2 * c + x1 * s
    else:
        raise ValueError(mode)
    return out


def new_cache(m):
    return {"pos": 0, "k": [None] * m.n_layers, "v": [None] * m.n_layers}


def forward(m, ids, cache=None):
    """Run tokens `ids` (continuing after `cache` if given).

    Returns (logits [len(ids), vocab] float64, cache).  All positions of the
    chunk are computed at once (one matmul per projection).
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) == 0:
        raise ValueError("ids must be a non-empty 1-D list")
    if ids.min() < 0 or ids.max() >= m.vocab_size:
        raise ValueError(f"token id out of range [0, {m.vocab_size})")
    if cache is None:
        cache = new_cache(m)
    T = len(ids)
    p0 = cache["pos"]
    H, KV, hd = m.n_heads, m.n_kv_heads, m.head_dim
    group = H // KV
    cos, sin = rope_tables(np.arange(p0, p0 + T), hd, m.rope_theta)
    # causal mask: query at absolute pos p0+i may see keys at pos <= p0+i
    q_pos = np.arange(p0, p0 + T)[:, None]
    k_pos = np.arange(0, p0 + T)[None, :]
    masked = k_pos > q_pos  # [T, p0+T]
    scale = 1.0 / np.sqrt(hd)

    x = m.embed[ids]  # [T, D]
    for li, L in enumerate(m.layers):
        h = rmsnorm(x, L["attn_norm"], m.eps)
        q = h @ L["wq"].T
        k = h @ L["wk"].T
        v = h @ L["wv"].T
        if "bq" in L:
            q = q + L["bq"]
        if "bk" in L:
            k = k + L["bk"]
        if "bv" in L:
            v = v + L["bv"]
        q = q.reshape(T, H, hd)
        k = k.reshape(T, KV, hd)
        v = v.reshape(T, KV, hd)
        if m.qk_norm:
            q = rmsnorm(q, L["q_norm"], m.eps)
            k = rmsnorm(k, L["k_norm"], m.eps)
        q = apply_rope(q, cos, sin, m.rope_mode)
        k = apply_rope(k, cos, sin, m.rope_mode)
        if cache["k"][li] is not None:
            k = np.concatenate([cache["k"][li], k], axis=0)
            v = np.concatenate([cache["v"][li], v], axis=0)
        cache["k"][li], cache["v"][li] = k, v
        # GQA: query head hq uses kv head hq // group
        kh = np.repeat(k.transpose(1, 0, 2), group, axis=0)  # [H, S, hd]
        vh = np.repeat(v.transpose(1, 0, 2), group, axis=0)  # [H, S, hd]
        qh = q.transpose(1, 0, 2)  # [H, T, hd]
        scores = (qh @ kh.transpose(0, 2, 1)) * scale  # [H, T, S]
        scores = np.where(masked[None], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        att = (p @ vh).transpose(1, 0, 2).reshape(T, H * hd)  # [T, H*hd]
        x = x + att @ L["wo"].T

        h = rmsnorm(x, L["ffn_norm"], m.eps)
        g = h @ L["w_gate"].T
        u = h @ L["w_up"].T
        x = x + (silu(g) * u) @ L["w_down"].T

    x = rmsnorm(x, m.final_norm, m.eps)
    logits = x @ m.lm_head.T
    cache["pos"] = p0 + T
    return logits, cache


def log_softmax(logits):
    mx = logits.max(axis=-1, keepdims=True)
    z = logits - mx
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def run(m, ids, logits_mode="last", top_k=5, greedy=0, stop_ids=()):
    ids = [int(i) for i in ids]
    logits, cache = forward(m, ids)
    T = len(ids)
    lp = log_softmax(logits)
    nll = [float(-lp[t, ids[t + 1]]) for t in range(T - 1)]
    out = {
        "n_tokens": T,
        "nll": nll,
        "mean_nll": float(np.mean(nll)) if nll else None,
        "argmax": [int(a) for a in logits.argmax(axis=-1)],
    }
    last = logits[-1]
    k = min(int(top_k), m.vocab_size)
    if k > 0:
        order = np.argsort(-last, kind="stable")[:k]
        out["top"] = [[int(i), float(last[i])] for i in order]
    if logits_mode == "last":
        out["logits_last"] = [float(v) for v in last]
    elif logits_mode == "all":
        out["logits"] = [[float(v) for v in row] for row in logits]
    elif logits_mode != "none":
        raise ValueError(logits_mode)

    if greedy > 0:
        gen, margins = [], []
        cur = last
        for _ in range(int(greedy)):
            two = np.argsort(-cur, kind="stable")[:2]
            nxt = int(two[0])
            gen.append(nxt)
            margins.append(float(cur[two[0]] - cur[two[1]]))
            if nxt in stop_ids or len(gen) == greedy:
                break
            step_logits, cache = forward(m, [nxt], cache)
            cur = step_logits[-1]
        out["generated"] = gen
        # logit gap top1 - top2 at each greedy step (small => tie-sensitive)
        out["generated_margin"] = margins
    return out


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def _parse_ids(s):
    return [int(x) for x in s.replace(" ", "").split(",") if x != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--gguf", help="GGUF model file (llama or qwen3 arch)")
    src.add_argument("--hf-dir", help="HF model dir with config.json + safetensors")
    ids = ap.add_mutually_exclusive_group(required=True)
    ids.add_argument("--ids", help="comma-separated token ids")
    ids.add_argument("--ids-file", help="JSON file holding a list of token ids")
    ap.add_argument("--logits", choices=["last", "all", "none"], default="last")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--greedy", type=int, default=0, help="greedy-generate N tokens")
    ap.add_argument("--stop-ids", default="", help="comma-separated ids that end --greedy early (included in output)")
    a = ap.parse_args(argv)

    if a.ids is not None:
        tok = _parse_ids(a.ids)
    else:
        with open(a.ids_file) as fh:
            tok = [int(x) for x in json.load(fh)]
    t0 = time.time()
    m = load_model(gguf=a.gguf, hf_dir=a.hf_dir)
    t1 = time.time()
    out = run(m, tok, logits_mode=a.logits, top_k=a.top_k, greedy=a.greedy,
              stop_ids=set(_parse_ids(a.stop_ids)))
    t2 = time.time()
    print(f"reference: {m.arch} from {m.source}: load {t1 - t0:.1f}s, "
          f"compute {t2 - t1:.1f}s", file=sys.stderr)
    # json.dumps uses the C encoder (json.dump to a stream does not): much
    # faster for --logits all.  Python float repr round-trips float64 exactly.
    sys.stdout.write(json.dumps(out))
    sys.stdout.write("\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
