//! OpenAI-compatible request types and their validation into one engine-level
//! `GenerationSpec`. Field names follow OpenAI, with vLLM's extras
//! (`ignore_eos`, `min_tokens`, `stop_token_ids`, `return_token_ids`,
//! `prompt_logprobs`, `top_k`, `min_p`). Fields the engine does not implement (tools,
//! response formats, penalties, ...) are refused with 400 naming the field
//! (`UNSUPPORTED`) rather than silently ignored; other unknown fields (`user`,
//! `metadata`, ...) are ignored, as OpenAI does. Values outside the limits
//! below (vLLM's where it has one) are refused with 400 naming the field and
//! the limit.

use super::error::{ApiError, fields, parse_object};
use super::sampling::SamplingParams;
use crate::tokenizer::{ChatMessage, Tokenizer};
use serde::Deserialize;
use serde_json::Value;

/// Most prompts one completions request may carry.
pub const MAX_PROMPTS_PER_REQUEST: usize = 256;
/// Most alternatives per token for logprobs and prompt_logprobs.
pub const MAX_LOGPROBS: usize = 20;
/// Highest temperature (OpenAI's and vLLM's: [0, 2]).
pub const MAX_TEMPERATURE: f64 = 2.0;
/// Most stop strings in one request (OpenAI allows 4, vLLM sets no limit):
/// each is searched for after every generated token.
pub const MAX_STOP_STRINGS: usize = 64;
/// Longest stop string, in bytes (the engine holds back that much text).
pub const MAX_STOP_BYTES: usize = 1024;
/// Chat message roles the engine renders.
pub const CHAT_ROLES: [&str; 3] = ["system", "user", "assistant"];

#[derive(Debug, Deserialize, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    /// vLLM's extra: usage on every chunk too (with `include_usage`).
    #[serde(default)]
    pub continuous_usage_stats: bool,
}

/// Whether a request field's value means "off".
type IsOff = fn(&Value) -> bool;

/// Request fields that change what a compliant server returns but that this
/// engine does not implement, each with the value that means "off" (accepted).
const UNSUPPORTED: &[(&str, IsOff)] = &[
    ("tools", |v| v.as_array().is_some_and(|a| a.is_empty())),
    ("tool_choice", |v| v == "none"),
    ("functions", |v| v.as_array().is_some_and(|a| a.is_empty())),
    ("function_call", |v| v == "none"),
    ("parallel_tool_calls", |_| true),
    ("response_format", |v| v.get("type").is_some_and(|t| t == "text")),
    ("logit_bias", |v| v.as_object().is_some_and(|m| m.is_empty())),
    ("frequency_penalty", |v| v.as_f64() == Some(0.0)),
    ("presence_penalty", |v| v.as_f64() == Some(0.0)),
    ("repetition_penalty", |v| v.as_f64() == Some(1.0)),
    ("best_of", |v| v.as_u64() == Some(1)),
    ("suffix", |_| false),
    ("use_beam_search", |v| v == false),
    ("guided_json", |_| false),
    ("guided_regex", |_| false),
    ("guided_choice", |_| false),
    ("guided_grammar", |_| false),
    ("structured_outputs", |_| false),
    ("audio", |_| false),
    ("modalities", |v| v == &serde_json::json!(["text"])),
    ("prediction", |_| false),
];

/// 400 for the first unsupported field a body sets to anything but "off".
fn reject_unsupported(body: &Value) -> Result<(), ApiError> {
    for (name, off) in UNSUPPORTED {
        if let Some(v) = body.get(*name)
            && !v.is_null()
            && !off(v)
        {
            return Err(ApiError::bad_param(*name, format!("{name} is not supported by this server")));
        }
    }
    Ok(())
}

/// Fields shared by both endpoints.
#[derive(Debug, Deserialize)]
pub struct CommonFields {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    /// vLLM's extra: drop tokens less likely than `min_p` times the most likely one.
    pub min_p: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Option<Value>,
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub ignore_eos: bool,
    #[serde(default)]
    pub min_tokens: usize,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub return_token_ids: bool,
    pub prompt_logprobs: Option<usize>,
    pub n: Option<usize>,
}

/// Fields only `/v1/completions` reads.
#[derive(Debug, Deserialize)]
pub struct CompletionFields {
    #[serde(default)]
    pub prompt: Value,
    /// Completions: number of top alternatives per token (0 = only the chosen one).
    pub logprobs: Option<usize>,
    #[serde(default)]
    pub echo: bool,
}

