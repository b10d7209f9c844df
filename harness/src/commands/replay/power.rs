//! `results/evidence.json`'s `power` (a study with `[pilots]` and hypotheses)
//! against replay's own recomputation from the pilots' raw records: per hypothesis,
//! the pilot runs of its control arm (in `pilots/derived.json` order; the pilots
//! check verifies those records' hashes), the hypothesis metric of each run by
//! replay's own measures, the SD of ln(value) times sqrt(2) (a paired log-ratio is a
//! difference of two runs), its degrees of freedom (runs - 1) and its one-sided 90%
//! upper bound (chi-square), whether the cell is a proxy (not closed loop at the
//! pilot concurrency), alpha / m and the critical wins, and the smallest effects
//! supported with 80% and 95% probability at the estimated SD and at its upper bound
//! (`power_model`: exact sign test, simulated rule with the plan's seed and 10,000
//! draws). With fewer than 2 pilot runs of a control arm there is no estimate and
//! `power.unavailable` must say so. After the study, the realised noise: the SD of
//! the confirmation blocks' paired log-ratios ln(candidate / control) from each
//! arm's records, what the rule supports at it with 80% probability, and whether it
//! is more than twice the pilots' SD. Every difference is named by field. Must not
//! call the analysis path (`stats`, `power`, `report`) and must not write anything.

use std::path::Path;

use serde_json::{Value, json};
use statrs::distribution::{ChiSquared, ContinuousCDF};

use super::measures::{Val, summarize};
use super::power_model::{Draws, Member, critical_wins, detectable};
use super::read::{read_doc, read_json};
use super::records::Rec;
use super::{Check, Mismatch, close, num};
use crate::metrics::{FIELD_NAMES, metric_field};
use crate::plan::{FrozenPlan, Load, MetricKind, Plan};

pub const NAME: &str = "evidence.json: power from the pilots' noise";
const FILE: &str = crate::evidence::EVIDENCE_FILE;
/// Draws per simulated point (the report's default).
const DRAWS: usize = 10_000;
const SD_UPPER_CONFIDENCE: f64 = 0.9;
const PROBABILITIES: [f64; 2] = [0.8, 0.95];
/// The realised SD is flagged beyond this multiple of the assumed one.
const OPTIMISM_FACTOR: f64 = 2.0;

/// One hypothesis's noise as replay recomputes it.
struct Noise {
    runs: Vec<u32>,
    values: Vec<f64>,
    sd: f64,
    sd_upper: f64,
}

fn value(bytes: &[u8], field: &str, plan: &Plan) -> Result<f64, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let recs = text
        .lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str::<Rec>(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let values = summarize(&recs, plan.slo.as_ref())?;
    let i = FIELD_NAMES.iter().position(|n| *n == field).ok_or_else(|| format!("no field {field}"))?;
    match values.get(i) {
        Some(Val::Float(Some(v))) if *v > 0.0 => Ok(*v),
        Some(Val::Int(n)) if *n > 0 => Ok(*n as f64),
        _ => Err(format!("no {field} value")),
    }
}

/// The noise of the pilot runs of `arm` on `field`; `Err`: why there is none.
fn noise(root: &Path, plan: &Plan, arm: &str, field: &str) -> Result<Noise, String> {
    let rec = crate::evidence::read_pilots_record(root)?;
    let runs: Vec<_> = rec.pilots.iter().filter(|p| p.arm == arm).collect();
    if runs.len() < 2 {
        return Err(format!("{} pilot run(s) of control arm {arm}; an estimate needs 2", runs.len()));
    }
    let mut values = Vec::new();
    for p in &runs {
        let bytes = read_doc(root, &p.records)?;
        values.push(value(&bytes, field, plan).map_err(|e| format!("{}: {e}", p.records))?);
    }
    let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    let n = logs.len() as f64;
    let s = sample_sd(&logs);
    let chi = ChiSquared::new(n - 1.0).map_err(|e| e.to_string())?.inverse_cdf(1.0 - SD_UPPER_CONFIDENCE);
    let sd = s * std::f64::consts::SQRT_2;
    if !(sd.is_finite() && sd > 0.0) {
        return Err(format!("no spread: SD {sd}"));
    }
    Ok(Noise { runs: runs.iter().map(|p| p.run).collect(), values, sd, sd_upper: sd * ((n - 1.0) / chi).sqrt() })
}

