//! The registry of server dialects: the only place that knows how vLLM-style servers
//! (vLLM, SGLang, our engine) and llama.cpp's `llama-server` differ: request fields,
//! where token IDs come back, where the context length is published, the parity call
//! (`harness compare`); the paths every dialect shares are `crate::protocol::routes`'s.
//! Auto-detection reads `/v1/models` `owned_by`, then
//! `/props`. Must not send requests itself (callers pass what they fetched) and must
//! not judge responses.
//!
//! The parity call (greedy, forced-length output token IDs):
//! - vLLM-style: `POST /v1/completions` with `max_tokens` = `min_tokens` = N,
//!   `ignore_eos`, `temperature` 0, `stream` false, `return_token_ids`; IDs in
//!   `choices[0].token_ids`.
//! - llama.cpp: its native `POST /completion` with `n_predict` N, `ignore_eos`,
//!   `temperature` 0, `stream` false, `return_tokens`, `cache_prompt` false; IDs in
//!   the top-level `tokens` (its OpenAI routes return text only).
//!
//! Timed requests and the warmup use `/v1/completions` in every dialect
//! (llama-server accepts `max_tokens` and `ignore_eos` there too).

use serde_json::{Value, json};

use crate::protocol::routes::COMPLETIONS_PATH;

/// `--server-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKindArg {
    /// Detect from /v1/models `owned_by`, then /props.
    Auto,
    /// vLLM's OpenAI server and servers that follow it (SGLang, our engine).
    OpenaiVllm,
    /// llama.cpp's `llama-server`.
    LlamaCpp,
}

pub use crate::protocol::routes::ServerKind;

impl ServerKind {
    /// From the first `/v1/models` entry and, when fetched, the `/props` body.
    /// Returns the kind and the evidence it was chosen on.
    pub fn detect(model_entry: Option<&Value>, props: Option<&Value>) -> (ServerKind, String) {
        let owned_by = model_entry.and_then(|m| m.get("owned_by")).and_then(Value::as_str).unwrap_or("");
        if owned_by.eq_ignore_ascii_case("llamacpp") || owned_by.eq_ignore_ascii_case("llama.cpp") {
            return (ServerKind::LlamaCpp, format!("/v1/models owned_by {owned_by:?}"));
        }
        if !owned_by.is_empty() {
            return (ServerKind::OpenAiVllm, format!("/v1/models owned_by {owned_by:?}"));
        }
        if props.and_then(|p| p.get("default_generation_settings")).is_some() {
            return (ServerKind::LlamaCpp, "/props has default_generation_settings".into());
        }
        (ServerKind::OpenAiVllm, "no owned_by and no llama.cpp /props: the OpenAI/vLLM dialect".into())
    }
}

/// Builds request bodies and reads dialect-specific response fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adapter {
    pub kind: ServerKind,
}

impl Adapter {
    pub fn new(kind: ServerKind) -> Adapter {
        Adapter { kind }
    }

    /// Fields every generation request carries: greedy, a fixed budget that EOS
    /// cannot cut short, token ids back where the dialect offers them.
    fn common(&self, body: &mut serde_json::Map<String, Value>, model: &str, max_tokens: u32, stream: bool) {
        body.insert("model".into(), json!(model));
        body.insert("max_tokens".into(), json!(max_tokens));
        body.insert("temperature".into(), json!(0.0));
        body.insert("ignore_eos".into(), json!(true));
        body.insert("stream".into(), json!(stream));
        match self.kind {
            ServerKind::OpenAiVllm => {
                body.insert("return_token_ids".into(), json!(true));
            }
            // llama.cpp reads `n_predict` natively (and maps `max_tokens` onto it in
            // its OpenAI routes); its OpenAI routes return no token ids: text is compared.
            ServerKind::LlamaCpp => {
                body.insert("n_predict".into(), json!(max_tokens));
            }
        }
    }

    /// A `/v1/completions` body.
    pub fn completion(&self, model: &str, prompt: Value, max_tokens: u32, stream: bool) -> Value {
        let mut body = serde_json::Map::new();
        body.insert("prompt".into(), prompt);
        self.common(&mut body, model, max_tokens, stream);
        Value::Object(body)
    }

    /// A `/v1/chat/completions` body with one user message.
    pub fn chat(&self, model: &str, text: &str, max_tokens: u32, stream: bool) -> Value {
        let mut body = serde_json::Map::new();
        body.insert("messages".into(), json!([{"role": "user", "content": text}]));
        self.common(&mut body, model, max_tokens, stream);
        Value::Object(body)
    }