#[derive(Debug)]
pub struct CompletionRequest {
    pub fields: CompletionFields,
    pub common: CommonFields,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessageIn {
    pub role: String,
    pub content: Value,
}

/// Fields only `/v1/chat/completions` reads.
#[derive(Debug, Deserialize)]
pub struct ChatFields {
    #[serde(default)]
    pub messages: Vec<ChatMessageIn>,
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<usize>,
    #[serde(default = "yes")]
    pub add_generation_prompt: bool,
}

#[derive(Debug)]
pub struct ChatRequest {
    pub fields: ChatFields,
    pub common: CommonFields,
}

fn yes() -> bool {
    true
}

/// What the engine is asked to do, after validation.
#[derive(Debug)]
pub struct GenerationSpec {
    pub prompts: Vec<Vec<u32>>,
    pub params: SamplingParams,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Usage on every streamed chunk (`stream_options.continuous_usage_stats`).
    pub continuous_usage: bool,
    pub return_token_ids: bool,
}

/// Limits the validation needs from the loaded model.
pub struct Limits<'a> {
    pub served_model_name: &'a str,
    pub vocab_size: usize,
    pub max_model_len: usize,
    pub tokenizer: &'a Tokenizer,
}

fn check_model(model: &Option<String>, limits: &Limits<'_>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != limits.served_model_name => Err(ApiError::ModelNotFound(m.clone())),
        _ => Ok(()),
    }
}

fn parse_prompts(v: &Value, tok: &Tokenizer) -> Result<Vec<Vec<u32>>, ApiError> {
    let bad = |m: &str| ApiError::bad_param("prompt", m.to_string());
    let ids_of = |arr: &[Value]| -> Result<Vec<u32>, ApiError> {
        arr.iter()
            .map(|x| {
                x.as_u64()
                    .filter(|&i| i <= u32::MAX as u64)
                    .map(|i| i as u32)
                    .ok_or_else(|| bad("token IDs must be non-negative integers"))
            })
            .collect()
    };
    let encode = |s: &str| tok.encode(s, true).map_err(|e| ApiError::bad_param("prompt", e.to_string()));
    match v {
        Value::String(s) => Ok(vec![encode(s)?]),
        Value::Array(items) if items.is_empty() => Err(bad("prompt must not be empty")),
        Value::Array(items) => match &items[0] {
            Value::Number(_) => Ok(vec![ids_of(items)?]),
            Value::String(_) => items
                .iter()
                .map(|x| {
                    x.as_str()
                        .ok_or_else(|| bad("a prompt list must hold only strings or only token-ID lists"))
                        .and_then(encode)
                })
                .collect(),
            Value::Array(_) => items
                .iter()
                .map(|x| {
                    x.as_array()
                        .ok_or_else(|| bad("a prompt list must hold only strings or only token-ID lists"))
                        .and_then(|a| ids_of(a))
                })
                .collect(),
            _ => Err(bad("prompt must be a string, a list of token IDs, or a list of either")),
        },
        Value::Null => Err(bad("prompt is required")),
        _ => Err(bad("prompt must be a string, a list of token IDs, or a list of either")),
    }
}

fn parse_stop(v: &Option<Value>) -> Result<Vec<String>, ApiError> {
    let not_strings = || ApiError::bad_param("stop", "stop must be a string or a list of strings");
    let stops: Vec<&str> = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) if a.len() > MAX_STOP_STRINGS => {
            return Err(ApiError::bad_param(
                "stop",
                format!("stop has {} strings; at most {MAX_STOP_STRINGS} are allowed", a.len()),
            ));
        }
        Some(Value::Array(a)) => a.iter().map(|x| x.as_str().ok_or_else(not_strings)).collect::<Result<_, _>>()?,
        _ => return Err(not_strings()),
    };
    if stops.iter().any(|x| x.is_empty()) {
        return Err(ApiError::bad_param("stop", "stop strings must not be empty"));
    }
    if let Some(long) = stops.iter().find(|x| x.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad_param(
            "stop",
            format!("stop strings must be at most {MAX_STOP_BYTES} bytes; one has {}", long.len()),
        ));
    }
    Ok(stops.into_iter().map(String::from).collect())
}

/// A number as a message shows it (1e308 as such, not 309 digits).
fn shown(x: f64) -> String {
    if x.abs() < 1e9 { x.to_string() } else { format!("{x:e}") }
}

