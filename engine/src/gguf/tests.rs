//! Unit tests of the GGUF reader on tiny files built with `writer::GgufWriter`:
//! metadata of every value type, each supported tensor type with known values
//! (hand-packed blocks, including Q5_0/Q5_1 and the Q4_K/Q5_K/Q6_K k-quants),
//! corrupt and truncated files, unsupported types (model-level tests are in
//! `model/gguf_load_tests.rs`).

use super::writer::GgufWriter;
use super::*;
use crate::kernels::cpu::quant::{QuantKind, QuantMatrix};

fn f16(x: u16) -> [u8; 2] {
    x.to_le_bytes()
}

fn all_value_types() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("u8", MetaValue::U8(200))
        .meta("i8", MetaValue::I8(-5))
        .meta("u16", MetaValue::U16(60000))
        .meta("i16", MetaValue::I16(-30000))
        .meta("u32", MetaValue::U32(4_000_000_000))
        .meta("i32", MetaValue::I32(-7))
        .meta("f32", MetaValue::F32(1.5))
        .meta("bool", MetaValue::Bool(true))
        .meta("str", MetaValue::String("héllo".into()))
        .meta("arr", MetaValue::Array(vec![MetaValue::String("a".into()), MetaValue::String("".into())]))
        .meta("nested", MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::I32(1), MetaValue::I32(2)])]))
        .meta("u64", MetaValue::U64(u64::MAX))
        .meta("i64", MetaValue::I64(-1))
        .meta("f64", MetaValue::F64(-0.25));
    w
}

#[test]
fn reads_every_metadata_type_in_v2_and_v3() {
    for version in [2, 3] {
        let w = all_value_types();
        let g = GgufFile::from_bytes(w.to_bytes(version)).unwrap();
        assert_eq!(g.version(), version);
        assert_eq!(g.alignment(), 32);
        assert_eq!(g.metadata().len(), 14);
        assert_eq!(g.get("u8"), Some(&MetaValue::U8(200)));
        assert_eq!(g.get("i8"), Some(&MetaValue::I8(-5)));
        assert_eq!(g.get_u64("u16").unwrap(), Some(60000));
        assert_eq!(g.get("i16"), Some(&MetaValue::I16(-30000)));
        assert_eq!(g.get_u64("u32").unwrap(), Some(4_000_000_000));
        let e = g.get_u64("i32").unwrap_err().to_string();
        assert!(e.contains("i32") && e.contains("non-negative integer"), "{e}");
        assert_eq!(g.get_f64("f32").unwrap(), Some(1.5));
        assert_eq!(g.get_bool("bool").unwrap(), Some(true));
        assert_eq!(g.get_str("str").unwrap(), Some("héllo"));
        assert_eq!(g.get_str_array("arr").unwrap(), Some(vec!["a", ""]));
        let nested = g.get_array("nested").unwrap().unwrap();
        assert_eq!(nested[0].as_array().map(|a| a.len()), Some(2));
        assert_eq!(g.get_u64("u64").unwrap(), Some(u64::MAX));
        assert_eq!(g.get("i64").and_then(MetaValue::as_i64), Some(-1));
        assert_eq!(g.get_f64("f64").unwrap(), Some(-0.25));
        assert_eq!(g.get_str("missing").unwrap(), None);
        let e = g.get_str("u8").unwrap_err().to_string();
        assert!(e.contains("u8") && e.contains("should be a string"), "{e}");
    }
}

