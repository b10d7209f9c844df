//! The GSM gate's items and per-arm scoring: GSM8K-format JSONL (`question`, and an
//! `answer` ending in `#### <number>`), an optional seeded subset, the plan's fixed
//! template (zero-shot, or few-shot with worked examples), greedy natural completion
//! (EOS honoured, the plan's stop strings, a maximum length) and strict-match
//! scoring (`extract`). Must not pair arms (`paired` and `driver` do).
//!
//! Subset: a seeded partial Fisher-Yates draw of `subset` line numbers (use
//! `gsm-subset`), then sorted into file order. Prompts are the template text with
//! the tokenizer's special tokens, sent as token IDs.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::common::{Tok, below, item_rng};
use super::driver::{ArmCtx, GateRun};
use super::extract::{gold_answer, lm_eval_v3_equal, strict_answer};
use super::{QualityError, client};
use crate::plan::GsmGateSpec;

/// One question as sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GsmItem {
    pub index: u64,
    /// 0-based line in the JSONL file.
    pub line: u64,
    pub gold: String,
    pub prompt: Vec<u32>,
}

/// The set as used: what every report states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GsmSet {
    /// "GSM8K" or "GSM-style set, not GSM8K".
    pub label: String,
    pub path: String,
    pub lines: u64,
    /// Items used (the whole set, or the seeded subset's size).
    pub used: u64,
    pub subset: Option<u32>,
    pub template: String,
    pub fewshot: u32,
    /// Leading lines not scored because they are the few-shot examples.
    pub excluded_fewshot_lines: u64,
    pub max_tokens: u32,
    pub stop: Vec<String>,
}

struct Line {
    question: String,
    answer: String,
}

fn read_jsonl(path: &Path) -> Result<Vec<Line>, QualityError> {
    let text =
        crate::evidence::read_input_text(path).map_err(|error| QualityError::Io { path: path.to_path_buf(), error })?;
    let bad =
        |i: usize, m: &str| QualityError::Input { path: path.to_path_buf(), message: format!("line {}: {m}", i + 1) };
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(l).map_err(|e| bad(i, &e.to_string()))?;
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(question), Some(answer)) = (field("question"), field("answer")) else {
            return Err(bad(i, "needs string fields `question` and `answer`"));
        };
        out.push(Line { question, answer });
    }
    Ok(out)
}

/// Seeded subset of `k` of `n` line numbers, in file order.
pub fn subset(n: u64, k: u64, seed: u64) -> Vec<u64> {
    let mut idx: Vec<u64> = (0..n).collect();
    let mut rng = item_rng(seed, "gsm-subset", 0);
    let k = k.min(n) as usize;
    for i in 0..k {
        let j = i + below(&mut rng, (idx.len() - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut chosen = idx[..k].to_vec();
    chosen.sort_unstable();
    chosen
}

pub fn items(spec: &GsmGateSpec, seed: u64, tok: &Tok, base: &Path) -> Result<(Vec<GsmItem>, GsmSet), QualityError> {
    let path = base.join(&spec.path);
    let lines = read_jsonl(&path)?;
    let mut prefix = String::new();
    if let Some(fp) = &spec.fewshot_path {
        let shots = read_jsonl(&base.join(fp))?;
        if shots.len() < spec.fewshot as usize {
            return Err(QualityError::Input {
                path: base.join(fp),
                message: format!("{} worked examples, fewshot asks for {}", shots.len(), spec.fewshot),
            });
        }
        for s in shots.iter().take(spec.fewshot as usize) {
            prefix.push_str(&spec.template.replace("{question}", &s.question));
            prefix.push(' ');
            prefix.push_str(&s.answer);
            prefix.push_str("\n\n");
        }
    }
    // Worked examples taken from the scored file itself are never scored.
    let skip = if spec.fewshot_path.as_deref() == Some(spec.path.as_str()) { u64::from(spec.fewshot) } else { 0 };
    let pool = (lines.len() as u64).saturating_sub(skip);
    let chosen: Vec<u64> = match spec.subset {
        Some(k) => subset(pool, u64::from(k), seed).into_iter().map(|i| i + skip).collect(),
        None => (skip..lines.len() as u64).collect(),
    };
    let mut items = Vec::with_capacity(chosen.len());
    for (index, &line) in chosen.iter().enumerate() {
        let l = &lines[line as usize];
        let gold = gold_answer(&l.answer).ok_or_else(|| QualityError::Input {
            path: path.clone(),
            message: format!("line {}: the answer has no `#### <number>`", line + 1),
        })?;
        let text = format!("{prefix}{}", spec.template.replace("{question}", &l.question));
        items.push(GsmItem { index: index as u64, line, gold, prompt: tok.encode(&text, true)? });
    }
    let set = GsmSet {
        label: spec.dataset.label().to_string(),
        path: spec.path.clone(),
        lines: lines.len() as u64,
        used: items.len() as u64,
        subset: spec.subset,
        template: spec.template.clone(),
        fewshot: spec.fewshot,
        excluded_fewshot_lines: skip,
        max_tokens: spec.max_tokens,
        stop: spec.stop.clone(),
    };
    Ok((items, set))
}

/// Asks one arm every question and scores each answer strictly.
pub async fn run(ctx: &ArmCtx<'_>, spec: &GsmGateSpec, items: &[GsmItem], set: &GsmSet) -> GateRun {
    let bodies: Vec<Value> = items
        .iter()
        .map(|it| client::body(ctx.model, &it.prompt, spec.max_tokens, json!({ "stop": spec.stop })))
        .collect();
    let answers = ctx.complete_all("gsm", &bodies).await;
    let mut run = GateRun::new("gsm");
    let (mut correct, mut v3) = (0u64, 0u64);
    for (it, a) in items.iter().zip(&answers) {
        let ok = a.error.is_none() && super::extract::strict_correct(&a.text, &it.gold);
        let ok_v3 = a.error.is_none() && lm_eval_v3_equal(&a.text, &it.gold);
        correct += u64::from(ok);
        v3 += u64::from(ok_v3);
        run.push(
            a,
            ok,
            json!({
                "line": it.line, "gold": it.gold, "strict_answer": strict_answer(&a.text),
                "correct": ok, "lm_eval_v3_correct": ok_v3,
            }),
        );
    }
    let n = items.len() as u64;
    run.summary = json!({
        "set": set, "n": n, "correct": correct, "accuracy": if n > 0 { correct as f64 / n as f64 } else { 0.0 },
        "lm_eval_v3_correct": v3, "failed": run.failed,
        "extractor": super::extract::TERMINAL_DOT_NOTE,
    });
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_is_seeded_sorted_and_distinct() {
        let a = subset(1319, 50, 7);
        assert_eq!(a, subset(1319, 50, 7));
        assert_ne!(a, subset(1319, 50, 8));
        assert_eq!(a.len(), 50);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a.iter().all(|&x| x < 1319));
        assert_eq!(subset(5, 9, 1), vec![0, 1, 2, 3, 4]);
    }
}
