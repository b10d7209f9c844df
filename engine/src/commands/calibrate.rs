//! `engine calibrate`: per-layer k16v8 value scales from real activations,
//! written as the JSON file `--kv-scales` reads.

use super::{Result, read_text, write_atomic};
use crate::kv::KvFormat;
use crate::runtime::{Engine, EngineOptions};
use std::path::{Path, PathBuf};

pub struct CalibrateOptions<'a> {
    pub model: &'a Path,
    /// Loading options; the KV format and scales are ignored (values are
    /// observed before they are stored, so f16 without scales is used).
    pub engine: EngineOptions,
    pub text: &'a Path,
    pub max_tokens: usize,
    pub out: PathBuf,
}

pub struct CalibrateReport {
    pub layers: usize,
    pub tokens: usize,
}

pub fn calibrate(o: CalibrateOptions<'_>) -> Result<CalibrateReport> {
    let opts = EngineOptions { kv_format: KvFormat::F16, kv_scales: None, ..o.engine };
    let mut engine = Engine::load(o.model, &opts)?;
    let text = read_text(o.text, None)?;
    let mut ids = engine.tokenizer.encode(&text, false)?;
    ids.truncate(o.max_tokens);
    let scales = engine.calibrate(&ids)?;
    let out = serde_json::json!({
        "rule": scales.rule,
        "scales": scales.scales,
        "model": o.model.display().to_string(),
        "text": o.text.display().to_string(),
        "tokens": ids.len(),
    });
    let json = serde_json::to_string_pretty(&out).expect("a JSON value always serialises");
    write_atomic(&o.out, json.as_bytes())?;
    Ok(CalibrateReport { layers: scales.scales.len(), tokens: ids.len() })
}
