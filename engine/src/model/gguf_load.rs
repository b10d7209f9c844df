//! Loading a model from a GGUF file (`gguf::GgufFile`): the model configuration
//! read from `{arch}.*` and `tokenizer.ggml.*` keys, and weight loading that
//! dequantizes every tensor to f32 under its Hugging Face name and layout
//! (including the inverse of llama.cpp's Q/K row permutation for arch `llama`), or
//! keeps the 2-D weights as the file stores them (block-quantized, 16-bit floats).
//! Owns the mapping from the GGUF format to the model's tensors. Must not parse the
//! file itself (`gguf` does) or build the model.

use rayon::prelude::*;

use super::config::{Arch, ModelConfig};
use super::qwen3::Weight;
use super::tensor::{Tensor, TensorMap};
use crate::error::{EngineError, Result};
use crate::gguf::{
    GgmlType, GgufFile, TensorInfo, dequantize, hf_name, qk_kind, repack_q4_k, repack_q6_k, unpermute_rows, unsupported,
};
use crate::kernels::{HalfMatrix, QuantKind, QuantMatrix};

impl GgufFile {
    /// One tensor dequantized to f32, by GGUF name, with its HF-order shape
    /// (dims reversed) and no renaming or permutation.
    pub fn dequantize_raw(&self, name: &str) -> Result<Tensor> {
        let info = self.tensor_info(name).ok_or_else(|| EngineError::MissingTensor(name.to_string()))?;
        self.decode(info)
    }

    fn decode(&self, info: &TensorInfo) -> Result<Tensor> {
        if !info.ty.is_supported() {
            return Err(unsupported(info));
        }
        let bytes = self.tensor_bytes(info)?;
        let data = dequantize(info.ty, bytes, info.numel())
            .ok_or_else(|| EngineError::Gguf(format!("tensor {:?}: data size does not match its shape", info.name)))?;
        self.release(info);
        Ok(Tensor::new(info.hf_shape(), data))
    }

