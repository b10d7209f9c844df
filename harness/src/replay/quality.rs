//! The quality gates under `qualification/`, recounted from the raw answers: per
//! arm and gate, correct and failed answers (GSM, retrieval: each response's
//! `correct`; NLL: each document's mean NLL, itself recomputed from its token
//! logprobs) against `<arm>/<gate>.scores.json`; per comparison, the paired losses
//! and gains and the one-sided Clopper-Pearson upper bound of losses / N (the
//! `confidence` quantile of Beta(losses + 1, N - losses), by bisection on statrs's
//! regularized incomplete beta), or the one-sided Student-t upper bound of the mean
//! paired NLL difference, and each gate's pass. Bounds are compared within a
//! relative 1e-7. Must not call `quality` or `stats`.

use std::path::Path;

use serde_json::Value;
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::function::beta::checked_beta_reg;

use super::files::Scan;
use super::read::{read_json, stream_lines};
use super::{Check, Mismatch};
use crate::plan::FrozenPlan;

pub const NAME: &str = "quality gates: recounted scores and bounds";

fn near(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-7 * a.abs().max(b.abs()).max(1e-9)
}

/// One-sided Clopper-Pearson upper bound of x / n.
pub fn cp_upper(x: u64, n: u64, confidence: f64) -> Option<f64> {
    if n == 0 || x > n {
        return None;
    }
    if x == n {
        return Some(1.0);
    }
    let (a, b) = ((x + 1) as f64, (n - x) as f64);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if checked_beta_reg(a, b, mid).ok()? >= confidence {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Per item of one gate: right/wrong (or NLL value) and whether the request failed.
struct Answers {
    correct: Vec<bool>,
    values: Vec<f64>,
    failed: u64,
}

fn answers(dir: &Path, rel: &str, m: &mut Vec<Mismatch>) -> Option<Answers> {
    let mut a = Answers { correct: Vec::new(), values: Vec::new(), failed: 0 };
    let mut bad = Vec::new();
    let r = stream_lines(&dir.join(rel), |n, l| {
        let v: Value = serde_json::from_slice(l).map_err(|e| e.to_string())?;
        let failed = !v.get("error").is_none_or(Value::is_null);
        a.failed += u64::from(failed);
        a.correct.push(!failed && v.get("correct").and_then(Value::as_bool) == Some(true));
        let mean = v.get("mean_nll").and_then(Value::as_f64);
        if let (Some(mean), Some(lps)) = (mean, v.get("logprobs").and_then(Value::as_array)) {
            let lps: Vec<f64> = lps.iter().filter_map(Value::as_f64).collect();
            let mine = -lps.iter().sum::<f64>() / lps.len().max(1) as f64;
            if !near(mean, mine) {
                bad.push(Mismatch::new(
                    format!("qualification/{rel}"),
                    format!("line {n} mean_nll"),
                    mean.to_string(),
                    mine.to_string(),
                ));
            }
        }
        a.values.push(if failed { f64::NAN } else { mean.unwrap_or(f64::NAN) });
        Ok(())
    });
    m.extend(bad);
    match r {
        Ok((_, None)) => Some(a),
        Ok((_, Some(e))) => {
            m.push(Mismatch::new(format!("qualification/{rel}"), "parse", "malformed", e));
            None
        }
        Err(e) => {
            m.push(Mismatch::new(format!("qualification/{rel}"), "file", "unreadable", e.to_string()));
            None
        }
    }
}

fn num_eq(m: &mut Vec<Mismatch>, file: &str, field: String, a: Option<&Value>, mine: f64) {
    if !a.and_then(Value::as_f64).is_some_and(|x| near(x, mine)) {
        m.push(Mismatch::new(file, field, a.map_or("absent".into(), Value::to_string), mine.to_string()));
    }
}

/// Recounts `qualification/` when present.
pub fn check(root: &Path, _plan: Option<&FrozenPlan>, _scan: &Scan) -> Check {
    let dir = root.join("qualification");
    let qrel = "qualification/qualification.json";
    if !dir.join("qualification.json").is_file() {
        return Check::skip(NAME, "no qualification/ in this evidence directory");
    }
    let mut m = Vec::new();
    let q: Value = match read_json(&dir.join("qualification.json")) {
        Ok(v) => v,
        Err(e) => return Check::of(NAME, String::new(), vec![Mismatch::new(qrel, "parse", "malformed", e)]),
    };
    let confidence = q.get("confidence").and_then(Value::as_f64).unwrap_or(0.95);
    let mut recounted = 0;
    let arm_names: Vec<String> = q
        .get("arms")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.get("arm").and_then(Value::as_str).map(str::to_string)).collect())
        .unwrap_or_default();
    let mut all = std::collections::HashMap::new();
    for arm in &arm_names {
        for gate in ["gsm", "retrieval", "nll"] {
            let rel = format!("{arm}/{gate}.responses.jsonl");
            if !dir.join(&rel).is_file() {
                continue;
            }
            let Some(a) = answers(&dir, &rel, &mut m) else { continue };
            recounted += 1;
            let srel = format!("qualification/{arm}/{gate}.scores.json");
            let scores: Value = read_json(&root.join(&srel)).unwrap_or(Value::Null);
            num_eq(&mut m, &srel, "failed".into(), scores.get("failed"), a.failed as f64);
            if gate == "nll" {
                let ok: Vec<f64> = a.values.iter().copied().filter(|v| v.is_finite()).collect();
                if !ok.is_empty() {
                    let mean = ok.iter().sum::<f64>() / ok.len() as f64;
                    num_eq(
                        &mut m,
                        &srel,
                        "mean_of_document_mean_nll".into(),
                        scores.get("mean_of_document_mean_nll"),
                        mean,
                    );
                }
            } else {
                let right = a.correct.iter().filter(|&&c| c).count() as f64;
                num_eq(&mut m, &srel, "correct".into(), scores.get("correct"), right);
                num_eq(&mut m, &srel, "n".into(), scores.get("n"), a.correct.len() as f64);
            }
            all.insert((arm.clone(), gate), a);
        }
    }
    for (i, c) in q.get("comparisons").and_then(Value::as_array).cloned().unwrap_or_default().iter().enumerate() {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (gate, cand, ctrl) = (s("gate"), s("candidate"), s("control"));
        let f = |k: &str| format!("comparisons[{i}] {gate} {cand} vs {ctrl} {k}");
        let g: &str = match gate.as_str() {
            "gsm" => "gsm",
            "retrieval" => "retrieval",
            "nll" => "nll",
            _ => continue,
        };
        let (Some(a), Some(b)) = (all.get(&(cand.clone(), g)), all.get(&(ctrl.clone(), g))) else { continue };
        let pass = c.get("pass").and_then(Value::as_bool);
        if g == "nll" {
            let Some(gate_v) = c.get("nll").filter(|v| !v.is_null()) else { continue };
            let diffs: Vec<f64> = a.values.iter().zip(&b.values).map(|(x, y)| x - y).collect();
            let n = diffs.len();
            if n < 2 || diffs.iter().any(|d| !d.is_finite()) {
                continue;
            }
            let mean = diffs.iter().sum::<f64>() / n as f64;
            let sd = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            let Ok(t) = StudentsT::new(0.0, 1.0, (n - 1) as f64) else { continue };
            let upper = mean + t.inverse_cdf(confidence) * sd / (n as f64).sqrt();
            num_eq(&mut m, qrel, f("nll.mean"), gate_v.get("mean"), mean);
            num_eq(&mut m, qrel, f("nll.upper"), gate_v.get("upper"), upper);
            let limit = gate_v.get("limit").and_then(Value::as_f64).unwrap_or(f64::NAN);
            if pass != Some(upper < limit) {
                m.push(Mismatch::new(qrel, f("pass"), format!("{pass:?}"), format!("{}", upper < limit)));
            }
        } else {
            let Some(loss) = c.get("loss").filter(|v| !v.is_null()) else { continue };
            if a.correct.len() != b.correct.len() {
                m.push(Mismatch::new(qrel, f("items"), a.correct.len().to_string(), b.correct.len().to_string()));
                continue;
            }
            let pairs = a.correct.iter().zip(&b.correct);
            let losses = pairs.clone().filter(|(x, y)| !**x && **y).count() as u64;
            let gains = pairs.filter(|(x, y)| **x && !**y).count() as u64;
            let n = a.correct.len() as u64;
            num_eq(&mut m, qrel, f("loss.counts.losses"), loss.pointer("/counts/losses"), losses as f64);
            num_eq(&mut m, qrel, f("loss.counts.gains"), loss.pointer("/counts/gains"), gains as f64);
            num_eq(&mut m, qrel, f("loss.counts.n"), loss.pointer("/counts/n"), n as f64);
            if let Some(upper) = cp_upper(losses, n, confidence) {
                num_eq(&mut m, qrel, f("loss.loss_upper"), loss.get("loss_upper"), upper);
                let limit = loss.get("limit").and_then(Value::as_f64).unwrap_or(f64::NAN);
                if pass != Some(upper < limit) {
                    m.push(Mismatch::new(qrel, f("pass"), format!("{pass:?}"), format!("{}", upper < limit)));
                }
            }
        }
    }
    Check::of(NAME, format!("{recounted} (arm, gate) answer files recounted"), m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clopper_pearson_published_values() {
        // DESIGN 7: 12, 11 and 8 losses of 1,319 give 1.470%, 1.377%, 1.092%.
        for (x, pct) in [(12u64, 1.470), (11, 1.377), (8, 1.092)] {
            let u = cp_upper(x, 1319, 0.95).unwrap();
            assert!((u * 100.0 - pct).abs() < 0.0005, "{x}: {u}");
        }
        assert_eq!(cp_upper(5, 5, 0.95), Some(1.0));
    }
}
