//! `results/evidence.json`'s `tuning` summary against replay's own application of
//! the recommendation rule (docs/plan.md, `[tuning]`): a configuration is supported
//! when its primary-metric claim `tuning:<metric>:<cell>:<candidate>` is supported
//! at every cell of the profile; its score is its smallest median block effect over
//! the profile; the recommendation is the supported configuration with the highest
//! score (the first in plan order on a tie), or none. The claims and medians it
//! reads are the archived hypotheses, which the evidence check recomputes one by
//! one from raw records, so a changed recommendation is named here and a changed
//! claim there. Must not call the report's tuning code.

use std::path::Path;

use serde_json::Value;

use super::read::read_json;
use super::{Check, Mismatch, close, num};
use crate::plan::{Plan, Tuning};

pub const NAME: &str = "evidence.json: tuning recommendation";
const FILE: &str = crate::evidence::EVIDENCE_FILE;

/// `None` when the plan has no `[tuning]` (no check).
pub fn check(root: &Path, plan: &Plan) -> Option<Check> {
    let t = plan.tuning.as_ref()?;
    let ev: Value = match read_json(root, FILE) {
        Ok(v) => v,
        Err(e) => return Some(Check::of(NAME, String::new(), vec![Mismatch::new(FILE, "parse", "unreadable", e)])),
    };
    let hyps = ev.get("hypotheses").and_then(Value::as_array).cloned().unwrap_or_default();
    let primary = t.primary();
    let mut m = Vec::new();
    let mut best: Option<(&str, f64)> = None;
    let archived = ev.pointer("/tuning/configurations").and_then(Value::as_array).cloned().unwrap_or_default();
    for (i, cand) in t.candidates.iter().enumerate() {
        let mut supported = true;
        let mut worst: Option<f64> = Some(f64::INFINITY);
        for cell in &t.cells {
            let name = Tuning::hypothesis_name(primary, cell, cand);
            let h = hyps.iter().find(|h| h.get("name").and_then(Value::as_str) == Some(&name));
            let claim = h.and_then(|h| h.pointer("/claim/claim")).and_then(Value::as_str);
            supported &= claim == Some("supported");
            let med = h.and_then(|h| h.pointer("/median/median")).and_then(Value::as_f64);
            worst = match (worst, med) {
                (Some(w), Some(x)) => Some(w.min(x)),
                _ => None,
            };
        }
        let a = archived.get(i).cloned().unwrap_or(Value::Null);
        let f = |k: &str| format!("tuning.configurations[{cand}].{k}");
        if a.get("candidate").and_then(Value::as_str) != Some(cand) {
            m.push(Mismatch::new(
                FILE,
                f("candidate"),
                a.get("candidate").map_or("absent".into(), Value::to_string),
                cand.clone(),
            ));
        }
        if a.get("supported").and_then(Value::as_bool) != Some(supported) {
            m.push(Mismatch::new(
                FILE,
                f("supported"),
                a.get("supported").map_or("absent".into(), Value::to_string),
                supported.to_string(),
            ));
        }
        let got = a.get("worst_median_effect").and_then(Value::as_f64);
        let same = match (got, worst) {
            (Some(x), Some(y)) => close(x, y),
            (None, None) => true,
            _ => false,
        };
        if !same {
            m.push(Mismatch::new(FILE, f("worst_median_effect"), num(got), num(worst)));
        }
        if let (true, Some(w)) = (supported, worst)
            && best.is_none_or(|(_, b)| w > b)
        {
            best = Some((cand, w));
        }
    }
    if archived.len() != t.candidates.len() {
        m.push(Mismatch::new(
            FILE,
            "tuning.configurations (count)",
            archived.len().to_string(),
            t.candidates.len().to_string(),
        ));
    }
    let want = best.map_or(Value::Null, |(c, _)| Value::from(c));
    let got = ev.pointer("/tuning/recommended").cloned().unwrap_or(Value::String("absent".into()));
    if got != want {
        m.push(Mismatch::new(FILE, "tuning.recommended", got.to_string(), want.to_string()));
    }
    let detail = format!(
        "{} configurations over {} cells on {}: recommended {}",
        t.candidates.len(),
        t.cells.len(),
        primary.as_str(),
        best.map_or("none", |(c, _)| c)
    );
    Some(Check::of(NAME, detail, m))
}
