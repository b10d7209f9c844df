//! The qualification outcome (`results/qualification.json`, which the report reads,
//! and its twin `qualification/qualification.json`) compared field by field with
//! the rescored answers (`quality`): the study, `required` and `confidence` against
//! the plan, the GSM set against `inputs/gsm.set.json`; per comparison (each
//! candidate against each control on each enabled gate, in the plan's order) the
//! paired counts, the one-sided Clopper-Pearson upper bound of losses / N (the
//! `confidence` quantile of Beta(losses + 1, N - losses), by bisection on statrs's
//! regularized incomplete beta) or the one-sided Student-t upper bound of the mean
//! paired NLL difference, the limit and the pass; the parity results against each
//! arm's recount; per arm its server fault and startup (`arm.json`), its scores, its
//! verdict and the number of reasons (wording is not compared). Must not call
//! `quality::verdict`, `paired` or `stats`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::function::beta::checked_beta_reg;

use super::quality::{Arm, Cmp, rescore};
use super::read::read_json;
use super::{Check, Mismatch};
use crate::evidence::{
    GSM_SET_FILE, INPUTS_DIR, PLAN_FILE, QUALIFICATION_DIR, QUALIFICATION_OUTCOME_PATH, QUALIFICATION_RESULT_FILE,
};
use crate::plan::{ArmRole, FrozenPlan, Qualification};
use crate::quality::QUALIFICATION_FORMAT;

pub const NAME: &str = "quality gates: rescored answers, scores, bounds, verdicts";
const RESULTS: &str = QUALIFICATION_RESULT_FILE;
const TWIN: &str = QUALIFICATION_OUTCOME_PATH;

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

/// One comparison as replay computes it: (pass, loss object, nll object).
fn comparison(q: &Qualification, gate: &str, cand: &Arm, ctrl: &Arm) -> (bool, Value, Value) {
    let (Some(a), Some(b)) = (cand.gates.get(gate), ctrl.gates.get(gate)) else {
        return (false, Value::Null, Value::Null);
    };
    if gate == "nll" {
        let limit = q.nll.as_ref().map_or(1.01f64.ln(), |n| n.max_upper);
        let n = a.values.len();
        if n != b.values.len() || n < 2 || a.values.iter().chain(&b.values).any(|v| !v.is_finite()) {
            return (false, Value::Null, Value::Null);
        }
        let diffs: Vec<f64> = a.values.iter().zip(&b.values).map(|(x, y)| x - y).collect();
        let mean = diffs.iter().sum::<f64>() / n as f64;
        let sd = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        let Ok(t) = StudentsT::new(0.0, 1.0, (n - 1) as f64).map(|t| t.inverse_cdf(q.confidence)) else {
            return (false, Value::Null, Value::Null);
        };
        let upper = mean + t * sd / (n as f64).sqrt();
        let pass = upper < limit;
        let g = json!({"n": n, "mean": mean, "sd": sd, "confidence": q.confidence, "t_quantile": t,
            "upper": upper, "limit": limit, "pass": pass});
        return (pass, Value::Null, g);
    }
    let limit = match gate {
        "gsm" => q.gsm.as_ref().map(|g| g.max_loss_rate),
        _ => q.retrieval.as_ref().map(|r| r.max_loss_rate),
    }
    .unwrap_or(0.02);
    if a.correct.len() != b.correct.len() {
        return (false, Value::Null, Value::Null);
    }
    let pairs: Vec<(bool, bool)> = a.correct.iter().copied().zip(b.correct.iter().copied()).collect();
    let count = |f: fn(&(bool, bool)) -> bool| pairs.iter().filter(|p| f(p)).count() as u64;
    let losses = count(|p| !p.0 && p.1);
    let n = pairs.len() as u64;
    let Some(upper) = cp_upper(losses, n, q.confidence) else { return (false, Value::Null, Value::Null) };
    let loss_items: Vec<u64> = pairs.iter().enumerate().filter(|(_, p)| !p.0 && p.1).map(|(i, _)| i as u64).collect();
    let counts = json!({"n": n, "losses": losses, "gains": count(|p| p.0 && !p.1), "both_right": count(|p| p.0 && p.1),
        "both_wrong": count(|p| !p.0 && !p.1), "candidate_right": count(|p| p.0), "control_right": count(|p| p.1),
        "loss_items": loss_items});
    let pass = upper < limit;
    (
        pass,
        json!({"counts": counts, "confidence": q.confidence, "loss_upper": upper, "limit": limit, "pass": pass}),
        Value::Null,
    )
}

