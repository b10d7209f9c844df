//! The variable-length workload of `harness bench-loadgen --sharegpt FILE`: a
//! ShareGPT-format panel sampled exactly as a study's `sharegpt` panel is
//! (`trace::sources::sharegpt`, vLLM's filters, the benchmark's seed), encoded with
//! `--tokenizer`, each entry sent as its own token IDs with `max_tokens` = its own
//! output length capped at `--max-output-tokens` (forced, so the fake streams exactly
//! that many chunks). Owns the panel's prepared requests and its description in the
//! report. Must not time anything.

use std::path::Path;

use axum::body::Bytes;
use serde::Serialize;

use super::BenchError;
use crate::inputs::TokenizerEncoder;
use crate::load::PreparedRequest;
use crate::plan::ShareGptSpec;
use crate::plan::{SHAREGPT_MAX_PROMPT_TOKENS, SHAREGPT_MAX_TOTAL_TOKENS, SHAREGPT_MIN_TOKENS};
use crate::stats::percentiles;

/// What the report says about the panel.
#[derive(Debug, Clone, Serialize)]
pub struct PanelInfo {
    pub path: String,
    /// "play dialogue in ShareGPT format, not ShareGPT" for the offline file.
    pub label: String,
    pub tokenizer: String,
    pub requests: u64,
    pub max_output_tokens: u32,
    /// Nearest-rank min, p50, p90, max of the prompt lengths and of `max_tokens`.
    pub prompt_tokens_min_p50_p90_max: [f64; 4],
    pub max_tokens_min_p50_p90_max: [f64; 4],
}

/// The timed body of one panel entry (the fields `body` sends for the fixed workload).
pub fn entry_body(tokens: &[u32], max_tokens: u32) -> Bytes {
    let v = serde_json::json!({
        "model": "fake", "prompt": tokens, "max_tokens": max_tokens, "min_tokens": max_tokens,
        "ignore_eos": true, "temperature": 0.0, "stream": true,
        "stream_options": {"include_usage": true}, "return_token_ids": true,
    });
    Bytes::from(v.to_string())
}

fn spread(values: &[f64]) -> Result<[f64; 4], BenchError> {
    let p = percentiles(values, &[0.0, 50.0, 90.0, 100.0]).map_err(crate::metrics::MetricsError::from)?;
    Ok([p[0], p[1], p[2], p[3]])
}

/// Samples `n` requests of the ShareGPT-format file and prepares their bodies.
pub fn build(
    path: &Path,
    tokenizer: &Path,
    n: usize,
    seed: u64,
    max_output_tokens: u32,
) -> Result<(Vec<PreparedRequest>, PanelInfo), BenchError> {
    let invalid = |e: String| BenchError::Invalid(e);
    let enc = TokenizerEncoder::from_file(tokenizer).map_err(|e| invalid(e.to_string()))?;
    let spec = ShareGptSpec {
        path: path.display().to_string(),
        tokenizer: tokenizer.display().to_string(),
        min_tokens: SHAREGPT_MIN_TOKENS,
        max_prompt_tokens: Some(SHAREGPT_MAX_PROMPT_TOKENS),
        max_total_tokens: Some(SHAREGPT_MAX_TOTAL_TOKENS),
        shuffle: true,
    };
    let entries =
        crate::trace::sources::sharegpt(&spec, path, &enc, seed, n, false).map_err(|e| invalid(e.to_string()))?;
    let prepared: Vec<PreparedRequest> = entries
        .iter()
        .map(|e| {
            let max_tokens = e.output_tokens.unwrap_or(max_output_tokens).min(max_output_tokens).max(1);
            PreparedRequest {
                body: entry_body(&e.tokens, max_tokens),
                prompt_tokens: e.tokens.len() as u32,
                max_tokens,
                request_id: None,
            }
        })
        .collect();
    let info = PanelInfo {
        path: spec.path.clone(),
        label: spec.label().to_string(),
        tokenizer: spec.tokenizer.clone(),
        requests: prepared.len() as u64,
        max_output_tokens,
        prompt_tokens_min_p50_p90_max: spread(
            &prepared.iter().map(|p| f64::from(p.prompt_tokens)).collect::<Vec<_>>(),
        )?,
        max_tokens_min_p50_p90_max: spread(&prepared.iter().map(|p| f64::from(p.max_tokens)).collect::<Vec<_>>())?,
    };
    Ok((prepared, info))
}
