//! Phase 1, parity: the fixed prompt set (panel documents 0..n of one length) sent
//! one at a time, greedy and forced-length, to each arm on a fresh server, through
//! the arm's dialect (`dialect`); the answers (`parity.jsonl`, raw bodies kept) are
//! then compared token for token. Any difference, or any prompt without an answer,
//! fails parity, and the comparison stops there: no speed is reported for outputs
//! that are not identical. With `compare.parity_prefix_tokens` N, only the first N
//! output tokens must match; the full-output differences are still listed. Owns the
//! dialect detection of an arm and the parity verdict. Must not time anything.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::CompareError;
use super::server::Running;
use crate::arm::ServerKind;
use crate::arm::dialect::{parity_request, parity_tokens, prompt_tokens};
use crate::evidence::write_jsonl;
use crate::evidence::{Dialect, ParityMismatch, ParityReport, sha256_hex};
use crate::plan::compare::CompareSpec;
use crate::protocol::routes::{MODELS_PATH, PROPS_PATH};

/// Tokens shown on each side of a first difference.
const WINDOW: usize = 8;

/// One parity answer (one line of `parity.jsonl`).
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub prompt: u64,
    pub arm: String,
    pub path: String,
    pub body_sha256: String,
    pub status: Option<u16>,
    pub prompt_tokens_reported: Option<u64>,
    pub tokens: Vec<u32>,
    pub error: Option<String>,
    pub elapsed_ms: f64,
    /// The answer body as received (JSON), or its text when it is not JSON.
    pub raw: Value,
}

/// Detects the dialect from `/v1/models` and `/props`, unless the plan fixed it.
pub async fn detect(run: &Running, fixed: Option<ServerKind>) -> Dialect {
    if let Some(kind) = fixed {
        return Dialect { kind, how: "compare.dialects in the plan".into() };
    }
    let get = |path: &str| {
        let url = format!("{}{path}", run.base_url);
        let client = run.client.clone();
        async move {
            let r = client.get(url).timeout(Duration::from_secs(10)).send().await.ok()?;
            if !r.status().is_success() {
                return None;
            }
            r.json::<Value>().await.ok()
        }
    };
    let models = get(MODELS_PATH).await;
    let entry = models.as_ref().and_then(|m| m.get("data")).and_then(|d| d.get(0)).cloned();
    let props = get(PROPS_PATH).await;
    let (kind, how) = ServerKind::detect(entry.as_ref(), props.as_ref());
    Dialect { kind, how }
}

