//! Request bodies: the timed streaming `/v1/completions` request of one panel prompt,
//! and the warmup's one non-streaming batched call. Built from the frozen plan and
//! the panel only, serialized once, and the same bytes sent to every arm. Owns the
//! field set (vLLM-compatible, in a fixed order). Must not vary a body by arm.
//!
//! Timed body: `{"model", "prompt": [ids], "max_tokens": output_tokens,
//! "min_tokens": output_tokens (only with ignore_eos), "ignore_eos", "temperature",
//! "stream": true, "stream_options": {"include_usage": true}, "return_token_ids": true}`.

use serde::Serialize;

use crate::plan::Plan;

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Body<'a, P: Serialize> {
    model: &'a str,
    prompt: P,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tokens: Option<u32>,
    ignore_eos: bool,
    temperature: f64,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    return_token_ids: Option<bool>,
}

fn to_bytes<T: Serialize>(body: &T) -> Vec<u8> {
    // Strings, integers, finite floats and bools always serialize.
    serde_json::to_vec(body).unwrap_or_default()
}

/// The body of one timed request for `tokens` (a panel prompt).
pub fn stream_body(plan: &Plan, tokens: &[u32]) -> Vec<u8> {
    stream_body_with(plan, tokens, plan.request.output_tokens)
}

/// [`stream_body`] with `output_tokens` as `max_tokens` (and `min_tokens` when
/// forced): a trace-file row's own output length.
pub fn stream_body_with(plan: &Plan, tokens: &[u32], output_tokens: u32) -> Vec<u8> {
    let r = &plan.request;
    to_bytes(&Body {
        model: &r.model,
        prompt: tokens,
        max_tokens: output_tokens,
        min_tokens: r.ignore_eos.then_some(output_tokens),
        ignore_eos: r.ignore_eos,
        temperature: r.temperature,
        stream: true,
        stream_options: Some(StreamOptions { include_usage: true }),
        return_token_ids: Some(true),
    })
}

/// The warmup call: one non-streaming request whose prompt is a list of token lists.
pub fn warmup_body(plan: &Plan, prompts: &[&[u32]]) -> Vec<u8> {
    let r = &plan.request;
    let out = plan.warmup.output_tokens;
    to_bytes(&Body {
        model: &r.model,
        prompt: prompts,
        max_tokens: out,
        min_tokens: r.ignore_eos.then_some(out),
        ignore_eos: r.ignore_eos,
        temperature: r.temperature,
        stream: false,
        stream_options: None,
        return_token_ids: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_documented_fields_in_order() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/e2e-synthetic.toml")).unwrap();
        let plan = crate::plan::parse(&text).unwrap();
        let body = String::from_utf8(stream_body(&plan, &[1, 2, 3])).unwrap();
        assert_eq!(
            body,
            r#"{"model":"synth","prompt":[1,2,3],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}"#
        );
        let warm = String::from_utf8(warmup_body(&plan, &[&[1, 2], &[3]])).unwrap();
        assert_eq!(
            warm,
            r#"{"model":"synth","prompt":[[1,2],[3]],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":false}"#
        );
    }
}
