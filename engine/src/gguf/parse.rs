//! GGUF header parsing: magic, version (2 or 3), metadata key/values of every
//! value type, tensor infos, alignment and the data offset. Owns bounds checking
//! of the header bytes: every length and count read from the file is checked
//! against the bytes that remain before anything is allocated, so a truncated or
//! corrupt file is an `EngineError::Gguf` naming the problem, never a panic or a
//! huge allocation. Does not touch tensor data (see `dequant.rs`).

use super::dequant::GgmlType;
use super::{MetaValue, TensorInfo};
use crate::error::{EngineError, Result};

/// `GGUF` read as a little-endian u32.
const MAGIC: u32 = 0x4655_4747;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest metadata array we accept (real vocabularies hold ~10^5..10^6
/// entries); bounds the memory a corrupt length can claim.
const MAX_ARRAY_LEN: usize = 1 << 24;
/// Largest metadata string (an embedded tokenizer.json is a few MiB).
const MAX_STRING_LEN: usize = 256 << 20;
/// Initial capacity of vectors sized by a count read from the file: they grow
/// only as elements actually parse.
const MAX_PREALLOC: usize = 4096;

/// Everything the header says.
pub(super) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    /// For each metadata value (same order) that is an array, its element type
    /// id as written (an empty array has no element to tell it).
    pub array_types: Vec<Option<u32>>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn err<T>(msg: String) -> Result<T> {
    Err(EngineError::Gguf(msg))
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return err(format!(
                "truncated file: {what} needs {n} bytes at offset {} but only {} remain",
                self.pos,
                self.remaining()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that will size an allocation: each element needs at least
    /// `min_elem_bytes`, so a count larger than the remaining bytes allow is corrupt.
    fn count(&mut self, min_elem_bytes: usize, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let max = (self.remaining() / min_elem_bytes.max(1)) as u64;
        if n > max {
            return err(format!(
                "{what} is {n} at offset {}, more than the {} remaining bytes can hold",
                self.pos - 8,
                self.remaining()
            ));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.count(1, what)?;
        if n > MAX_STRING_LEN {
            return err(format!("{what} is {n} bytes long, more than {MAX_STRING_LEN}"));
        }
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| EngineError::Gguf(format!("{what} is not valid UTF-8")))
    }
}

/// Smallest encoded size of one value of a type, used to bound array lengths.
fn min_value_bytes(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,  // u64 length
        9 => 12, // u32 type + u64 length
        _ => 8,
    }
}

fn value(c: &mut Cursor, ty: u32, key: &str, depth: u32) -> Result<MetaValue> {
    let what = || format!("value of metadata key {key:?}");
    Ok(match ty {
        0 => MetaValue::U8(c.u8(&what())?),
        1 => MetaValue::I8(c.u8(&what())? as i8),
        2 => MetaValue::U16(c.u16(&what())?),
        3 => MetaValue::I16(c.u16(&what())? as i16),
        4 => MetaValue::U32(c.u32(&what())?),
        5 => MetaValue::I32(c.u32(&what())? as i32),
        6 => MetaValue::F32(f32::from_bits(c.u32(&what())?)),
        7 => match c.u8(&what())? {
            0 => MetaValue::Bool(false),
            1 => MetaValue::Bool(true),
            b => return err(format!("metadata key {key:?}: invalid bool byte {b}")),
        },
        8 => MetaValue::String(c.string(&what())?),
        9 => {
            if depth >= 4 {
                return err(format!("metadata key {key:?}: arrays nested too deeply"));
            }
            let elem_ty = c.u32(&what())?;
            if elem_ty > 12 {
                return err(format!("metadata key {key:?}: unknown array element type {elem_ty}"));
            }
            let n = c.count(min_value_bytes(elem_ty), &format!("length of array {key:?}"))?;
            if n > MAX_ARRAY_LEN {
                return err(format!("array {key:?} has {n} elements, more than the {MAX_ARRAY_LEN} supported"));
            }
            let mut items = Vec::with_capacity(n.min(MAX_PREALLOC));
            for _ in 0..n {
                items.push(value(c, elem_ty, key, depth + 1)?);
            }
            MetaValue::Array(items)
        }
        10 => MetaValue::U64(c.u64(&what())?),
        11 => MetaValue::I64(c.u64(&what())? as i64),
        12 => MetaValue::F64(f64::from_bits(c.u64(&what())?)),
        other => return err(format!("metadata key {key:?}: unknown value type {other}")),
    })
}

/// Parses the header of a whole GGUF file held in `buf`.
pub(super) fn parse(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.u32("magic")?;
    if magic != MAGIC {
        return err(format!("bad magic {:02x?} (expected \"GGUF\"): not a GGUF file", magic.to_le_bytes()));
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return err(format!("unsupported GGUF version {version} (supported: 2, 3)"));
    }
    // A tensor info is at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
    let n_tensors = c.count(24, "tensor count")?;
    // A key/value is at least 8 (key length) + 4 (type) + 1 (value).
    let n_kv = c.count(13, "metadata key/value count")?;

    let mut metadata = Vec::with_capacity(n_kv.min(MAX_PREALLOC));
    let mut array_types = Vec::with_capacity(n_kv.min(MAX_PREALLOC));
    for i in 0..n_kv {
        let key = c.string(&format!("metadata key #{i}"))?;
        let ty = c.u32(&format!("type of metadata key {key:?}"))?;
        // An array starts with its element type: note it before parsing.
        let elem =
            c.buf.get(c.pos..c.pos + 4).filter(|_| ty == 9).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let v = value(&mut c, ty, &key, 0)?;
        metadata.push((key, v));
        array_types.push(elem);
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            _ => {
                return err(format!("general.alignment must be a positive power of two, got {v:?}"));
            }
        },
    };

    let mut tensors = Vec::with_capacity(n_tensors.min(MAX_PREALLOC));
    for i in 0..n_tensors {
        let name = c.string(&format!("name of tensor #{i}"))?;
        let n_dims = c.u32(&format!("n_dims of tensor {name:?}"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return err(format!("tensor {name:?}: {n_dims} dimensions (supported: 1..={MAX_DIMS})"));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = c.u64(&format!("dimensions of tensor {name:?}"))?;
            dims.push(
                usize::try_from(d)
                    .map_err(|_| EngineError::Gguf(format!("tensor {name:?}: dimension {d} is too large")))?,
            );
        }
        let ty = GgmlType::from_id(c.u32(&format!("type of tensor {name:?}"))?);
        let offset = c.u64(&format!("offset of tensor {name:?}"))?;
        if offset % alignment != 0 {
            return err(format!("tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}"));
        }
        tensors.push(TensorInfo { name, dims, ty, offset, n_bytes: None });
    }

    let header_end = c.pos as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;
    if data_offset > file_len && n_tensors > 0 {
        return err(format!(
            "truncated file: tensor data would start at {data_offset} but the file has {file_len} bytes"
        ));
    }

    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    for t in &mut tensors {
        if !seen.insert(t.name.clone()) {
            return err(format!("duplicate tensor name {:?}", t.name));
        }
        let numel = t
            .dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| EngineError::Gguf(format!("tensor {:?}: element count overflows", t.name)))?;
        // The byte size is known for every type we can lay out; for an unknown
        // type id the tensor stays unreadable (load reports it by name).
        if let Some((block, type_size)) = t.ty.block_layout() {
            if t.dims[0] % block != 0 {
                return err(format!(
                    "tensor {:?}: first dimension {} is not a multiple of the {} block size {block}",
                    t.name, t.dims[0], t.ty
                ));
            }
            let n_bytes = (numel / block)
                .checked_mul(type_size)
                .ok_or_else(|| EngineError::Gguf(format!("tensor {:?}: size overflows", t.name)))?
                as u64;
            let start = data_offset.checked_add(t.offset);
            match start.and_then(|s| s.checked_add(n_bytes)) {
                Some(end) if end <= file_len => {}
                _ => {
                    return err(format!(
                        "truncated file: tensor {:?} ({} bytes at data offset {}) extends past the end of the file ({file_len} bytes)",
                        t.name, n_bytes, t.offset
                    ));
                }
            }
            t.n_bytes = Some(n_bytes);
        }
        t.offset += data_offset;
    }

    Ok(Header { version, metadata, array_types, tensors, alignment, data_offset })
}
