//! Request bodies: the timed streaming `/v1/completions` request of one panel prompt,
//! and the warmup's one non-streaming batched call. Built from the frozen plan and
//! the panel only, serialized once, and the same bytes sent to every arm. Owns the
//! field set (vLLM-compatible, in a fixed order). Must not vary a body by arm.
//!
//! Timed body: `{"model", "prompt": [ids], "max_tokens": M, "min_tokens": M (only
//! when forced, i.e. with ignore_eos), "ignore_eos", "temperature", "stream": true,
//! "stream_options": {"include_usage": true}, "return_token_ids": true}` (the last
//! field left out with `request.token_ids = false`, as `vllm bench serve` sends), where M is
//! `request.output_tokens` for a fixed-length panel and the entry's own `max_tokens`
//! (fixed in `prompts.jsonl`) for a dataset panel; a dataset entry's `ignore_eos`
//! likewise comes from its line. Natural output (`ignore_eos = false`) sends no
//! `min_tokens`: EOS may end the request before M tokens. The plan's
//! `request.extra_body` fields (sampling parameters such as `top_p`, vLLM bench's
//! `--extra-body`) follow in every body, timed and warmup, sorted by name;
//! a plan without them sends the bytes it sent before they existed.
//!
//! Every timed body is built for one endpoint (the cell's: `cells[].endpoint`, else
//! `request.endpoint`); a plan whose cells use both has two bodies per entry.
//! Chat: the same fields with `"messages": [{"role",
//! "content"}, ..]` (the entry's, from `prompts.jsonl`) in place of `"prompt"`, for
//! `/v1/chat/completions`. The warmup warms the route the timed requests take: one
//! batched non-streaming `/v1/completions` call of the warmup prompts' token IDs, or
//! on the chat endpoint one non-streaming chat call per warmup entry (its messages;
//! a chat call takes one conversation), `max_tokens` = `warmup.output_tokens`.

use axum::body::Bytes;
use reqwest::header::HeaderValue;
use serde::Serialize;
use serde_json::{Map, Value};

use super::PreparedRequest;
use crate::plan::{BodyKind, Endpoint, Plan, RequestSpec};
use crate::trace::{ChatMessage, Prompt};

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// Every body the harness sends, timed or warmup, on either route: the input field
/// second (`prompt` for `/v1/completions`, `messages` for the chat route), then the
/// fields in this fixed order, then the plan's `extra_body`.
#[derive(Serialize)]
struct Body<'a, P: Serialize> {
    model: &'a str,
    #[serde(flatten)]
    input: Input<'a, P>,
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
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// A body's input: token IDs (one list, or a list of lists for the batched warmup)
/// or chat messages.
#[derive(Serialize)]
enum Input<'a, P: Serialize> {
    #[serde(rename = "prompt")]
    Prompt(P),
    #[serde(rename = "messages")]
    Messages(&'a [ChatMessage]),
}

/// Whether a body is the timed stream (usage asked for, token IDs when the kind asks)
/// or a warmup call (neither).
enum Mode {
    Timed { token_ids: bool },
    Warmup,
}

