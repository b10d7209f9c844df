//! A minimal GGUF writer for tests and fixtures: metadata of any value type and
//! tensors given as raw, already-encoded bytes. It writes what the reader reads
//! (v2 or v3, any power-of-two alignment); it does no quantization and is not
//! used when serving.

use super::MetaValue;

/// Builds a GGUF file in memory.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, Vec<usize>, u32, Vec<u8>)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(items) => {
            let elem = items.first().map_or(4, MetaValue::type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(out, it);
            }
        }
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn meta(&mut self, key: &str, v: MetaValue) -> &mut Self {
        self.metadata.push((key.to_string(), v));
        self
    }

    /// Adds a tensor: `dims` in GGUF order (fastest-varying first), `ggml_type`
    /// the ggml type id, `data` its encoded bytes.
    pub fn tensor(&mut self, name: &str, dims: &[usize], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), ggml_type, data));
        self
    }

    /// The file's bytes. The alignment is `general.alignment` if set (as U32),
    /// else 32.
    pub fn to_bytes(&self, version: u32) -> Vec<u8> {
        let alignment =
            self.metadata.iter().find(|(k, _)| k == "general.alignment").and_then(|(_, v)| v.as_u64()).unwrap_or(32)
                as usize;
        let align = |n: usize| n.div_ceil(alignment) * alignment;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for (name, dims, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = align(offset + data.len());
        }
        out.resize(align(out.len()), 0);
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
            out.resize(align(out.len()), 0);
        }
        out
    }
}