/// Temperature in [0, `MAX_TEMPERATURE`] (default 1) and top_p in (0, 1]
/// (default 1).
fn temperature_and_top_p(c: &CommonFields) -> Result<(f32, f32), ApiError> {
    let temperature = c.temperature.unwrap_or(1.0);
    if !(0.0..=MAX_TEMPERATURE).contains(&temperature) {
        return Err(ApiError::bad_param(
            "temperature",
            format!("temperature must be in [0, {MAX_TEMPERATURE}], got {}", shown(temperature)),
        ));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_param("top_p", format!("top_p must be in (0, 1], got {}", shown(top_p))));
    }
    Ok((temperature as f32, top_p as f32))
}

/// top_k: -1 or 0 mean no limit (vLLM accepts both), else 1..=vocabulary size.
fn top_k(c: &CommonFields, vocab_size: usize) -> Result<i64, ApiError> {
    match c.top_k {
        None => Ok(0),
        Some(k) if k >= -1 && k <= vocab_size as i64 => Ok(k),
        Some(k) => Err(ApiError::bad_param(
            "top_k",
            format!("top_k must be -1 or 0 (no limit), or from 1 to the vocabulary size ({vocab_size}); got {k}"),
        )),
    }
}

/// min_p in [0, 1] (vLLM's range; default 0, no filter).
fn min_p(c: &CommonFields) -> Result<f32, ApiError> {
    let m = c.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&m) {
        return Err(ApiError::bad_param("min_p", format!("min_p must be in [0, 1], got {}", shown(m))));
    }
    Ok(m as f32)
}

/// stop_token_ids, each inside the vocabulary.
fn stop_token_ids(c: &CommonFields, vocab_size: usize) -> Result<Vec<u32>, ApiError> {
    let ids = c.stop_token_ids.clone().unwrap_or_default();
    match ids.iter().find(|&&t| t as usize >= vocab_size) {
        Some(t) => Err(ApiError::bad_param(
            "stop_token_ids",
            format!("stop_token_ids: token id {t} is outside the vocabulary (size {vocab_size})"),
        )),
        None => Ok(ids),
    }
}

/// Validates the shared fields for prompts that are already tokenized.
fn build(
    c: &CommonFields,
    prompts: Vec<Vec<u32>>,
    max_tokens: Option<i64>,
    logprobs: Option<usize>,
    limits: &Limits<'_>,
) -> Result<GenerationSpec, ApiError> {
    if let Some(n) = c.n
        && n != 1
    {
        return Err(ApiError::bad_param("n", "only n = 1 is supported"));
    }
    if prompts.len() > MAX_PROMPTS_PER_REQUEST {
        return Err(ApiError::bad_param(
            "prompt",
            format!("{} prompts in one request; at most {MAX_PROMPTS_PER_REQUEST}", prompts.len()),
        ));
    }
    let (temperature, top_p) = temperature_and_top_p(c)?;
    for (name, v) in [("logprobs", logprobs), ("prompt_logprobs", c.prompt_logprobs)] {
        if let Some(k) = v
            && k > MAX_LOGPROBS
        {
            return Err(ApiError::bad_param(name, format!("{name} must be at most {MAX_LOGPROBS}")));
        }
    }
    let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    for p in &prompts {
        if p.is_empty() {
            return Err(ApiError::bad_param("prompt", "prompt must not be empty"));
        }
        if let Some(&t) = p.iter().find(|&&t| t as usize >= limits.vocab_size) {
            return Err(ApiError::bad_param(
                "prompt",
                format!("token id {t} is outside the vocabulary (size {})", limits.vocab_size),
            ));
        }
    }
    let max_tokens = match max_tokens {
        Some(m) if m < 1 => {
            return Err(ApiError::bad_param("max_tokens", format!("max_tokens must be at least 1, got {m}")));
        }
        Some(m) => m as usize,
        None => limits.max_model_len.saturating_sub(longest).max(1),
    };
    if longest + max_tokens > limits.max_model_len {
        return Err(ApiError::bad_param(
            "max_tokens",
            format!(
                "this model's maximum context length is {} tokens; the prompt has {longest} and max_tokens is {max_tokens}",
                limits.max_model_len
            ),
        ));
    }
    if c.min_tokens > max_tokens {
        return Err(ApiError::bad_param("min_tokens", "min_tokens must not exceed max_tokens"));
    }
    Ok(GenerationSpec {
        prompts,
        params: SamplingParams {
            temperature,
            top_p,
            top_k: top_k(c, limits.vocab_size)?,
            min_p: min_p(c)?,
            max_tokens,
            min_tokens: c.min_tokens,
            ignore_eos: c.ignore_eos,
            stop_token_ids: stop_token_ids(c, limits.vocab_size)?,
            logprobs,
            prompt_logprobs: c.prompt_logprobs,
        },
        seed: c.seed,
        stop: parse_stop(&c.stop)?,
        stream: c.stream,
        include_usage: c.stream_options.as_ref().map(|o| o.include_usage).unwrap_or(false),
        continuous_usage: c.stream_options.as_ref().is_some_and(|o| o.include_usage && o.continuous_usage_stats),
        return_token_ids: c.return_token_ids,
    })
}

