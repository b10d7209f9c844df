//! Readiness and warmup of one server invocation: polls the arm's health path until
//! it answers 200 (the time from spawn to that answer is the cold start), and sends
//! the warmup: one non-streaming batched `/v1/completions` call, or on the chat
//! endpoint one non-streaming chat call per warmup entry, sent together. Must not
//! measure anything that enters a cell and must not retry the warmup.

use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::watch;

use super::ArmError;
use crate::evidence::WarmupRecord;
use crate::load::StudyClock;

/// Pause between health polls.
pub const HEALTH_POLL: Duration = Duration::from_millis(50);
/// Longest one health poll may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an external server (no process: `exit` is `None`) may refuse every
/// connection, or have a name that does not resolve, before it is declared
/// unreachable: the harness never starts it, so waiting out the whole startup
/// timeout (600 s by default) would only delay the error.
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(3);

/// Polls `url` until it answers 200, the process exits, or `timeout` passes; an
/// external server (`exit` is `None`) that refuses every connection for
/// [`UNREACHABLE_AFTER`] is unreachable. Returns the study time of the 200 and the
/// number of polls.
pub async fn wait_healthy(
    client: &reqwest::Client,
    url: &str,
    clock: StudyClock,
    timeout: Duration,
    exit: Option<watch::Receiver<Option<String>>>,
) -> Result<(u64, u64), ArmError> {
    let start = tokio::time::Instant::now();
    let deadline = start + timeout;
    let mut polls = 0u64;
    let mut last;
    // Since when every poll failed to connect (external servers only).
    let mut refused_since: Option<tokio::time::Instant> = None;
    loop {
        if let Some(d) = exit.as_ref().and_then(|rx| rx.borrow().clone()) {
            return Err(ArmError::ExitedBeforeHealthy { detail: d });
        }
        polls += 1;
        match client.get(url).timeout(HEALTH_TIMEOUT).send().await {
            Ok(r) if r.status().as_u16() == 200 => return Ok((clock.now_ns(), polls)),
            Ok(r) => {
                refused_since = None;
                last = format!("HTTP {}", r.status().as_u16());
            }
            Err(e) => {
                last = crate::load::error_chain(&e);
                if exit.is_none() && e.is_connect() {
                    let since = *refused_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= UNREACHABLE_AFTER {
                        let after_s = (start.elapsed().as_secs_f64() * 10.0).round() / 10.0;
                        return Err(ArmError::Unreachable { url: url.to_string(), after_s, cause: last });
                    }
                } else {
                    refused_since = None;
                }
            }
        }
        if tokio::time::Instant::now() + HEALTH_POLL > deadline {
            return Err(ArmError::HealthTimeout {
                url: url.to_string(),
                after_s: timeout.as_secs_f64(),
                last,
                log: String::new(),
            });
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
}

/// What to send: the route's name, its URL and the bodies (sent together).
pub struct WarmupCalls {
    pub endpoint: &'static str,
    pub url: String,
    pub bodies: Vec<Bytes>,
}

/// Sends the warmup calls together and checks a 200 from each and one choice per
/// prompt over all of them.
pub async fn warmup(
    client: &reqwest::Client,
    calls: WarmupCalls,
    prompts: u32,
    output_tokens: u32,
    clock: StudyClock,
    timeout: Duration,
) -> WarmupRecord {
    let body_sha256 = match &calls.bodies[..] {
        [one] => crate::evidence::sha256_hex(one),
        many => {
            let mut all = Vec::new();
            for b in many {
                all.extend_from_slice(b);
                all.push(b'\n');
            }
            crate::evidence::sha256_hex(&all)
        }
    };
    let send_ns = clock.now_ns();
    let mut rec = WarmupRecord {
        endpoint: calls.endpoint.to_string(),
        calls: calls.bodies.len() as u32,
        prompts,
        output_tokens,
        body_sha256,
        send_ns,
        end_ns: send_ns,
        status: None,
        ok: false,
        detail: None,
        usage: None,
        choices: None,
        more_endpoints: Vec::new(),
    };
    let call = |body: Bytes| async {
        let resp = client
            .post(&calls.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, text))
    };
    let all = futures_util::future::join_all(calls.bodies.iter().cloned().map(call));
    match tokio::time::timeout(timeout, all).await {
        Err(_) => rec.detail = Some(format!("no answer within {} s", timeout.as_secs_f64())),
        Ok(answers) => {
            let (mut usages, mut choices, mut problems) = (Vec::new(), Some(0usize), Vec::new());
            for answer in answers {
                let (status, text) = match answer {
                    Ok(a) => a,
                    Err(e) => {
                        problems.push(e);
                        continue;
                    }
                };
                if rec.status.is_none_or(|s| s == 200) {
                    rec.status = Some(status);
                }
                let v: Option<serde_json::Value> = serde_json::from_str(&text).ok();
                usages.push(v.as_ref().and_then(|v| v.get("usage")).cloned().unwrap_or_default());
                let n = v.as_ref().and_then(|v| v.get("choices")).and_then(|c| c.as_array()).map(Vec::len);
                choices = choices.zip(n).map(|(a, b)| a + b);
                if status != 200 || n.is_none() {
                    let head: String = text.chars().take(500).collect();
                    problems.push(format!("HTTP {status}, {n:?} choices: {head}"));
                }
            }
            rec.usage = match usages.len() {
                0 => None,
                1 => usages.pop().filter(|u| !u.is_null()),
                _ => Some(serde_json::Value::Array(usages)),
            };
            rec.choices = choices.filter(|_| problems.is_empty());
            rec.ok = problems.is_empty() && rec.choices == Some(prompts as usize);
            if !rec.ok {
                let why = if problems.is_empty() { "wrong choice count".to_string() } else { problems.join("; ") };
                rec.detail = Some(format!("{:?} choices for {prompts} prompts: {why}", rec.choices));
            }
        }
    }
    rec.end_ns = clock.now_ns();
    rec
}
