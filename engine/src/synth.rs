//! `engine synth`: writes a deterministic random-weight model directory
//! (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) of a
//! chosen shape. Tests and CI use it for fast end-to-end runs; it says nothing
//! about correctness on real text, which only the real model can show.
//!
//! Weights are drawn from Xoshiro256++ seeded with `seed` (a documented,
//! portable generator), uniform in ±sqrt(3 / fan_in) so activations stay O(1);
//! norm weights are 1 ± 0.1. Stored as BF16 unless asked otherwise.

use crate::error::{EngineError, Result};
use crate::model::{Arch, ModelConfig};
use crate::tokenizer;
use half::{bf16, f16};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use safetensors::{Dtype, tensor::TensorView};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthDtype {
    F32,
    F16,
    Bf16,
}

impl std::str::FromStr for SynthDtype {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(SynthDtype::F32),
            "f16" => Ok(SynthDtype::F16),
            "bf16" => Ok(SynthDtype::Bf16),
            o => Err(EngineError::Config(format!("unknown dtype {o:?}; expected f32, f16 or bf16"))),
        }
    }
}

/// Which tokenizer the synthetic model ships with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SynthTokenizer {
    /// A copy of a real tokenizer directory (tokenizer.json + tokenizer_config.json).
    CopyFrom(PathBuf),
    /// The small built-in byte-level tokenizer.
    ByteLevel,
}

#[derive(Debug, Clone)]
pub struct SynthSpec {
    pub arch: Arch,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    pub rope_theta: f32,
    pub seed: u64,
    pub dtype: SynthDtype,
    pub tokenizer: SynthTokenizer,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            arch: Arch::Qwen3,
            hidden_size: 256,
            intermediate_size: 512,
            num_hidden_layers: 4,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 64,
            max_position_embeddings: 4096,
            rope_theta: 1_000_000.0,
            seed: 0,
            dtype: SynthDtype::Bf16,
            tokenizer: SynthTokenizer::ByteLevel,
        }
    }
}

/// A tensor ready for safetensors: name, shape, little-endian bytes.
type EncodedTensor = (String, Vec<usize>, Vec<u8>);

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| EngineError::io(path, e))
}

