//! A minimal GGUF writer: metadata of any value type (arrays of any element
//! type, nested and empty ones included) and tensors given either as raw,
//! already-encoded bytes held in memory (`tensor` + `to_bytes`, for tests and
//! fixtures) or streamed one at a time after the header (`stream`, for
//! `engine dequantize`). It writes what the reader reads (v2 or v3, any
//! power-of-two alignment); it does no quantization and is not used when serving.

use super::MetaValue;
use std::io::{self, Write};

/// Builds a GGUF file: metadata, plus (for `to_bytes`) tensors held in memory.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    /// Key, value, and for an array the element type to write (needed for an
    /// empty array, which has no element to take it from).
    metadata: Vec<(String, MetaValue, Option<u32>)>,
    tensors: Vec<(String, Vec<usize>, u32, Vec<u8>)>,
}

/// One tensor's header entry for `GgufWriter::stream`: its data follows later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorHeader {
    pub name: String,
    /// GGUF order (fastest-varying first).
    pub dims: Vec<usize>,
    /// The ggml type id.
    pub ggml_type: u32,
    /// The exact size of the encoded data.
    pub n_bytes: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Encodes `v`; for an array, `elem` is its element type (else that of its
/// first element, else u32). Every element must have that one type.
fn put_value(out: &mut Vec<u8>, key: &str, v: &MetaValue, elem: Option<u32>) -> io::Result<()> {
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
            let elem = elem.or_else(|| items.first().map(MetaValue::type_id)).unwrap_or(4);
            if elem > 12 {
                return Err(invalid(format!("metadata key {key:?}: unknown array element type {elem}")));
            }
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                if it.type_id() != elem {
                    return Err(invalid(format!(
                        "metadata key {key:?}: array of type {elem} holds a value of type {}",
                        it.type_id()
                    )));
                }
                put_value(out, key, it, None)?;
            }
        }
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
    Ok(())
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn meta(&mut self, key: &str, v: MetaValue) -> &mut Self {
        self.metadata.push((key.to_string(), v, None));
        self
    }

    /// An array value with an explicit element type id (`gguf_type`), which an
    /// empty array needs to keep its type (`MetaValue::Array(vec![])` alone is
    /// written as an empty u32 array).
    pub fn meta_array(&mut self, key: &str, elem_type: u32, items: Vec<MetaValue>) -> &mut Self {
        self.metadata.push((key.to_string(), MetaValue::Array(items), Some(elem_type)));
        self
    }

    /// Adds a tensor: `dims` in GGUF order (fastest-varying first), `ggml_type`
    /// the ggml type id, `data` its encoded bytes.
    pub fn tensor(&mut self, name: &str, dims: &[usize], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), ggml_type, data));
        self
    }

    /// The alignment: `general.alignment` if set to a positive integer (of any
    /// integer type, and not necessarily a power of two: tests write corrupt
    /// files on purpose), else 32.
    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _, _)| k == "general.alignment")
            .and_then(|(_, v, _)| v.as_u64())
            .filter(|&a| a > 0)
            .unwrap_or(32)
    }

    /// Writes the header (this writer's metadata and the infos of `tensors`,
    /// whose data will be laid out in that order, each at an aligned offset) to
    /// `out`, padded to the alignment; then each tensor's data goes through
    /// `GgufStream::write_tensor`, in order. Tensors added with `tensor` are not
    /// part of a stream.
    pub fn stream<W: Write>(&self, mut out: W, version: u32, tensors: &[TensorHeader]) -> io::Result<GgufStream<W>> {
        let alignment = self.alignment();
        let align = |n: u64| n.div_ceil(alignment) * alignment;
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&version.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v, elem) in &self.metadata {
            put_str(&mut head, k);
            head.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut head, k, v, *elem)?;
        }
        let mut offset = 0u64;
        for t in tensors {
            put_str(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            head.extend_from_slice(&t.ggml_type.to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset = align(offset + t.n_bytes);
        }
        head.resize(align(head.len() as u64) as usize, 0);
        out.write_all(&head)?;
        Ok(GgufStream { out, alignment, sizes: tensors.iter().map(|t| (t.name.clone(), t.n_bytes)).collect(), next: 0 })
    }

    /// The whole file's bytes, tensors included. Panics on metadata the format
    /// cannot hold (an array mixing value types): this is a fixture builder.
    pub fn to_bytes(&self, version: u32) -> Vec<u8> {
        let headers: Vec<TensorHeader> = self
            .tensors
            .iter()
            .map(|(name, dims, ty, data)| TensorHeader {
                name: name.clone(),
                dims: dims.clone(),
                ggml_type: *ty,
                n_bytes: data.len() as u64,
            })
            .collect();
        let mut s = self.stream(Vec::new(), version, &headers).expect("GgufWriter: invalid metadata");
        for (_, _, _, data) in &self.tensors {
            s.write_tensor(data).expect("writing to memory");
        }
        s.finish().expect("writing to memory")
    }
}

