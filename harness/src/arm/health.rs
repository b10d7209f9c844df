//! Readiness and warmup of one server invocation: polls the arm's health path until
//! it answers 200 (the time from spawn to that answer is the cold start), and sends
//! the one non-streaming batched warmup call. Must not measure anything that enters
//! a cell and must not retry the warmup.

use std::time::Duration;

use axum::body::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::ArmError;
use crate::load::StudyClock;

/// Pause between health polls.
pub const HEALTH_POLL: Duration = Duration::from_millis(50);
/// Longest one health poll may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Polls `url` until it answers 200, the process exits, or `timeout` passes.
/// Returns the study time of the 200 and the number of polls.
pub async fn wait_healthy(
    client: &reqwest::Client,
    url: &str,
    clock: StudyClock,
    timeout: Duration,
    exit: Option<watch::Receiver<Option<String>>>,
) -> Result<(u64, u64), ArmError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut polls = 0u64;
    let mut last;
    loop {
        if let Some(d) = exit.as_ref().and_then(|rx| rx.borrow().clone()) {
            return Err(ArmError::ExitedBeforeHealthy { detail: d });
        }
        polls += 1;
        match client.get(url).timeout(HEALTH_TIMEOUT).send().await {
            Ok(r) if r.status().as_u16() == 200 => return Ok((clock.now_ns(), polls)),
            Ok(r) => last = format!("HTTP {}", r.status().as_u16()),
            Err(e) => last = e.to_string(),
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

/// The warmup call as recorded in `warmup.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupRecord {
    pub prompts: u32,
    pub output_tokens: u32,
    /// SHA-256 of the request body (identical for every arm of the study).
    pub body_sha256: String,
    pub send_ns: u64,
    pub end_ns: u64,
    pub status: Option<u16>,
    pub ok: bool,
    /// Why it is not ok, when it is not.
    pub detail: Option<String>,
    pub usage: Option<serde_json::Value>,
    pub choices: Option<usize>,
}

/// Sends the warmup body and checks a 200 with one choice per prompt.
pub async fn warmup(
    client: &reqwest::Client,
    url: &str,
    body: Bytes,
    prompts: u32,
    output_tokens: u32,
    clock: StudyClock,
    timeout: Duration,
) -> WarmupRecord {
    let body_sha256 = crate::evidence::sha256_hex(&body);
    let send_ns = clock.now_ns();
    let mut rec = WarmupRecord {
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
    };
    let call = async {
        let resp = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, text))
    };
    match tokio::time::timeout(timeout, call).await {
        Err(_) => rec.detail = Some(format!("no answer within {} s", timeout.as_secs_f64())),
        Ok(Err(e)) => rec.detail = Some(e),
        Ok(Ok((status, text))) => {
            rec.status = Some(status);
            let v: Option<serde_json::Value> = serde_json::from_str(&text).ok();
            rec.usage = v.as_ref().and_then(|v| v.get("usage")).cloned();
            rec.choices = v.as_ref().and_then(|v| v.get("choices")).and_then(|c| c.as_array()).map(Vec::len);
            rec.ok = status == 200 && rec.choices == Some(prompts as usize);
            if !rec.ok {
                let head: String = text.chars().take(500).collect();
                rec.detail = Some(format!("HTTP {status}, {:?} choices for {prompts} prompts: {head}", rec.choices));
            }
        }
    }
    rec.end_ns = clock.now_ns();
    rec
}
