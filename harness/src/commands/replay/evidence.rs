//! `results/evidence.json` against replay's own analysis: the study fields, every
//! server invocation's status, the failed requests, and per hypothesis (the plan's
//! whole family, in plan order) the paired block values and effects, the sign
//! test, the Holm-adjusted p, the median screen, the median interval and the claim
//! (blocked by failed requests, under study-level blocking also by failed
//! requests anywhere else in the confirmation, arm faults, missing measurements or an unqualified
//! arm; else supported or not supported naming the failed rules; a hypothesis that
//! cannot be tested enters Holm with p = 1); and, as a second check, the medians
//! across blocks of every cell measure. Claim reasons are compared by count, not
//! wording. The unit maps (`median_units`, each hypothesis's `block_units`) are
//! checked against the field catalogue's units (`metrics::field_unit`). Must not
//! call the analysis path.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::complete::Study;
use super::decide::{effect, holm, interval, median, sign_test};
use super::measures::{CellMeasures, expected};
use super::read::read_json;
use super::{Check, Mismatch, close, num};
use crate::metrics::{FIELD_NAMES, field_unit, metric_field};
use crate::plan::{Blocking, CellKind, FrozenPlan, Hypothesis, Metric, MetricKind};

pub const NAME: &str = "evidence.json: effects, sign tests, Holm, medians, intervals, claims";
pub const CELLS_NAME: &str = "evidence.json: cell medians across blocks";
const FILE: &str = crate::evidence::EVIDENCE_FILE;
const INTERVAL_TARGET: f64 = 0.95;

struct Cmp<'a> {
    m: &'a mut Vec<Mismatch>,
}

impl Cmp<'_> {
    fn float(&mut self, field: &str, a: Option<&Value>, mine: Option<f64>) {
        let got = a.and_then(Value::as_f64);
        let ok = match (got, mine) {
            (Some(x), Some(y)) => close(x, y),
            (None, None) => a.is_none_or(Value::is_null),
            _ => false,
        };
        if !ok {
            self.m.push(Mismatch::new(FILE, field, a.map_or("absent".into(), Value::to_string), num(mine)));
        }
    }

    fn exact(&mut self, field: &str, a: Option<&Value>, mine: Value) {
        if a != Some(&mine) {
            self.m.push(Mismatch::new(FILE, field, a.map_or("absent".into(), Value::to_string), mine.to_string()));
        }
    }
}

fn metric_unit(metric: Metric) -> &'static str {
    field_unit(metric_field(metric))
}

fn unqualified(root: &Path) -> (Vec<String>, Option<Value>) {
    let q: Option<Value> = read_json(root, crate::evidence::QUALIFICATION_RESULT_FILE).ok();
    let arms = q.as_ref().and_then(|q| q.get("arms")).and_then(Value::as_array).cloned().unwrap_or_default();
    let names = arms
        .iter()
        .filter(|a| a.get("qualified").and_then(Value::as_bool) == Some(false))
        .filter_map(|a| a.get("arm").and_then(Value::as_str).map(str::to_string))
        .collect();
    (names, q)
}

/// One confirmation block of a hypothesis: block, control, candidate, effect.
type BlockRow = (u32, Option<f64>, Option<f64>, Option<f64>);

/// One hypothesis before Holm.
struct Prep {
    blocks: Vec<BlockRow>,
    structural: Vec<String>,
    by_class: BTreeMap<String, u64>,
    failed: u64,
    /// Study-level blocking: failed requests elsewhere in the confirmation.
    elsewhere: u64,
    effects: Vec<f64>,
}

impl Prep {
    /// Tested: no structural reason and at least one effect (else p = 1 in Holm).
    fn tested(&self) -> bool {
        self.structural.is_empty() && !self.effects.is_empty()
    }
}