/// One tensor of each supported type: (ggml type id, name, row length `cols`,
/// encoded bytes, expected values) for a [cols, 2] tensor (two rows, each one
/// block of 32 or one super-block of 256 values).
type TypedCase = (u32, &'static str, usize, Vec<u8>, Vec<f32>);

fn typed_cases() -> Vec<TypedCase> {
    let mut cases: Vec<TypedCase> = Vec::new();
    let vals: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 7.0).collect();
    // F32
    let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    cases.push((0, "F32", 32, bytes, vals.clone()));
    // F16 and BF16: these values are exact in both
    let bytes = vals.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
    cases.push((1, "F16", 32, bytes, vals.clone()));
    let bytes = vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect();
    cases.push((30, "BF16", 32, bytes, vals.clone()));
    // Q8_0: block 0 d = 0.5 (0x3800), block 1 d = -2.0 (0xC000); q_i = 8 i - 128
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for (d_bits, d) in [(0x3800u16, 0.5f32), (0xC000, -2.0)] {
        bytes.extend_from_slice(&f16(d_bits));
        for i in 0..32i32 {
            let q = (i * 8 - 128) as i8;
            bytes.push(q as u8);
            want.push(d * q as f32);
        }
    }
    cases.push((8, "Q8_0", 32, bytes, want));
    // Q4_0: d = 2.0 (0x4000) then 0.5; qs[j] = j | (15 - j) << 4
    // element j = d (j - 8), element j + 16 = d (7 - j)
    let mut bytes = Vec::new();
    let mut want = vec![0f32; 64];
    for (b, (d_bits, d)) in [(0x4000u16, 2.0f32), (0x3800, 0.5)].into_iter().enumerate() {
        bytes.extend_from_slice(&f16(d_bits));
        for j in 0..16u8 {
            bytes.push(j | ((15 - j) << 4));
            want[b * 32 + j as usize] = d * (j as f32 - 8.0);
            want[b * 32 + j as usize + 16] = d * (7.0 - j as f32);
        }
    }
    cases.push((2, "Q4_0", 32, bytes, want));
    // Q4_1: d = 0.25 (0x3400), m = -1 (0xBC00); then d = 1, m = 0.5 (0x3C00, 0x3800)
    let mut bytes = Vec::new();
    let mut want = vec![0f32; 64];
    let blocks = [(0x3400u16, 0.25f32, 0xBC00u16, -1.0f32), (0x3C00, 1.0, 0x3800, 0.5)];
    for (b, (d_bits, d, m_bits, m)) in blocks.into_iter().enumerate() {
        bytes.extend_from_slice(&f16(d_bits));
        bytes.extend_from_slice(&f16(m_bits));
        for j in 0..16u8 {
            bytes.push(j | ((15 - j) << 4));
            want[b * 32 + j as usize] = d * j as f32 + m;
            want[b * 32 + j as usize + 16] = d * (15 - j) as f32 + m;
        }
    }
    cases.push((3, "Q4_1", 32, bytes, want));
    cases.extend(q5_cases());
    cases.extend(k_quant_cases());
    cases
}