/// Compares an archived object with replay's, every key of replay's (floats within
/// `near`, the rest exactly), and names archived keys replay does not know.
fn object(c: &mut Cmp<'_>, label: &str, archived: Option<&Value>, mine: &Value) {
    let Some(mo) = mine.as_object() else { return c.exact(label, archived, mine.clone()) };
    let Some(ao) = archived.and_then(Value::as_object) else { return c.exact(label, archived, mine.clone()) };
    for (k, v) in mo {
        let field = format!("{label}.{k}");
        match v {
            Value::Object(_) => object(c, &field, ao.get(k), v),
            Value::Number(x) if x.is_f64() => c.num(field, ao.get(k), x.as_f64()),
            _ => c.exact(field, ao.get(k), v.clone()),
        }
    }
    for k in ao.keys().filter(|k| !mo.contains_key(*k) && !["rule", "interval"].contains(&k.as_str())) {
        c.exact(format!("{label}.{k}"), ao.get(k), Value::Null);
    }
}

fn outcome(
    root: &Path,
    c: &mut Cmp<'_>,
    fp: &FrozenPlan,
    q: &Qualification,
    arms: &BTreeMap<String, Arm>,
    archived: &Value,
) {
    let plan = &fp.plan;
    c.exact("format", archived.get("format"), Value::from(QUALIFICATION_FORMAT));
    c.exact("study", archived.get("study"), Value::from(plan.study.name.clone()));
    c.exact("required", archived.get("required"), Value::from(q.required));
    c.num("confidence", archived.get("confidence"), Some(q.confidence));
    let set = q
        .gsm
        .as_ref()
        .and_then(|_| read_json::<Value>(root, &format!("{QUALIFICATION_DIR}/{INPUTS_DIR}/{GSM_SET_FILE}")).ok());
    c.exact("gsm_set", archived.get("gsm_set"), set.unwrap_or(Value::Null));
    let gates: Vec<&str> = [("gsm", q.gsm.is_some()), ("nll", q.nll.is_some()), ("retrieval", q.retrieval.is_some())]
        .into_iter()
        .filter_map(|(g, on)| on.then_some(g))
        .collect();
    let role = |r: ArmRole| plan.arms.iter().filter(move |a| a.role == r);
    let empty = Arm::default();
    let arm = |name: &str| arms.get(name).unwrap_or(&empty);
    let ac = archived.get("comparisons").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut i = 0;
    let mut failing: BTreeMap<&str, usize> = BTreeMap::new();
    for cand in role(ArmRole::Candidate) {
        for ctrl in role(ArmRole::Control) {
            for g in &gates {
                let (pass, loss, nll) = comparison(q, g, arm(&cand.name), arm(&ctrl.name));
                *failing.entry(cand.name.as_str()).or_default() += usize::from(!pass);
                let a = ac.get(i);
                let label = format!("comparisons[{i}] {g} {} vs {}", cand.name, ctrl.name);
                let mine = json!({"gate": g, "candidate": cand.name, "control": ctrl.name, "pass": pass});
                for k in ["gate", "candidate", "control", "pass"] {
                    c.exact(format!("{label}.{k}"), a.and_then(|a| a.get(k)), mine[k].clone());
                }
                object(c, &format!("{label}.loss"), a.and_then(|a| a.get("loss")), &loss);
                object(c, &format!("{label}.nll"), a.and_then(|a| a.get("nll")), &nll);
                i += 1;
            }
        }
    }
    c.exact("comparisons (count)", Some(&Value::from(ac.len())), Value::from(i));
    let aa = archived.get("arms").and_then(Value::as_array).cloned().unwrap_or_default();
    c.exact("arms (count)", Some(&Value::from(aa.len())), Value::from(plan.arms.len()));
    let mut parity = Vec::new();
    for (j, pa) in plan.arms.iter().enumerate() {
        let r = arm(&pa.name);
        let a = aa.get(j).cloned().unwrap_or(Value::Null);
        let f = |k: &str| format!("arms[{}].{k}", pa.name);
        c.exact(f("arm"), a.get("arm"), Value::from(pa.name.clone()));
        c.exact(f("role"), a.get("role"), Value::from(pa.role.as_str()));
        c.exact(f("error"), a.get("error"), r.arm_json.get("error").cloned().unwrap_or(Value::Null));
        c.num(f("startup_s"), a.get("startup_s"), r.arm_json.get("startup_s").and_then(Value::as_f64));
        let scores: serde_json::Map<String, Value> =
            r.gates.iter().map(|(g, x)| (g.to_string(), x.scores.clone())).collect();
        c.exact(f("scores"), a.get("scores"), Value::Object(scores));
        let server = usize::from(!r.arm_json.get("error").is_some_and(Value::is_null));
        let failed = r.gates.values().filter(|g| g.failed > 0).count();
        let mut reasons = server + failed + failing.get(pa.name.as_str()).copied().unwrap_or(0);
        let wants = q.parity.as_ref().is_some_and(|p| p.reference.contains_key(&pa.name));
        match &r.parity {
            Some((rows, scores)) => {
                reasons += usize::from(!rows.is_empty());
                parity.push((pa.name.clone(), rows, scores));
            }
            None => reasons += usize::from(wants && server == 0),
        }
        let got = a.get("reasons").and_then(Value::as_array).map_or(0, Vec::len);
        c.exact(f("reasons (count)"), Some(&Value::from(got)), Value::from(reasons));
        c.exact(f("qualified"), a.get("qualified"), Value::from(reasons == 0));
    }
    let ap = archived.get("parity").and_then(Value::as_array).cloned().unwrap_or_default();
    c.exact("parity (count)", Some(&Value::from(ap.len())), Value::from(parity.len()));
    for (k, (name, rows, scores)) in parity.iter().enumerate() {
        let f = |x: &str| format!("parity[{name}].{x}");
        c.exact(f("(whole)"), ap.get(k), (*scores).clone());
        let spec = q.parity.as_ref();
        for (key, v) in [("prompts", spec.map(|p| p.prompts)), ("input_tokens", spec.map(|p| p.input_tokens))]
            .into_iter()
            .chain([("output_tokens", spec.map(|p| p.output_tokens)), ("concurrency", spec.map(|p| p.concurrency))])
        {
            c.exact(f(key), scores.get(key), v.map_or(Value::Null, Value::from));
        }
        c.exact(f("pass"), scores.get("pass"), Value::from(rows.is_empty()));
        let mine: Vec<Value> = rows.iter().map(|(p, o, first, h, r)| json!([p, o, first, h, r])).collect();
        let got: Vec<Value> = scores
            .get("mismatches")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|x| {
                        json!([x["prompt"], x["order"], x["first_difference"], x["http_tokens"], x["reference_tokens"]])
                    })
                    .collect()
            })
            .unwrap_or_default();
        c.exact(f("mismatches (prompt, order, first, http, reference)"), Some(&Value::Array(got)), Value::Array(mine));
    }
}