/// The SD (n - 1) of the confirmation blocks' paired log-ratios ln(candidate /
/// control) of hypothesis `h`, each arm's value from its own records, over the
/// blocks where both have one, with the number of such blocks; `None` below 2
/// blocks or without spread.
fn realised(root: &Path, plan: &Plan, h: &crate::plan::Hypothesis, field: &str) -> Option<(f64, usize)> {
    let of = |b: u32, arm: &str| {
        read_doc(root, crate::evidence::requests_path(b, arm, &h.cell)).ok().and_then(|x| value(&x, field, plan).ok())
    };
    let logs: Vec<f64> =
        (0..plan.blocks.count).filter_map(|b| Some((of(b, &h.candidate)? / of(b, &h.control)?).ln())).collect();
    let n = logs.len();
    if n < 2 {
        return None;
    }
    let sd = sample_sd(&logs);
    (sd.is_finite() && sd > 0.0).then_some((sd, n))
}

/// Sample SD (n - 1) of `x` (at least 2 values).
fn sample_sd(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

struct Cmp<'a> {
    m: &'a mut Vec<Mismatch>,
    at: String,
}

impl Cmp<'_> {
    fn float(&mut self, field: &str, archived: Option<&Value>, mine: Option<f64>) {
        let got = archived.and_then(Value::as_f64);
        let ok = match (got, mine) {
            (Some(a), Some(b)) => close(a, b),
            (None, None) => archived.is_none_or(Value::is_null),
            _ => false,
        };
        if !ok {
            let shown = archived.map_or("absent".into(), Value::to_string);
            self.m.push(Mismatch::new(FILE, format!("{}{field}", self.at), shown, num(mine)));
        }
    }

    fn exact(&mut self, field: &str, archived: Option<&Value>, mine: Value) {
        if archived != Some(&mine) {
            let shown = archived.map_or("absent".into(), Value::to_string);
            self.m.push(Mismatch::new(FILE, format!("{}{field}", self.at), shown, mine.to_string()));
        }
    }
}