impl<'a, P: Serialize> Body<'a, P> {
    fn new(r: &'a RequestSpec, input: Input<'a, P>, max_tokens: u32, ignore_eos: bool, mode: Mode) -> Self {
        let (stream, stream_options, return_token_ids) = match mode {
            Mode::Timed { token_ids } => (true, Some(StreamOptions { include_usage: true }), token_ids.then_some(true)),
            Mode::Warmup => (false, None, None),
        };
        Body {
            model: &r.model,
            input,
            max_tokens,
            min_tokens: ignore_eos.then_some(max_tokens),
            ignore_eos,
            temperature: r.temperature,
            stream,
            stream_options,
            return_token_ids,
            extra: &r.extra_body,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        // Strings, integers, finite floats and bools always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The chat endpoint's timed body for `messages` (a panel entry's, or a session
/// turn's with its history), with the plan's request fields `r`.
pub fn chat_body(
    r: &RequestSpec,
    messages: &[ChatMessage],
    max_tokens: u32,
    ignore_eos: bool,
    token_ids: bool,
) -> Vec<u8> {
    Body::<()>::new(r, Input::Messages(messages), max_tokens, ignore_eos, Mode::Timed { token_ids }).to_bytes()
}

/// The body of one timed request for a panel prompt, of kind `kind` (its route and
/// whether it asks for token IDs).
pub fn stream_body(plan: &Plan, kind: BodyKind, prompt: &Prompt) -> Vec<u8> {
    stream_body_with(plan, kind, prompt, prompt.max_tokens.unwrap_or(plan.request.output_tokens))
}

/// [`stream_body`] with `max_tokens` as the output length (and `min_tokens` when
/// forced): a trace-file row's own output length.
pub fn stream_body_with(plan: &Plan, kind: BodyKind, prompt: &Prompt, max_tokens: u32) -> Vec<u8> {
    let r = &plan.request;
    let ignore_eos = prompt.ignore_eos.unwrap_or(r.ignore_eos);
    if kind.endpoint == Endpoint::Chat {
        let messages = prompt.messages.as_deref().unwrap_or(&[]);
        return chat_body(r, messages, max_tokens, ignore_eos, kind.token_ids);
    }
    Body::new(r, Input::Prompt(&prompt.tokens), max_tokens, ignore_eos, Mode::Timed { token_ids: kind.token_ids })
        .to_bytes()
}

/// The prepared request of a panel prompt of kind `kind` (body, exact prompt length,
/// max_tokens, and its `x-request-id` value `<request.request_id_prefix><panel
/// index>` when the plan names one).
pub fn prepare(plan: &Plan, kind: BodyKind, prompt: &Prompt) -> PreparedRequest {
    PreparedRequest {
        body: Bytes::from(stream_body(plan, kind, prompt)),
        prompt_tokens: prompt.length,
        max_tokens: prompt.max_tokens.unwrap_or(plan.request.output_tokens),
        // Validation keeps the prefix printable ASCII, so the value always parses.
        request_id: plan.request.request_id(prompt.index).and_then(|id| HeaderValue::from_str(&id).ok()),
    }
}

/// The warmup call: one non-streaming request whose prompt is a list of token lists.
pub fn warmup_body(plan: &Plan, prompts: &[&[u32]]) -> Vec<u8> {
    let r = &plan.request;
    let out = plan.warmup.output_tokens;
    Body::new(r, Input::Prompt(prompts), out, r.ignore_eos, Mode::Warmup).to_bytes()
}

/// The chat warmup: one non-streaming chat call per warmup entry's `messages`.
pub fn warmup_chat_bodies(plan: &Plan, entries: &[&[ChatMessage]]) -> Vec<Vec<u8>> {
    let r = &plan.request;
    let out = plan.warmup.output_tokens;
    entries
        .iter()
        .map(|messages| Body::<()>::new(r, Input::Messages(messages), out, r.ignore_eos, Mode::Warmup).to_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(tokens: &[u32]) -> Prompt {
        Prompt {
            index: 0,
            length: tokens.len() as u32,
            doc: 0,
            source: "test".into(),
            offset: 0,
            output_tokens: None,
            max_tokens: None,
            ignore_eos: None,
            tokens: tokens.to_vec(),
            messages: None,
            next_turns: None,
        }
    }

    fn e2e_plan(edit: &str) -> Plan {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/e2e-synthetic.toml")).unwrap();
        crate::plan::parse(&text.replace("output_tokens = 8\n", edit)).unwrap()
    }

    #[test]
    fn bodies_have_the_documented_fields_in_order() {
        let plan = e2e_plan("output_tokens = 8\n");
        let body =
            String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &prompt(&[1, 2, 3]))).unwrap();
        assert_eq!(
            body,
            r#"{"model":"synth","prompt":[1,2,3],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}"#
        );
        let warm = String::from_utf8(warmup_body(&plan, &[&[1, 2], &[3]])).unwrap();
        assert_eq!(
            warm,
            r#"{"model":"synth","prompt":[[1,2],[3]],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":false}"#
        );
        // `output = "forced"` is the default spelled out: the same bytes.
        let forced = e2e_plan("output_tokens = 8\noutput = \"forced\"\n");
        assert_eq!(stream_body(&forced, forced.body_kind(Endpoint::Completions), &prompt(&[1, 2, 3])), body.as_bytes());
    }

    #[test]
    fn without_token_ids_the_body_is_what_vllm_bench_sends() {
        let plan = e2e_plan("output_tokens = 8\ntoken_ids = false\n");
        let body =
            String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &prompt(&[1, 2, 3]))).unwrap();
        assert_eq!(
            body,
            r#"{"model":"synth","prompt":[1,2,3],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":true,"stream_options":{"include_usage":true}}"#
        );
        let chat = chat_body(&plan.request, &[], 4, false, false);
        assert!(!String::from_utf8(chat).unwrap().contains("return_token_ids"));
    }

