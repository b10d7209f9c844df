//! `engine dequantize`: a GGUF file rewritten with every tensor decoded to F32
//! (or F16, or BF16), so that another server (llama.cpp's) computes on exactly the
//! weights this engine's loader produces instead of on quantized blocks. Every
//! metadata key/value is copied unchanged and in order except
//! `general.file_type` (0 = ALL_F32, 1 = MOSTLY_F16, 32 = MOSTLY_BF16); tensors keep their GGUF
//! names, dims, order and layout (no HF renaming, no Q/K un-permutation); the
//! file keeps its version and `general.alignment`. Values come from `dequantize`,
//! the loader's own decoder, so an F32 file loads to bit-identical weights.
//! F16 and BF16 round each of those values to nearest-even (1-D tensors, the
//! norms, stay F32 as llama.cpp's converters keep them), so only F32 is exact.

use super::writer::{GgufWriter, TensorHeader};
use super::{GgmlType, GgufFile, MetaValue, TensorInfo};
use crate::error::{EngineError, Result};
use std::io::{self, Write};

/// The float type of the written tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutDtype {
    F32,
    F16,
    Bf16,
}

impl OutDtype {
    /// `general.file_type` (llama_ftype): ALL_F32, MOSTLY_F16 or MOSTLY_BF16.
    pub fn file_type(self) -> u32 {
        match self {
            OutDtype::F32 => 0,
            OutDtype::F16 => 1,
            OutDtype::Bf16 => 32,
        }
    }

    /// The ggml type a tensor of `n_dims` dimensions is written as.
    fn ggml_type(self, n_dims: usize) -> GgmlType {
        match self {
            OutDtype::F16 if n_dims >= 2 => GgmlType::F16,
            OutDtype::Bf16 if n_dims >= 2 => GgmlType::Bf16,
            _ => GgmlType::F32,
        }
    }
}

impl std::str::FromStr for OutDtype {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(OutDtype::F32),
            "f16" => Ok(OutDtype::F16),
            "bf16" => Ok(OutDtype::Bf16),
            other => Err(EngineError::InvalidRequest(format!("unknown dtype {other:?}; expected f32, f16 or bf16"))),
        }
    }
}

impl std::fmt::Display for OutDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OutDtype::F32 => "f32",
            OutDtype::F16 => "f16",
            OutDtype::Bf16 => "bf16",
        })
    }
}

/// The dequantized rewrite of an open GGUF file, checked in full before any
/// byte is written: once `new` succeeds, `write_to` fails only on I/O.
pub struct Dequantized<'a> {
    file: &'a GgufFile,
    dtype: OutDtype,
    writer: GgufWriter,
    headers: Vec<TensorHeader>,
}

impl<'a> Dequantized<'a> {
    /// Plans the rewrite. Errors (`EngineError::UnsupportedTensorType`, `Gguf`)
    /// name the first tensor the loader could not decode either.
    pub fn new(file: &'a GgufFile, dtype: OutDtype) -> Result<Self> {
        let mut writer = GgufWriter::new();
        let file_type = MetaValue::U32(dtype.file_type());
        let mut wrote_file_type = false;
        for (key, value) in file.metadata() {
            if key == "general.file_type" {
                writer.meta(key, file_type.clone());
                wrote_file_type = true;
            } else if let (Some(elem), MetaValue::Array(items)) = (file.array_elem_type(key), value) {
                writer.meta_array(key, elem, items.clone());
            } else {
                writer.meta(key, value.clone());
            }
        }
        if !wrote_file_type {
            writer.meta("general.file_type", file_type);
        }
        let mut headers = Vec::with_capacity(file.tensors().len());
        for info in file.tensors() {
            if !info.ty.is_supported() {
                return Err(EngineError::UnsupportedTensorType { name: info.name.clone(), ty: info.ty.name() });
            }
            // Bounds were checked by the parser; this only re-states the size.
            file.tensor_bytes(info)?;
            let ty = dtype.ggml_type(info.dims.len());
            let (_, elem_bytes) = ty.block_layout().expect("F32, F16 and BF16 have a layout");
            headers.push(TensorHeader {
                name: info.name.clone(),
                dims: info.dims.clone(),
                ggml_type: match ty {
                    GgmlType::F16 => 1,
                    GgmlType::Bf16 => 30,
                    _ => 0,
                },
                n_bytes: (info.numel() * elem_bytes) as u64,
            });
        }
        Ok(Dequantized { file, dtype, writer, headers })
    }

    /// The tensors as they will be written.
    pub fn tensors(&self) -> &[TensorHeader] {
        &self.headers
    }

    /// Writes the file to `out`, one tensor at a time (at most one decoded
    /// tensor is held), and returns the sink.
    pub fn write_to<W: Write>(&self, out: W) -> io::Result<W> {
        let mut stream = self.writer.stream(out, self.file.version(), &self.headers)?;
        for info in self.file.tensors() {
            let values = self.decode(info)?;
            let bytes: Vec<u8> = match self.dtype.ggml_type(info.dims.len()) {
                GgmlType::F16 => values.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
                GgmlType::Bf16 => values.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
                _ => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
            };
            stream.write_tensor(&bytes)?;
        }
        stream.finish()
    }

    /// The loader's values for one tensor: the decoder `load_tensors` runs,
    /// before any renaming or un-permutation.
    fn decode(&self, info: &TensorInfo) -> io::Result<Vec<f32>> {
        let t = self.file.dequantize_raw(&info.name).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(t.data)
    }
}
