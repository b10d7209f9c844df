//! The parity call in each server's dialect: the one place `harness compare` knows how
//! to get greedy, forced-length output token IDs back from a server. Builds on
//! `accept::Adapter` (which knows where each dialect puts token IDs) and
//! `accept::ServerKind::detect`:
//!
//! - vLLM-style (vLLM, SGLang, this engine): `POST /v1/completions` with
//!   `max_tokens` = `min_tokens` = N, `ignore_eos`, `temperature` 0, `stream` false,
//!   `return_token_ids`; IDs in `choices[0].token_ids`.
//! - llama.cpp's `llama-server`: its native `POST /completion` with `n_predict` N,
//!   `ignore_eos`, `temperature` 0, `stream` false, `return_tokens`, `cache_prompt`
//!   false; IDs in the top-level `tokens` (its OpenAI routes return text only).
//!
//! Timed requests do not come here: every arm gets the same `/v1/completions` stream
//! body (`load::stream_body`), which llama-server also accepts (`max_tokens`,
//! `ignore_eos`). Must not send requests or judge answers.

use serde_json::{Value, json};

use crate::accept::{Adapter, ServerKind};

/// The parity request of one prompt: path and body.
pub fn parity_request(kind: ServerKind, model: &str, prompt: &[u32], n: u32) -> (&'static str, Value) {
    match kind {
        ServerKind::OpenAiVllm => (
            "/v1/completions",
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