/// Q5_0 and Q5_1, two blocks each. Element j (0..32) of block b has the 5-bit
/// quant q = (11 j + 3 b) % 32 (each of 0..=31 once per block, so every bit of
/// qh is set in some block): its low 4 bits go to nibble j % 16 of qs (low
/// nibble for j < 16), its 5th bit to bit j of qh (a little-endian u32).
fn q5_cases() -> Vec<TypedCase> {
    let quant = |b: usize, j: usize| ((11 * j + 3 * b) % 32) as u8;
    let pack = |b: usize| -> Vec<u8> {
        let mut qh = 0u32;
        let mut qs = [0u8; 16];
        for j in 0..32 {
            let q = quant(b, j);
            qh |= u32::from(q >> 4) << j;
            qs[j % 16] |= (q & 0x0f) << if j < 16 { 0 } else { 4 };
        }
        qh.to_le_bytes().into_iter().chain(qs).collect()
    };
    // Q5_0: d = 0.5 (0x3800), then -0.25 (0xB400); x = (q - 16) d
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for (b, (d_bits, d)) in [(0x3800u16, 0.5f32), (0xB400, -0.25)].into_iter().enumerate() {
        bytes.extend_from_slice(&f16(d_bits));
        bytes.extend(pack(b));
        want.extend((0..32).map(|j| (quant(b, j) as f32 - 16.0) * d));
    }
    // Spot checks written out: block 0, j = 3 is q = 33 % 32 = 1 (-7.5); j = 5
    // is q = 55 % 32 = 23 (5th bit set, 3.5); j = 29 (a high nibble, qh bit 29)
    // is q = 319 % 32 = 31 (7.5).
    assert_eq!((want[3], want[5], want[29]), (-7.5, 3.5, 7.5));
    let mut cases = vec![(6, "Q5_0", 32, bytes, want)];
    // Q5_1: d = 0.25 (0x3400), m = -3.5 (0xC300); then d = 2, m = 1 (0x4000, 0x3C00); x = q d + m
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    let blocks = [(0x3400u16, 0.25f32, 0xC300u16, -3.5f32), (0x4000, 2.0, 0x3C00, 1.0)];
    for (b, (d_bits, d, m_bits, m)) in blocks.into_iter().enumerate() {
        bytes.extend_from_slice(&f16(d_bits));
        bytes.extend_from_slice(&f16(m_bits));
        bytes.extend(pack(b));
        want.extend((0..32).map(|j| quant(b, j) as f32 * d + m));
    }
    assert_eq!((want[3], want[5], want[29]), (-3.25, 2.25, 4.25));
    cases.push((7, "Q5_1", 32, bytes, want));
    cases
}

