//! Serial parity: K frozen prompts (seeded text cuts, use `parity`) sent
//! concurrently through the arm's HTTP server (greedy, `ignore_eos`, fixed
//! `max_tokens`, `return_token_ids`) must equal, token for token, the outputs of the
//! arm's declared serial in-process reference command (argv + `--prompts-jsonl -
//! --max-tokens N --ignore-eos`: one process answers every prompt, one after
//! another, from JSONL on its stdin, one JSON line per answer on stdout), produced
//! in both orders (forward, then reversed, each by a fresh process) and both compared.
//! Must not start the arm's server (the driver does; references run after it stops).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::QualityError;
use super::client::{self, Completion};
use super::common::{Texts, Tok};
use super::driver::ArmCtx;
use crate::plan::ParityGateSpec;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParityPrompt {
    pub index: u64,
    pub source: String,
    pub offset: u64,
    pub tokens: Vec<u32>,
}

pub fn prompts(
    spec: &ParityGateSpec,
    seed: u64,
    tok: &Tok,
    texts: &mut Texts,
) -> Result<Vec<ParityPrompt>, QualityError> {
    (0..u64::from(spec.prompts))
        .map(|i| {
            let (source, offset, tokens) = texts.cut(tok, seed, "parity", i, spec.input_tokens as usize)?;
            Ok(ParityPrompt { index: i, source, offset, tokens })
        })
        .collect()
}

/// One serial reference output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SerialOutput {
    pub order: String,
    pub index: u64,
    pub output_ids: Vec<u32>,
    pub text: String,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub elapsed_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub prompt: u64,
    /// `forward` or `reversed`.
    pub order: String,
    /// First position where the token IDs differ (or where one is shorter); `None`
    /// when a side failed.
    pub first_difference: Option<u64>,
    pub http_tokens: usize,
    pub reference_tokens: usize,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityResult {
    pub arm: String,
    pub prompts: u32,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub concurrency: u32,
    pub reference_argv: Vec<String>,
    pub mismatches: Vec<Mismatch>,
    pub pass: bool,
    pub rule: String,
}

/// The HTTP half: every prompt, `spec.concurrency` in flight.
pub async fn run_http(ctx: &ArmCtx<'_>, spec: &ParityGateSpec, prompts: &[ParityPrompt]) -> Vec<Completion> {
    let bodies: Vec<Value> = prompts
        .iter()
        .map(|p| client::body(ctx.model, &p.tokens, spec.output_tokens, json!({ "ignore_eos": true })))
        .collect();
    ctx.complete_all_at("parity", &bodies, spec.concurrency as usize).await
}

/// The answer of one reference line: `{"index", "output_ids", "text", "finish_reason"}`.
fn parse_answer(line: &str) -> Result<SerialOutput, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("stdout JSON: {e}"))?;
    let index = v.get("index").and_then(Value::as_u64).ok_or("no index")?;
    let output_ids = v
        .get("output_ids")
        .and_then(Value::as_array)
        .ok_or("no output_ids")?
        .iter()
        .map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()).ok_or("a non-integer output id"))
        .collect::<Result<Vec<u32>, _>>()?;
    Ok(SerialOutput {
        order: String::new(),
        index,
        output_ids,
        text: v.get("text").and_then(Value::as_str).unwrap_or_default().to_string(),
        finish_reason: v.get("finish_reason").and_then(Value::as_str).map(str::to_string),
        error: None,
        elapsed_s: v.get("elapsed_s").and_then(Value::as_f64).unwrap_or(0.0),
    })
}

