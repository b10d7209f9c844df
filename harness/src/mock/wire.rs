//! What crosses the wire: a request body read into what the mock honours (prompt
//! length, `max_tokens`, `ignore_eos`, `stream`, `stream_options.include_usage`,
//! `return_token_ids`), the requests it refuses with 400 (as the engine does: `n`
//! other than 1, tools, a body that is not a JSON object, no prompt), and every
//! byte it answers: SSE frames in vLLM's shapes for completions and chat, reasoning
//! deltas, usage chunks, `[DONE]`, non-streamed bodies and error bodies. Owns the
//! mock's wire format. Must not read clocks or decide when anything is sent.

use axum::body::Bytes;
use serde_json::{Value, json};

/// Which route a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Completions,
    Chat,
}

impl Route {
    pub fn path(self) -> &'static str {
        match self {
            Route::Completions => crate::protocol::routes::COMPLETIONS_PATH,
            Route::Chat => crate::protocol::routes::CHAT_COMPLETIONS_PATH,
        }
    }
    fn id_prefix(self) -> &'static str {
        match self {
            Route::Completions => "cmpl",
            Route::Chat => "chatcmpl",
        }
    }
    fn chunk_object(self) -> &'static str {
        match self {
            Route::Completions => "text_completion",
            Route::Chat => "chat.completion.chunk",
        }
    }
}

/// What a request asks for, as far as the mock honours it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Prompt tokens of each prompt (one, except a batched non-streamed completion):
    /// the length of a token-ID array, else the whitespace-separated words of the
    /// text (the mock has no tokenizer; chat: over every message's content).
    pub prompt_tokens: Vec<u64>,
    pub max_tokens: Option<u32>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    pub return_token_ids: bool,
}

/// A request the mock refuses with 400: the message and the parameter at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub message: String,
    pub param: Option<&'static str>,
}

fn refuse(message: impl Into<String>, param: Option<&'static str>) -> Refusal {
    Refusal { message: message.into(), param }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn prompt_lengths(v: &Value) -> Result<Vec<u64>, Refusal> {
    let bad = || refuse("prompt must be a string, a token-ID array, or a list of either", Some("prompt"));
    match v {
        Value::String(s) => Ok(vec![words(s)]),
        Value::Array(items) if items.iter().all(Value::is_u64) => Ok(vec![items.len() as u64]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|p| match p {
                Value::String(s) => Ok(words(s)),
                Value::Array(ids) if ids.iter().all(Value::is_u64) => Ok(ids.len() as u64),
                _ => Err(bad()),
            })
            .collect(),
        _ => Err(bad()),
    }
}

fn message_words(messages: &Value) -> Result<u64, Refusal> {
    let list = messages
        .as_array()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| refuse("messages must be a non-empty array", Some("messages")))?;
    let mut n = 0;
    for m in list {
        match m.get("content") {
            Some(Value::String(s)) => n += words(s),
            Some(Value::Array(parts)) => {
                n += parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(words).sum::<u64>()
            }
            _ => {}
        }
    }
    Ok(n)
}

/// Reads a request body; a `Refusal` is answered with 400.
pub fn read_ask(route: Route, body: &[u8]) -> Result<Ask, Refusal> {
    let v: Value = serde_json::from_slice(body).map_err(|e| refuse(format!("malformed JSON body: {e}"), None))?;
    let obj = v.as_object().ok_or_else(|| refuse("the request body must be a JSON object", None))?;
    if let Some(n) = obj.get("n").filter(|n| !n.is_null())
        && n.as_u64() != Some(1)
    {
        return Err(refuse(format!("only n = 1 is supported, got {n}"), Some("n")));
    }
    if let Some(tools) = obj.get("tools").filter(|t| !t.is_null())
        && tools.as_array().is_none_or(|a| !a.is_empty())
    {
        return Err(refuse("tools are not supported", Some("tools")));
    }
    let prompt_tokens = match route {
        Route::Completions => {
            prompt_lengths(obj.get("prompt").ok_or_else(|| refuse("prompt is required", Some("prompt")))?)?
        }
        Route::Chat => vec![message_words(obj.get("messages").unwrap_or(&Value::Null))?],
    };
    let count = |key: &'static str| -> Result<Option<u32>, Refusal> {
        match obj.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .filter(|x| *x >= 1)
                .map(Some)
                .ok_or_else(|| refuse(format!("{key} must be a positive integer, got {v}"), Some(key))),
        }
    };
    let max_tokens = match route {
        Route::Chat => count("max_completion_tokens")?.or(count("max_tokens")?),
        Route::Completions => count("max_tokens")?,
    };
    let flag = |key: &str| obj.get(key).and_then(Value::as_bool).unwrap_or(false);
    let stream = flag("stream");
    let include_usage =
        obj.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    if stream && prompt_tokens.len() > 1 {
        return Err(refuse("a streamed batch of prompts is not supported; send one prompt", Some("prompt")));
    }
    Ok(Ask {
        prompt_tokens,
        max_tokens,
        ignore_eos: flag("ignore_eos"),
        stream,
        include_usage,
        return_token_ids: flag("return_token_ids"),
    })
}