/// The 12 scale bytes of a Q4_K/Q5_K super-block for eight 6-bit scales and
/// mins, laid out as ggml's `get_scale_min_k4` reads them: bytes 0..4 =
/// sc[0..4] | (sc[4..8] >> 4) << 6, bytes 4..8 = m[0..4] | (m[4..8] >> 4) << 6,
/// bytes 8..12 = (sc[4..8] & 15) | (m[4..8] & 15) << 4.
fn pack_k4_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..4 {
        out[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        out[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        out[j + 8] = (sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4);
    }
    out
}

/// Q4_K, Q5_K and Q6_K, two super-blocks of 256 each. Scales and mins include
/// values >= 16 in sub-blocks 4..8 (the j >= 4 branch of get_scale_min_k4 takes
/// their top 2 bits from the top of bytes 0..8) and 63. Powers of two for d
/// and dmin keep every product exact, so `want` is the formula's value.
fn k_quant_cases() -> Vec<TypedCase> {
    let mut cases = Vec::new();
    // (d bits, d, dmin bits, dmin, scales, mins) per super-block
    let supers = [
        (0x3800u16, 0.5f32, 0x3400u16, 0.25f32, [1u8, 2, 3, 63, 17, 33, 50, 5], [0u8, 7, 40, 1, 20, 63, 2, 48]),
        (0xBC00, -1.0, 0x4000, 2.0, [63, 0, 31, 16, 63, 47, 1, 32], [63, 15, 16, 0, 0, 31, 62, 17]),
    ];
    // The packing of the first super-block's scales, written out: sc[4] = 17 =
    // 0b01_0001 and m[4] = 20 = 0b01_0100 put 0b01 in the top bits of bytes 0
    // and 4 and 0x41 (1 | 4 << 4) in byte 8; sc[5] = 33 = 0b10_0001, m[5] = 63.
    let first = pack_k4_scales(supers[0].4, supers[0].5);
    assert_eq!(first, [0x41, 0x82, 0xC3, 0x3F, 0x40, 0xC7, 0x28, 0xC1, 0x41, 0xF1, 0x22, 0x05]);

    // Q4_K: element e (0..256) of super-block b has q = (7 e + b) % 16; group
    // g = e / 64 packs elements 64 g + l (low nibble) and 64 g + 32 + l (high
    // nibble) in qs[32 g + l]; sub-block e / 32 gives y = d sc q - dmin m.
    // Q5_K: q = (13 e + b) % 32, its 5th bit in bit 2 g (first 32 of the
    // group) or 2 g + 1 (second 32) of qh[e % 32].
    for (id, name, bits) in [(12u32, "Q4_K", 4u32), (13, "Q5_K", 5)] {
        let mut bytes = Vec::new();
        let mut want = Vec::new();
        for (b, &(d_bits, d, dmin_bits, dmin, sc, m)) in supers.iter().enumerate() {
            let quant = |e: usize| ((if bits == 4 { 7 * e } else { 13 * e } + b) % (1 << bits)) as u8;
            bytes.extend_from_slice(&f16(d_bits));
            bytes.extend_from_slice(&f16(dmin_bits));
            bytes.extend_from_slice(&pack_k4_scales(sc, m));
            let mut qh = [0u8; 32];
            let mut qs = [0u8; 128];
            for e in 0..256 {
                let (g, half, l) = (e / 64, (e / 32) % 2, e % 32);
                let q = quant(e);
                qs[32 * g + l] |= (q & 0x0f) << (4 * half);
                qh[l] |= (q >> 4) << (2 * g + half);
                let s = e / 32;
                want.push(d * sc[s] as f32 * q as f32 - dmin * m[s] as f32);
            }
            if bits == 5 {
                bytes.extend_from_slice(&qh);
            } else {
                assert_eq!(qh, [0; 32]);
            }
            bytes.extend_from_slice(&qs);
        }
        cases.push((id, name, 256, bytes, want));
    }
    // Spot checks: Q4_K super-block 0, element 130 (sub-block 4: sc 17, m 20)
    // has q = 910 % 16 = 14: 0.5 * 17 * 14 - 0.25 * 20 = 114; element 200
    // (sub-block 6: sc 50, m 2) has q = 1400 % 16 = 8: 200 - 0.5 = 199.5.
    assert_eq!((cases[0].4[130], cases[0].4[200]), (114.0, 199.5));
    // Q5_K super-block 1, element 255 (sub-block 7: sc 32, m 17) has
    // q = 3316 % 32 = 20 (5th bit, qh[31] bit 7): -1 * 32 * 20 - 2 * 17 = -674.
    assert_eq!(cases[1].4[511], -674.0);

    // Q6_K: element e of super-block b has q = (29 e + b) % 64 - 32 and scale
    // scales[e / 16] (i8, negative ones included); half n = e / 128, and
    // within it k = (e % 128) / 32, l = e % 32: the low 4 bits of q + 32 go to
    // the low (k = 0, 1) or high (k = 2, 3) nibble of ql[64 n + l + 32 (k % 2)],
    // the top 2 bits to bits 2k..2k+2 of qh[32 n + l]; y = d scale q.
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for (b, (d_bits, d)) in [(0x3000u16, 0.125f32), (0xC000, -2.0)].into_iter().enumerate() {
        let scales: Vec<i8> = (0..16i32).map(|i| (i * 17 - 128 + 5 * b as i32) as i8).collect();
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for e in 0..256 {
            let u = ((29 * e + b) % 64) as u8;
            let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
            ql[64 * n + l + 32 * (k % 2)] |= (u & 0x0f) << (4 * (k / 2));
            qh[32 * n + l] |= (u >> 4) << (2 * k);
            want.push(d * scales[e / 16] as f32 * (u as i32 - 32) as f32);
        }
        bytes.extend_from_slice(&ql);
        bytes.extend_from_slice(&qh);
        bytes.extend(scales.iter().map(|&s| s as u8));
        bytes.extend_from_slice(&f16(d_bits));
    }
    // Spot checks: super-block 0, element 0 is scale -128, q = -32:
    // 0.125 * -128 * -32 = 512; element 100 (scale index 6: -26) has
    // u = 2900 % 64 = 20, q = -12: 0.125 * -26 * -12 = 39.
    assert_eq!((want[0], want[100]), (512.0, 39.0));
    assert_eq!(bytes.len(), 2 * 210);
    cases.push((14, "Q6_K", 256, bytes, want));
    cases
}

#[test]
fn dequantizes_each_supported_type() {
    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetaValue::U32(64));
    let cases = typed_cases();
    for (id, name, cols, bytes, _) in &cases {
        w.tensor(&format!("t.{name}"), &[*cols, 2], *id, bytes.clone());
    }
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    for (_, name, cols, bytes, want) in &cases {
        let info = g.tensor_info(&format!("t.{name}")).unwrap();
        assert_eq!(info.ty.name(), *name);
        assert!(info.ty.is_supported(), "{name}");
        let (block, type_size) = info.ty.block_layout().unwrap();
        assert_eq!(bytes.len(), 2 * cols / block * type_size, "{name}: test bytes");
        assert_eq!(info.offset % 64, 0);
        let t = g.dequantize_raw(&format!("t.{name}")).unwrap();
        assert_eq!(t.shape, vec![2, *cols], "{name}");
        for (i, (a, b)) in t.data.iter().zip(want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name}[{i}]: ours {a}, want {b}");
        }
        assert_eq!(t.data.len(), want.len(), "{name}");
    }
    let names: Vec<&str> = cases.iter().map(|c| c.1).collect();
    let all = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"];
    assert_eq!(names, all);
}