    #[test]
    fn extra_body_fields_follow_the_harness_fields_in_every_body() {
        let plan = e2e_plan(
            "output_tokens = 8
extra_body = { top_p = 0.9, top_k = 20, min_p = 0.05 }
",
        );
        let tail = r#","min_p":0.05,"top_k":20,"top_p":0.9}"#;
        let body =
            String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &prompt(&[1, 2, 3]))).unwrap();
        assert_eq!(
            body,
            format!(
                r#"{{"model":"synth","prompt":[1,2,3],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":true,"stream_options":{{"include_usage":true}},"return_token_ids":true{tail}"#
            )
        );
        let warm = String::from_utf8(warmup_body(&plan, &[&[1, 2]])).unwrap();
        assert!(warm.ends_with(&format!(r#""stream":false{tail}"#)), "{warm}");
        let chat = String::from_utf8(chat_body(&plan.request, &[], 4, false, true)).unwrap();
        assert!(chat.ends_with(&format!(r#""return_token_ids":true{tail}"#)), "{chat}");
        let warm_chat = String::from_utf8(warmup_chat_bodies(&plan, &[&[]]).remove(0)).unwrap();
        assert!(warm_chat.ends_with(tail), "{warm_chat}");
        // Nested values go through as JSON.
        let nested = e2e_plan(
            "output_tokens = 8
extra_body = { chat_template_kwargs = { enable_thinking = false } }
",
        );
        let body =
            String::from_utf8(stream_body(&nested, nested.body_kind(Endpoint::Completions), &prompt(&[1]))).unwrap();
        assert!(body.ends_with(r#""chat_template_kwargs":{"enable_thinking":false}}"#), "{body}");
    }

    #[test]
    fn natural_output_sends_no_min_tokens_and_lets_eos_end_it() {
        let plan = e2e_plan("output_tokens = 8\noutput = \"natural\"\n");
        let body =
            String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &prompt(&[1, 2, 3]))).unwrap();
        assert_eq!(
            body,
            r#"{"model":"synth","prompt":[1,2,3],"max_tokens":8,"ignore_eos":false,"temperature":0.0,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}"#
        );
        assert_eq!(prepare(&plan, plan.body_kind(Endpoint::Completions), &prompt(&[1, 2, 3])).max_tokens, 8);
    }

    #[test]
    fn the_chat_endpoint_sends_the_entrys_messages_in_place_of_token_ids() {
        let random = "source = \"random\"\nmin_token_id = 0\nmax_token_id = 255\nlengths = [32]\ndocuments = 4\n";
        let requests = "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 4\n";
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/e2e-synthetic.toml")).unwrap();
        assert!(text.contains(random));
        let text = text.replace("output_tokens = 8\n", "output_tokens = 8\nendpoint = \"chat\"\n");
        let plan = crate::plan::parse(&text.replace(random, requests)).unwrap();
        // Chat needs a panel with messages: a random panel is refused.
        let e = crate::plan::parse(&text).unwrap_err().to_string();
        assert!(e.contains("request.endpoint") && e.contains("\"sharegpt\", \"requests\" or \"synthetic\""), "{e}");
        let m = ChatMessage { role: "user".into(), content: "Who's there?".into() };
        let p = Prompt { max_tokens: Some(5), ignore_eos: Some(false), messages: Some(vec![m]), ..prompt(&[9, 9]) };
        let body = String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Chat), &p)).unwrap();
        assert_eq!(
            body,
            r#"{"model":"synth","messages":[{"role":"user","content":"Who's there?"}],"max_tokens":5,"ignore_eos":false,"temperature":0.0,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}"#
        );
        // On /v1/completions (another cell's endpoint) the same entry sends its token IDs.
        assert!(
            String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &p))
                .unwrap()
                .contains(r#""prompt":[9,9]"#)
        );
        let completions = e2e_plan("output_tokens = 8\n");
        assert!(
            String::from_utf8(stream_body(&completions, completions.body_kind(Endpoint::Completions), &p))
                .unwrap()
                .contains(r#""prompt":[9,9]"#)
        );
        // The chat warmup: one non-streaming call per entry, at the warmup's length
        // (the e2e plan's warmup output is 8, forced by its ignore_eos).
        let warm = warmup_chat_bodies(&plan, &[p.messages.as_deref().unwrap(), &[]]);
        assert_eq!(warm.len(), 2);
        assert_eq!(
            String::from_utf8(warm[0].clone()).unwrap(),
            r#"{"model":"synth","messages":[{"role":"user","content":"Who's there?"}],"max_tokens":8,"min_tokens":8,"ignore_eos":true,"temperature":0.0,"stream":false}"#
        );
    }

    #[test]
    fn a_request_id_prefix_names_each_entry_by_its_panel_index() {
        let plan = e2e_plan("output_tokens = 8\nrequest_id_prefix = \"bench-0a1b2c3d-\"\n");
        let kind = plan.body_kind(Endpoint::Completions);
        let p = Prompt { index: 7, ..prompt(&[1, 2]) };
        let prepared = prepare(&plan, kind, &p);
        assert_eq!(prepared.request_id.as_ref().map(|v| v.to_str().unwrap()), Some("bench-0a1b2c3d-7"));
        // The header, not the body: the bytes are those of a plan without it.
        let plain = e2e_plan("output_tokens = 8\n");
        assert_eq!(prepared.body, prepare(&plain, kind, &p).body);
        assert_eq!(prepare(&plain, kind, &p).request_id, None);
        // vLLM's empty prefix names requests by their index alone.
        let empty = e2e_plan("output_tokens = 8\nrequest_id_prefix = \"\"\n");
        assert_eq!(prepare(&empty, kind, &p).request_id.as_ref().map(|v| v.to_str().unwrap()), Some("7"));
        for bad in ["\"a\\nb\"", "\"é\"", &format!("\"{}\"", "x".repeat(201))] {
            let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/e2e-synthetic.toml"))
                .unwrap()
                .replace("output_tokens = 8\n", &format!("output_tokens = 8\nrequest_id_prefix = {bad}\n"));
            let e = crate::plan::parse(&text).unwrap_err().to_string();
            assert!(e.contains("request.request_id_prefix: printable ASCII"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_dataset_entry_sends_its_own_max_tokens_and_eos_flag() {
        let plan = e2e_plan("output_tokens = 8\n");
        let p = Prompt { output_tokens: Some(40), max_tokens: Some(5), ignore_eos: Some(false), ..prompt(&[9]) };
        let body = String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &p)).unwrap();
        assert!(body.contains(r#""max_tokens":5,"ignore_eos":false"#), "{body}");
        let forced = Prompt { ignore_eos: Some(true), ..p.clone() };
        let body = String::from_utf8(stream_body(&plan, plan.body_kind(Endpoint::Completions), &forced)).unwrap();
        assert!(body.contains(r#""max_tokens":5,"min_tokens":5,"ignore_eos":true"#), "{body}");
        let prepared = prepare(&plan, plan.body_kind(Endpoint::Completions), &p);
        assert_eq!((prepared.prompt_tokens, prepared.max_tokens), (1, 5));
    }
}
