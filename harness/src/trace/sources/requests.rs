//! `prompts.source = "requests"`: users' own datasets, one JSON object per line,
//! `{"prompt": "text"}` (encoded with the panel's tokenizer), `{"tokens": [ids]}`
//! or `{"messages": [{"role", "content"}, ..]}`, with an optional
//! `"output_tokens"`; blank lines are skipped, other keys ignored. AIPerf's
//! `single_turn` spellings are the same keys: `"text"` for `"prompt"`,
//! `"output_length"` for `"output_tokens"` (`harness profile --input-file`). The
//! first `num_requests` requests are used, in file order.
//!
//! A line must suit every endpoint its cells send to (`LineRoutes`, each endpoint
//! named by a cell on it). On `/v1/completions` a line sends token IDs: `messages`
//! is refused (the harness has no chat template to turn messages into token IDs).
//! On the chat endpoint a line sends messages: `messages` as given, `prompt` as one
//! user message, and `tokens` is refused (token IDs cannot be sent as chat); the
//! entry's `tokens` are then its message contents encoded one after the other, for
//! input lengths only (the server's template adds its own tokens, which it counts
//! in `usage.prompt_tokens`). Must not guess: a line with none or more than one of
//! prompt, tokens and messages, an empty prompt or an empty message list is an
//! error naming the line.
//!
//! Sessions (`prompts.max_turns = N`, chat endpoint only): every line is instead
//! `{"turns": [{"prompt": "text", "output_tokens": n}, ..]}` with an optional
//! `"system": "text"` (a system message before the first user turn): one session of
//! its first N turns, each turn's `prompt` sent as one user message after the
//! history so far (earlier turns and the replies actually streamed), each turn's
//! optional `output_tokens` its own output length. Without `max_turns` a `turns`
//! line is refused, and with it every line must be one.

use std::path::Path;

use serde::Deserialize;

use super::{ChatMessage, Entry, SessionTurn, too_few};
use crate::trace::panel::io_err;
use crate::trace::{Encoder, TraceError};

#[derive(Deserialize)]
struct Line {
    #[serde(alias = "text")]
    prompt: Option<String>,
    tokens: Option<Vec<u32>>,
    messages: Option<Vec<ChatMessage>>,
    #[serde(alias = "output_length")]
    output_tokens: Option<u32>,
    turns: Option<Vec<TurnLine>>,
    system: Option<String>,
}

/// One user turn of a session line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnLine {
    prompt: String,
    output_tokens: Option<u32>,
}

/// The endpoints a panel's lines are sent to, each as who sends there (e.g.
/// `cell "x"`, named in errors): a line must suit every one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineRoutes {
    /// Who sends to the chat endpoint: lines carry messages, `tokens` is refused.
    pub chat: Option<String>,
    /// Who sends to `/v1/completions`: `messages` is refused.
    pub completions: Option<String>,
}

impl LineRoutes {
    /// Every request on one endpoint (chat or not), sent by `who`.
    pub fn single(chat: bool, who: &str) -> LineRoutes {
        let who = Some(who.to_string());
        if chat { LineRoutes { chat: who, completions: None } } else { LineRoutes { chat: None, completions: who } }
    }
}

/// The first `n` requests of the JSONL file at `path` (`label`: the plan's spelling),
/// each fit for every endpoint of `routes`.
pub fn requests(
    path: &Path,
    label: &str,
    enc: Option<&dyn Encoder>,
    n: usize,
    routes: &LineRoutes,
) -> Result<Vec<Entry>, TraceError> {
    requests_sessions(path, label, enc, n, routes, None)
}

