//! Unit tests of the GGUF reader on tiny files built with `writer::GgufWriter`:
//! metadata of every value type, each supported tensor type with known values,
//! corrupt and truncated files, unsupported types, config and HF renaming.

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
        .meta(
            "arr",
            MetaValue::Array(vec![
                MetaValue::String("a".into()),
                MetaValue::String("".into()),
            ]),
        )
        .meta(
            "nested",
            MetaValue::Array(vec![MetaValue::Array(vec![
                MetaValue::I32(1),
                MetaValue::I32(2),
            ])]),
        )
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
        assert_eq!(
            g.get_u64("i32").unwrap_err().to_string().contains("i32"),
            true
        );
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
    let bytes = vals
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    cases.push((1, "F16", bytes, vals.clone()));
    let bytes = vals
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect();
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
    let blocks = [
        (0x3400u16, 0.25f32, 0xBC00u16, -1.0f32),
        (0x3C00, 1.0, 0x3800, 0.5),
    ];
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
    assert!(
        msg.contains("Q6_K") && msg.contains("blk.0.ffn_down.weight"),
        "{msg}"
    );
    let e = g
        .dequantize_raw("blk.0.odd.weight")
        .unwrap_err()
        .to_string();
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
    let last = GgufFile::from_bytes(full.clone())
        .unwrap()
        .tensors()
        .last()
        .cloned()
        .unwrap();
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
    let mut b = GgufWriter::new()
        .tensor("t", &[4], 0, vec![0; 16])
        .to_bytes(3);
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
    w.tensor("t", &[1], 0, vec![0; 4])
        .tensor("t", &[1], 0, vec![0; 4]);
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
    assert!(
        GgufFile::open(&path)
            .unwrap_err()
            .to_string()
            .contains("empty file")
    );
    std::fs::remove_dir_all(&dir).ok();
    let e = GgufFile::open(dir.join("nope.gguf")).unwrap_err();
    assert!(matches!(e, EngineError::Io { .. }), "{e:?}");
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A one-layer model: hidden 8, 2 heads of 4, 1 KV head, ffn 4, vocab 6. The
/// HF q/k matrices have row r = [r, r, ...]; the file stores them as the
/// converter does (permuted for llama, as is for qwen3).
fn tiny_model(arch: &str, with_output: bool) -> GgufFile {
    let (hidden, heads, kv, hd, ffn, vocab) = (8usize, 2usize, 1usize, 4usize, 4usize, 6usize);
    let mut w = GgufWriter::new();
    let a = |s: &str| format!("{arch}.{s}");
    w.meta("general.architecture", MetaValue::String(arch.into()))
        .meta(&a("block_count"), MetaValue::U32(1))
        .meta(&a("context_length"), MetaValue::U32(128))
        .meta(&a("embedding_length"), MetaValue::U32(hidden as u32))
        .meta(&a("feed_forward_length"), MetaValue::U32(ffn as u32))
        .meta(&a("attention.head_count"), MetaValue::U32(heads as u32))
        .meta(&a("attention.head_count_kv"), MetaValue::U32(kv as u32))
        .meta(&a("rope.freq_base"), MetaValue::F32(1e6))
        .meta(&a("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6))
        .meta("tokenizer.ggml.bos_token_id", MetaValue::U32(1))
        .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(2))
        .meta(
            "tokenizer.ggml.tokens",
            MetaValue::Array(
                ["a", "<s>", "<|im_end|>", "b", "<|endoftext|>", "c"]
                    .iter()
                    .map(|s| MetaValue::String(s.to_string()))
                    .collect(),
            ),
        );
    if arch == "qwen3" {
        w.meta(&a("attention.key_length"), MetaValue::U32(hd as u32));
    }
    let permute = |rows: usize, n_head: usize| -> Vec<f32> {
        let hf: Vec<f32> = (0..rows).flat_map(|r| vec![r as f32; hidden]).collect();
        if arch != "llama" {
            return hf;
        }
        let half = rows / n_head / 2;
        let mut out = vec![0f32; hf.len()];
        for h in 0..n_head {
            for i in 0..half {
                for j in 0..2 {
                    let dst = (h * half + i) * 2 + j;
                    let src = (h * 2 + j) * half + i;
                    out[dst * hidden..(dst + 1) * hidden]
                        .copy_from_slice(&hf[src * hidden..(src + 1) * hidden]);
                }
            }
        }
        out
    };
    let fill = |n: usize, v: f32| f32_bytes(&vec![v; n]);
    w.tensor(
        "token_embd.weight",
        &[hidden, vocab],
        0,
        fill(hidden * vocab, 0.5),
    )
    .tensor("blk.0.attn_norm.weight", &[hidden], 0, fill(hidden, 1.0))
    .tensor(
        "blk.0.attn_q.weight",
        &[hidden, heads * hd],
        0,
        f32_bytes(&permute(heads * hd, heads)),
    )
    .tensor(
        "blk.0.attn_k.weight",
        &[hidden, kv * hd],
        0,
        f32_bytes(&permute(kv * hd, kv)),
    )
    .tensor(
        "blk.0.attn_v.weight",
        &[hidden, kv * hd],
        0,
        fill(hidden * kv * hd, 2.0),
    )
    .tensor(
        "blk.0.attn_output.weight",
        &[heads * hd, hidden],
        0,
        fill(hidden * heads * hd, 3.0),
    )
    .tensor(
        "blk.0.ffn_gate.weight",
        &[hidden, ffn],
        0,
        fill(hidden * ffn, 4.0),
    )
    .tensor(
        "blk.0.ffn_up.weight",
        &[hidden, ffn],
        0,
        fill(hidden * ffn, 5.0),
    )
    .tensor(
        "blk.0.ffn_down.weight",
        &[ffn, hidden],
        0,
        fill(hidden * ffn, 6.0),
    )
    .tensor("blk.0.ffn_norm.weight", &[hidden], 0, fill(hidden, 7.0))
    .tensor("output_norm.weight", &[hidden], 0, fill(hidden, 8.0));
    if arch == "qwen3" {
        w.tensor("blk.0.attn_q_norm.weight", &[hd], 0, fill(hd, 9.0))
            .tensor("blk.0.attn_k_norm.weight", &[hd], 0, fill(hd, 10.0));
    }
    if with_output {
        w.tensor(
            "output.weight",
            &[hidden, vocab],
            0,
            fill(hidden * vocab, 11.0),
        );
    }
    GgufFile::from_bytes(w.to_bytes(3)).unwrap()
}

fn rows_of(t: &Tensor) -> Vec<f32> {
    t.data.chunks(t.shape[1]).map(|r| r[0]).collect()
}

#[test]
fn llama_config_and_unpermuted_hf_tensors() {
    let g = tiny_model("llama", false);
    let cfg = g.model_config().unwrap();
    assert_eq!(cfg.arch, Arch::Llama);
    assert_eq!(
        (
            cfg.vocab_size,
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.num_hidden_layers
        ),
        (6, 8, 4, 1)
    );
    assert_eq!(
        (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim
        ),
        (2, 1, 4)
    );
    assert_eq!(
        (
            cfg.rope_theta,
            cfg.rms_norm_eps,
            cfg.max_position_embeddings
        ),
        (1e6, 1e-6, 128)
    );
    assert!(cfg.tie_word_embeddings);
    assert_eq!(
        (cfg.bos_token_id, cfg.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    let m = g.load_tensors(&cfg).unwrap();
    assert_eq!(m.len(), 11);
    let q = &m["model.layers.0.self_attn.q_proj.weight"];
    assert_eq!(q.shape, vec![8, 8]);
    assert_eq!(rows_of(q), (0..8).map(|r| r as f32).collect::<Vec<_>>());
    let k = &m["model.layers.0.self_attn.k_proj.weight"];
    assert_eq!(k.shape, vec![4, 8]);
    assert_eq!(rows_of(k), vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(m["model.embed_tokens.weight"].shape, vec![6, 8]);
    assert_eq!(m["model.layers.0.mlp.down_proj.weight"].shape, vec![8, 4]);
    assert_eq!(m["model.layers.0.mlp.gate_proj.weight"].shape, vec![4, 8]);
    for (name, v) in [
        ("model.layers.0.input_layernorm.weight", 1.0),
        ("model.layers.0.self_attn.v_proj.weight", 2.0),
        ("model.layers.0.self_attn.o_proj.weight", 3.0),
        ("model.layers.0.mlp.gate_proj.weight", 4.0),
        ("model.layers.0.mlp.up_proj.weight", 5.0),
        ("model.layers.0.mlp.down_proj.weight", 6.0),
        ("model.layers.0.post_attention_layernorm.weight", 7.0),
        ("model.norm.weight", 8.0),
    ] {
        assert!(m[name].data.iter().all(|&x| x == v), "{name}");
    }
}

#[test]
fn qwen3_config_keeps_row_order_and_adds_chat_eos() {
    let g = tiny_model("qwen3", true);
    let cfg = g.model_config().unwrap();
    assert_eq!(cfg.arch, Arch::Qwen3);
    assert!(!cfg.tie_word_embeddings);
    assert_eq!(cfg.eos_token_ids, vec![2, 4]);
    let m = g.load_tensors(&cfg).unwrap();
    assert_eq!(m.len(), 14);
    let q = &m["model.layers.0.self_attn.q_proj.weight"];
    assert_eq!(rows_of(q), (0..8).map(|r| r as f32).collect::<Vec<_>>());
    assert_eq!(
        m["model.layers.0.self_attn.q_norm.weight"].data,
        vec![9.0; 4]
    );
    assert_eq!(
        m["model.layers.0.self_attn.k_norm.weight"].data,
        vec![10.0; 4]
    );
    assert_eq!(m["lm_head.weight"].shape, vec![6, 8]);
}

#[test]
fn config_errors_name_the_key() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("mixtral".into()));
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    let e = g.model_config().unwrap_err().to_string();
    assert!(
        e.contains("mixtral") && e.contains("supported: llama, qwen3"),
        "{e}"
    );
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()));
    w.meta("llama.embedding_length", MetaValue::U32(8));
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    let e = g.model_config().unwrap_err().to_string();
    assert!(e.contains("llama.attention.head_count"), "{e}");
}

#[test]
fn load_reports_the_first_unsupported_tensor() {
    let g = tiny_model("llama", false);
    let cfg = g.model_config().unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.meta(k, v.clone());
    }
    for t in g.tensors() {
        w.tensor(&t.name, &t.dims, 0, g.tensor_bytes(t).unwrap().to_vec());
    }
    w.tensor("blk.0.extra.weight", &[256], 14, vec![0; 210]);
    let g = GgufFile::from_bytes(w.to_bytes(2)).unwrap();
    let e = g.load_tensors(&cfg).unwrap_err().to_string();
    assert_eq!(e, "tensor blk.0.extra.weight: unsupported tensor type Q6_K");
}
