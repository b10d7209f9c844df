//! KV storage formats and their element conversions.
//!
//! - `f16`: keys and values as IEEE binary16 (round to nearest even).
//! - `bf16`: keys and values as bfloat16 (round to nearest even).
//! - `k16v8`: keys as binary16; values as FP8 E4M3 of `v / s_layer`, converted
//!   saturating with round-to-nearest-even (the `float8` crate, which matches
//!   CUDA's `__nv_cvt_float_to_fp8(.., __NV_SATFINITE, __NV_E4M3)`), read back as
//!   `e4m3 * s_layer`. One f32 scale per layer, from a calibration file.

use crate::error::{EngineError, Result};
use float8::F8E4M3;
use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvFormat {
    F16,
    Bf16,
    K16v8,
}

impl std::str::FromStr for KvFormat {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f16" => Ok(KvFormat::F16),
            "bf16" => Ok(KvFormat::Bf16),
            "k16v8" => Ok(KvFormat::K16v8),
            other => Err(EngineError::Kv(format!("unknown KV format {other:?}; expected f16, bf16 or k16v8"))),
        }
    }
}

impl std::fmt::Display for KvFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvFormat::F16 => "f16",
            KvFormat::Bf16 => "bf16",
            KvFormat::K16v8 => "k16v8",
        })
    }
}

impl KvFormat {
    /// Bytes per stored key element.
    pub fn key_bytes(self) -> usize {
        2
    }

    /// Bytes per stored value element.
    pub fn value_bytes(self) -> usize {
        match self {
            KvFormat::F16 | KvFormat::Bf16 => 2,
            KvFormat::K16v8 => 1,
        }
    }

    pub fn needs_scales(self) -> bool {
        matches!(self, KvFormat::K16v8)
    }

    /// Encodes one f32 as a 16-bit key (or value in the 16-bit formats).
    #[inline]
    pub fn encode16(self, v: f32) -> u16 {
        match self {
            KvFormat::Bf16 => bf16::from_f32(v).to_bits(),
            KvFormat::F16 | KvFormat::K16v8 => f16::from_f32(v).to_bits(),
        }
    }

    /// Decodes a 16-bit key or value.
    #[inline]
    pub fn decode16(self, bits: u16) -> f32 {
        match self {
            KvFormat::Bf16 => bf16::from_bits(bits).to_f32(),
            KvFormat::F16 | KvFormat::K16v8 => f16::from_bits(bits).to_f32(),
        }
    }
}

/// The largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// Encodes `v / scale` as E4M3 (saturating, round to nearest even).
#[inline]
pub fn encode_e4m3(v: f32, inv_scale: f32) -> u8 {
    F8E4M3::from_f32(v * inv_scale).to_bits()
}

/// The 256 E4M3 codes decoded to f32 (unscaled).
pub fn e4m3_table() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    for (i, v) in t.iter_mut().enumerate() {
        *v = F8E4M3::from_bits(i as u8).to_f32();
    }
    t
}

/// Per-layer value scales for k16v8, as written by `engine calibrate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueScales {
    /// How the scales were computed (free text, e.g. "max|v| / 448 per layer").
    #[serde(default)]
    pub rule: String,
    /// One positive, finite scale per decoder layer.
    pub scales: Vec<f32>,
}

impl ValueScales {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        let parsed: ValueScales =
            serde_json::from_str(&text).map_err(|e| EngineError::KvScales(format!("{}: {e}", path.display())))?;
        parsed.validate()?;
        Ok(parsed)
    }

    pub fn validate(&self) -> Result<()> {
        if self.scales.is_empty() {
            return Err(EngineError::KvScales("no scales in file".into()));
        }
        for (layer, &s) in self.scales.iter().enumerate() {
            if !s.is_finite() || s <= 0.0 {
                return Err(EngineError::KvScales(format!("layer {layer}: scale {s} must be finite and positive")));
            }
        }
        Ok(())
    }

    /// Checks that there is one scale per layer of the model.
    pub fn check_layers(&self, layers: usize) -> Result<()> {
        if self.scales.len() != layers {
            return Err(EngineError::KvScales(format!(
                "file has {} scales but the model has {layers} layers",
                self.scales.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_saturates_and_rounds_to_nearest_even() {
        // 448 is the largest finite value; larger magnitudes saturate.
        assert_eq!(F8E4M3::from_bits(encode_e4m3(1.0e6, 1.0)).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_bits(encode_e4m3(-1.0e6, 1.0)).to_f32(), -448.0);
        // Between 1.0 and 1.125 (spacing 0.125 at exponent 0): the midpoint 1.0625
        // rounds to the even mantissa, 1.0; 1.1875 rounds to 1.25 (even).
        assert_eq!(F8E4M3::from_bits(encode_e4m3(1.0625, 1.0)).to_f32(), 1.0);
        assert_eq!(F8E4M3::from_bits(encode_e4m3(1.1875, 1.0)).to_f32(), 1.25);
        // Scaling: 2.0 with scale 0.5 is stored as 4.0.
        let t = e4m3_table();
        assert_eq!(t[encode_e4m3(2.0, 1.0 / 0.5) as usize] * 0.5, 2.0);
    }

    #[test]
    fn scales_must_be_positive_and_finite() {
        for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
            let s = ValueScales { rule: String::new(), scales: vec![1.0, bad] };
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("layer 1") && e.contains("finite and positive"), "{e}");
        }
        let s = ValueScales { rule: String::new(), scales: vec![1.0; 3] };
        assert!(s.check_layers(4).unwrap_err().to_string().contains("4 layers"));
    }

    #[test]
    fn formats_parse() {
        assert_eq!("k16v8".parse::<KvFormat>().unwrap(), KvFormat::K16v8);
        assert!("fp8".parse::<KvFormat>().is_err());
    }
}