/// Both evidence.json checks.
/// `listed`: whether the manifest lists evidence.json (then it must be there).
pub fn checks(root: &Path, s: &Study<'_>, cells: &[CellMeasures], frozen: &FrozenPlan, listed: bool) -> (Check, Check) {
    if root.join(FILE).symlink_metadata().is_err() && !listed {
        // Never written (no report): no claim to check.
        let why = "no results/evidence.json, none in the manifest (no report was built)";
        return (Check::skip(NAME, why), Check::skip(CELLS_NAME, why));
    }
    let ev: Value = match read_json(root, FILE) {
        Ok(v) => v,
        Err(e) => {
            let m = vec![Mismatch::new(FILE, "parse", "malformed or missing", e)];
            return (Check::of(NAME, "no evidence.json".into(), m.clone()), Check::of(CELLS_NAME, String::new(), m));
        }
    };
    let plan = s.plan;
    let mut m = Vec::new();
    let mut c = Cmp { m: &mut m };
    let blocking = check_study_fields(&mut c, &ev, s, frozen);
    check_units_and_failures(&mut c, &ev, s, cells);
    let (unq, qual) = unqualified(root);
    c.exact("qualification", Some(ev.get("qualification").unwrap_or(&Value::Null)), qual.unwrap_or(Value::Null));

    // Hypotheses: every one prepared, then Holm across the family, then each checked.
    let alpha = plan.alpha.unwrap_or(0.05);
    let preps: Vec<Prep> = plan.hypotheses.iter().map(|h| prepare(h, s, cells, blocking)).collect();
    let pvals: Vec<f64> = preps.iter().map(|p| if p.tested() { sign_test(&p.effects).4 } else { 1.0 }).collect();
    let holms = holm(&pvals, alpha);
    let archived_h = ev.get("hypotheses").and_then(Value::as_array).cloned().unwrap_or_default();
    if archived_h.len() != plan.hypotheses.len() {
        c.exact("hypotheses (count)", Some(&Value::from(archived_h.len())), Value::from(plan.hypotheses.len()));
    }
    for (i, (h, p)) in plan.hypotheses.iter().zip(&preps).enumerate() {
        let a = archived_h.get(i).cloned().unwrap_or(Value::Null);
        let f = |k: &str| format!("hypotheses[{}].{k}", h.name);
        check_hypothesis_fields(&mut c, &a, h, alpha, &f);
        check_blocks(&mut c, &a, h, p, &f);
        let (hp, reject) = holms[i];
        c.exact(&f("tested"), a.get("tested"), Value::from(p.tested()));
        c.exact(&f("failed_requests"), a.get("failed_requests"), Value::from(p.failed));
        c.exact(&f("failed_by_class"), a.get("failed_by_class"), serde_json::to_value(&p.by_class).unwrap_or_default());
        c.float(&f("holm.p_value"), a.pointer("/holm/p_value"), Some(pvals[i]));
        c.float(&f("holm.adjusted_p"), a.pointer("/holm/adjusted_p"), Some(hp));
        c.exact(&f("holm.reject"), a.pointer("/holm/reject"), Value::from(reject));
        let median_passed = check_tests(&mut c, &a, h, p, &f);
        let claim = expected_claim(h, p, &unq, reject, median_passed);
        let mut got = a.get("claim").cloned().unwrap_or(Value::Null);
        if let Some(r) = got.get_mut("reasons") {
            *r = Value::from(r.as_array().map_or(0, Vec::len));
        }
        c.exact(&f("claim"), Some(&got), claim);
    }
    let detail = format!(
        "{} hypotheses, {} units, alpha {alpha}, {}-level blocking{}",
        plan.hypotheses.len(),
        s.units.len(),
        blocking.as_str(),
        if ev.get("blocking").is_none() { " (evidence.json predates analysis.blocking)" } else { "" }
    );
    let hyp = Check::of(NAME, detail, m);
    (hyp, medians_check(&ev, s, cells))
}

