//! `prompts.source = "requests"`: users' own datasets, one JSON object per line,
//! `{"prompt": "text"}` (encoded with the panel's tokenizer), `{"tokens": [ids]}`
//! or `{"messages": [{"role", "content"}, ..]}`, with an optional
//! `"output_tokens"`; blank lines are skipped, other keys ignored. The first
//! `num_requests` requests are used, in file order.
//!
//! On `/v1/completions` (the default) a line sends token IDs: `messages` is refused
//! (the harness has no chat template to turn messages into token IDs). On the chat
//! endpoint (`chat`) a line sends messages: `messages` as given, `prompt` as one
//! user message, and `tokens` is refused (token IDs cannot be sent as chat); the
//! entry's `tokens` are then its message contents encoded one after the other, for
//! input lengths only (the server's template adds its own tokens, which it counts
//! in `usage.prompt_tokens`). Must not guess: a line with none or more than one of
//! prompt, tokens and messages, an empty prompt or an empty message list is an
//! error naming the line.

use std::path::Path;

use serde::Deserialize;

use super::{ChatMessage, Entry, too_few};
use crate::trace::panel::io_err;
use crate::trace::{Encoder, TraceError};

#[derive(Deserialize)]
struct Line {
    prompt: Option<String>,
    tokens: Option<Vec<u32>>,
    messages: Option<Vec<ChatMessage>>,
    output_tokens: Option<u32>,
}

/// The first `n` requests of the JSONL file at `path` (`label`: the plan's spelling);
/// `chat`: the requests go to the chat endpoint.
pub fn requests(
    path: &Path,
    label: &str,
    enc: Option<&dyn Encoder>,
    n: usize,
    chat: bool,
) -> Result<Vec<Entry>, TraceError> {
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
        let encode = |text: &str| -> Result<Vec<u32>, TraceError> {
            let enc = enc.ok_or_else(|| {
                bad("text (\"prompt\" or \"messages\") needs prompts.tokenizer (or an arm's tokenizer) to be encoded"
                    .into())
            })?;
            enc.encode(text).map_err(|message| TraceError::Encode { file: what.clone(), message })
        };
        let (tokens, messages) = match (line.prompt, line.tokens, line.messages) {
            (Some(prompt), None, None) => {
                let messages = chat.then(|| vec![ChatMessage { role: "user".into(), content: prompt.clone() }]);
                (encode(&prompt)?, messages)
            }
            (None, Some(_), None) if chat => {
                return Err(bad("\"tokens\" cannot be sent to the chat endpoint (request.endpoint = \"chat\"): give \
                     \"messages\" or \"prompt\" text"
                    .into()));
            }
            (None, Some(tokens), None) => (tokens, None),
            (None, None, Some(_)) if !chat => {
                return Err(bad(
                    "\"messages\" needs the chat endpoint (request.endpoint = \"chat\"): the harness has no chat \
                     template to turn them into the token IDs /v1/completions is sent"
                        .into(),
                ));
            }
            (None, None, Some(messages)) => {
                if messages.is_empty() {
                    return Err(bad("\"messages\" is empty".into()));
                }
                let mut tokens = Vec::new();
                for m in &messages {
                    tokens.extend(encode(&m.content)?);
                }
                (tokens, Some(messages))
            }
            (None, None, None) => return Err(bad("no \"prompt\", \"tokens\" or \"messages\"".into())),
            _ => return Err(bad("give one of \"prompt\", \"tokens\" and \"messages\", not several".into())),
        };
        if tokens.is_empty() {
            return Err(bad("the prompt has no tokens".into()));
        }
        if line.output_tokens == Some(0) {
            return Err(bad("\"output_tokens\" must be at least 1".into()));
        }
        out.push(Entry {
            tokens,
            output_tokens: line.output_tokens,
            source: format!("{label}:{}", k + 1),
            offset: 0,
            messages,
        });
    }
    if out.len() < n {
        return Err(too_few(&path.display().to_string(), n, out.len(), ""));
    }
    Ok(out)
}