/// One reference process answering `seq` in order (prompts as JSONL on its stdin).
/// Returns one output per prompt of `seq`, in order; the prompts the process did not
/// answer (it failed, timed out or printed something else) carry the error.
async fn serial_order(
    argv: &[String],
    seq: &[&ParityPrompt],
    n: u32,
    timeout: Duration,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<SerialOutput> {
    let mut out = Vec::with_capacity(seq.len());
    let Err(error) = serial_process(argv, seq, n, timeout, progress, &mut out).await else {
        return out;
    };
    let answered = out.len();
    out.extend(seq[answered..].iter().map(|p| SerialOutput {
        order: String::new(),
        index: p.index,
        output_ids: Vec::new(),
        text: String::new(),
        finish_reason: None,
        error: Some(error.clone()),
        elapsed_s: 0.0,
    }));
    out
}

async fn serial_process(
    argv: &[String],
    seq: &[&ParityPrompt],
    n: u32,
    timeout: Duration,
    progress: &(dyn Fn(usize) + Sync),
    out: &mut Vec<SerialOutput>,
) -> Result<(), String> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let (program, args) = argv.split_first().ok_or("empty reference argv")?;
    let mut input = String::new();
    for p in seq {
        input.push_str(&json!({"index": p.index, "prompt_ids": p.tokens}).to_string());
        input.push('\n');
    }
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .args(["--prompts-jsonl", "-", "--max-tokens", &n.to_string(), "--ignore-eos"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {program:?}: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(input.as_bytes()).await;
    });
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let stderr_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf).await;
        buf
    });
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    // The process loads the model before its first answer: that line gets twice the time.
    let mut wait = timeout * 2;
    for p in seq {
        let line = match tokio::time::timeout(wait, lines.next_line()).await {
            Err(_) => return Err(format!("no answer for prompt {} within {:.0} s", p.index, wait.as_secs_f64())),
            Ok(Err(e)) => return Err(format!("reading stdout: {e}")),
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = child.wait().await.map_err(|e| e.to_string())?;
                let err = stderr_task.await.unwrap_or_default();
                let err = String::from_utf8_lossy(&err);
                let tail: String = err.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
                return Err(format!("{status} before answering prompt {}: {tail}", p.index));
            }
        };
        wait = timeout;
        let answer = parse_answer(&line)?;
        if answer.index != p.index {
            return Err(format!("answered prompt {} where prompt {} was next", answer.index, p.index));
        }
        out.push(answer);
        progress(out.len());
    }
    let _ = writer.await;
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("{status} after answering every prompt"));
    }
    Ok(())
}

/// The serial half: one reference process answers every prompt in forward order,
/// then a fresh one in reversed order (state leaking from one request into the next
/// would show as a difference between the orders).
pub async fn run_serial(
    argv: &[String],
    spec: &ParityGateSpec,
    prompts: &[ParityPrompt],
    timeout: Duration,
    progress: &(dyn Fn(&str, usize) + Sync),
) -> Vec<SerialOutput> {
    let mut out = Vec::with_capacity(prompts.len() * 2);
    for order in ["forward", "reversed"] {
        let seq: Vec<&ParityPrompt> =
            if order == "forward" { prompts.iter().collect() } else { prompts.iter().rev().collect() };
        let t0 = Instant::now();
        let answers = serial_order(argv, &seq, spec.output_tokens, timeout, &|done| progress(order, done)).await;
        let elapsed = t0.elapsed().as_secs_f64();
        out.extend(answers.into_iter().map(|mut a| {
            a.order = order.to_string();
            if a.error.is_some() {
                a.elapsed_s = elapsed;
            }
            a
        }));
    }
    out
}

/// First position where `a` and `b` differ, or the shorter length; `None` if equal.
pub fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

pub fn compare(
    arm: &str,
    spec: &ParityGateSpec,
    argv: &[String],
    http: &[Completion],
    serial: &[SerialOutput],
) -> ParityResult {
    let mut mismatches = Vec::new();
    for s in serial {
        let h = http.iter().find(|h| h.index == s.index);
        let (detail, first, ht) = match (h, &s.error) {
            (None, _) => ("no HTTP answer".to_string(), None, 0),
            (Some(h), _) if h.error.is_some() => {
                (format!("HTTP failed: {}", h.error.as_deref().unwrap_or_default()), None, 0)
            }
            (Some(h), Some(e)) => (format!("serial reference failed: {e}"), None, h.token_ids.len()),
            (Some(h), None) => match first_difference(&h.token_ids, &s.output_ids) {
                None => continue,
                Some(i) => (format!("token IDs differ from position {i}"), Some(i as u64), h.token_ids.len()),
            },
        };
        mismatches.push(Mismatch {
            prompt: s.index,
            order: s.order.clone(),
            first_difference: first,
            http_tokens: ht,
            reference_tokens: s.output_ids.len(),
            detail,
        });
    }
    let orders = ["forward", "reversed"].iter().all(|o| serial.iter().filter(|s| s.order == *o).count() == http.len());
    if !orders {
        mismatches.push(Mismatch {
            prompt: 0,
            order: "both".into(),
            first_difference: None,
            http_tokens: 0,
            reference_tokens: 0,
            detail: "the serial reference does not cover every prompt in both orders".into(),
        });
    }
    ParityResult {
        arm: arm.to_string(),
        prompts: spec.prompts,
        input_tokens: spec.input_tokens,
        output_tokens: spec.output_tokens,
        concurrency: spec.concurrency,
        reference_argv: argv.to_vec(),
        pass: mismatches.is_empty(),
        mismatches,
        rule: format!(
            "{} prompts sent concurrently ({} in flight) through HTTP must equal the serial reference token for \
             token, in forward and in reversed order",
            spec.prompts, spec.concurrency
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_differences() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 5, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
