//! Validity rules of the acceptance suite: what a non-streamed completion and an SSE
//! stream must look like, and how two greedy answers are compared (token ids when
//! both sides have them, else text). Owns every rule's wording (the failure reasons
//! the outcome reports). Must not send requests.

use serde_json::Value;

use super::http::{Reply, StreamEnd, StreamRec, clip};
use crate::arm::Adapter;

/// The endpoint a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
}

impl Api {
    pub fn path(self) -> &'static str {
        match self {
            Api::Completions => crate::protocol::routes::COMPLETIONS_PATH,
            Api::Chat => crate::protocol::routes::CHAT_COMPLETIONS_PATH,
        }
    }

    fn object(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Api::Completions, _) => "text_completion",
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
        }
    }

    fn text(self, choice: &Value, stream: bool) -> Option<&str> {
        match (self, stream) {
            (Api::Completions, _) => choice.get("text").and_then(Value::as_str),
            (Api::Chat, false) => choice.get("message").and_then(|m| m.get("content")).and_then(Value::as_str),
            (Api::Chat, true) => choice.get("delta").and_then(|m| m.get("content")).and_then(Value::as_str),
        }
    }
}

/// A valid greedy answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Answer {
    pub text: String,
    pub token_ids: Option<Vec<u32>>,
    pub finish_reason: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

const FINISH: [&str; 2] = ["stop", "length"];

/// Checks a non-streamed answer: HTTP 200, the object type, one choice, a valid
/// finish reason, positive usage with total = prompt + completion, and exactly
/// `budget` completion tokens (the request sent `ignore_eos`).
pub fn completion(reply: &Reply, api: Api, adapter: &Adapter, budget: u32) -> Result<Answer, String> {
    let body = || clip(&reply.text, 600);
    if reply.status != 200 {
        return Err(format!("HTTP {} (expected 200): {}", reply.status, body()));
    }
    let v: Value = serde_json::from_str(&reply.text).map_err(|e| format!("the body is not JSON ({e}): {}", body()))?;
    let object = v.get("object").and_then(Value::as_str).unwrap_or("(none)");
    if object != api.object(false) {
        return Err(format!("object is {object:?}, expected {:?}", api.object(false)));
    }
    let choices = v.get("choices").and_then(Value::as_array).ok_or_else(|| format!("no choices array: {}", body()))?;
    let [choice] = choices.as_slice() else {
        return Err(format!("{} choices for one prompt", choices.len()));
    };
    let text = api.text(choice, false).ok_or_else(|| format!("the choice has no text: {}", body()))?.to_string();
    let finish = choice.get("finish_reason").and_then(Value::as_str).unwrap_or("(none)").to_string();
    if !FINISH.contains(&finish.as_str()) {
        return Err(format!("finish_reason {finish:?} is not stop or length"));
    }
    let usage = v.get("usage").ok_or("no usage")?;
    let count =
        |k: &str| usage.get(k).and_then(Value::as_u64).ok_or_else(|| format!("usage.{k} missing or not a count"));
    let (p, c, t) = (count("prompt_tokens")?, count("completion_tokens")?, count("total_tokens")?);
    if p == 0 || c == 0 {
        return Err(format!("usage counts must be positive: prompt {p}, completion {c}"));
    }
    if t != p + c {
        return Err(format!("usage.total_tokens {t} != prompt {p} + completion {c}"));
    }
    if c != u64::from(budget) {
        return Err(format!(
            "completion_tokens {c} != the fixed budget {budget} (ignore_eos was sent; finish_reason {finish})"
        ));
    }
    let token_ids = adapter.token_ids(choice)?;
    if let Some(ids) = &token_ids
        && ids.len() as u64 != c
    {
        return Err(format!("{} token ids returned for completion_tokens {c}", ids.len()));
    }
    Ok(Answer { text, token_ids, finish_reason: finish, prompt_tokens: p, completion_tokens: c })
}

/// How two greedy answers compare.
pub fn same_answer(a: &Answer, b: &Answer) -> Result<(), String> {
    if let (Some(x), Some(y)) = (&a.token_ids, &b.token_ids) {
        return match x.iter().zip(y).position(|(p, q)| p != q) {
            None if x.len() == y.len() => Ok(()),
            None => Err(format!("token ids differ in length ({} vs {})", x.len(), y.len())),
            Some(i) => Err(format!("token ids differ at position {i} ({} vs {})", x[i], y[i])),
        };
    }
    same_text(&a.text, &b.text)
}

pub fn same_text(a: &str, b: &str) -> Result<(), String> {
    if a == b {
        return Ok(());
    }
    let at = a.chars().zip(b.chars()).position(|(p, q)| p != q).unwrap_or(a.chars().count().min(b.chars().count()));
    Err(format!("text differs at character {at}: {:?} vs {:?}", clip(a, 80), clip(b, 80)))
}

