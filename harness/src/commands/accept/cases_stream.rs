//! Streaming cases: two simultaneous streams (completions, and chat unless
//! `--no-chat`), each checked chunk by chunk and against the non-streamed greedy
//! answer for its prompt; and a client that disconnects after two events, followed
//! by a fresh request that must get its whole budget. Owns these cases. Must not
//! parse SSE itself (`http`) or define validity (`check`).

use futures_util::future::join_all;
use serde_json::{Value, json};

use super::check::{self, Api};
use super::http::{StreamEnd, StreamRec, clip};
use super::outcome::CaseResult;
use super::suite::Suite;

/// Streams in the streams case.
const STREAMS: usize = 2;

/// Most events one stream may carry: one per token, plus role, usage and slack.
fn max_events(budget: u32) -> usize {
    budget as usize * 2 + 16
}

fn event_log(rec: &StreamRec) -> Value {
    let shown: Vec<Value> =
        rec.events.iter().take(40).map(|(t, d)| json!({"t_s": t.as_secs_f64(), "data": clip(d, 300)})).collect();
    json!({"status": rec.status, "end": format!("{:?}", rec.end), "events": rec.events.len(), "first_events": shown})
}

/// Case 5: two simultaneous streams on `api`.
pub async fn streams(s: &Suite, api: Api) -> CaseResult {
    let (name, title) = match api {
        Api::Completions => ("streams", "two simultaneous /v1/completions streams"),
        Api::Chat => ("chat_streams", "two simultaneous /v1/chat/completions streams"),
    };
    let mut c = CaseResult::new(name, title);
    let build = |i: usize, stream: bool| {
        let tag = format!("{name}/{i}/{}", if stream { "stream" } else { "reference" });
        match api {
            Api::Completions => {
                let prompts = s.prompts.distinct(name, STREAMS, s.prompt_len);
                s.completion_body(&tag, &prompts[i], s.budget, stream)
            }
            Api::Chat => s.chat_body(&tag, &s.prompts.chat_text(name, i as u64, s.prompt_len), s.budget, stream),
        }
    };
    let mut references = Vec::new();
    for i in 0..STREAMS {
        let sent = s.send(api, &build(i, false), s.budget).await;
        let status = sent.reply.as_ref().map(|r| r.status).ok();
        if api == Api::Chat && matches!(status, Some(404 | 405 | 501)) {
            c.skip(format!("POST {} answered HTTP {}", api.path(), status.unwrap_or(0)));
            return c;
        }
        if sent.fail_into(&mut c, &format!("non-streamed reference {i}")) && api == Api::Chat {
            c.finding("a server without a chat template can be run with --no-chat");
        }
        references.push(sent.answer.ok());
    }
    let bodies: Vec<_> = (0..STREAMS).map(|i| build(i, true)).collect();
    let recs = join_all(bodies.iter().map(|b| s.http.stream(api.path(), b.clone(), None, max_events(s.budget)))).await;
    let mut ids: Vec<Vec<String>> = Vec::new();
    for (i, (rec, body)) in recs.iter().zip(&bodies).enumerate() {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                c.fail_with(format!("stream {i}: {e}"), body, "");
                continue;
            }
        };
        let sum = check::stream(rec, api, &s.adapter, references[i].as_ref(), s.budget);
        c.count(&format!("stream_{i}_events"), sum.events as u64);
        c.count(&format!("stream_{i}_content_chunks"), sum.content_chunks as u64);
        if let Some(t) = sum.first_content_s {
            c.secs(&format!("stream_{i}_first_content"), t);
        }
        if let Some(t) = sum.done_s {
            c.secs(&format!("stream_{i}_done"), t);
        }
        for p in &sum.problems {
            if c.failures.is_empty() {
                c.evidence("offending_request", Value::String(clip(&String::from_utf8_lossy(body), 4000)));
                c.evidence("offending_stream", event_log(rec));
            }
            c.fail(format!("stream {i}: {p}"));
        }
        ids.push(sum.ids);
    }
    if let [a, b] = ids.as_slice()
        && let Some(shared) = a.iter().find(|x| b.contains(x))
    {
        c.fail(format!("both streams carry the response id {shared:?}: streams mixed"));
    }
    if references.iter().all(Option::is_some) {
        let by = if references.iter().all(|r| r.as_ref().is_some_and(|r| r.token_ids.is_some())) {
            "token ids and text"
        } else {
            "text"
        };
        c.finding(format!("each stream compared with its non-streamed greedy answer by {by}"));
    }
    c
}

/// Case 6: a client drops its stream after two events; a fresh request follows.
pub async fn disconnect(s: &Suite) -> CaseResult {
    let mut c = CaseResult::new("disconnect", "client disconnects after two stream events, then a fresh request");
    let long_budget = s.budget.saturating_mul(4);
    let prompt = s.prompts.prompt("disconnect", 0, s.prompt_len);
    let body = s.completion_body("disconnect/stream", &prompt, long_budget, true);
    match s.http.stream(Api::Completions.path(), body.clone(), Some(2), max_events(long_budget)).await {
        Err(e) => c.fail_with(format!("the stream to disconnect from: {e}"), &body, ""),
        Ok(rec) if rec.status != 200 => c.fail_with(
            format!("the stream to disconnect from answered HTTP {}", rec.status),
            &body,
            rec.error_body.as_deref().unwrap_or(""),
        ),
        Ok(rec) => {
            c.count("events_before_disconnect", rec.events.len() as u64);
            c.time("disconnect_after", rec.elapsed());
            if rec.end != StreamEnd::Dropped {
                c.fail(format!(
                    "the stream ended ({:?}) after {} events, before the client could disconnect after two",
                    rec.end,
                    rec.events.len()
                ));
                c.evidence("offending_stream", event_log(&rec));
            }
        }
    }
    let fresh_prompt = s.prompts.prompt("after-disconnect", 0, s.prompt_len);
    let fresh = s.completion_body("disconnect/fresh", &fresh_prompt, s.budget, false);
    let sent = s.send(Api::Completions, &fresh, s.budget).await;
    if let Some(d) = sent.latency() {
        c.time("fresh_latency", d);
    }
    if !sent.fail_into(&mut c, "fresh request after the disconnect")
        && let Ok(a) = &sent.answer
    {
        c.count("fresh_completion_tokens", a.completion_tokens);
    }
    c
}