    /// Token ids of one choice (or stream chunk choice), when the server sent them.
    /// `Err` when the field is there but is not a list of ids.
    pub fn token_ids(&self, choice: &Value) -> Result<Option<Vec<u32>>, String> {
        let field = match self.kind {
            ServerKind::OpenAiVllm => "token_ids",
            ServerKind::LlamaCpp => "tokens",
        };
        let Some(v) = choice.get(field).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let arr = v.as_array().ok_or_else(|| format!("{field} is not an array"))?;
        arr.iter()
            .map(|x| {
                x.as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(|| format!("bad token id {x} in {field}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// The context length the server publishes: vLLM's `max_model_len` on the
    /// `/v1/models` entry; llama.cpp's `n_ctx` in `/props`.
    pub fn max_context(&self, model_entry: Option<&Value>, props: Option<&Value>) -> Option<u64> {
        let from_models = model_entry.and_then(|m| m.get("max_model_len")).and_then(Value::as_u64);
        let from_props = props.and_then(|p| {
            p.get("default_generation_settings")
                .and_then(|d| d.get("n_ctx"))
                .or_else(|| p.get("n_ctx"))
                .and_then(Value::as_u64)
        });
        match self.kind {
            ServerKind::OpenAiVllm => from_models.or(from_props),
            ServerKind::LlamaCpp => from_props.or(from_models),
        }
        .filter(|&n| n > 0)
    }
}

/// The parity request of one prompt: path and body.
pub fn parity_request(kind: ServerKind, model: &str, prompt: &[u32], n: u32) -> (&'static str, Value) {
    match kind {
        ServerKind::OpenAiVllm => (
            COMPLETIONS_PATH,
            json!({"model": model, "prompt": prompt, "max_tokens": n, "min_tokens": n, "ignore_eos": true,
                   "temperature": 0.0, "stream": false, "return_token_ids": true}),
        ),
        ServerKind::LlamaCpp => (
            "/completion",
            json!({"prompt": prompt, "n_predict": n, "ignore_eos": true, "temperature": 0.0, "stream": false,
                   "return_tokens": true, "cache_prompt": false}),
        ),
    }
}

/// The output token IDs of a parity answer, or why there are none.
pub fn parity_tokens(kind: ServerKind, body: &Value) -> Result<Vec<u32>, String> {
    let holder = match kind {
        ServerKind::OpenAiVllm => body
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .ok_or("no choices[0] in the answer")?,
        ServerKind::LlamaCpp => body,
    };
    Adapter::new(kind).token_ids(holder)?.ok_or_else(|| "the answer carries no token ids".to_string())
}

/// The prompt length the server says it evaluated, when it says so.
pub fn prompt_tokens(kind: ServerKind, body: &Value) -> Option<u64> {
    match kind {
        ServerKind::OpenAiVllm => body.get("usage").and_then(|u| u.get("prompt_tokens")),
        ServerKind::LlamaCpp => body.get("tokens_evaluated"),
    }
    .and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_owned_by_then_props() {
        let llama = json!({"id": "m", "owned_by": "llamacpp"});
        assert_eq!(ServerKind::detect(Some(&llama), None).0, ServerKind::LlamaCpp);
        let vllm = json!({"id": "m", "owned_by": "vllm", "max_model_len": 4096});
        assert_eq!(ServerKind::detect(Some(&vllm), None).0, ServerKind::OpenAiVllm);
        let bare = json!({"id": "m"});
        let props = json!({"default_generation_settings": {"n_ctx": 2048}});
        assert_eq!(ServerKind::detect(Some(&bare), Some(&props)).0, ServerKind::LlamaCpp);
        assert_eq!(ServerKind::detect(None, None).0, ServerKind::OpenAiVllm);
        assert_eq!(Adapter::new(ServerKind::LlamaCpp).max_context(Some(&bare), Some(&props)), Some(2048));
        assert_eq!(Adapter::new(ServerKind::OpenAiVllm).max_context(Some(&vllm), None), Some(4096));
    }

    #[test]
    fn dialect_fields() {
        let v = Adapter::new(ServerKind::OpenAiVllm).completion("m", json!([1, 2]), 8, false);
        assert_eq!(v["return_token_ids"], true);
        assert_eq!(v["ignore_eos"], true);
        assert!(v.get("n_predict").is_none());
        let l = Adapter::new(ServerKind::LlamaCpp).chat("m", "hi", 8, true);
        assert_eq!(l["n_predict"], 8);
        assert_eq!(l["max_tokens"], 8);
        assert!(l.get("return_token_ids").is_none());
        let a = Adapter::new(ServerKind::OpenAiVllm);
        assert_eq!(a.token_ids(&json!({"token_ids": [3, 4]})), Ok(Some(vec![3, 4])));
        assert_eq!(a.token_ids(&json!({"text": "x"})), Ok(None));
        assert!(a.token_ids(&json!({"token_ids": [-1]})).is_err());
    }

    #[test]
    fn each_dialect_asks_for_and_reads_token_ids() {
        let (path, v) = parity_request(ServerKind::OpenAiVllm, "m", &[1, 2], 4);
        assert_eq!((path, &v["max_tokens"], &v["return_token_ids"]), ("/v1/completions", &json!(4), &json!(true)));
        let (path, l) = parity_request(ServerKind::LlamaCpp, "m", &[1, 2], 4);
        assert_eq!((path, &l["n_predict"], &l["return_tokens"]), ("/completion", &json!(4), &json!(true)));
        assert_eq!(l["prompt"], json!([1, 2]));
        let vllm = json!({"choices": [{"text": "ab", "token_ids": [7, 8]}], "usage": {"prompt_tokens": 2}});
        assert_eq!(parity_tokens(ServerKind::OpenAiVllm, &vllm), Ok(vec![7, 8]));
        assert_eq!(prompt_tokens(ServerKind::OpenAiVllm, &vllm), Some(2));
        let llama = json!({"content": "ab", "tokens": [7, 9], "tokens_evaluated": 2});
        assert_eq!(parity_tokens(ServerKind::LlamaCpp, &llama), Ok(vec![7, 9]));
        assert!(parity_tokens(ServerKind::LlamaCpp, &json!({"content": "ab"})).is_err());
        assert!(parity_tokens(ServerKind::OpenAiVllm, &llama).is_err());
    }
}