/// What a stream said, after the checks.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StreamSummary {
    pub events: usize,
    pub content_chunks: usize,
    pub done_events: usize,
    pub ids: Vec<String>,
    pub text: String,
    pub token_ids: Option<Vec<u32>>,
    pub finish_reason: Option<String>,
    pub role_seen: bool,
    /// Seconds from send to the first event with content, and to `[DONE]`.
    pub first_content_s: Option<f64>,
    pub done_s: Option<f64>,
    pub problems: Vec<String>,
}

impl StreamSummary {
    fn bad(&mut self, problem: String) {
        self.problems.push(problem);
    }
}

/// Checks one stream against the non-streamed greedy answer for its prompt.
pub fn stream(rec: &StreamRec, api: Api, adapter: &Adapter, reference: Option<&Answer>, budget: u32) -> StreamSummary {
    let mut s = StreamSummary { events: rec.events.len(), ..StreamSummary::default() };
    if rec.status != 200 {
        s.bad(format!("HTTP {}: {}", rec.status, rec.error_body.clone().unwrap_or_default()));
        return s;
    }
    let mut finishes = 0usize;
    for (k, (t, data)) in rec.events.iter().enumerate() {
        if data.trim() == "[DONE]" {
            s.done_events += 1;
            s.done_s.get_or_insert(t.as_secs_f64());
            continue;
        }
        if s.done_events > 0 {
            s.bad(format!("event {k} arrived after [DONE]: {}", clip(data, 200)));
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            s.bad(format!("event {k} is not JSON: {}", clip(data, 200)));
            continue;
        };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            s.bad(format!("event {k} is an error: {}", clip(&e.to_string(), 300)));
            continue;
        }
        let object = v.get("object").and_then(Value::as_str).unwrap_or("(none)");
        if object != api.object(true) {
            s.bad(format!("event {k}: object {object:?}, expected {:?}", api.object(true)));
        }
        if let Some(id) = v.get("id").and_then(Value::as_str)
            && !s.ids.iter().any(|x| x == id)
        {
            s.ids.push(id.to_string());
        }
        let Some(choices) = v.get("choices").and_then(Value::as_array) else {
            s.bad(format!("event {k} has no choices array: {}", clip(data, 200)));
            continue;
        };
        for choice in choices {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            if index != 0 {
                s.bad(format!("event {k}: choice index {index} in a one-prompt stream"));
            }
            if choice.get("delta").and_then(|d| d.get("role")).and_then(Value::as_str) == Some("assistant") {
                s.role_seen = true;
            }
            let text = api.text(choice, true).unwrap_or("");
            let ids = match adapter.token_ids(choice) {
                Ok(ids) => ids,
                Err(e) => {
                    s.bad(format!("event {k}: {e}"));
                    None
                }
            };
            let has_content = !text.is_empty() || ids.as_ref().is_some_and(|i| !i.is_empty());
            if has_content {
                if finishes > 0 {
                    s.bad(format!("event {k} carries content after the finish_reason"));
                }
                s.content_chunks += 1;
                s.first_content_s.get_or_insert(t.as_secs_f64());
            }
            s.text.push_str(text);
            if let Some(ids) = ids {
                s.token_ids.get_or_insert_with(Vec::new).extend(ids);
            }
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                finishes += 1;
                if !FINISH.contains(&f) {
                    s.bad(format!("event {k}: finish_reason {f:?} is not stop or length"));
                }
                s.finish_reason = Some(f.to_string());
            }
        }
    }
    match &rec.end {
        StreamEnd::Closed | StreamEnd::OpenAfterDone | StreamEnd::Dropped => {}
        StreamEnd::Timeout => s.bad("the stream did not end within the timeout".into()),
        StreamEnd::TooManyEvents => s.bad(format!("more than {} events", rec.events.len() - 1)),
        StreamEnd::Transport(e) => s.bad(format!("the connection failed mid-stream: {e}")),
        StreamEnd::Malformed(e) => s.bad(format!("malformed SSE: {e}")),
    }
    // The order below is the order of the reasons a failing case reports first.
    if s.ids.len() > 1 {
        let shown: Vec<&str> = s.ids.iter().take(4).map(String::as_str).collect();
        s.problems.insert(0, format!("chunks carry {} different response ids {shown:?}: streams mixed", s.ids.len()));
    }
    if s.done_events == 0 {
        s.bad("no [DONE] event before the stream closed".into());
    } else if s.done_events > 1 {
        s.bad(format!("{} [DONE] events (expected exactly one)", s.done_events));
    }
    match finishes {
        0 => s.bad("no terminal finish_reason".into()),
        1 => {}
        n => s.bad(format!("{n} chunks carry a finish_reason (expected one)")),
    }
    if api == Api::Chat && !s.role_seen {
        s.bad("no role marker (delta.role \"assistant\")".into());
    }
    if let Some(ids) = &s.token_ids
        && ids.len() != budget as usize
    {
        s.bad(format!("{} token ids streamed for a budget of {budget}", ids.len()));
    }
    if let Some(r) = reference {
        let got = Answer { text: s.text.clone(), token_ids: s.token_ids.clone(), ..r.clone() };
        if let Err(e) = same_answer(&got, r) {
            s.bad(format!("differs from the non-streamed greedy answer: {e}"));
        }
        if s.token_ids.is_some()
            && let Err(e) = same_text(&s.text, &r.text)
        {
            s.bad(format!("concatenated text differs from the non-streamed answer: {e}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::arm::ServerKind;

    fn reply(status: u16, v: Value) -> Reply {
        let now = Instant::now();
        Reply { status, text: v.to_string(), sent: now, done: now }
    }

    fn body(completion: u64, total: u64, object: &str) -> Value {
        json!({"object": object, "choices": [{"index": 0, "text": "ab", "token_ids": [1, 2], "finish_reason": "length"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": completion, "total_tokens": total}})
    }

    #[test]
    fn completion_rules() {
        let a = Adapter::new(ServerKind::OpenAiVllm);
        let ok = completion(&reply(200, body(2, 5, "text_completion")), Api::Completions, &a, 2).expect("valid");
        assert_eq!(ok.token_ids, Some(vec![1, 2]));
        let err = |r: Reply, budget| completion(&r, Api::Completions, &a, budget).unwrap_err();
        assert!(err(reply(200, body(2, 6, "text_completion")), 2).contains("total_tokens 6"));
        assert!(err(reply(200, body(2, 5, "chat.completion")), 2).contains("object"));
        assert!(err(reply(200, body(2, 5, "text_completion")), 4).contains("!= the fixed budget 4"));
        assert!(err(reply(200, body(3, 6, "text_completion")), 3).contains("2 token ids"));
        assert!(err(reply(400, json!({"error": {}})), 2).contains("HTTP 400"));
    }

    fn rec(events: &[&str]) -> StreamRec {
        let now = Instant::now();
        let events = events.iter().enumerate().map(|(i, d)| (Duration::from_millis(i as u64), d.to_string())).collect();
        StreamRec { status: 200, error_body: None, events, end: StreamEnd::Closed, sent: now, done: now }
    }

    fn chunk(id: &str, tok: u32, finish: Option<&str>) -> String {
        json!({"id": id, "object": "text_completion",
               "choices": [{"index": 0, "text": format!("<{tok}>"), "token_ids": [tok], "finish_reason": finish}]})
        .to_string()
    }

    #[test]
    fn stream_rules() {
        let a = Adapter::new(ServerKind::OpenAiVllm);
        let reference = Answer {
            text: "<1><2>".into(),
            token_ids: Some(vec![1, 2]),
            finish_reason: "length".into(),
            prompt_tokens: 3,
            completion_tokens: 2,
        };
        let (c1, c2) = (chunk("x", 1, None), chunk("x", 2, Some("length")));
        let good = stream(&rec(&[&c1, &c2, "[DONE]"]), Api::Completions, &a, Some(&reference), 2);
        assert!(good.problems.is_empty(), "{:?}", good.problems);
        let no_done = stream(&rec(&[&c1, &c2]), Api::Completions, &a, Some(&reference), 2);
        assert_eq!(no_done.problems, vec!["no [DONE] event before the stream closed".to_string()]);
        let two_done = stream(&rec(&[&c1, &c2, "[DONE]", "[DONE]"]), Api::Completions, &a, Some(&reference), 2);
        assert_eq!(two_done.problems, vec!["2 [DONE] events (expected exactly one)".to_string()]);
        let late = stream(&rec(&[&c1, &c2, "[DONE]", &c2]), Api::Completions, &a, None, 2);
        assert!(late.problems.iter().any(|p| p.contains("after [DONE]")), "{:?}", late.problems);
        let mixed = stream(&rec(&[&c1, &chunk("y", 2, Some("length")), "[DONE]"]), Api::Completions, &a, None, 2);
        assert!(mixed.problems[0].contains("2 different response ids"), "{:?}", mixed.problems);
        let wrong =
            stream(&rec(&[&c1, &chunk("x", 3, Some("length")), "[DONE]"]), Api::Completions, &a, Some(&reference), 2);
        assert!(wrong.problems[0].contains("non-streamed greedy answer"), "{:?}", wrong.problems);
        let no_finish = stream(&rec(&[&c1, &chunk("x", 2, None), "[DONE]"]), Api::Completions, &a, Some(&reference), 2);
        assert_eq!(no_finish.problems, vec!["no terminal finish_reason".to_string()]);
        let chat = json!({"id": "c", "object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"content": "<1><2>"}, "finish_reason": "length"}]});
        let chat = stream(&rec(&[&chat.to_string(), "[DONE]"]), Api::Chat, &a, None, 2);
        assert_eq!(chat.problems, vec!["no role marker (delta.role \"assistant\")".to_string()]);
    }
}