/// Writes the model directory and returns its config.
pub fn write_model(spec: &SynthSpec, out: &Path) -> Result<ModelConfig> {
    std::fs::create_dir_all(out).map_err(|e| EngineError::io(out, e))?;
    // Tokenizer first: the vocabulary size follows from it.
    let (tok_json, tok_cfg) = match &spec.tokenizer {
        SynthTokenizer::CopyFrom(dir) => {
            let read = |name: &str| {
                let p = dir.join(name);
                std::fs::read_to_string(&p).map_err(|e| EngineError::io(p, e))
            };
            (read("tokenizer.json")?, read("tokenizer_config.json")?)
        }
        SynthTokenizer::ByteLevel => tokenizer::synthetic_tokenizer_files(),
    };
    write_file(&out.join("tokenizer.json"), &tok_json)?;
    write_file(&out.join("tokenizer_config.json"), &tok_cfg)?;
    let tok =
        tokenizer::Tokenizer::from_hf_files(&out.join("tokenizer.json"), Some(&out.join("tokenizer_config.json")))?;
    // Round up to a multiple of 64, as real checkpoints pad their embeddings.
    let vocab_size = tok.vocab_size().div_ceil(64) * 64;
    let eos: Vec<u32> = tok.eos_token_ids().to_vec();

    let config = ModelConfig {
        arch: spec.arch,
        vocab_size,
        hidden_size: spec.hidden_size,
        intermediate_size: spec.intermediate_size,
        num_hidden_layers: spec.num_hidden_layers,
        num_attention_heads: spec.num_attention_heads,
        num_key_value_heads: spec.num_key_value_heads,
        head_dim: spec.head_dim,
        rope_theta: spec.rope_theta,
        rms_norm_eps: 1e-6,
        max_position_embeddings: spec.max_position_embeddings,
        tie_word_embeddings: true,
        bos_token_id: None,
        eos_token_ids: eos.clone(),
    };
    config.validate()?;
    let hf_config = serde_json::json!({
        "architectures": [match spec.arch { Arch::Qwen3 => "Qwen3ForCausalLM", Arch::Llama => "LlamaForCausalLM" }],
        "model_type": match spec.arch { Arch::Qwen3 => "qwen3", Arch::Llama => "llama" },
        "vocab_size": vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": true,
        "eos_token_id": eos,
        "torch_dtype": match spec.dtype { SynthDtype::F32 => "float32", SynthDtype::F16 => "float16", SynthDtype::Bf16 => "bfloat16" },
        "synthetic": {"seed": spec.seed, "generator": "xoshiro256++", "note": "random weights from `engine synth`"}
    });
    write_file(&out.join("config.json"), &serde_json::to_string_pretty(&hf_config).unwrap_or_default())?;

    let mut rng = Xoshiro256PlusPlus::seed_from_u64(spec.seed);
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let mut uniform = |shape: Vec<usize>, fan_in: usize| {
        let a = (3.0 / fan_in as f64).sqrt() as f32;
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * a).collect();
        (shape, data)
    };
    let h = spec.hidden_size;
    let (q_dim, kv_dim) = (config.q_dim(), config.kv_dim());
    let mut push = |name: String, (shape, data): (Vec<usize>, Vec<f32>)| tensors.push((name, shape, data));
    push("model.embed_tokens.weight".into(), uniform(vec![vocab_size, h], 3));
    for i in 0..spec.num_hidden_layers {
        let p = format!("model.layers.{i}");
        push(format!("{p}.self_attn.q_proj.weight"), uniform(vec![q_dim, h], h));
        push(format!("{p}.self_attn.k_proj.weight"), uniform(vec![kv_dim, h], h));
        push(format!("{p}.self_attn.v_proj.weight"), uniform(vec![kv_dim, h], h));
        push(format!("{p}.self_attn.o_proj.weight"), uniform(vec![h, q_dim], q_dim));
        push(format!("{p}.mlp.gate_proj.weight"), uniform(vec![spec.intermediate_size, h], h));
        push(format!("{p}.mlp.up_proj.weight"), uniform(vec![spec.intermediate_size, h], h));
        push(format!("{p}.mlp.down_proj.weight"), uniform(vec![h, spec.intermediate_size], spec.intermediate_size));
        let (s, d) = uniform(vec![h], 300);
        push(format!("{p}.input_layernorm.weight"), (s, d.iter().map(|v| 1.0 + v).collect()));
        let (s, d) = uniform(vec![h], 300);
        push(format!("{p}.post_attention_layernorm.weight"), (s, d.iter().map(|v| 1.0 + v).collect()));
        if spec.arch.has_qk_norm() {
            let (s, d) = uniform(vec![spec.head_dim], 300);
            push(format!("{p}.self_attn.q_norm.weight"), (s, d.iter().map(|v| 1.0 + v).collect()));
            let (s, d) = uniform(vec![spec.head_dim], 300);
            push(format!("{p}.self_attn.k_norm.weight"), (s, d.iter().map(|v| 1.0 + v).collect()));
        }
    }
    let (s, d) = uniform(vec![h], 300);
    push("model.norm.weight".into(), (s, d.iter().map(|v| 1.0 + v).collect()));

    let (dtype, encoded): (Dtype, Vec<EncodedTensor>) = match spec.dtype {
        SynthDtype::F32 => (
            Dtype::F32,
            tensors.into_iter().map(|(n, s, d)| (n, s, d.iter().flat_map(|v| v.to_le_bytes()).collect())).collect(),
        ),
        SynthDtype::F16 => (
            Dtype::F16,
            tensors
                .into_iter()
                .map(|(n, s, d)| (n, s, d.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect()))
                .collect(),
        ),
        SynthDtype::Bf16 => (
            Dtype::BF16,
            tensors
                .into_iter()
                .map(|(n, s, d)| (n, s, d.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect()))
                .collect(),
        ),
    };
    let views = encoded
        .iter()
        .map(|(n, s, bytes)| {
            TensorView::new(dtype, s.clone(), bytes)
                .map(|v| (n.clone(), v))
                .map_err(|e| EngineError::Safetensors(format!("{n}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let path = out.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &path)
        .map_err(|e| EngineError::Safetensors(format!("{}: {e}", path.display())))?;
    Ok(config)
}