/// A decoder reads exactly its block: each byte of each case's tensor, flipped
/// in turn, changes at least one decoded value (so no byte is ignored), and only
/// values of the block (32) or super-block (256) that holds it.
#[test]
fn every_byte_of_a_quantized_block_matters_and_only_to_its_block() {
    for (id, name, cols, bytes, want) in typed_cases() {
        let ty = GgmlType::from_id(id);
        let (block, type_size) = ty.block_layout().unwrap();
        if block == 1 {
            continue;
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x81;
            let got = dequantize(ty, &b, 2 * cols).unwrap();
            let changed: Vec<usize> = (0..got.len()).filter(|&k| got[k].to_bits() != want[k].to_bits()).collect();
            assert!(!changed.is_empty(), "{name}: byte {i} changes nothing");
            let blk = i / type_size;
            assert!(changed.iter().all(|&k| k / block == blk), "{name}: byte {i} changed {changed:?}");
        }
    }
}

#[test]
fn unsupported_type_is_named_with_its_tensor() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()));
    // IQ2_XXS (ggml type 16): 66 bytes per 256 values.
    w.tensor("blk.0.ffn_down.weight", &[256, 1], 16, vec![0u8; 66]);
    w.tensor("blk.0.odd.weight", &[4], 99, vec![0u8; 16]);
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    let e = g.dequantize_raw("blk.0.ffn_down.weight").unwrap_err();
    match &e {
        EngineError::UnsupportedTensorType { name, ty } => {
            assert_eq!(name, "blk.0.ffn_down.weight");
            assert_eq!(ty, "IQ2_XXS");
        }
        other => panic!("wrong error {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("IQ2_XXS") && msg.contains("blk.0.ffn_down.weight"), "{msg}");
    let e = g.dequantize_raw("blk.0.odd.weight").unwrap_err().to_string();
    assert!(e.contains("unknown ggml type id 99"), "{e}");
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let mut w = all_value_types();
    for (id, name, cols, bytes, _) in typed_cases() {
        w.tensor(name, &[cols, 2], id, bytes);
    }
    let full = w.to_bytes(3);
    assert!(GgufFile::from_bytes(full.clone()).is_ok());
    // The last tensor's data ends before the trailing alignment padding.
    let last = GgufFile::from_bytes(full.clone()).unwrap().tensors().last().cloned().unwrap();
    let data_end = (last.offset + last.n_bytes.unwrap()) as usize;
    for cut in 0..data_end {
        match GgufFile::from_bytes(full[..cut].to_vec()) {
            Err(EngineError::Gguf(m)) => assert!(!m.is_empty()),
            other => panic!("cut at {cut}: expected a GGUF error, got {other:?}"),
        }
    }
}

fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn gguf_err(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes) {
        Err(EngineError::Gguf(m)) => m,
        other => panic!("expected a GGUF error, got {other:?}"),
    }
}

