//! GGUF model files: a memory-mapped reader (`GgufFile`) with typed metadata,
//! the model configuration read from `{arch}.*` keys, and weight loading that
//! dequantizes every tensor to f32 under its Hugging Face name and layout
//! (including the inverse of llama.cpp's Q/K row permutation for arch `llama`).
//! Owns the GGUF format only: it does not build models, tokenizers (see
//! `tokenizer`) or kernels, and it never trusts a length read from the file.

mod convert;
mod dequant;
mod meta;
mod names;
mod parse;
pub mod writer;

pub use convert::{Dequantized, OutDtype};
pub use dequant::{GgmlType, dequantize, repack_q4_k, repack_q6_k};
pub use meta::MetaValue;
pub use names::{hf_name, unpermute_rows};

use crate::error::{EngineError, Result};
use crate::kernels::cpu::half::HalfMatrix;
use crate::kernels::cpu::quant::{QuantKind, QuantMatrix};
use crate::model::config::{Arch, ModelConfig};
use crate::model::qwen3::Weight;
use crate::model::tensor::{Tensor, TensorMap};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::Path;

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF (ggml `ne`) order: the fastest-varying dimension first.
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Size of the data; `None` only for an unknown type id.
    pub n_bytes: Option<u64>,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// Hugging Face (row-major) shape: `dims` reversed.
    pub fn hf_shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }
}

enum Bytes {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mmap(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// An open GGUF file: parsed header plus the mapped bytes.
pub struct GgufFile {
    bytes: Bytes,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, MetaValue)>,
    array_types: Vec<Option<u32>>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| EngineError::io(path, e))?;
        let len = file.metadata().map_err(|e| EngineError::io(path, e))?.len();
        if len == 0 {
            return Err(EngineError::Gguf(format!("{}: empty file", path.display())));
        }
        // SAFETY: the map is read-only; the file must not be truncated while we
        // hold it (the same contract every mmap-based model loader has).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| EngineError::io(path, e))?;
        Self::from_storage(Bytes::Mmap(map)).map_err(|e| EngineError::Gguf(format!("{}: {}", path.display(), strip(e))))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_storage(Bytes::Owned(bytes))
    }

    fn from_storage(bytes: Bytes) -> Result<Self> {
        let h = parse::parse(&bytes)?;
        let mut meta_index = HashMap::with_capacity(h.metadata.len());
        for (i, (k, _)) in h.metadata.iter().enumerate() {
            if meta_index.insert(k.clone(), i).is_some() {
                return Err(EngineError::Gguf(format!("duplicate metadata key {k:?}")));
            }
        }
        let tensor_index = h.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile {
            bytes,
            version: h.version,
            alignment: h.alignment,
            data_offset: h.data_offset,
            metadata: h.metadata,
            array_types: h.array_types,
            meta_index,
            tensors: h.tensors,
            tensor_index,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// For an array value, the element type id (`gguf_type`) the file gives it,
    /// which an empty array carries nowhere else; `None` for other values.
    pub fn array_elem_type(&self, key: &str) -> Option<u32> {
        self.meta_index.get(key).and_then(|&i| self.array_types[i])
    }

    /// A string value; `Ok(None)` if absent, an error if present with another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", MetaValue::as_str)
    }

    /// A non-negative integer value of any integer type.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", MetaValue::as_u64)
    }

    /// A float (or integer) value.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "a number", MetaValue::as_f64)
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", MetaValue::as_bool)
    }

    /// An array value (elements of any one type).
    pub fn get_array(&self, key: &str) -> Result<Option<&[MetaValue]>> {
        self.typed(key, "an array", MetaValue::as_array)
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        let Some(items) = self.get_array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|v| v.as_str().ok_or_else(|| bad_type(key, "an array of strings", v)))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// An array of integers (e.g. `tokenizer.ggml.token_type`).
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(items) = self.get_array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|v| v.as_i64().ok_or_else(|| bad_type(key, "an array of integers", v)))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    fn typed<'a, T>(&'a self, key: &str, what: &str, f: impl Fn(&'a MetaValue) -> Option<T>) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| bad_type(key, what, v)),
        }
    }

    fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key)?.ok_or_else(|| EngineError::Gguf(format!("missing metadata key {key}")))
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")?
            .ok_or_else(|| EngineError::Gguf("missing metadata key general.architecture".into()))
    }

    /// Tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw (encoded) bytes of a tensor.
    pub fn tensor_bytes(&self, info: &TensorInfo) -> Result<&[u8]> {
        let n = info.n_bytes.ok_or_else(|| unsupported(info))?;
        // parse() checked offset + n_bytes against the file length.
        let start = info.offset as usize;
        self.bytes
            .get(start..start + n as usize)
            .ok_or_else(|| EngineError::Gguf(format!("tensor {:?} lies outside the file", info.name)))
    }

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

    /// Drops a copied tensor's mapped pages from this process's resident set, so
    /// that loading never holds the file and its decoded copy at once (the peak
    /// RSS a comparison reports). Only a hint: errors are ignored.
    fn release(&self, info: &TensorInfo) {
        let (Bytes::Mmap(map), Some(len)) = (&self.bytes, info.n_bytes) else { return };
        // SAFETY: the mapping is read-only and file-backed: MADV_DONTNEED only
        // unmaps its pages from this process, and a later read faults the same
        // file bytes back in, so no live reference (the tokenizer's strings, a
        // tensor decoding in parallel on a shared page) sees a change.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, info.offset as usize, len as usize)
        };
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
        if let Some(bad) = self.tensors.iter().find(|t| !t.ty.is_supported()) {
            return Err(unsupported(bad));
        }
        let loaded = self
            .tensors
            .par_iter()
            .map(|info| {
                let name = hf_name(&info.name).unwrap_or_else(|| info.name.clone());
                if defer(&name) {
                    return Ok((name, Tensor::deferred(info.hf_shape())));
                }
                let mut t = self.decode(info)?;
                if cfg.arch == Arch::Llama
                    && let Some(is_q) = names::qk_kind(&info.name)
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
        for info in &self.tensors {
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
                && let Some(is_q) = names::qk_kind(&info.name)
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

fn bad_type(key: &str, what: &str, v: &MetaValue) -> EngineError {
    EngineError::Gguf(format!("metadata key {key} should be {what}, found value type {}", v.type_id()))
}

fn unsupported(info: &TensorInfo) -> EngineError {
    EngineError::UnsupportedTensorType { name: info.name.clone(), ty: info.ty.name() }
}

/// The message of a Gguf error without its prefix, to re-wrap it with a path.
fn strip(e: EngineError) -> String {
    match e {
        EngineError::Gguf(m) => m,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_model;
