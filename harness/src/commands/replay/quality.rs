//! The quality gates under `qualification/`, rescored from the raw answers: per arm
//! (`<arm>/arm.json`: its server fault) and gate, every response line against its
//! item (`inputs/<gate>.items.jsonl`): GSM right when not failed and the strict
//! `#### <number>` answer of its text equals the item's gold (the extractor of
//! `quality::extract`, the definition shared, not the counting), retrieval right
//! when the first digits of its text equal the item's passkey, NLL the document's
//! mean token NLL from its logprobs; then the arm's `<gate>.scores.json`; parity
//! recounted from the HTTP answers and the serial reference
//! (`parity.responses.jsonl`, `parity.reference.jsonl`) against
//! `parity.scores.json`. `qualification` then compares the outcome with this.
//! Must not call `quality`'s gates, `paired` or `verdict`, nor `stats`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::read::stream_lines;
use super::{Mismatch, close};
use crate::evidence::{
    ARM_FILE, GSM_SET_FILE, INPUTS_DIR, PARITY_REFERENCE_FILE, QUALIFICATION_DIR, items_file, responses_file,
    scores_file,
};
use crate::plan::Qualification;
use crate::quality::extract::{lm_eval_v3_equal, strict_answer, strict_correct};
use crate::quality::first_digits;

/// Floats of the quality evidence: equal within a relative 1e-7.
pub fn near(a: f64, b: f64) -> bool {
    a == b || close(a, b) || (a - b).abs() <= 1e-7 * a.abs().max(b.abs()).max(1e-9)
}

/// Collects mismatches of one file.
pub struct Cmp<'a> {
    pub m: &'a mut Vec<Mismatch>,
    pub file: String,
}

impl Cmp<'_> {
    pub fn exact(&mut self, field: impl Into<String>, archived: Option<&Value>, mine: Value) {
        if archived.unwrap_or(&Value::Null) != &mine {
            let a = archived.map_or("absent".into(), Value::to_string);
            self.m.push(Mismatch::new(&self.file, field, a, mine.to_string()));
        }
    }

    /// A number; `None` means null (or absent) is expected.
    pub fn num(&mut self, field: impl Into<String>, archived: Option<&Value>, mine: Option<f64>) {
        let ok = match (archived.and_then(Value::as_f64), mine) {
            (Some(a), Some(b)) => near(a, b),
            (None, None) => archived.is_none_or(Value::is_null),
            _ => false,
        };
        if !ok {
            let a = archived.map_or("absent".into(), Value::to_string);
            self.m.push(Mismatch::new(&self.file, field, a, mine.map_or("null".into(), |x| x.to_string())));
        }
    }
}

/// One gate on one arm, rescored.
#[derive(Debug, Default)]
pub struct Gate {
    /// Right/wrong per item (GSM, retrieval); a failed request is wrong.
    pub correct: Vec<bool>,
    /// NLL per document (NaN when it failed).
    pub values: Vec<f64>,
    pub failed: u64,
    /// The archived `<gate>.scores.json` (the outcome must repeat it).
    pub scores: Value,
}

/// Parity of one arm, recounted: (prompt, order, first difference, HTTP tokens, reference tokens).
pub type ParityRow = (u64, String, Option<u64>, u64, u64);

/// One arm's qualification, rescored.
#[derive(Debug, Default)]
pub struct Arm {
    pub arm_json: Value,
    pub gates: BTreeMap<&'static str, Gate>,
    /// Recounted parity mismatches, and the archived `parity.scores.json`.
    pub parity: Option<(Vec<ParityRow>, Value)>,
}