#[test]
fn corrupt_headers_are_named() {
    let e = gguf_err(b"GGML\x03\0\0\0".to_vec());
    assert!(e.contains("bad magic"), "{e}");
    for v in [1, 4] {
        let e = gguf_err(header(v, 0, 0));
        assert!(e.contains(&format!("unsupported GGUF version {v}")), "{e}");
    }
    let e = gguf_err(header(3, u64::MAX, 0));
    assert!(e.contains("tensor count"), "{e}");
    let e = gguf_err(header(3, 0, 1 << 40));
    assert!(e.contains("key/value count"), "{e}");

    // A key whose string length is absurd.
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(&[0u8; 16]);
    assert!(gguf_err(b).contains("metadata key #0"));

    // An array that claims 2^60 elements.
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'a');
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(&(1u64 << 60).to_le_bytes());
    b.extend_from_slice(&[0u8; 64]);
    let e = gguf_err(b);
    assert!(e.contains("length of array \"a\""), "{e}");

    // An array longer than any real vocabulary (the bytes are there).
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'a');
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&((1u64 << 24) + 1).to_le_bytes());
    b.resize(b.len() + (1 << 24) + 1, 0);
    let e = gguf_err(b);
    assert!(e.contains("more than the 16777216 supported"), "{e}");

    // Unknown value type; bad bool.
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&13u32.to_le_bytes());
    b.extend_from_slice(&[0u8; 16]);
    assert!(gguf_err(b).contains("unknown value type 13"));
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&7u32.to_le_bytes());
    b.push(2);
    assert!(gguf_err(b).contains("invalid bool"));

    // Too many dimensions, a misaligned offset, data past the end, bad alignment.
    let mut w = GgufWriter::new();
    w.tensor("t", &[1, 1, 1, 1, 1], 0, vec![0; 4]);
    assert!(gguf_err(w.to_bytes(3)).contains("5 dimensions"));
    let mut b = GgufWriter::new().tensor("t", &[4], 0, vec![0; 16]).to_bytes(3);
    // header (24) + name (8 + 1) + n_dims (4) + one dim (8) + type (4)
    let off_at = 24 + 8 + 1 + 4 + 8 + 4;
    b[off_at..off_at + 8].copy_from_slice(&3u64.to_le_bytes());
    assert!(gguf_err(b.clone()).contains("not a multiple of the alignment"));
    b[off_at..off_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(gguf_err(b).contains("extends past the end"));
    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetaValue::U32(3));
    assert!(gguf_err(w.to_bytes(3)).contains("power of two"));
    // A quantized row that is not whole blocks.
    let mut w = GgufWriter::new();
    w.tensor("q", &[33], 8, vec![0; 34]);
    assert!(gguf_err(w.to_bytes(3)).contains("block size 32"));
    // Duplicate names.
    let mut w = GgufWriter::new();
    w.tensor("t", &[1], 0, vec![0; 4]).tensor("t", &[1], 0, vec![0; 4]);
    assert!(gguf_err(w.to_bytes(3)).contains("duplicate tensor name"));
}

