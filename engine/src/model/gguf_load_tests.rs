//! Unit tests of the model-level GGUF API on a tiny one-layer model built with
//! `writer::GgufWriter`: `model_config` from `{arch}.*` keys, HF renaming, the
//! llama Q/K un-permutation (and its absence for qwen3), and load errors.

use super::config::Arch;
use super::tensor::Tensor;
use crate::gguf::writer::GgufWriter;
use crate::gguf::*;

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
                    out[dst * hidden..(dst + 1) * hidden].copy_from_slice(&hf[src * hidden..(src + 1) * hidden]);
                }
            }
        }
        out
    };
    let fill = |n: usize, v: f32| f32_bytes(&vec![v; n]);
    w.tensor("token_embd.weight", &[hidden, vocab], 0, fill(hidden * vocab, 0.5))
        .tensor("blk.0.attn_norm.weight", &[hidden], 0, fill(hidden, 1.0))
        .tensor("blk.0.attn_q.weight", &[hidden, heads * hd], 0, f32_bytes(&permute(heads * hd, heads)))
        .tensor("blk.0.attn_k.weight", &[hidden, kv * hd], 0, f32_bytes(&permute(kv * hd, kv)))
        .tensor("blk.0.attn_v.weight", &[hidden, kv * hd], 0, fill(hidden * kv * hd, 2.0))
        .tensor("blk.0.attn_output.weight", &[heads * hd, hidden], 0, fill(hidden * heads * hd, 3.0))
        .tensor("blk.0.ffn_gate.weight", &[hidden, ffn], 0, fill(hidden * ffn, 4.0))
        .tensor("blk.0.ffn_up.weight", &[hidden, ffn], 0, fill(hidden * ffn, 5.0))
        .tensor("blk.0.ffn_down.weight", &[ffn, hidden], 0, fill(hidden * ffn, 6.0))
        .tensor("blk.0.ffn_norm.weight", &[hidden], 0, fill(hidden, 7.0))
        .tensor("output_norm.weight", &[hidden], 0, fill(hidden, 8.0));
    if arch == "qwen3" {
        w.tensor("blk.0.attn_q_norm.weight", &[hd], 0, fill(hd, 9.0)).tensor(
            "blk.0.attn_k_norm.weight",
            &[hd],
            0,
            fill(hd, 10.0),
        );
    }
    if with_output {
        w.tensor("output.weight", &[hidden, vocab], 0, fill(hidden * vocab, 11.0));
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
    assert_eq!((cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers), (6, 8, 4, 1));
    assert_eq!((cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim), (2, 1, 4));
    assert_eq!((cfg.rope_theta, cfg.rms_norm_eps, cfg.max_position_embeddings), (1e6, 1e-6, 128));
    assert!(cfg.tie_word_embeddings);
    assert_eq!((cfg.bos_token_id, cfg.eos_token_ids.clone()), (Some(1), vec![2]));
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
    assert_eq!(m["model.layers.0.self_attn.q_norm.weight"].data, vec![9.0; 4]);
    assert_eq!(m["model.layers.0.self_attn.k_norm.weight"].data, vec![10.0; 4]);
    assert_eq!(m["lm_head.weight"].shape, vec![6, 8]);
}

#[test]
fn config_errors_name_the_key() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("mixtral".into()));
    let g = GgufFile::from_bytes(w.to_bytes(3)).unwrap();
    let e = g.model_config().unwrap_err().to_string();
    assert!(e.contains("mixtral") && e.contains("supported: llama, qwen3"), "{e}");
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
    w.tensor("blk.0.extra.weight", &[256], 16, vec![0; 66]);
    let g = GgufFile::from_bytes(w.to_bytes(2)).unwrap();
    let e = g.load_tensors(&cfg).unwrap_err().to_string();
    assert_eq!(e, "tensor blk.0.extra.weight: unsupported tensor type IQ2_XXS");
}

#[test]
fn deferred_tensors_keep_their_shape_and_a_model_missing_their_values_is_refused() {
    let g = tiny_model("llama", false);
    let cfg = g.model_config().unwrap();
    let defer = |n: &str| n == "model.layers.0.mlp.up_proj.weight";
    let m = g.load_tensors_except(&cfg, &defer).unwrap();
    let up = &m["model.layers.0.mlp.up_proj.weight"];
    assert_eq!((up.shape.clone(), up.data.len()), (vec![4, 8], 0));
    // Everything else is decoded as by load_tensors.
    let full = g.load_tensors(&cfg).unwrap();
    assert!(m.iter().all(|(k, t)| defer(k) || *t == full[k]));
    // A model built from it loads (shapes check) but its weights do not: the
    // loader's check names the one with no values.
    let model = crate::model::Model::from_tensors(cfg.clone(), m).unwrap();
    let e = model.check_weights().unwrap_err().to_string();
    assert!(e.contains("model.layers.0.mlp.up_proj.weight"), "{e}");
    crate::model::Model::from_tensors(cfg, full).unwrap().check_weights().unwrap();
}
