//! GGUF metadata values: one enum for the thirteen GGUF value types (arrays
//! included) and lenient typed accessors. Owns no parsing (see `parse.rs`).

/// A metadata value, of any GGUF value type.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    /// The GGUF value type id (`gguf_type`).
    pub fn type_id(&self) -> u32 {
        match self {
            MetaValue::U8(_) => 0,
            MetaValue::I8(_) => 1,
            MetaValue::U16(_) => 2,
            MetaValue::I16(_) => 3,
            MetaValue::U32(_) => 4,
            MetaValue::I32(_) => 5,
            MetaValue::F32(_) => 6,
            MetaValue::Bool(_) => 7,
            MetaValue::String(_) => 8,
            MetaValue::Array(_) => 9,
            MetaValue::U64(_) => 10,
            MetaValue::I64(_) => 11,
            MetaValue::F64(_) => 12,
        }
    }

    /// Any integer value that is non-negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(x) => Some(x as u64),
            MetaValue::U16(x) => Some(x as u64),
            MetaValue::U32(x) => Some(x as u64),
            MetaValue::U64(x) => Some(x),
            MetaValue::I8(x) => u64::try_from(x).ok(),
            MetaValue::I16(x) => u64::try_from(x).ok(),
            MetaValue::I32(x) => u64::try_from(x).ok(),
            MetaValue::I64(x) => u64::try_from(x).ok(),
            _ => None,
        }
    }

    /// Any integer value.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(x) => Some(x as i64),
            MetaValue::I16(x) => Some(x as i64),
            MetaValue::I32(x) => Some(x as i64),
            MetaValue::I64(x) => Some(x),
            _ => self.as_u64().and_then(|x| i64::try_from(x).ok()),
        }
    }

    /// A float, or an integer read as a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(x) => Some(x as f64),
            MetaValue::F64(x) => Some(x),
            _ => self.as_i64().map(|x| x as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}