#[test]
fn open_reads_a_file_and_names_a_missing_one() {
    let dir = std::env::temp_dir().join(format!("engine-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    std::fs::write(&path, all_value_types().to_bytes(3)).unwrap();
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(g.get_str("str").unwrap(), Some("héllo"));
    std::fs::write(&path, b"GGUF\x03\0").unwrap();
    let e = GgufFile::open(&path).unwrap_err().to_string();
    assert!(e.contains("t.gguf") && e.contains("truncated"), "{e}");
    std::fs::write(&path, b"").unwrap();
    assert!(GgufFile::open(&path).unwrap_err().to_string().contains("empty file"));
    std::fs::remove_dir_all(&dir).ok();
    let e = GgufFile::open(dir.join("nope.gguf")).unwrap_err();
    assert!(matches!(e, EngineError::Io { .. }), "{e:?}");
}

/// `count` super-blocks of `size` random bytes (xorshift32 from `seed`), each
/// passed through `fix` (to keep its f16 scales finite).
fn random_superblocks(size: usize, count: usize, seed: u32, fix: impl Fn(&mut [u8])) -> Vec<u8> {
    let mut s = seed;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s >> 8) as u8
    };
    let mut out = Vec::with_capacity(size * count);
    for _ in 0..count {
        let mut blk: Vec<u8> = (0..size).map(|_| next()).collect();
        fix(&mut blk);
        out.extend(blk);
    }
    out
}

/// The loader's Q4_K repack (super-blocks of 256 into the kernels' blocks of
/// 32) keeps every value: the repacked matrix dequantizes to ggml's
/// `dequantize_row_q4_K` values bit for bit, on the hand-built cases and on
/// random super-blocks (every scale byte, both branches of
/// `get_scale_min_k4`, negative scales); a truncated tensor is refused.
#[test]
fn q4_k_repacked_per_32_decodes_to_the_same_values() {
    let mut cases: Vec<(usize, Vec<u8>)> = typed_cases()
        .into_iter()
        .filter(|c| GgmlType::from_id(c.0) == GgmlType::Q4K)
        .map(|(_, _, cols, bytes, _)| (cols, bytes))
        .collect();
    assert!(!cases.is_empty(), "typed_cases has no Q4_K case");
    // 3 rows of 512: d and dmin random finite f16 (exponent bits kept below all ones).
    cases.push((
        512,
        random_superblocks(144, 6, 0x9e37_79b9, |blk| {
            blk[1] &= 0xbb;
            blk[3] &= 0xbb;
        }),
    ));
    for (cols, bytes) in cases {
        let rows = bytes.len() / 144 * 256 / cols;
        let want = dequantize(GgmlType::Q4K, &bytes, rows * cols).unwrap();
        let repacked = repack_q4_k(&bytes).unwrap();
        let q = QuantMatrix::new(QuantKind::Q4K, rows, cols, repacked).unwrap();
        let got = q.dequantize();
        let differ = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{rows}x{cols}: {differ} values differ from dequantize_row_q4_K");
    }
    assert!(repack_q4_k(&[0u8; 143]).is_none());
}

/// As for Q4_K: the loader's Q6_K repack keeps every value (hand-built cases
/// and random super-blocks, negative sub-block scales and scales of -128
/// included), and a truncated tensor is refused.
#[test]
fn q6_k_repacked_per_32_decodes_to_the_same_values() {
    let mut cases: Vec<(usize, Vec<u8>)> = typed_cases()
        .into_iter()
        .filter(|c| GgmlType::from_id(c.0) == GgmlType::Q6K)
        .map(|(_, _, cols, bytes, _)| (cols, bytes))
        .collect();
    assert!(!cases.is_empty(), "typed_cases has no Q6_K case");
    // d finite; the first sub-block scale -128.
    cases.push((
        512,
        random_superblocks(210, 6, 0x2545_f491, |blk| {
            blk[209] &= 0xbb;
            blk[192] = 0x80;
        }),
    ));
    for (cols, bytes) in cases {
        let rows = bytes.len() / 210 * 256 / cols;
        let want = dequantize(GgmlType::Q6K, &bytes, rows * cols).unwrap();
        let q = QuantMatrix::new(QuantKind::Q6K, rows, cols, repack_q6_k(&bytes).unwrap()).unwrap();
        let got = q.dequantize();
        let differ = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{rows}x{cols}: {differ} values differ from dequantize_row_q6_K");
    }
    assert!(repack_q6_k(&[0u8; 209]).is_none());
}