/// The JSON lines of the file `path` under `root` (`Err`: why it cannot be read whole).
pub fn lines(root: &Path, path: &Path) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    match stream_lines(root, path, |_, l| serde_json::from_slice(l).map(|v| out.push(v)).map_err(|e| e.to_string())) {
        Ok((_, None)) => Ok(out),
        Ok((_, Some(e))) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

fn doc(root: &Path, path: &Path) -> Value {
    super::read::read_json(root, path).unwrap_or(Value::Null)
}

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

/// Rescores one gate of one arm; mismatches name the responses or scores file.
fn gate(root: &Path, arm: &str, name: &'static str, q: &Qualification, items: &[Value], m: &mut Vec<Mismatch>) -> Gate {
    let dir = root.join(QUALIFICATION_DIR);
    let rel = format!("{arm}/{}", responses_file(name));
    let mut g = Gate::default();
    let mut c = Cmp { m, file: format!("{QUALIFICATION_DIR}/{rel}") };
    let answers = match lines(root, &dir.join(&rel)) {
        Ok(a) => a,
        Err(e) => {
            c.m.push(Mismatch::new(&c.file, "file", "unreadable or malformed", e));
            return g;
        }
    };
    c.exact("lines", Some(&Value::from(answers.len())), Value::from(items.len()));
    for (i, (a, it)) in answers.iter().zip(items).enumerate() {
        let f = |k: &str| format!("line {} {k}", i + 1);
        c.exact(f("index"), a.get("index"), Value::from(i));
        let failed = !a.get("error").is_none_or(Value::is_null);
        g.failed += u64::from(failed);
        let text = s(a, "text").unwrap_or_default();
        match name {
            "gsm" => {
                let gold = s(it, "gold").unwrap_or_default();
                c.exact(f("gold"), a.get("gold"), Value::from(gold.clone()));
                c.exact(f("line"), a.get("line"), it.get("line").cloned().unwrap_or(Value::Null));
                let ok = !failed && strict_correct(&text, &gold);
                c.exact(f("correct"), a.get("correct"), Value::from(ok));
                c.exact(
                    f("strict_answer"),
                    a.get("strict_answer"),
                    strict_answer(&text).map_or(Value::Null, Value::from),
                );
                let v3 = !failed && lm_eval_v3_equal(&text, &gold);
                c.exact(f("lm_eval_v3_correct"), a.get("lm_eval_v3_correct"), Value::from(v3));
                g.correct.push(ok);
            }
            "retrieval" => {
                let key = s(it, "passkey").unwrap_or_default();
                c.exact(f("passkey"), a.get("passkey"), Value::from(key.clone()));
                let digits = first_digits(&text);
                c.exact(f("answer_digits"), a.get("answer_digits"), digits.map_or(Value::Null, Value::from));
                let ok = !failed && digits == Some(key.as_str());
                c.exact(f("correct"), a.get("correct"), Value::from(ok));
                g.correct.push(ok);
            }
            _ => {
                let tokens = it.get("tokens").and_then(Value::as_array).map_or(0, Vec::len);
                let lps: Option<Vec<f64>> =
                    a.get("logprobs").and_then(Value::as_array).map(|l| l.iter().filter_map(Value::as_f64).collect());
                let mine = match (&lps, failed) {
                    (Some(l), false) if l.len() + 1 == tokens && !l.is_empty() => {
                        Some(-l.iter().sum::<f64>() / l.len() as f64)
                    }
                    (_, false) => {
                        let got = lps.as_ref().map_or(0, Vec::len);
                        c.m.push(Mismatch::new(
                            &c.file,
                            f("logprobs"),
                            format!("{got} values"),
                            format!("{}", tokens.max(1) - 1),
                        ));
                        None
                    }
                    (_, true) => None,
                };
                c.num(f("mean_nll"), a.get("mean_nll"), mine);
                g.values.push(mine.unwrap_or(f64::NAN));
            }
        }
    }
    // The arm's own scores.
    let srel = format!("{arm}/{}", scores_file(name));
    g.scores = doc(root, &dir.join(&srel));
    let sc = g.scores.clone();
    let mut c = Cmp { m: c.m, file: format!("{QUALIFICATION_DIR}/{srel}") };
    let n = answers.len();
    c.exact("failed", sc.get("failed"), Value::from(g.failed));
    match name {
        "nll" => {
            let ok: Vec<f64> = g.values.iter().copied().filter(|v| v.is_finite()).collect();
            let mean = (!ok.is_empty()).then(|| ok.iter().sum::<f64>() / ok.len() as f64);
            c.num("mean_of_document_mean_nll", sc.get("mean_of_document_mean_nll"), mean);
            c.exact("documents", sc.get("documents"), Value::from(n));
            let tokens = items.first().and_then(|d| d.get("tokens")).and_then(Value::as_array).map(Vec::len);
            c.exact("tokens", sc.get("tokens"), tokens.map_or(Value::Null, Value::from));
            c.exact(
                "scored_per_document",
                sc.get("scored_per_document"),
                tokens.map_or(Value::Null, |t| Value::from(t.saturating_sub(1))),
            );
        }
        _ => {
            let right = g.correct.iter().filter(|&&x| x).count();
            c.exact("n", sc.get("n"), Value::from(items.len()));
            c.exact("correct", sc.get("correct"), Value::from(right));
            if name == "gsm" {
                let acc = if items.is_empty() { 0.0 } else { right as f64 / items.len() as f64 };
                c.num("accuracy", sc.get("accuracy"), Some(acc));
                let v3 = answers.iter().filter(|a| a.get("lm_eval_v3_correct") == Some(&Value::Bool(true))).count();
                c.exact("lm_eval_v3_correct", sc.get("lm_eval_v3_correct"), Value::from(v3));
                c.exact("set", sc.get("set"), doc(root, &dir.join(INPUTS_DIR).join(GSM_SET_FILE)));
            } else if let Some(r) = &q.retrieval {
                c.exact("context_tokens", sc.get("context_tokens"), Value::from(r.context_tokens));
                c.exact("max_tokens", sc.get("max_tokens"), Value::from(r.max_tokens));
            }
        }
    }
    g
}

/// Parity of one arm: HTTP answers against the serial reference, both orders.
fn parity(root: &Path, arm: &str, m: &mut Vec<Mismatch>) -> Option<(Vec<ParityRow>, Value)> {
    let dir = root.join(QUALIFICATION_DIR);
    let srel = format!("{arm}/{}", scores_file("parity"));
    if dir.join(&srel).symlink_metadata().is_err() {
        return None;
    }
    let mut rows = Vec::new();
    let read = |m: &mut Vec<Mismatch>, rel: String| {
        lines(root, &dir.join(&rel)).unwrap_or_else(|e| {
            m.push(Mismatch::new(format!("{QUALIFICATION_DIR}/{rel}"), "file", "unreadable or malformed", e));
            Vec::new()
        })
    };
    let http = read(m, format!("{arm}/{}", responses_file("parity")));
    let serial = read(m, format!("{arm}/{PARITY_REFERENCE_FILE}"));
    let ids = |v: &Value, k: &str| -> Vec<u64> {
        v.get(k).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
    };
    let failed = |v: &Value| !v.get("error").is_none_or(Value::is_null);
    for sv in &serial {
        let index = sv.get("index").and_then(Value::as_u64).unwrap_or(u64::MAX);
        let order = s(sv, "order").unwrap_or_default();
        let reference = ids(sv, "output_ids");
        let h = http.iter().find(|h| h.get("index").and_then(Value::as_u64) == Some(index));
        let row = match h {
            None => (index, order, None, 0, reference.len() as u64),
            Some(h) if failed(h) => (index, order, None, 0, reference.len() as u64),
            Some(h) if failed(sv) => (index, order, None, ids(h, "token_ids").len() as u64, reference.len() as u64),
            Some(h) => {
                let got = ids(h, "token_ids");
                let first = got.iter().zip(&reference).position(|(a, b)| a != b);
                let first = first.or((got.len() != reference.len()).then(|| got.len().min(reference.len())));
                match first {
                    None => continue,
                    Some(i) => (index, order, Some(i as u64), got.len() as u64, reference.len() as u64),
                }
            }
        };
        rows.push(row);
    }
    let covered = ["forward", "reversed"]
        .iter()
        .all(|o| serial.iter().filter(|s| s.get("order").and_then(Value::as_str) == Some(o)).count() == http.len());
    if !covered {
        rows.push((0, "both".into(), None, 0, 0));
    }
    Some((rows, doc(root, &dir.join(&srel))))
}

/// Rescores every arm named by the plan that has a directory under `qualification/`.
pub fn rescore(
    root: &Path,
    plan: &crate::plan::Plan,
    q: &Qualification,
    m: &mut Vec<Mismatch>,
) -> BTreeMap<String, Arm> {
    let dir = root.join(QUALIFICATION_DIR);
    let mut items: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let enabled = [("gsm", q.gsm.is_some()), ("nll", q.nll.is_some()), ("retrieval", q.retrieval.is_some())];
    for (name, _) in enabled.iter().filter(|(_, on)| *on) {
        let rel = format!("{INPUTS_DIR}/{}", items_file(name));
        match lines(root, &dir.join(&rel)) {
            Ok(v) => {
                items.insert(name, v);
            }
            Err(e) => m.push(Mismatch::new(format!("{QUALIFICATION_DIR}/{rel}"), "file", "unreadable or malformed", e)),
        }
    }
    let mut out = BTreeMap::new();
    for arm in &plan.arms {
        let mut a = Arm { arm_json: doc(root, &dir.join(&arm.name).join(ARM_FILE)), ..Arm::default() };
        let server_ran = a.arm_json.get("error").is_some_and(Value::is_null);
        if !a.arm_json.is_object() {
            m.push(Mismatch::new(
                format!("{QUALIFICATION_DIR}/{}/{ARM_FILE}", arm.name),
                "file",
                "missing or malformed",
                "the arm's record",
            ));
        }
        if server_ran {
            for (name, list) in &items {
                let g = match *name {
                    "gsm" => "gsm",
                    "nll" => "nll",
                    _ => "retrieval",
                };
                a.gates.insert(g, gate(root, &arm.name, g, q, list, m));
            }
            a.parity = parity(root, &arm.name, m);
        }
        out.insert(arm.name.clone(), a);
    }
    out
}
