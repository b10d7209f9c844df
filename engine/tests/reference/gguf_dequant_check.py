#!/usr/bin/env python3
"""`engine dequantize` against gguf-py's numpy dequantizers, value for value.

Used by engine/tests/integration/dequant_gguf_py.rs; also runnable by hand:

    cargo build -p engine --bin engine
    python3 engine/tests/reference/gguf_dequant_check.py [--engine target/debug/engine]

Writes a GGUF file with gguf-py's GGUFWriter holding one 2-D tensor of random
blocks per ggml type the engine decodes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
Q5_1, Q4_K, Q5_K, Q6_K; raw bytes, `raw_dtype=`), runs
`ENGINE dequantize --model IN --out OUT --dtype f32`, reads OUT with GGUFReader
and compares every value with `gguf.quants.dequantize` of the input tensor:
the f32 bit patterns must be equal. Block bytes are uniform random except the
f16 scale fields (d, dmin, m), which are set to finite values of random sign
and magnitude 2^-24 .. 2^2 (f16 subnormals included, a random mantissa so the
products round). F32/F16/BF16 tensors are random bit patterns with NaN and
infinity excluded.

Prints one line per type (values compared, values differing, max |difference|)
and exits 0 when all are equal, 1 on any difference or a malformed output, 2
when it cannot run (gguf/numpy missing, engine failed).
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFReader, GGUFWriter
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover - environment problem
    print(
        f"gguf_dequant_check.py: {e}; install the references with "
        "`python3 -m pip install -r engine/tests/reference/requirements.txt`",
        file=sys.stderr,
    )
    sys.exit(2)

REPO = Path(__file__).resolve().parents[3]

# ggml type -> byte offsets of the f16 scale fields inside one block
F16_FIELDS = {
    T.Q8_0: [0],
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}
FLOATS = {T.F32: (np.uint32, 0x7F800000, 0x40000000), T.F16: (np.uint16, 0x7C00, 0x4000), T.BF16: (np.uint16, 0x7F80, 0x4000)}
TYPES = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]


def finite_f16(rng, n):
    """n finite f16 values (as uint8 pairs): random sign, magnitude 2^-24 .. 2^2."""
    mag = np.exp2(rng.uniform(-24.0, 2.0, size=n))
    sign = np.where(rng.integers(0, 2, size=n) == 1, -1.0, 1.0)
    v = (sign * mag).astype(np.float16)
    assert np.isfinite(v).all()
    return v.view(np.uint8).reshape(n, 2)


def random_tensor(rng, qtype, rows, cols):
    """(rows, bytes per row) uint8 holding `rows` x `cols` values of `qtype`."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    assert cols % block == 0
    n_blocks = rows * cols // block
    data = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype in FLOATS:
        dt, exp_mask, clear = FLOATS[qtype]
        v = data.reshape(-1).view(dt).copy()
        v[(v & exp_mask) == exp_mask] &= dt(~clear & np.iinfo(dt).max)  # no NaN or infinity
        data = v.view(np.uint8)
    else:
        for off in F16_FIELDS[qtype]:
            data[:, off : off + 2] = finite_f16(rng, n_blocks)
    return data.reshape(rows, cols // block * type_size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default=os.environ.get("ENGINE", str(REPO / "target/debug/engine")))
    ap.add_argument("--dir", help="where to write the files (default: a temporary directory, removed)")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--rows", type=int, default=64, help="rows per tensor (row = 4 super-blocks of 256)")
    args = ap.parse_args()
    if not Path(args.engine).is_file():
        print(f"gguf_dequant_check.py: no engine binary at {args.engine}: cargo build -p engine --bin engine", file=sys.stderr)
        return 2
    if args.dir:
        return run(args, Path(args.dir))
    with tempfile.TemporaryDirectory(prefix="gguf-dequant-check-") as d:
        return run(args, Path(d))


def run(args, d):
    rng = np.random.default_rng(args.seed)
    src, out = d / "in.gguf", d / "out.f32.gguf"
    w = GGUFWriter(str(src), "dequant-check")
    inputs = {}
    cols = 1024  # 32 blocks of 32 or 4 super-blocks of 256
    for qtype in TYPES:
        name = f"t.{qtype.name}"
        data = random_tensor(rng, qtype, args.rows, cols)
        w.add_tensor(name, data, raw_dtype=qtype)
        inputs[name] = (qtype, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    cmd = [args.engine, "dequantize", "--model", str(src), "--out", str(out), "--dtype", "f32"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"gguf_dequant_check.py: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}", file=sys.stderr)
        return 2

    src_tensors = {t.name: t for t in GGUFReader(str(src)).tensors}
    got = {t.name: t for t in GGUFReader(str(out)).tensors}
    failed = False
    if sorted(got) != sorted(inputs):
        print(f"FAIL: output tensors {sorted(got)} != input tensors {sorted(inputs)}")
        failed = True
    for name, (qtype, raw) in inputs.items():
        t_in = src_tensors[name]
        assert t_in.tensor_type == qtype and np.array_equal(np.asarray(t_in.data).view(np.uint8).reshape(-1), raw.reshape(-1))
        want = np.asarray(dequantize(t_in.data, qtype), dtype=np.float32).reshape(args.rows, cols)
        t = got.get(name)
        if t is None:
            continue
        if t.tensor_type != T.F32 or [int(x) for x in t.shape] != [cols, args.rows]:
            print(f"FAIL {qtype.name}: output is {t.tensor_type.name} of shape {list(t.shape)}, want F32 [{cols}, {args.rows}]")
            failed = True
            continue
        ours = np.asarray(t.data, dtype=np.float32).reshape(args.rows, cols)
        assert np.isfinite(want).all(), f"{qtype.name}: the reference has non-finite values"
        differ = ours.view(np.uint32) != want.view(np.uint32)
        n_diff = int(differ.sum())
        max_diff = float(np.max(np.abs(ours.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
        status = "ok" if n_diff == 0 else "FAIL"
        print(
            f"{status} {qtype.name:5} {want.size} values, {n_diff} differ, max |diff| {max_diff:.3g}, "
            f"max |value| {float(np.max(np.abs(want))):.3g}"
        )
        if n_diff:
            failed = True
            i = np.argwhere(differ)[0]
            print(f"     first at [{i[0]}, {i[1]}]: engine {float(ours[tuple(i)])!r}, gguf-py {float(want[tuple(i)])!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
