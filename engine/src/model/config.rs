//! Model configuration: the shape and hyper-parameters of a dense decoder, read
//! from a Hugging Face `config.json` or from GGUF metadata (see `gguf.rs`), and
//! validated once so that the forward pass can trust it.

use crate::error::{EngineError, Result};
use serde::{Deserialize, Serialize};

/// The two supported architectures share one code path; Qwen3 adds per-head
/// RMSNorm on queries and keys (q_norm, k_norm) before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen3,
}

impl Arch {
    pub fn has_qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub rms_norm_eps: f32,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

/// The subset of a Hugging Face `config.json` that we read.
#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rope_theta: Option<f32>,
    rms_norm_eps: Option<f32>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<serde_json::Value>,
}

impl ModelConfig {
    /// Parses a Hugging Face `config.json` text.
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let hf: HfConfig = serde_json::from_str(text).map_err(|e| EngineError::Config(format!("config.json: {e}")))?;
        let model_type = hf.model_type.clone().unwrap_or_default();
        let arch = match model_type.as_str() {
            "qwen3" => Arch::Qwen3,
            "llama" => Arch::Llama,
            other => {
                let archs = hf.architectures.clone().unwrap_or_default().join(",");
                return Err(EngineError::Config(format!(
                    "unsupported model_type {other:?} (architectures {archs}); supported: qwen3, llama"
                )));
            }
        };
        if hf.num_attention_heads == 0 {
            return Err(EngineError::Config("num_attention_heads must be positive".into()));
        }
        let head_dim = hf.head_dim.unwrap_or(hf.hidden_size / hf.num_attention_heads);
        let eos_token_ids = match hf.eos_token_id {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Number(n)) => n
                .as_u64()
                .map(|v| vec![v as u32])
                .ok_or_else(|| EngineError::Config("eos_token_id must be a non-negative integer".into()))?,
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .map(|v| v as u32)
                        .ok_or_else(|| EngineError::Config("eos_token_id entries must be integers".into()))
                })
                .collect::<Result<Vec<_>>>()?,
            Some(other) => {
                return Err(EngineError::Config(format!("eos_token_id has unexpected value {other}")));
            }
        };
        let cfg = ModelConfig {
            arch,
            vocab_size: hf.vocab_size,
            hidden_size: hf.hidden_size,
            intermediate_size: hf.intermediate_size,
            num_hidden_layers: hf.num_hidden_layers,
            num_attention_heads: hf.num_attention_heads,
            num_key_value_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
            head_dim,
            rope_theta: hf.rope_theta.unwrap_or(10_000.0),
            rms_norm_eps: hf.rms_norm_eps.unwrap_or(1e-6),
            max_position_embeddings: hf.max_position_embeddings.unwrap_or(4096),
            tie_word_embeddings: hf.tie_word_embeddings.unwrap_or(false),
            bos_token_id: hf.bos_token_id,
            eos_token_ids,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks internal consistency; every loader calls it.
    pub fn validate(&self) -> Result<()> {
        let err = |m: String| Err(EngineError::Config(m));
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
        ] {
            if v == 0 {
                return err(format!("{name} must be positive"));
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return err(format!(
                "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return err(format!("head_dim ({}) must be even for RoPE", self.head_dim));
        }
        if !self.arch.has_qk_norm() && self.head_dim * self.num_attention_heads != self.hidden_size {
            return err(format!(
                "hidden_size ({}) != num_attention_heads ({}) x head_dim ({})",
                self.hidden_size, self.num_attention_heads, self.head_dim
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return err(format!("rope_theta must be positive, got {}", self.rope_theta));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return err(format!("rms_norm_eps must be positive, got {}", self.rms_norm_eps));
        }
        if let Some(bos) = self.bos_token_id
            && bos as usize >= self.vocab_size
        {
            return err(format!("bos_token_id {bos} is outside the vocabulary"));
        }
        if let Some(eos) = self.eos_token_ids.iter().find(|&&e| e as usize >= self.vocab_size) {
            return err(format!("eos_token_id {eos} is outside the vocabulary"));
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    pub fn gqa_group(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN3_SMALL: &str = r#"{"model_type":"qwen3","vocab_size":1000,"hidden_size":256,
      "intermediate_size":512,"num_hidden_layers":4,"num_attention_heads":4,
      "num_key_value_heads":2,"head_dim":64,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "max_position_embeddings":2048,"tie_word_embeddings":true,"eos_token_id":[7,8]}"#;

    #[test]
    fn parses_qwen3_config() {
        let c = ModelConfig::from_hf_json(QWEN3_SMALL).unwrap();
        assert_eq!(c.arch, Arch::Qwen3);
        assert_eq!(c.gqa_group(), 2);
        assert_eq!(c.eos_token_ids, vec![7, 8]);
        assert!(c.tie_word_embeddings);
    }

    #[test]
    fn rejects_inconsistent_heads() {
        let bad = QWEN3_SMALL.replace("\"num_key_value_heads\":2", "\"num_key_value_heads\":3");
        let e = ModelConfig::from_hf_json(&bad).unwrap_err().to_string();
        assert!(e.contains("not a multiple of num_key_value_heads"), "{e}");
    }

    #[test]
    fn rejects_unknown_architecture() {
        let bad = QWEN3_SMALL.replace("qwen3", "mixtral");
        let e = ModelConfig::from_hf_json(&bad).unwrap_err().to_string();
        assert!(e.contains("unsupported model_type"), "{e}");
    }

    #[test]
    fn rejects_eos_outside_vocab() {
        let bad = QWEN3_SMALL.replace("[7,8]", "[7,1000]");
        let e = ModelConfig::from_hf_json(&bad).unwrap_err().to_string();
        assert!(e.contains("outside the vocabulary"), "{e}");
    }
}
