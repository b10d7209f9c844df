//! One SSE `data:` payload of a streamed completion, read into what the record keeps:
//! the response id, the tokens it carries, its finish reason and usage. Owns the
//! token-count rule of `record::StreamEvent`: the length of `token_ids` when the
//! server returns them, else 1 for a non-empty text delta (content or reasoning) and
//! 0 otherwise (role-only, empty and usage-only chunks carry 0); a delta with
//! reasoning and no content counts its tokens as reasoning. Must not touch the network or clocks.

use serde_json::Value;

use crate::evidence::request_record::Usage;

/// What one chunk says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    pub id: Option<String>,
    pub tokens: u32,
    pub token_ids: Option<Vec<u32>>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// An in-stream error object (`{"error": ...}`), as text.
    pub error: Option<String>,
    /// The text the chunk carries (`text`, or a chat `delta.content`), all choices joined.
    pub text: String,
    /// Of `tokens`, those of reasoning deltas (`delta.reasoning`, vLLM's field since
    /// it renamed it, or `delta.reasoning_content`, older vLLM's and SGLang's): every
    /// token of a choice whose delta has reasoning text and no content.
    pub reasoning_tokens: u32,
}

fn ids_of(v: &Value) -> Result<Vec<u32>, String> {
    let arr = v.as_array().ok_or("token_ids is not an array")?;
    arr.iter()
        .map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(|| format!("bad token id {x}")))
        .collect()
}

fn usage_of(v: &Value) -> Result<Usage, String> {
    let field = |k: &str| -> Result<u32, String> {
        v.get(k)
            .and_then(Value::as_u64)
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| format!("usage.{k} is missing or not a count"))
    };
    let prompt_tokens = field("prompt_tokens")?;
    let completion_tokens = field("completion_tokens")?;
    let total_tokens = field("total_tokens").unwrap_or(prompt_tokens.saturating_add(completion_tokens));
    let reasoning_tokens = v
        .get("completion_tokens_details")
        .and_then(|d| d.get("reasoning_tokens"))
        .and_then(Value::as_u64)
        .and_then(|x| u32::try_from(x).ok());
    Ok(Usage { prompt_tokens, completion_tokens, total_tokens, reasoning_tokens })
}