/// Rescores `qualification/` and compares its outcome; skips when the study has none.
pub fn check(root: &Path, plan: Option<&FrozenPlan>) -> Check {
    let dir = root.join(QUALIFICATION_DIR);
    let spec = plan.and_then(|p| p.plan.qualification.as_ref());
    let required = spec.is_some_and(|q| q.required);
    if dir.symlink_metadata().is_err() && root.join(RESULTS).symlink_metadata().is_err() {
        if required {
            let m =
                vec![Mismatch::new(format!("{QUALIFICATION_DIR}/"), "directory", "missing", "required by the plan")];
            return Check::of(NAME, "no qualification".into(), m);
        }
        return Check::skip(NAME, "no qualification/ in this evidence directory (not required by the plan)");
    }
    let (Some(fp), Some(q)) = (plan, spec) else {
        let m = vec![Mismatch::new(PLAN_FILE, "[qualification]", "absent or invalid", "the gates' definition")];
        return Check::of(NAME, "qualification/ without a plan to rescore it by".into(), m);
    };
    let mut m = Vec::new();
    let arms = rescore(root, &fp.plan, q, &mut m);
    let mut compared = Vec::new();
    let main = if root.join(RESULTS).symlink_metadata().is_ok() { RESULTS } else { TWIN };
    match read_json::<Value>(root, main) {
        Err(e) => m.push(Mismatch::new(main, "parse", "malformed or missing", e)),
        Ok(archived) => {
            outcome(root, &mut Cmp { m: &mut m, file: main.into() }, fp, q, &arms, &archived);
            compared.push(main);
            if main == RESULTS && root.join(TWIN).symlink_metadata().is_ok() {
                match read_json::<Value>(root, TWIN) {
                    Ok(twin) if twin == archived => compared.push(TWIN),
                    Ok(_) => m.push(Mismatch::new(TWIN, "(whole)", "differs", format!("equal to {RESULTS}"))),
                    Err(e) => m.push(Mismatch::new(TWIN, "parse", "malformed", e)),
                }
            }
        }
    }
    let gates: usize = arms.values().map(|a| a.gates.len() + usize::from(a.parity.is_some())).sum();
    let detail =
        format!("{} arms, {gates} (arm, gate) answer files rescored; outcome: {}", arms.len(), compared.join(", "));
    Check::of(NAME, detail, m)
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