/// Sends every prompt in order and writes `parity.jsonl` into the server's directory.
pub async fn collect(
    run: &Running,
    kind: ServerKind,
    model: &str,
    prompts: &[(u64, &[u32])],
    n: u32,
    timeout: Duration,
) -> Result<Vec<Answer>, CompareError> {
    let mut out = Vec::with_capacity(prompts.len());
    for &(index, tokens) in prompts {
        let (path, body) = parity_request(kind, model, tokens, n);
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut a = Answer {
            prompt: index,
            arm: run.record.arm.clone(),
            path: path.to_string(),
            body_sha256: sha256_hex(&bytes),
            status: None,
            prompt_tokens_reported: None,
            tokens: Vec::new(),
            error: None,
            elapsed_ms: 0.0,
            raw: Value::Null,
        };
        let t0 = Instant::now();
        let sent = run
            .client
            .post(format!("{}{path}", run.base_url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(timeout)
            .body(bytes)
            .send()
            .await;
        match sent {
            Err(e) => a.error = Some(format!("request failed: {e}")),
            Ok(resp) => {
                let status = resp.status().as_u16();
                a.status = Some(status);
                let text = resp.text().await.unwrap_or_default();
                a.raw = serde_json::from_str(&text).unwrap_or(Value::String(text));
                if status != 200 {
                    a.error = Some(format!("HTTP {status}"));
                } else {
                    a.prompt_tokens_reported = prompt_tokens(kind, &a.raw);
                    match parity_tokens(kind, &a.raw) {
                        Ok(t) => a.tokens = t,
                        Err(e) => a.error = Some(e),
                    }
                }
            }
        }
        a.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        if a.error.is_none() && a.tokens.len() != n as usize {
            a.error = Some(format!("{} output tokens, {n} forced", a.tokens.len()));
        }
        if a.error.is_none() && a.prompt_tokens_reported.is_some_and(|p| p != tokens.len() as u64) {
            let got = a.prompt_tokens_reported.unwrap_or_default();
            a.error = Some(format!("the server evaluated {got} prompt tokens, {} sent", tokens.len()));
        }
        out.push(a);
    }
    write_jsonl(&run.dir.join(crate::evidence::PARITY_FILE), &out)?;
    Ok(out)
}

/// First position where `a` and `b` differ, or the shorter length; `None` if equal.
fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

fn mismatch(prompt: u64, r: &[u32], c: &[u32], limit: Option<usize>) -> Option<ParityMismatch> {
    let cut = |t: &'_ [u32]| -> Vec<u32> { t[..limit.unwrap_or(t.len()).min(t.len())].to_vec() };
    let (rc, cc) = (cut(r), cut(c));
    let pos = first_difference(&rc, &cc)?;
    let start = pos.saturating_sub(WINDOW);
    let window = |t: &[u32]| t[start.min(t.len())..(pos + WINDOW + 1).min(t.len())].to_vec();
    Some(ParityMismatch {
        prompt,
        first_difference: Some(pos),
        window_start: start,
        reference_window: window(r),
        candidate_window: window(c),
        reference_tokens: r.len(),
        candidate_tokens: c.len(),
        detail: format!("first difference at output token {pos}"),
    })
}

/// Compares the two arms' answers, prompt by prompt.
pub fn judge(
    spec: &CompareSpec,
    reference: &[Answer],
    candidate: &[Answer],
    dialects: BTreeMap<String, Dialect>,
) -> ParityReport {
    let prefix = spec.parity_prefix_tokens.map(|n| n as usize);
    let mut mismatches = Vec::new();
    let mut full = Vec::new();
    for r in reference {
        let c = candidate.iter().find(|c| c.prompt == r.prompt);
        let failed = match (r.error.as_deref(), c.map(|c| c.error.as_deref())) {
            (Some(e), _) => Some(format!("{}: {e}", spec.reference)),
            (None, None) => Some(format!("{}: no answer", spec.candidate)),
            (None, Some(Some(e))) => Some(format!("{}: {e}", spec.candidate)),
            (None, Some(None)) => None,
        };
        let Some(c) = c.filter(|_| failed.is_none()) else {
            mismatches.push(ParityMismatch {
                prompt: r.prompt,
                first_difference: None,
                window_start: 0,
                reference_window: Vec::new(),
                candidate_window: Vec::new(),
                reference_tokens: r.tokens.len(),
                candidate_tokens: c.map_or(0, |c| c.tokens.len()),
                detail: failed.unwrap_or_default(),
            });
            continue;
        };
        if let Some(m) = mismatch(r.prompt, &r.tokens, &c.tokens, prefix) {
            mismatches.push(m);
        } else if prefix.is_some()
            && let Some(m) = mismatch(r.prompt, &r.tokens, &c.tokens, None)
        {
            full.push(m);
        }
    }
    let rule = match prefix {
        None => format!(
            "every one of {} prompts ({} tokens) gives token-for-token identical output ({} greedy tokens, ignore_eos) on both arms",
            spec.parity_prompts, spec.parity_input_tokens, spec.parity_output_tokens
        ),
        Some(n) => format!(
            "PREFIX RULE (set by the plan): only the first {n} of {} greedy output tokens must be identical, for each of {} prompts; the outputs are NOT fully identical where listed",
            spec.parity_output_tokens, spec.parity_prompts
        ),
    };
    ParityReport {
        pass: mismatches.is_empty() && reference.len() == spec.parity_prompts as usize,
        rule,
        prompts: spec.parity_prompts,
        input_tokens: spec.parity_input_tokens,
        output_tokens: spec.parity_output_tokens,
        prefix_tokens: spec.parity_prefix_tokens,
        mismatches,
        full_output_differences: full,
        dialects,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_show_both_sides_around_the_first_difference() {
        let r: Vec<u32> = (0..30).collect();
        let mut c = r.clone();
        c[20] = 999;
        let m = mismatch(7, &r, &c, None).unwrap();
        assert_eq!((m.first_difference, m.window_start), (Some(20), 12));
        assert_eq!(m.reference_window, (12..29).collect::<Vec<u32>>());
        assert_eq!(m.candidate_window[8], 999);
        assert!(mismatch(7, &r, &c, Some(20)).is_none(), "the prefix stops before the difference");
        assert!(mismatch(7, &r, &r, None).is_none());
        let short = mismatch(1, &r, &r[..10], None).unwrap();
        assert_eq!((short.first_difference, short.candidate_window.len()), (Some(10), 8));
    }
}
