//! OpenAI-compatible request types and their validation into one engine-level
//! `GenerationSpec`. Field names follow OpenAI, with vLLM's extras
//! (`ignore_eos`, `min_tokens`, `stop_token_ids`, `return_token_ids`,
//! `prompt_logprobs`, `top_k`). Fields the engine does not implement (tools,
//! response formats, penalties, ...) are refused with 400 naming the field
//! (`UNSUPPORTED`) rather than silently ignored; other unknown fields (`user`,
//! `metadata`, ...) are ignored, as OpenAI does.

use super::error::{ApiError, fields, parse_object};
use super::sampling::SamplingParams;
use crate::tokenizer::{ChatMessage, Tokenizer};
use serde::Deserialize;
use serde_json::Value;

/// Most prompts one completions request may carry.
pub const MAX_PROMPTS_PER_REQUEST: usize = 256;
/// Most alternatives per token for logprobs and prompt_logprobs.
pub const MAX_LOGPROBS: usize = 20;

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
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
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
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(String::from)
                    .ok_or_else(|| ApiError::bad_param("stop", "stop must be a string or a list of strings"))
            })
            .collect(),
        _ => Err(ApiError::bad_param("stop", "stop must be a string or a list of strings")),
    }
    .and_then(|s: Vec<String>| {
        if s.iter().any(|x| x.is_empty()) {
            Err(ApiError::bad_param("stop", "stop strings must not be empty"))
        } else {
            Ok(s)
        }
    })
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
    let temperature = c.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(ApiError::bad_param("temperature", "temperature must be >= 0"));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_param("top_p", "top_p must be in (0, 1]"));
    }
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
            top_k: c.top_k.unwrap_or(0),
            max_tokens,
            min_tokens: c.min_tokens,
            ignore_eos: c.ignore_eos,
            stop_token_ids: c.stop_token_ids.clone().unwrap_or_default(),
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
    let mut msgs = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let content = match &m.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => Ok(t.to_string()),
                    _ => Err(ApiError::bad_param(
                        format!("messages[{i}].content"),
                        "only text content parts are supported",
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(""),
            Value::Null => String::new(),
            _ => {
                return Err(ApiError::bad_param(
                    format!("messages[{i}].content"),
                    "content must be a string or a list of parts",
                ));
            }
        };
        msgs.push(ChatMessage { role: m.role.clone(), content });
    }
    let text = tok
        .apply_chat_template(&msgs, add_generation_prompt)
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    let ids = tok.encode(&text, false).map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    Ok(ids)
}