    /// The model configuration from `{arch}.*` and `tokenizer.ggml.*` keys.
    pub fn model_config(&self) -> Result<ModelConfig> {
        let arch_name = self.architecture()?;
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "qwen3" => Arch::Qwen3,
            other => {
                return Err(EngineError::Config(format!(
                    "unsupported GGUF general.architecture {other:?}; supported: llama, qwen3"
                )));
            }
        };
        let k = |s: &str| format!("{arch_name}.{s}");
        let usize_of = |key: String| -> Result<usize> {
            let v = self.require_u64(&key)?;
            usize::try_from(v).map_err(|_| EngineError::Gguf(format!("{key} = {v} is too large")))
        };
        let hidden_size = usize_of(k("embedding_length"))?;
        let num_attention_heads = usize_of(k("attention.head_count"))?;
        let num_key_value_heads = match self.get_u64(&k("attention.head_count_kv"))? {
            Some(v) => v as usize,
            None => num_attention_heads,
        };
        let head_dim = match self.get_u64(&k("attention.key_length"))? {
            Some(v) => v as usize,
            None if num_attention_heads > 0 => hidden_size / num_attention_heads,
            None => 0,
        };
        if let Some(v) = self.get_u64(&k("attention.value_length"))?
            && v as usize != head_dim
        {
            return Err(EngineError::Config(format!(
                "attention.value_length {v} differs from key_length {head_dim}: unsupported"
            )));
        }
        if let Some(rot) = self.get_u64(&k("rope.dimension_count"))?
            && rot as usize != head_dim
        {
            return Err(EngineError::Config(format!(
                "partial rotary embedding (rope.dimension_count {rot} < head_dim {head_dim}) is unsupported"
            )));
        }
        if let Some(s) = self.get_str(&k("rope.scaling.type"))?
            && s != "none"
        {
            return Err(EngineError::Config(format!("RoPE scaling {s:?} is unsupported")));
        }
        let tokens = self.get_array("tokenizer.ggml.tokens")?;
        let vocab_size = match self.get_u64(&k("vocab_size"))? {
            Some(v) => v as usize,
            None => match (tokens, self.tensor_info("token_embd.weight")) {
                (Some(t), _) => t.len(),
                (None, Some(t)) if t.dims.len() == 2 => t.dims[1],
                _ => {
                    return Err(EngineError::Gguf(format!(
                        "cannot tell the vocabulary size: no {}, tokenizer.ggml.tokens or token_embd.weight",
                        k("vocab_size")
                    )));
                }
            },
        };
        let bos_token_id = self.token_id("tokenizer.ggml.bos_token_id")?;
        let mut eos_token_ids = Vec::new();
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            if let Some(id) = self.token_id(key)? {
                eos_token_ids.push(id);
            }
        }
        if arch == Arch::Qwen3
            && let Some(tokens) = tokens
        {
            for special in ["<|im_end|>", "<|endoftext|>"] {
                if let Some(id) = tokens.iter().position(|t| t.as_str() == Some(special)) {
                    eos_token_ids.push(id as u32);
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        eos_token_ids.retain(|id| seen.insert(*id));
        let cfg = ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: usize_of(k("feed_forward_length"))?,
            num_hidden_layers: usize_of(k("block_count"))?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rope_theta: self.get_f64(&k("rope.freq_base"))?.unwrap_or(10_000.0) as f32,
            rms_norm_eps: self.get_f64(&k("attention.layer_norm_rms_epsilon"))?.ok_or_else(|| {
                EngineError::Gguf(format!("missing metadata key {}", k("attention.layer_norm_rms_epsilon")))
            })? as f32,
            max_position_embeddings: usize_of(k("context_length"))?,
            tie_word_embeddings: self.tensor_info("output.weight").is_none(),
            bos_token_id,
            eos_token_ids,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn token_id(&self, key: &str) -> Result<Option<u32>> {
        match self.get_u64(key)? {
            None => Ok(None),
            Some(v) => {
                u32::try_from(v).map(Some).map_err(|_| EngineError::Gguf(format!("{key} = {v} is not a token id")))
            }
        }
    }

    /// Every tensor dequantized to f32 under its Hugging Face name (unmapped
    /// names are kept as they are), shaped `[out, in]`; for arch llama the
    /// Q/K projections are un-permuted back to HF row order. Tensors decode in
    /// parallel.
    pub fn load_tensors(&self, cfg: &ModelConfig) -> Result<TensorMap> {
        self.load_tensors_except(cfg, &|_| false)
    }

    /// As [`GgufFile::load_tensors`], but a tensor whose Hugging Face name
    /// `defer` accepts is not decoded: it comes back with its shape and no data
    /// (`Tensor::deferred`), for a caller that supplies its weights another way
    /// (the loader gives quantized layers their `QuantMatrix`, so the model is
    /// never held in f32 as well).
    pub fn load_tensors_except(&self, cfg: &ModelConfig, defer: &(dyn Fn(&str) -> bool + Sync)) -> Result<TensorMap> {
        if let Some(bad) = self.tensors().iter().find(|t| !t.ty.is_supported()) {
            return Err(unsupported(bad));
        }
        let loaded = self
            .tensors()
            .par_iter()
            .map(|info| {
                let name = hf_name(&info.name).unwrap_or_else(|| info.name.clone());
                if defer(&name) {
                    return Ok((name, Tensor::deferred(info.hf_shape())));
                }
                let mut t = self.decode(info)?;
                if cfg.arch == Arch::Llama
                    && let Some(is_q) = qk_kind(&info.name)
                {
                    let n_head = if is_q { cfg.num_attention_heads } else { cfg.num_key_value_heads };
                    let rows = t.shape[0];
                    let cols = t.shape[1..].iter().product();
                    t.data = unpermute_rows(&t.data, rows, cols, n_head).ok_or_else(|| EngineError::Shape {
                        name: info.name.clone(),
                        expected: vec![n_head * cfg.head_dim, cfg.hidden_size],
                        found: t.shape.clone(),
                    })?;
                }
                Ok((name, t))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(loaded.into_iter().collect())
    }
}

impl GgufFile {
    /// The block-quantized (Q4_0, Q4_1, Q5_0, Q8_0; Q4_K and Q6_K repacked per 32) 2-D weights, by Hugging Face name, with
    /// llama Q/K rows un-permuted exactly as `load_tensors` does, so that each
    /// dequantizes to the same f32 tensor. Other tensors are not included.
    pub fn quantized_weights(&self, cfg: &ModelConfig) -> Result<Vec<(String, QuantMatrix)>> {
        let stored = self.stored_weights_of(cfg, false)?;
        Ok(stored
            .into_iter()
            .filter_map(|(name, w)| match w {
                Weight::Quant(q) => Some((name, q)),
                Weight::Half(_) | Weight::F32(_) => None,
            })
            .collect())
    }

    /// The 2-D weights a model keeps as the file stores them: block-quantized
    /// (Q4_0, Q4_1, Q5_0, Q8_0; Q4_K and Q6_K repacked per 32) and 16-bit float (F16, BF16) ones, by Hugging Face name,
    /// llama Q/K rows un-permuted as `load_tensors` does (each decodes to the
    /// same f32 tensor).
    pub fn stored_weights(&self, cfg: &ModelConfig) -> Result<Vec<(String, Weight)>> {
        self.stored_weights_of(cfg, true)
    }

    fn stored_weights_of(&self, cfg: &ModelConfig, with_half: bool) -> Result<Vec<(String, Weight)>> {
        let mut out = Vec::new();
        for info in self.tensors() {
            let kind = match info.ty {
                GgmlType::Q4_0 => Some(QuantKind::Q4_0),
                GgmlType::Q4_1 => Some(QuantKind::Q4_1),
                GgmlType::Q5_0 => Some(QuantKind::Q5_0),
                GgmlType::Q4K => Some(QuantKind::Q4K),
                GgmlType::Q6K => Some(QuantKind::Q6K),
                GgmlType::Q8_0 => Some(QuantKind::Q8_0),
                GgmlType::F16 | GgmlType::Bf16 if with_half => None,
                _ => continue,
            };
            if info.dims.len() != 2 {
                continue;
            }
            let (cols, rows) = (info.dims[0], info.dims[1]);
            let mut bytes = self.tensor_bytes(info)?.to_vec();
            self.release(info);
            // k-quant super-blocks of 256 into the kernels' blocks of 32 (exact).
            type Repack = fn(&[u8]) -> Option<Vec<u8>>;
            let repack: Option<Repack> = match info.ty {
                GgmlType::Q4K => Some(repack_q4_k),
                GgmlType::Q6K => Some(repack_q6_k),
                _ => None,
            };
            if let Some(repack) = repack {
                bytes = repack(&bytes).ok_or_else(|| {
                    EngineError::Gguf(format!("{}: not whole {} super-blocks", info.name, info.ty.name()))
                })?;
            }
            if cfg.arch == Arch::Llama
                && let Some(is_q) = qk_kind(&info.name)
            {
                let n_head = if is_q { cfg.num_attention_heads } else { cfg.num_key_value_heads };
                let row_bytes = bytes.len() / rows.max(1);
                bytes = unpermute_rows(&bytes, rows, row_bytes, n_head).ok_or_else(|| {
                    EngineError::Gguf(format!("{}: rows do not split into {n_head} heads", info.name))
                })?;
            }
            let name = hf_name(&info.name).unwrap_or_else(|| info.name.clone());
            let w = match kind {
                Some(kind) => Weight::Quant(QuantMatrix::new(kind, rows, cols, bytes).ok_or_else(|| {
                    EngineError::Gguf(format!("{}: {cols} columns are not whole 32-value blocks", info.name))
                })?),
                None => Weight::Half(
                    HalfMatrix::from_le_bytes(rows, cols, &bytes, info.ty == GgmlType::Bf16)
                        .ok_or_else(|| EngineError::Gguf(format!("{}: size does not match its shape", info.name)))?,
                ),
            };
            out.push((name, w));
        }
        Ok(out)
    }
}
