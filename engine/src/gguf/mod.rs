//! GGUF files: a memory-mapped reader (`GgufFile`) with typed metadata and raw
//! tensor bytes, the block formats' dequantization and repacking, the writer, and
//! the GGUF-to-Hugging-Face tensor names. Below both `model` (which loads weights
//! and its configuration from it: `model::gguf_load`) and `tokenizer` (which reads
//! its vocabulary). Owns the GGUF format only: it does not build models,
//! tokenizers or kernels, and it never trusts a length read from the file.

mod convert;
mod dequant;
mod meta;
mod names;
mod parse;
pub mod writer;

pub use convert::{Dequantized, OutDtype};
pub use dequant::{GgmlType, dequantize, repack_q4_k, repack_q6_k};
pub use meta::MetaValue;
pub use names::{hf_name, qk_kind, unpermute_rows};

use crate::error::{EngineError, Result};
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

    /// A required integer key (an error naming it when absent).
    pub fn require_u64(&self, key: &str) -> Result<u64> {
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

    /// Drops a copied tensor's mapped pages from this process's resident set, so
    /// that loading never holds the file and its decoded copy at once (the peak
    /// RSS a comparison reports). Only a hint: errors are ignored.
    pub fn release(&self, info: &TensorInfo) {
        let (Bytes::Mmap(map), Some(len)) = (&self.bytes, info.n_bytes) else { return };
        // SAFETY: the mapping is read-only and file-backed: MADV_DONTNEED only
        // unmaps its pages from this process, and a later read faults the same
        // file bytes back in, so no live reference (the tokenizer's strings, a
        // tensor decoding in parallel on a shared page) sees a change.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, info.offset as usize, len as usize)
        };
    }
}

/// The error of a metadata key whose value has another type.
pub fn bad_type(key: &str, what: &str, v: &MetaValue) -> EngineError {
    EngineError::Gguf(format!("metadata key {key} should be {what}, found value type {}", v.type_id()))
}

/// The error of a tensor whose block type the engine does not decode.
pub fn unsupported(info: &TensorInfo) -> EngineError {
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