impl CompletionRequest {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let v = parse_object(body)?;
        reject_unsupported(&v)?;
        Ok(CompletionRequest { fields: fields(&v)?, common: fields(&v)? })
    }

    pub fn validate(&self, limits: &Limits<'_>) -> Result<GenerationSpec, ApiError> {
        check_model(&self.common.model, limits)?;
        let f = &self.fields;
        if f.echo {
            return Err(ApiError::bad_param("echo", "echo is not supported; use prompt_logprobs"));
        }
        let prompts = parse_prompts(&f.prompt, limits.tokenizer)?;
        build(&self.common, prompts, Some(self.common.max_tokens.unwrap_or(16)), f.logprobs, limits)
    }
}

impl ChatRequest {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let v = parse_object(body)?;
        reject_unsupported(&v)?;
        Ok(ChatRequest { fields: fields(&v)?, common: fields(&v)? })
    }

    pub fn validate(&self, limits: &Limits<'_>) -> Result<GenerationSpec, ApiError> {
        check_model(&self.common.model, limits)?;
        let f = &self.fields;
        if f.messages.is_empty() {
            return Err(ApiError::bad_param("messages", "messages must not be empty"));
        }
        if f.top_logprobs.is_some() && !f.logprobs {
            return Err(ApiError::bad_param("top_logprobs", "top_logprobs requires logprobs: true"));
        }
        // Chat names the count `top_logprobs` (completions: `logprobs`); the error names the field sent.
        if let Some(k) = f.top_logprobs
            && k > MAX_LOGPROBS
        {
            return Err(ApiError::bad_param("top_logprobs", format!("top_logprobs must be at most {MAX_LOGPROBS}")));
        }
        let ids = chat_prompt_ids(&f.messages, f.add_generation_prompt, limits.tokenizer)?;
        let logprobs = if f.logprobs { Some(f.top_logprobs.unwrap_or(0)) } else { None };
        let max = f.max_completion_tokens.or(self.common.max_tokens);
        build(&self.common, vec![ids], max, logprobs, limits)
    }
}

/// Renders chat messages with the model's template and tokenizes them (the
/// template carries the special tokens).
pub fn chat_prompt_ids(
    messages: &[ChatMessageIn],
    add_generation_prompt: bool,
    tok: &Tokenizer,
) -> Result<Vec<u32>, ApiError> {
    let msgs = messages.iter().enumerate().map(|(i, m)| chat_message(i, m)).collect::<Result<Vec<_>, _>>()?;
    let text = tok
        .apply_chat_template(&msgs, add_generation_prompt)
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    let ids = tok.encode(&text, false).map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    Ok(ids)
}

/// Message `i` with a role in `CHAT_ROLES` and its text: a string or text
/// parts; no content (null) only for an assistant message, as OpenAI allows.
fn chat_message(i: usize, m: &ChatMessageIn) -> Result<ChatMessage, ApiError> {
    if !CHAT_ROLES.contains(&m.role.as_str()) {
        let field = format!("messages[{i}].role");
        return Err(ApiError::bad_param(&field, format!("{field} must be system, user or assistant")));
    }
    let field = format!("messages[{i}].content");
    let content = match &m.content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(t)) => Ok(t),
                _ => Err(ApiError::bad_param(&field, format!("{field}: only text content parts are supported"))),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(""),
        Value::Null if m.role == "assistant" => String::new(),
        _ => {
            let message = format!("{field} must be a string or a list of text parts (null only for an assistant)");
            return Err(ApiError::bad_param(&field, message));
        }
    };
    Ok(ChatMessage { role: m.role.clone(), content })
}
