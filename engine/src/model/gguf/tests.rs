//! Unit tests of the GGUF reader on tiny files built with `writer::GgufWriter`:
//! metadata of every value type, each supported tensor type with known values,
//! corrupt and truncated files, unsupported types (model-level tests are in
//! `tests_model.rs`).

use super::writer::GgufWriter;
use super::*;

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

/// (ggml type id, encoded bytes, expected values) for a [32, 2] tensor.
fn typed_cases() -> Vec<(u32, &'static str, Vec<u8>, Vec<f32>)> {
    let mut cases = Vec::new();
    let vals: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 7.0).collect();
    // F32
    let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    cases.push((0, "F32", bytes, vals.clone()));
    // F16 and BF16: these values are exact in both
    let bytes = vals.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
    cases.push((1, "F16", bytes, vals.clone()));
    let bytes = vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect();
    cases.push((30, "BF16", bytes, vals.clone()));
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
    cases.push((8, "Q8_0", bytes, want));
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
    cases.push((2, "Q4_0", bytes, want));
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
    cases.push((3, "Q4_1", bytes, want));
    cases
}

#[test]
fn dequantizes_each_supported_type() {
    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetaValue::U32(64));
    let cases = typed_cases();
    for (id, name, bytes, _) in &cases {
        w.tensor(&format!("t.{name}"), &[32, 2], *id, bytes.clone());
    }
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    for (_, name, _, want) in &cases {
        let info = g.tensor_info(&format!("t.{name}")).unwrap();
        assert_eq!(info.ty.name(), *name);
        assert_eq!(info.offset % 64, 0);
        let t = g.dequantize_raw(&format!("t.{name}")).unwrap();
        assert_eq!(t.shape, vec![2, 32], "{name}");
        assert_eq!(&t.data, want, "{name}");
    }
}

#[test]
fn unsupported_type_is_named_with_its_tensor() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()));
    w.tensor("blk.0.ffn_down.weight", &[256, 1], 14, vec![0u8; 210]);
    w.tensor("blk.0.odd.weight", &[4], 99, vec![0u8; 16]);
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    let e = g.dequantize_raw("blk.0.ffn_down.weight").unwrap_err();
    match &e {
        EngineError::UnsupportedTensorType { name, ty } => {
            assert_eq!(name, "blk.0.ffn_down.weight");
            assert_eq!(ty, "Q6_K");
        }
        other => panic!("wrong error {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("Q6_K") && msg.contains("blk.0.ffn_down.weight"), "{msg}");
    let e = g.dequantize_raw("blk.0.odd.weight").unwrap_err().to_string();
    assert!(e.contains("unknown ggml type id 99"), "{e}");
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let mut w = all_value_types();
    for (id, name, bytes, _) in typed_cases() {
        w.tensor(name, &[32, 2], id, bytes);
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
