//! Server-level cases: input validation (malformed JSON and a prompt longer than
//! the context get 4xx, and the server still serves afterwards) and, when exposed,
//! `/metrics` (parses as Prometheus text; vLLM's running and waiting gauges return
//! to 0 after the suite). Owns these cases. Must not treat what a server does not
//! expose as a pass: it is reported as skipped.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde_json::json;

use super::check::Api;
use super::http::clip;
use super::outcome::CaseResult;
use super::payload::Prompt;
use super::suite::Suite;
use crate::protocol::prom;

/// Prompt length used when the server publishes no context length.
const UNKNOWN_CONTEXT_PROMPT: usize = 100_000;
/// Pause between two `/metrics` polls.
const POLL: Duration = Duration::from_millis(200);
const GAUGES: [&str; 2] = ["vllm:num_requests_running", "vllm:num_requests_waiting"];

/// Case 7: malformed JSON and an over-long prompt get 4xx; then a valid request works.
pub async fn validation(s: &Suite) -> CaseResult {
    let mut c = CaseResult::new("validation", "malformed JSON and an over-long prompt get 4xx; still serving after");
    let malformed = format!("{{\"model\": {:?}, \"prompt\": [101, 102", s.model);
    s.record("validation/malformed", malformed.as_bytes());
    let over_len = match s.max_context {
        Some(ctx) => ctx as usize + 8,
        None => UNKNOWN_CONTEXT_PROMPT,
    };
    let over = s.prompts.prompt("overlong", 0, over_len);
    let over_body = s.completion_body("validation/overlong", &over, s.budget, false);
    c.count("overlong_prompt_units", over.units() as u64);
    if let Prompt::Text(_) = over {
        c.finding("text prompt: its token count is at least its word count");
    }
    let probes: [(&str, Bytes); 2] = [("malformed", Bytes::from(malformed)), ("overlong", over_body)];
    for (what, body) in probes {
        match s.http.post(Api::Completions.path(), body.clone()).await {
            Err(e) => c.fail_with(format!("{what} request: no answer ({e}); the server may have died"), &body, ""),
            Ok(r) => {
                c.time(what, r.elapsed());
                c.count(&format!("{what}_status"), u64::from(r.status));
                c.evidence(&format!("{what}_answer"), json!(clip(&r.text, 400)));
                if !(400..500).contains(&r.status) {
                    c.fail_with(format!("{what} request got HTTP {} (expected 4xx)", r.status), &body, &r.text);
                }
            }
        }
    }
    let fresh =
        s.completion_body("validation/fresh", &s.prompts.prompt("after-validation", 0, s.prompt_len), s.budget, false);
    let sent = s.send(Api::Completions, &fresh, s.budget).await;
    if let Some(d) = sent.latency() {
        c.time("fresh_latency", d);
    }
    sent.fail_into(&mut c, "valid request after the bad ones");
    c
}

/// Fetches and parses `/metrics`. `Ok(None)`: not exposed.
async fn scrape(s: &Suite) -> Result<Option<Vec<prom::Sample>>, String> {
    let r = match s.http.get(crate::protocol::routes::METRICS_PATH).await {
        Ok(r) => r,
        Err(e) => return Err(format!("GET /metrics: {e}")),
    };
    match r.status {
        200 => prom::parse(&r.text).map(Some),
        404 | 405 | 501 => Ok(None),
        n => Err(format!("GET /metrics answered HTTP {n}: {}", clip(&r.text, 200))),
    }
}

/// Case 8: `metrics_format` and `metrics_idle`.
pub async fn metrics(s: &Suite) -> Vec<CaseResult> {
    let mut format = CaseResult::new("metrics_format", "/metrics parses as Prometheus text");
    let mut idle = CaseResult::new("metrics_idle", "vLLM running and waiting gauges return to 0 after the suite");
    let samples = match scrape(s).await {
        Ok(Some(samples)) => samples,
        Ok(None) => {
            format.skip("GET /metrics: not found");
            idle.skip("GET /metrics: not found");
            return vec![format, idle];
        }
        Err(e) => {
            format.fail(e);
            idle.fail("/metrics could not be read");
            return vec![format, idle];
        }
    };
    format.count("samples", samples.len() as u64);
    let mut names: Vec<&str> = samples.iter().map(|x| x.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    format.count("metric_names", names.len() as u64);
    let present: Vec<&str> = GAUGES.iter().copied().filter(|g| prom::total(&samples, g).is_some()).collect();
    if present.is_empty() {
        idle.skip(format!("/metrics has neither {} nor {}", GAUGES[0], GAUGES[1]));
        return vec![format, idle];
    }
    let t0 = Instant::now();
    let polls = (s.metrics_settle.as_secs_f64() / POLL.as_secs_f64()).ceil() as u32 + 1;
    let mut last = samples;
    for i in 0..polls {
        let values: Vec<(&str, f64)> = present.iter().map(|g| (*g, prom::total(&last, g).unwrap_or(0.0))).collect();
        if values.iter().all(|(_, v)| *v == 0.0) {
            idle.time("settled_after", t0.elapsed());
            idle.count("polls", u64::from(i) + 1);
            return vec![format, idle];
        }
        if i + 1 == polls {
            let shown: Vec<String> = values.iter().map(|(g, v)| format!("{g} = {v}")).collect();
            idle.fail(format!("after {:.1} s: {}", t0.elapsed().as_secs_f64(), shown.join(", ")));
            idle.count("polls", u64::from(polls));
            break;
        }
        tokio::time::sleep(POLL).await;
        match scrape(s).await {
            Ok(Some(next)) => last = next,
            Ok(None) => {
                idle.fail("/metrics disappeared while polling");
                break;
            }
            Err(e) => {
                idle.fail(format!("while polling: {e}"));
                break;
            }
        }
    }
    vec![format, idle]
}