/// The study's own fields; returns the blocking its claims were decided under.
fn check_study_fields(c: &mut Cmp<'_>, ev: &Value, s: &Study<'_>, frozen: &FrozenPlan) -> Blocking {
    let plan = s.plan;
    c.exact("study", ev.get("study"), Value::from(plan.study.name.clone()));
    c.exact("plan_sha256", ev.get("plan_sha256"), Value::from(frozen.sha256.clone()));
    c.exact("percentile_method", ev.get("percentile_method"), Value::from("nearest_rank"));
    c.float("alpha", ev.get("alpha"), plan.alpha);
    c.float("interval_target", ev.get("interval_target"), Some(INTERVAL_TARGET));
    c.exact("confirmation_blocks", ev.get("confirmation_blocks"), Value::from(plan.blocks.count));
    c.exact("descriptive_blocks", ev.get("descriptive_blocks"), Value::from(plan.blocks.descriptive));
    // An evidence.json without `blocking` predates the key: its claims were decided
    // under the only rule there was then, cell-level blocking.
    match ev.get("blocking") {
        None => Blocking::Cell,
        Some(v) => {
            c.exact("blocking", Some(v), Value::from(plan.blocking.as_str()));
            plan.blocking
        }
    }
}

/// Every server invocation's status, and every failed request with its class.
fn check_units_and_failures(c: &mut Cmp<'_>, ev: &Value, s: &Study<'_>, cells: &[CellMeasures]) {
    let units: Vec<Value> = s
        .units
        .iter()
        .map(|u| serde_json::json!({"block": u.block, "arm": u.arm, "status": u.status, "detail": u.detail}))
        .collect();
    c.exact("units", ev.get("units"), Value::Array(units));
    let mut failures: Vec<Value> = Vec::new();
    for x in cells {
        for f in &x.failures {
            failures.push(serde_json::json!([x.block, x.arm, x.cell, f.index, f.id, f.class]));
        }
    }
    let archived: Vec<Value> = ev
        .get("failures")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|f| serde_json::json!([f["block"], f["arm"], f["cell"], f["index"], f["id"], f["class"]]))
                .collect()
        })
        .unwrap_or_default();
    c.exact("failures (block, arm, cell, index, id, class)", Some(&Value::Array(archived)), Value::Array(failures));
    c.exact("summary_check.checked", ev.pointer("/summary_check/checked"), Value::from(cells.len()));
}

/// One hypothesis's blocks, effects, structural reasons and failed requests, from
/// replay's own measures.
fn prepare(h: &Hypothesis, s: &Study<'_>, cells: &[CellMeasures], blocking: Blocking) -> Prep {
    let plan = s.plan;
    let measured =
        |b: u32, arm: &str, cell: &str| cells.iter().find(|x| x.block == b && x.arm == arm && x.cell == cell);
    let mut p = Prep {
        blocks: Vec::new(),
        structural: Vec::new(),
        by_class: BTreeMap::new(),
        failed: 0,
        elsewhere: 0,
        effects: Vec::new(),
    };
    for b in 0..plan.blocks.count {
        for arm in [&h.candidate, &h.control] {
            match s.unit(b, arm) {
                Some(u) if u.status.is_completed() => {}
                _ => p.structural.push(format!("block {b}: arm {arm} fault")),
            }
        }
        let value = |arm: &str| measured(b, arm, &h.cell).and_then(|x| x.float(metric_field(h.metric)));
        let (ctrl, cand) = (value(&h.control), value(&h.candidate));
        let mut e = None;
        match (ctrl, cand) {
            (Some(x), Some(y)) => match effect(h.metric.kind() == MetricKind::Throughput, x, y) {
                Ok(v) => e = Some(v),
                Err(why) => p.structural.push(format!("block {b}: {why}")),
            },
            _ => p.structural.push(format!("block {b}: no measurement")),
        }
        p.effects.extend(e);
        p.blocks.push((b, ctrl, cand, e));
    }
    p.structural.dedup();
    for x in cells.iter().filter(|x| x.block < plan.blocks.count && x.cell == h.cell) {
        if x.arm == h.candidate || x.arm == h.control {
            for f in &x.failures {
                *p.by_class.entry(f.class.clone()).or_insert(0) += 1;
            }
        }
    }
    p.failed = p.by_class.values().sum();
    if blocking == Blocking::Study {
        let own = |x: &CellMeasures| x.cell == h.cell && (x.arm == h.candidate || x.arm == h.control);
        let confirmation = |x: &CellMeasures| plan.cell(&x.cell).is_some_and(|c| c.kind == CellKind::Confirmation);
        p.elsewhere = cells
            .iter()
            .filter(|x| x.block < plan.blocks.count && confirmation(x) && !own(x))
            .map(|x| x.failures.len() as u64)
            .sum();
    }
    p
}

