//! JSON pieces shared by responses and stream chunks: usage (with cached
//! prompt tokens), completions-style and chat-style logprobs, and vLLM's
//! prompt_logprobs.

use super::choice::ChoiceState;
use super::sampling::TokenLogprob;
use crate::tokenizer::Tokenizer;
use serde_json::{Value, json};

/// Usage of a whole request; `prompt_tokens_details.cached_tokens` counts
/// prompt tokens served from the prefix cache.
pub fn usage(choices: &[ChoiceState]) -> Value {
    let prompt: usize = choices.iter().map(|c| c.prompt_ids.len()).sum();
    let completion: usize = choices.iter().map(|c| c.completion_tokens).sum();
    let cached: usize = choices.iter().map(|c| c.cached_tokens).sum();
    usage_json(prompt, completion, cached)
}

pub fn usage_json(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": cached}})
}

fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

pub fn completion_logprobs(lps: &[TokenLogprob], tok: &Tokenizer, offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(lps.len());
    let mut at = offset;
    let tokens: Vec<String> = lps
        .iter()
        .map(|l| {
            let t = token_text(tok, l.token);
            text_offset.push(at);
            at += t.len();
            t
        })
        .collect();
    json!({
        "tokens": tokens,
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| completion_top(l, tok)).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// One position's `top_logprobs`: the top k, and the sampled token as an extra
/// entry when it is not among them (as vLLM does).
fn completion_top(l: &TokenLogprob, tok: &Tokenizer) -> serde_json::Map<String, Value> {
    let mut m: serde_json::Map<String, Value> =
        l.top.iter().map(|(id, lp)| (token_text(tok, *id), json!(lp))).collect();
    if !l.top.iter().any(|(id, _)| *id == l.token) {
        m.entry(token_text(tok, l.token)).or_insert_with(|| json!(l.logprob));
    }
    m
}

pub fn chat_logprobs(lps: &[TokenLogprob], tok: &Tokenizer) -> Value {
    let entry = |id: u32, lp: f64| {
        let t = token_text(tok, id);
        json!({"token": t, "logprob": lp, "bytes": t.as_bytes()})
    };
    json!({"content": lps.iter().map(|l| {
        let mut e = entry(l.token, l.logprob);
        e["top_logprobs"] = json!(l.top.iter().map(|(id, lp)| entry(*id, *lp)).collect::<Vec<_>>());
        e
    }).collect::<Vec<_>>()})
}

/// vLLM's format: `[null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]`.
pub fn prompt_logprobs_json(lps: &[TokenLogprob], tok: &Tokenizer) -> Value {
    let mut out = vec![Value::Null];
    for l in lps {
        let mut m = serde_json::Map::new();
        m.insert(
            l.token.to_string(),
            json!({"logprob": l.logprob, "rank": l.rank, "decoded_token": token_text(tok, l.token)}),
        );
        for (rank, (id, lp)) in l.top.iter().enumerate() {
            m.entry(id.to_string())
                .or_insert_with(|| json!({"logprob": lp, "rank": rank + 1, "decoded_token": token_text(tok, *id)}));
        }
        out.push(Value::Object(m));
    }
    Value::Array(out)
}