/// A GGUF file whose header is written and whose tensor data is written next,
/// one tensor at a time in header order (from `GgufWriter::stream`).
#[derive(Debug)]
pub struct GgufStream<W: Write> {
    out: W,
    alignment: u64,
    sizes: Vec<(String, u64)>,
    next: usize,
}

impl<W: Write> GgufStream<W> {
    /// Writes the next tensor's data, which must be exactly the size its header
    /// declared, padded to the alignment.
    pub fn write_tensor(&mut self, data: &[u8]) -> io::Result<()> {
        let Some((name, n_bytes)) = self.sizes.get(self.next) else {
            return Err(invalid(format!("all {} declared tensors are already written", self.sizes.len())));
        };
        if data.len() as u64 != *n_bytes {
            return Err(invalid(format!("tensor {name:?}: declared {n_bytes} bytes, given {}", data.len())));
        }
        self.out.write_all(data)?;
        let pad = (n_bytes.div_ceil(self.alignment) * self.alignment - n_bytes) as usize;
        self.out.write_all(&vec![0u8; pad])?;
        self.next += 1;
        Ok(())
    }

    /// Checks that every declared tensor was written, flushes, and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        if self.next != self.sizes.len() {
            return Err(invalid(format!("{} of {} declared tensors were written", self.next, self.sizes.len())));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;

    fn header(name: &str, n_bytes: u64) -> TensorHeader {
        TensorHeader { name: name.into(), dims: vec![n_bytes as usize / 4], ggml_type: 0, n_bytes }
    }

    #[test]
    fn a_stream_equals_to_bytes_and_checks_sizes_and_count() {
        let mut w = GgufWriter::new();
        w.meta("general.alignment", MetaValue::U64(64)).meta_array("empty", 8, vec![]);
        let mut held = w.clone();
        held.tensor("a", &[3], 0, vec![1; 12]).tensor("b", &[1], 0, vec![2; 4]);
        let headers = [header("a", 12), header("b", 4)];
        let mut s = w.stream(Vec::new(), 3, &headers).unwrap();
        assert!(s.write_tensor(&[0; 8]).unwrap_err().to_string().contains("declared 12 bytes, given 8"));
        s.write_tensor(&[1; 12]).unwrap();
        s.write_tensor(&[2; 4]).unwrap();
        assert!(s.write_tensor(&[0; 4]).unwrap_err().to_string().contains("already written"));
        let bytes = s.finish().unwrap();
        assert_eq!(bytes, held.to_bytes(3));
        let g = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!((g.alignment(), g.array_elem_type("empty")), (64, Some(8)));
        assert_eq!(g.tensors()[1].offset - g.data_offset(), 64);

        let s = w.stream(Vec::new(), 3, &headers).unwrap();
        assert!(s.finish().unwrap_err().to_string().contains("0 of 2 declared tensors"));
    }

    #[test]
    fn arrays_must_hold_one_type() {
        let mut w = GgufWriter::new();
        w.meta("mixed", MetaValue::Array(vec![MetaValue::U8(1), MetaValue::String("x".into())]));
        let e = w.stream(Vec::new(), 3, &[]).unwrap_err().to_string();
        assert!(e.contains("\"mixed\"") && e.contains("array of type 0 holds a value of type 8"), "{e}");
        let mut w = GgufWriter::new();
        w.meta_array("typed", 8, vec![MetaValue::U32(1)]);
        assert!(w.stream(Vec::new(), 3, &[]).is_err());
    }
}