/// `None` when the plan has no `[pilots]` or no hypotheses and `evidence.json` has no
/// `power` (nothing to check).
pub fn check(root: &Path, frozen: &FrozenPlan) -> Option<Check> {
    let plan = &frozen.plan;
    let ev: Value = match read_json(root, FILE) {
        Ok(v) => v,
        Err(e) => {
            if plan.pilots.is_none() || plan.hypotheses.is_empty() {
                return None;
            }
            return Some(Check::of(NAME, String::new(), vec![Mismatch::new(FILE, "parse", "unreadable", e)]));
        }
    };
    let archived = ev.get("power");
    let mut m = Vec::new();
    let (Some(pilots), Some(alpha), false) = (&plan.pilots, plan.alpha, plan.hypotheses.is_empty()) else {
        let a = archived?;
        m.push(Mismatch::new(FILE, "power", a.to_string(), "absent: the plan has no [pilots] or no hypotheses"));
        return Some(Check::of(NAME, "a power object without a noise source".into(), m));
    };
    let Some(archived) = archived else {
        m.push(Mismatch::new(FILE, "power", "absent", "the power from the pilots' noise"));
        return Some(Check::of(NAME, String::new(), m));
    };
    let mut c = Cmp { m: &mut m, at: "power.".into() };
    c.exact("noise_source", archived.get("noise_source"), json!("pilots"));
    let noises: Result<Vec<Noise>, String> =
        plan.hypotheses.iter().map(|h| noise(root, plan, &h.control, metric_field(h.metric))).collect();
    let noises = match noises {
        Err(why) => {
            let said = archived.get("unavailable").and_then(Value::as_str).unwrap_or("");
            if said.is_empty() {
                c.exact("unavailable", archived.get("unavailable"), json!(format!("a reason: {why}")));
            }
            c.exact("hypotheses", archived.get("hypotheses"), json!([]));
            return Some(Check::of(NAME, format!("no noise estimate ({why}), as evidence.json says"), m));
        }
        Ok(n) => n,
    };
    let n = plan.blocks.count;
    let family_size = plan.hypotheses.len();
    let null = Value::Null;
    c.exact("unavailable", archived.get("unavailable").or(Some(&null)), Value::Null);
    c.exact("blocks", archived.get("blocks"), json!(n));
    c.float("alpha", archived.get("alpha"), Some(alpha));
    c.exact("family", archived.get("family"), json!(family_size));
    c.exact("seed", archived.get("seed"), json!(plan.study.seed));
    c.exact("draws", archived.get("draws"), json!(DRAWS));
    c.float("sd_upper_confidence", archived.get("sd_upper_confidence"), Some(SD_UPPER_CONFIDENCE));
    let family: Vec<Member> = plan
        .hypotheses
        .iter()
        .zip(&noises)
        .map(|(h, e)| Member {
            throughput: h.metric.kind() == MetricKind::Throughput,
            sd: e.sd,
            threshold: h.threshold,
        })
        .collect();
    let draws = Draws::new(plan.study.seed, DRAWS, family_size, n as usize);
    let level = alpha / family_size as f64;
    let hyps = archived.get("hypotheses").and_then(Value::as_array).cloned().unwrap_or_default();
    if hyps.len() != family_size {
        c.exact("hypotheses (count)", Some(&json!(hyps.len())), json!(family_size));
    }
    let mut shown = Vec::new();
    for (i, (h, e)) in plan.hypotheses.iter().zip(&noises).enumerate() {
        let a = hyps.get(i).cloned().unwrap_or(Value::Null);
        let mut c = Cmp { m: &mut m, at: format!("power.hypotheses[{}].", h.name) };
        c.exact("name", a.get("name"), json!(h.name));
        c.exact("metric", a.get("metric"), json!(h.metric.as_str()));
        c.exact("cell", a.get("cell"), json!(h.cell));
        c.exact("noise_arm", a.get("noise_arm"), json!(h.control));
        c.exact("pilot_runs", a.get("pilot_runs"), json!(e.runs));
        let values = a.get("pilot_values").and_then(Value::as_array).cloned().unwrap_or_default();
        if values.len() != e.values.len() {
            c.exact("pilot_values (count)", Some(&json!(values.len())), json!(e.values.len()));
        }
        for (j, v) in e.values.iter().enumerate() {
            c.float(&format!("pilot_values[{j}]"), values.get(j), Some(*v));
        }
        c.float("noise_sd", a.get("noise_sd"), Some(e.sd));
        c.exact("noise_df", a.get("noise_df"), json!(e.runs.len() - 1));
        c.float("noise_sd_upper", a.get("noise_sd_upper"), Some(e.sd_upper));
        let same = matches!(plan.cell(&h.cell).map(|cell| &cell.load),
            Some(Load::Closed { concurrency }) if *concurrency == pilots.concurrency);
        c.exact("proxy", a.get("proxy"), json!(!same));
        c.float("level", a.get("level"), Some(level));
        c.exact("critical_wins", a.get("critical_wins"), json!(critical_wins(u64::from(n), level)));
        let det = a.get("detectable").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut k = 0;
        for (basis, sd) in [("estimate", e.sd), ("upper_bound", e.sd_upper)] {
            for p in PROBABILITIES {
                let d = det.get(k).cloned().unwrap_or(Value::Null);
                let at = format!("detectable[{basis} {p}].");
                let (exact, simulated) = detectable(&family, i, sd, p, alpha, &draws);
                c.float(&format!("{at}probability"), d.get("probability"), Some(p));
                c.exact(&format!("{at}sd_basis"), d.get("sd_basis"), json!(basis));
                c.float(&format!("{at}sd"), d.get("sd"), Some(sd));
                c.float(&format!("{at}sign_test_exact"), d.get("sign_test_exact"), exact);
                c.float(&format!("{at}rule_simulated"), d.get("rule_simulated"), simulated);
                if basis == "estimate" && p == PROBABILITIES[0] {
                    shown.push(format!("{} SD {:.4} ({} runs): {}", h.name, e.sd, e.runs.len(), num(simulated)));
                }
                k += 1;
            }
        }
        if det.len() != k {
            c.exact("detectable (count)", Some(&json!(det.len())), json!(k));
        }
        // What the confirmation blocks showed, against the assumption.
        let real = realised(root, plan, h, metric_field(h.metric));
        c.float("realised_sd", a.get("realised_sd"), real.map(|r| r.0));
        c.exact("realised_df", a.get("realised_df").or(Some(&null)), json!(real.map(|r| r.1 - 1)));
        let found = real.and_then(|(sd, _)| detectable(&family, i, sd, PROBABILITIES[0], alpha, &draws).1);
        c.float("realised_detectable_80", a.get("realised_detectable_80"), found);
        c.exact(
            "realised_optimistic",
            a.get("realised_optimistic").or(Some(&null)),
            json!(real.map(|(sd, _)| sd > OPTIMISM_FACTOR * e.sd)),
        );
    }
    let detail =
        format!("{n} blocks, seed {}, {DRAWS} draws; 80% at the estimate: {}", plan.study.seed, shown.join("; "));
    Some(Check::of(NAME, detail, m))
}
