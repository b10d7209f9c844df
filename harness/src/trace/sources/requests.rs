//! `prompts.source = "requests"`: users' own datasets, one JSON object per line,
//! `{"prompt": "text"}` (encoded with the panel's tokenizer) or `{"tokens": [ids]}`,
//! with an optional `"output_tokens"`; blank lines are skipped, other keys ignored.
//! The first `num_requests` requests are used, in file order. `{"messages": [..]}`
//! is refused: the harness has no chat template to turn messages into the token
//! IDs it sends. Must not guess: a line with neither or both of prompt and tokens,
//! or an empty prompt, is an error naming the line.

use std::path::Path;

use serde::Deserialize;

use super::{Entry, too_few};
use crate::trace::panel::io_err;
use crate::trace::{Encoder, TraceError};

#[derive(Deserialize)]
struct Line {
    prompt: Option<String>,
    tokens: Option<Vec<u32>>,
    messages: Option<serde_json::Value>,
    output_tokens: Option<u32>,
}

/// The first `n` requests of the JSONL file at `path` (`label`: the plan's spelling).
pub fn requests(path: &Path, label: &str, enc: Option<&dyn Encoder>, n: usize) -> Result<Vec<Entry>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let mut out = Vec::with_capacity(n);
    for (k, raw) in text.lines().enumerate() {
        if out.len() >= n {
            break;
        }
        if raw.trim().is_empty() {
            continue;
        }
        let what = format!("{}, line {}", path.display(), k + 1);
        let bad = |message: String| TraceError::Malformed { what: what.clone(), message };
        let line: Line = serde_json::from_str(raw).map_err(|e| bad(e.to_string()))?;
        if line.messages.is_some() {
            return Err(bad(
                "\"messages\" needs a chat template, which the harness does not have (it sends token IDs to \
                 /v1/completions): give the request as \"prompt\" text or \"tokens\""
                    .into(),
            ));
        }
        let tokens = match (line.prompt, line.tokens) {
            (Some(prompt), None) => {
                let enc = enc.ok_or_else(|| {
                    bad("a \"prompt\" needs prompts.tokenizer (or an arm's tokenizer) to be encoded".into())
                })?;
                enc.encode(&prompt).map_err(|message| TraceError::Encode { file: what.clone(), message })?
            }
            (None, Some(tokens)) => tokens,
            (Some(_), Some(_)) => return Err(bad("give \"prompt\" or \"tokens\", not both".into())),
            (None, None) => return Err(bad("no \"prompt\" or \"tokens\"".into())),
        };
        if tokens.is_empty() {
            return Err(bad("the prompt has no tokens".into()));
        }
        if line.output_tokens == Some(0) {
            return Err(bad("\"output_tokens\" must be at least 1".into()));
        }
        out.push(Entry { tokens, output_tokens: line.output_tokens, source: format!("{label}:{}", k + 1), offset: 0 });
    }
    if out.len() < n {
        return Err(too_few(&path.display().to_string(), n, out.len(), ""));
    }
    Ok(out)
}