/// What the plan says of the hypothesis: name, metric, cell, arms, threshold, alpha.
fn check_hypothesis_fields(c: &mut Cmp<'_>, a: &Value, h: &Hypothesis, alpha: f64, f: &dyn Fn(&str) -> String) {
    c.exact(&f("name"), a.get("name"), Value::from(h.name.clone()));
    c.exact(&f("metric"), a.get("metric"), Value::from(h.metric.as_str()));
    c.exact(&f("kind"), a.get("kind"), Value::from(h.metric.kind().as_str()));
    for (k, v) in [("cell", &h.cell), ("candidate", &h.candidate), ("control", &h.control)] {
        c.exact(&f(k), a.get(k), Value::from(v.clone()));
    }
    c.float(&f("threshold"), a.get("threshold"), Some(h.threshold));
    c.float(&f("alpha"), a.get("alpha"), Some(alpha));
}

/// The paired values and effect of every confirmation block, and their units.
fn check_blocks(c: &mut Cmp<'_>, a: &Value, h: &Hypothesis, p: &Prep, f: &dyn Fn(&str) -> String) {
    let ab = a.get("blocks").and_then(Value::as_array).cloned().unwrap_or_default();
    if ab.len() != p.blocks.len() {
        c.exact(&f("blocks (count)"), Some(&Value::from(ab.len())), Value::from(p.blocks.len()));
    }
    for (j, (b, ctrl, cand, e)) in p.blocks.iter().enumerate() {
        let x = ab.get(j).cloned().unwrap_or(Value::Null);
        c.exact(&f(&format!("blocks[{j}].block")), x.get("block"), Value::from(*b));
        c.float(&f(&format!("b{b}.control")), x.get("control"), *ctrl);
        c.float(&f(&format!("b{b}.candidate")), x.get("candidate"), *cand);
        c.float(&f(&format!("b{b}.effect")), x.get("effect"), *e);
    }
    let unit = metric_unit(h.metric);
    let units = serde_json::json!({"control": unit, "candidate": unit, "effect": "fraction"});
    c.exact(&f("block_units"), a.get("block_units"), units);
}

/// The sign test, the median screen and the median interval of a tested
/// hypothesis (all null when untested); returns whether the median screen passed.
fn check_tests(c: &mut Cmp<'_>, a: &Value, h: &Hypothesis, p: &Prep, f: &dyn Fn(&str) -> String) -> bool {
    if !p.tested() {
        for k in ["sign_test", "median", "interval"] {
            c.exact(&f(k), Some(a.get(k).unwrap_or(&Value::Null)), Value::Null);
        }
        return false;
    }
    let (n, w, t, l, pv) = sign_test(&p.effects);
    for (k, v) in [("n", n), ("wins", w), ("ties", t), ("losses", l)] {
        c.exact(&f(&format!("sign_test.{k}")), a.pointer(&format!("/sign_test/{k}")), Value::from(v));
    }
    c.float(&f("sign_test.p_value"), a.pointer("/sign_test/p_value"), Some(pv));
    let med = median(&p.effects);
    let median_passed = med.is_some_and(|x| x >= h.threshold);
    c.float(&f("median.median"), a.pointer("/median/median"), med);
    c.float(&f("median.threshold"), a.pointer("/median/threshold"), Some(h.threshold));
    c.exact(&f("median.passed"), a.pointer("/median/passed"), Value::from(median_passed));
    if let Some(iv) = interval(&p.effects, INTERVAL_TARGET) {
        for (k, v) in [("n", iv.n), ("lower_rank", iv.lower_rank), ("upper_rank", iv.upper_rank)] {
            c.exact(&f(&format!("interval.{k}")), a.pointer(&format!("/interval/{k}")), Value::from(v));
        }
        for (k, v) in [("lower", iv.lower), ("upper", iv.upper), ("coverage", iv.coverage), ("target", INTERVAL_TARGET)]
        {
            c.float(&f(&format!("interval.{k}")), a.pointer(&format!("/interval/{k}")), Some(v));
        }
        c.exact(&f("interval.target_reached"), a.pointer("/interval/target_reached"), Value::from(iv.target_reached));
    }
    median_passed
}