/// [`requests`], with `max_turns`: every line a session (`{"turns": [..]}`).
pub fn requests_sessions(
    path: &Path,
    label: &str,
    enc: Option<&dyn Encoder>,
    n: usize,
    routes: &LineRoutes,
    max_turns: Option<u32>,
) -> Result<Vec<Entry>, TraceError> {
    let chat = routes.chat.is_some();
    let text = crate::evidence::read_input_text(path).map_err(io_err(path))?;
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
        match (max_turns, line.turns) {
            (Some(max), Some(turns)) => {
                let plain = line.prompt.is_some() || line.tokens.is_some() || line.messages.is_some();
                if plain || line.output_tokens.is_some() {
                    return Err(bad("a session line holds \"turns\" (and optionally \"system\") only".into()));
                }
                out.push(session(turns, line.system, max, &encode, &bad, format!("{label}:{}", k + 1))?);
                continue;
            }
            (Some(_), None) => {
                return Err(bad("prompts.max_turns makes every line a session: give {\"turns\": [{\"prompt\": \
                     ..}, ..]}"
                    .into()));
            }
            (None, Some(_)) => {
                return Err(bad(
                    "\"turns\" (a multi-turn session) needs prompts.max_turns and the chat endpoint".into()
                ));
            }
            (None, None) if line.system.is_some() => {
                return Err(bad("\"system\" belongs to a session line (\"turns\")".into()));
            }
            (None, None) => {}
        }
        let (tokens, messages) = match (line.prompt, line.tokens, line.messages) {
            (Some(prompt), None, None) => {
                let messages = chat.then(|| vec![ChatMessage { role: "user".into(), content: prompt.clone() }]);
                (encode(&prompt)?, messages)
            }
            (None, Some(_), None) if let Some(who) = &routes.chat => {
                return Err(bad(format!(
                    "\"tokens\" cannot be sent to the chat endpoint, where {who} sends (endpoint = \"chat\"): give \
                     \"messages\" or \"prompt\" text"
                )));
            }
            (None, Some(tokens), None) => (tokens, None),
            (None, None, Some(_)) if let Some(who) = &routes.completions => {
                return Err(bad(format!(
                    "\"messages\" needs the chat endpoint, but {who} sends to /v1/completions (endpoint = \
                     \"completions\"; set endpoint = \"chat\"): the harness has no chat template to turn them \
                     into token IDs"
                )));
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
            next_turns: Vec::new(),
        });
    }
    if out.len() < n {
        return Err(too_few(&path.display().to_string(), n, out.len(), ""));
    }
    Ok(out)
}

/// One session line: its first `max` turns (the first as the entry's own prompt and
/// messages, the rest as `next_turns`).
fn session(
    turns: Vec<TurnLine>,
    system: Option<String>,
    max: u32,
    encode: &dyn Fn(&str) -> Result<Vec<u32>, TraceError>,
    bad: &dyn Fn(String) -> TraceError,
    source: String,
) -> Result<Entry, TraceError> {
    if turns.is_empty() {
        return Err(bad("\"turns\" is empty".into()));
    }
    let mut kept = Vec::new();
    for (t, turn) in turns.into_iter().take(max as usize).enumerate() {
        let tokens = encode(&turn.prompt)?;
        if tokens.is_empty() {
            return Err(bad(format!("turn {t}: the prompt has no tokens")));
        }
        if turn.output_tokens == Some(0) {
            return Err(bad(format!("turn {t}: \"output_tokens\" must be at least 1")));
        }
        kept.push((turn, tokens));
    }
    let mut kept = kept.into_iter();
    let Some((first, first_tokens)) = kept.next() else { return Err(bad("\"turns\" is empty".into())) };
    // As for a `messages` line: every message content of the first request, encoded.
    let mut tokens = match &system {
        Some(text) => encode(text)?,
        None => Vec::new(),
    };
    tokens.extend(first_tokens);
    let mut messages: Vec<ChatMessage> =
        system.into_iter().map(|content| ChatMessage { role: "system".into(), content }).collect();
    messages.push(ChatMessage { role: "user".into(), content: first.prompt });
    let next_turns = kept
        .map(|(turn, tokens)| SessionTurn {
            length: tokens.len() as u32,
            output_tokens: turn.output_tokens,
            max_tokens: None,
            content: turn.prompt,
        })
        .collect();
    Ok(Entry { tokens, output_tokens: first.output_tokens, source, offset: 0, messages: Some(messages), next_turns })
}