/// The body of a 400 (and of an injected 500): the engine's and vLLM's error shape.
pub fn error_body(message: &str, kind: &str, param: Option<&str>, code: u16) -> String {
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}}).to_string()
}

/// One SSE frame.
pub fn frame(json: &Value) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// What a token event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Reasoning,
    Content,
}

/// The token ID of output token `k` (any fixed, recognisable sequence).
pub fn token_id(k: u32) -> u32 {
    1000 + k % 30_000
}

/// Everything a request's frames share.
pub struct Framer<'a> {
    pub route: Route,
    pub id: &'a str,
    pub model: &'a str,
    pub return_token_ids: bool,
    /// The delta field of reasoning tokens on the chat route.
    pub reasoning_field: &'a str,
}

impl Framer<'_> {
    fn base(&self, choices: Value) -> Value {
        json!({"id": self.id, "object": self.route.chunk_object(), "created": 0, "model": self.model, "choices": choices})
    }

    /// Chat's first chunk: the role, empty content (vLLM sends it before the first token).
    pub fn role(&self) -> Bytes {
        frame(&self.base(json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}])))
    }

    /// Token `k` of the output; `finish` on the last.
    pub fn token(&self, k: u32, kind: TokenKind, finish: Option<&str>) -> Bytes {
        let text = match kind {
            TokenKind::Reasoning => " think",
            TokenKind::Content => " tok",
        };
        let mut choice = match (self.route, kind) {
            (Route::Completions, _) => json!({"index": 0, "text": text, "logprobs": null}),
            (Route::Chat, TokenKind::Content) => json!({"index": 0, "delta": {"content": text}, "logprobs": null}),
            (Route::Chat, TokenKind::Reasoning) => {
                json!({"index": 0, "delta": {self.reasoning_field: text}, "logprobs": null})
            }
        };
        choice["finish_reason"] = finish.map_or(Value::Null, Value::from);
        if self.return_token_ids {
            choice["token_ids"] = json!([token_id(k)]);
        }
        frame(&self.base(json!([choice])))
    }

    /// The usage-only chunk of `stream_options.include_usage`.
    pub fn usage(&self, prompt: u64, completion: u32, reasoning: u32) -> Bytes {
        let mut v = self.base(json!([]));
        v["usage"] = usage(prompt, completion, reasoning);
        frame(&v)
    }

    /// An in-stream error event (before the connection is dropped).
    pub fn error_event(&self, message: &str) -> Bytes {
        frame(&json!({"error": {"message": message, "type": "server_error", "code": 500}}))
    }

    /// A whole non-streamed answer: one choice per prompt.
    pub fn whole(&self, prompts: &[u64], completion: u32, reasoning: u32, finish: &str) -> String {
        let content: String = (reasoning..completion).map(|_| " tok").collect();
        let thinking: String = (0..reasoning).map(|_| " think").collect();
        let ids: Vec<u32> = (0..completion).map(token_id).collect();
        let choices: Vec<Value> = (0..prompts.len())
            .map(|i| {
                let mut c = match self.route {
                    Route::Completions => json!({"index": i, "text": format!("{thinking}{content}"), "logprobs": null}),
                    Route::Chat => {
                        let mut m = json!({"role": "assistant", "content": content});
                        if reasoning > 0 {
                            m[self.reasoning_field] = Value::from(thinking.clone());
                        }
                        json!({"index": i, "message": m, "logprobs": null})
                    }
                };
                c["finish_reason"] = Value::from(finish);
                if self.return_token_ids {
                    c["token_ids"] = json!(ids);
                }
                c
            })
            .collect();
        let object = match self.route {
            Route::Completions => "text_completion",
            Route::Chat => "chat.completion",
        };
        let total_prompt: u64 = prompts.iter().sum();
        json!({"id": self.id, "object": object, "created": 0, "model": self.model, "choices": choices,
               "usage": usage(total_prompt, completion * prompts.len() as u32, reasoning * prompts.len() as u32)})
        .to_string()
    }
}