/// The claim replay expects: blocked (with the count of its reasons: they are
/// compared by count, not wording), supported, or not supported naming the failed rules.
fn expected_claim(h: &Hypothesis, p: &Prep, unqualified: &[String], reject: bool, median_passed: bool) -> Value {
    let mut reasons = p.structural.len() + usize::from(p.failed > 0) + usize::from(p.elsewhere > 0);
    reasons += [&h.candidate, &h.control].iter().filter(|arm| unqualified.contains(arm)).count();
    if reasons > 0 {
        return serde_json::json!({"claim": "blocked", "failed_requests": p.failed, "reasons": reasons});
    }
    let mut rules = Vec::new();
    if !reject {
        rules.push("holm_sign_test");
    }
    if !median_passed {
        rules.push("median_threshold");
    }
    if rules.is_empty() {
        serde_json::json!({"claim": "supported"})
    } else {
        serde_json::json!({"claim": "not_supported", "failed_rules": rules})
    }
}

fn medians_check(ev: &Value, s: &Study<'_>, cells: &[CellMeasures]) -> Check {
    let mut m = Vec::new();
    let mut c = Cmp { m: &mut m };
    let mut archived: Vec<Value> = Vec::new();
    for k in ["confirmation_cells", "descriptive_cells"] {
        archived.extend(ev.get(k).and_then(Value::as_array).cloned().unwrap_or_default());
    }
    let mut n = 0;
    for cell in &s.plan.cells {
        for arm in &s.plan.arms {
            let mut rows: Vec<&CellMeasures> =
                cells.iter().filter(|x| x.cell == cell.name && x.arm == arm.name && x.values.is_ok()).collect();
            rows.sort_by_key(|x| x.block);
            let a = archived
                .iter()
                .find(|v| {
                    v.get("cell").and_then(Value::as_str) == Some(&cell.name)
                        && v.get("arm").and_then(Value::as_str) == Some(&arm.name)
                })
                .cloned()
                .unwrap_or(Value::Null);
            let f = |k: &str| format!("cells[{}/{}].{k}", cell.name, arm.name);
            n += 1;
            c.exact(&f("kind"), a.get("kind"), Value::from(cell.kind.as_str()));
            c.exact(&f("blocks"), a.get("blocks"), Value::from(rows.iter().map(|x| x.block).collect::<Vec<_>>()));
            let sum = |k: &str| rows.iter().filter_map(|x| x.float(k)).sum::<f64>() as u64;
            c.exact(&f("requests"), a.get("requests"), Value::from(sum("requests")));
            c.exact(&f("failed"), a.get("failed"), Value::from(sum("failed")));
            let am = a.get("medians").and_then(Value::as_object).cloned().unwrap_or_default();
            let mut names = 0;
            for name in FIELD_NAMES.iter().filter(|n| !n.starts_with("observation_") && expected(s, n)) {
                names += 1;
                let values: Vec<f64> = rows.iter().filter_map(|x| x.float(name)).collect();
                c.float(&f(&format!("medians.{name}")), am.get(*name), median(&values));
            }
            if am.len() != names {
                c.exact(&f("medians (fields)"), Some(&Value::from(am.len())), Value::from(names));
            }
        }
    }
    let units: serde_json::Map<String, Value> = FIELD_NAMES
        .iter()
        .filter(|n| !n.starts_with("observation_") && expected(s, n))
        .map(|n| (n.to_string(), Value::from(field_unit(n))))
        .collect();
    c.exact("median_units", ev.get("median_units"), Value::Object(units));
    if archived.len() != n {
        c.exact("confirmation_cells + descriptive_cells (count)", Some(&Value::from(archived.len())), Value::from(n));
    }
    Check::of(CELLS_NAME, format!("{n} (cell, arm) pairs"), m)
}