/// Parses one `data:` payload (not `[DONE]`). An error names what is malformed.
pub fn parse_chunk(data: &str) -> Result<Chunk, String> {
    let v: Value = serde_json::from_str(data).map_err(|e| format!("not JSON ({e}): {}", clip(data)))?;
    let obj = v.as_object().ok_or_else(|| format!("not a JSON object: {}", clip(data)))?;
    let mut chunk = Chunk { id: obj.get("id").and_then(Value::as_str).map(str::to_string), ..Chunk::default() };
    if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
        chunk.error = Some(err.to_string());
        return Ok(chunk);
    }
    if let Some(u) = obj.get("usage").filter(|u| !u.is_null()) {
        chunk.usage = Some(usage_of(u)?);
    }
    let choices = match obj.get("choices") {
        Some(Value::Array(c)) => c,
        Some(_) => return Err("choices is not an array".into()),
        None if chunk.usage.is_some() => return Ok(chunk),
        None => return Err(format!("not a completion chunk (no choices): {}", clip(data))),
    };
    for choice in choices {
        let delta = choice.get("delta");
        let text = choice
            .get("text")
            .and_then(Value::as_str)
            .or_else(|| delta.and_then(|d| d.get("content")).and_then(Value::as_str))
            .unwrap_or("");
        let reasoning = delta
            .and_then(|d| d.get("reasoning").or_else(|| d.get("reasoning_content")))
            .and_then(Value::as_str)
            .unwrap_or("");
        chunk.text.push_str(text);
        let tokens = match choice.get("token_ids").filter(|t| !t.is_null()) {
            Some(ids) => {
                let ids = ids_of(ids)?;
                let n = ids.len() as u32;
                chunk.token_ids.get_or_insert_with(Vec::new).extend(ids);
                n
            }
            None if !text.is_empty() || !reasoning.is_empty() => 1,
            None => 0,
        };
        chunk.tokens = chunk.tokens.saturating_add(tokens);
        if text.is_empty() && !reasoning.is_empty() {
            chunk.reasoning_tokens = chunk.reasoning_tokens.saturating_add(tokens);
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            chunk.finish_reason = Some(f.to_string());
        }
    }
    Ok(chunk)
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_follow_the_record_rule() {
        let role = parse_chunk(r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#).unwrap();
        assert_eq!((role.tokens, role.token_ids.clone()), (0, None));
        let empty = parse_chunk(r#"{"id":"c","choices":[{"index":0,"text":""}]}"#).unwrap();
        assert_eq!(empty.tokens, 0);
        let text = parse_chunk(r#"{"id":"c","choices":[{"index":0,"text":"ab"}]}"#).unwrap();
        assert_eq!(text.tokens, 1);
        let multi =
            parse_chunk(r#"{"id":"c","choices":[{"text":"","token_ids":[5,6,7],"finish_reason":"length"}]}"#).unwrap();
        assert_eq!(
            (multi.tokens, multi.token_ids, multi.finish_reason.as_deref()),
            (3, Some(vec![5, 6, 7]), Some("length"))
        );
        let usage = parse_chunk(
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}"#,
        )
        .unwrap();
        assert_eq!(usage.tokens, 0);
        assert_eq!(
            usage.usage,
            Some(Usage { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6, reasoning_tokens: None })
        );
        assert_eq!(usage.id.as_deref(), Some("c"));
    }

    #[test]
    fn chat_deltas_count_as_completion_chunks_do() {
        // The engine's and vLLM's chat stream: a role-only delta, content deltas
        // (with token_ids when asked), a finish delta, then the usage chunk.
        let role = parse_chunk(
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        )
        .unwrap();
        assert_eq!((role.tokens, role.id.as_deref()), (0, Some("chatcmpl-1")));
        let ids = parse_chunk(r#"{"choices":[{"index":0,"delta":{"content":"To"},"token_ids":[53,84]}]}"#).unwrap();
        assert_eq!((ids.tokens, ids.token_ids, ids.text.as_str()), (2, Some(vec![53, 84]), "To"));
        let text = parse_chunk(r#"{"choices":[{"index":0,"delta":{"content":" be"}}]}"#).unwrap();
        assert_eq!(text.tokens, 1);
        let fin = parse_chunk(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#).unwrap();
        assert_eq!((fin.tokens, fin.finish_reason.as_deref()), (0, Some("stop")));
    }

    #[test]
    fn reasoning_deltas_carry_tokens_with_or_without_token_ids() {
        // vLLM 0.34 streams `delta.reasoning`; older vLLM and SGLang `reasoning_content`.
        for field in ["reasoning", "reasoning_content"] {
            let bare =
                parse_chunk(&format!(r#"{{"choices":[{{"index":0,"delta":{{"{field}":" think"}}}}]}}"#)).unwrap();
            assert_eq!((bare.tokens, bare.reasoning_tokens, bare.text.as_str()), (1, 1, ""), "{field}");
            let ids =
                parse_chunk(&format!(r#"{{"choices":[{{"index":0,"delta":{{"{field}":"ab"}},"token_ids":[4,5]}}]}}"#))
                    .unwrap();
            assert_eq!((ids.tokens, ids.reasoning_tokens), (2, 2), "{field}");
        }
        let content = parse_chunk(r#"{"choices":[{"index":0,"delta":{"content":"x","reasoning":null}}]}"#).unwrap();
        assert_eq!((content.tokens, content.reasoning_tokens), (1, 0));
        let usage = parse_chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13,"completion_tokens_details":{"reasoning_tokens":5}}}"#,
        )
        .unwrap();
        assert_eq!(usage.usage.unwrap().reasoning_tokens, Some(5));
    }

    #[test]
    fn malformed_payloads_are_errors() {
        assert!(parse_chunk("{not json").unwrap_err().contains("not JSON"));
        assert!(parse_chunk("[1]").unwrap_err().contains("not a JSON object"));
        assert!(parse_chunk(r#"{"id":"x"}"#).unwrap_err().contains("no choices"));
        assert!(parse_chunk(r#"{"choices":[{"token_ids":[-1]}]}"#).is_err());
        let err = parse_chunk(r#"{"error":{"message":"boom"}}"#).unwrap();
        assert!(err.error.unwrap().contains("boom"));
    }
}