fn usage(prompt: u64, completion: u32, reasoning: u32) -> Value {
    let mut u = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + u64::from(completion)});
    if reasoning > 0 {
        u["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    u
}

/// The server request id of request number `n`: `cmpl-mock-<n>` / `chatcmpl-mock-<n>`.
pub fn request_id(route: Route, n: u64) -> String {
    format!("{}-mock-{n}", route.id_prefix())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_or_refused_as_the_engine_does() {
        let ask = read_ask(
            Route::Completions,
            br#"{"prompt":[1,2,3],"max_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}"#,
        )
        .unwrap();
        assert_eq!(
            ask,
            Ask {
                prompt_tokens: vec![3],
                max_tokens: Some(4),
                ignore_eos: true,
                stream: true,
                include_usage: true,
                return_token_ids: true
            }
        );
        let chat =
            read_ask(Route::Chat, br#"{"messages":[{"role":"user","content":"a b c d"}],"max_completion_tokens":2}"#)
                .unwrap();
        assert_eq!((chat.prompt_tokens, chat.max_tokens, chat.stream), (vec![4], Some(2), false));
        let batch = read_ask(Route::Completions, br#"{"prompt":[[1,2],[3]],"max_tokens":2}"#).unwrap();
        assert_eq!(batch.prompt_tokens, [2, 1]);
        let param = |route, body: &[u8]| read_ask(route, body).unwrap_err().param;
        assert_eq!(param(Route::Completions, br#"{"prompt":"x","n":2}"#), Some("n"));
        assert_eq!(
            param(Route::Chat, br#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#),
            Some("tools")
        );
        assert!(read_ask(Route::Chat, br#"{"messages":[{"role":"user","content":"x"}],"tools":[],"n":1}"#).is_ok());
        assert_eq!(param(Route::Completions, br#"{"max_tokens":2}"#), Some("prompt"));
        assert_eq!(param(Route::Completions, br#"{"prompt":"x","max_tokens":0}"#), Some("max_tokens"));
        assert_eq!(param(Route::Completions, br#"{"prompt":[[1],[2]],"stream":true}"#), Some("prompt"));
        assert_eq!(param(Route::Chat, br#"{"messages":[]}"#), Some("messages"));
        assert_eq!(param(Route::Completions, b"[1]"), None);
    }

    #[test]
    fn frames_have_vllms_shapes() {
        let f = Framer {
            route: Route::Chat,
            id: "chatcmpl-mock-0",
            model: "m",
            return_token_ids: false,
            reasoning_field: "reasoning_content",
        };
        let parse = |b: Bytes| -> Value {
            let s = std::str::from_utf8(&b).unwrap();
            assert!(s.starts_with("data: ") && s.ends_with("\n\n"));
            serde_json::from_str(&s[6..s.len() - 2]).unwrap()
        };
        assert_eq!(parse(f.role())["choices"][0]["delta"]["role"], "assistant");
        let r = parse(f.token(0, TokenKind::Reasoning, None));
        assert_eq!(r["choices"][0]["delta"]["reasoning_content"], " think");
        assert!(r["choices"][0]["delta"].get("content").is_none());
        let c = parse(f.token(1, TokenKind::Content, Some("length")));
        assert_eq!(
            (c["choices"][0]["delta"]["content"].as_str(), c["choices"][0]["finish_reason"].as_str()),
            (Some(" tok"), Some("length"))
        );
        let u = parse(f.usage(5, 2, 1));
        assert_eq!(u["usage"]["completion_tokens_details"]["reasoning_tokens"], 1);
        let g = Framer { route: Route::Completions, return_token_ids: true, ..f };
        let t = parse(g.token(3, TokenKind::Content, None));
        assert_eq!(
            (t["choices"][0]["text"].as_str(), t["choices"][0]["token_ids"][0].as_u64()),
            (Some(" tok"), Some(1003))
        );
        let whole: Value = serde_json::from_str(&g.whole(&[2, 3], 4, 0, "length")).unwrap();
        assert_eq!(
            (whole["choices"].as_array().unwrap().len(), whole["usage"]["prompt_tokens"].as_u64()),
            (2, Some(5))
        );
        assert_eq!(request_id(Route::Chat, 7), "chatcmpl-mock-7");
    }
}
