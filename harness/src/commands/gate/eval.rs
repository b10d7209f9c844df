//! Applies each rule to the two sides and produces one [`RuleRow`]: what was
//! compared, the baseline and candidate values, the change, the limit, pass/fail and
//! why. Anything a rule needs that is missing on either side (no matrix, no cell, no
//! arm, an unmeasured block, a measure without samples, no qualification, no parity
//! result, no comparison) makes the row fail and is named in its detail: a missing
//! number never passes. Owns the regression arithmetic (positive = worse) and the
//! per-side statistic across blocks. Must not read files or print.

use serde::Serialize;
use serde_json::{Value, json};

use super::rules::{ArmSelect, Check, Rule, Statistic};
use super::side::{MatrixRow, Qualification, Side};

/// Slack, in percentage points, when comparing a regression with its limit.
pub const LIMIT_SLACK_PCT: f64 = 1e-9;

/// The verdict of one rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleRow {
    pub name: String,
    pub kind: String,
    /// What was compared: cell, metric, statistic, arm.
    pub subject: String,
    /// A number, `pass`/`fail` text, or null when missing.
    pub baseline: Value,
    pub candidate: Value,
    /// Relative change candidate / baseline - 1, in percent (measure rules).
    pub change_pct: Option<f64>,
    /// The change in the worse direction, in percent (positive = worse).
    pub regression_pct: Option<f64>,
    /// The limit in words.
    pub limit: String,
    pub pass: bool,
    /// Why it failed, what is missing, and notes.
    pub detail: String,
}

/// Evaluates every rule, in file order.
pub fn evaluate(rules: &[Rule], baseline: &Side, candidate: &Side) -> Vec<RuleRow> {
    rules.iter().map(|r| evaluate_one(r, baseline, candidate)).collect()
}

fn row(rule: &Rule, subject: String, limit: String) -> RuleRow {
    RuleRow {
        name: rule.name.clone(),
        kind: rule.check.kind().to_string(),
        subject,
        baseline: Value::Null,
        candidate: Value::Null,
        change_pct: None,
        regression_pct: None,
        limit,
        pass: false,
        detail: String::new(),
    }
}

fn evaluate_one(rule: &Rule, baseline: &Side, candidate: &Side) -> RuleRow {
    match &rule.check {
        Check::Throughput { cell, metric, statistic, max_regression_pct }
        | Check::Latency { cell, metric, statistic, max_regression_pct } => {
            let higher_better = matches!(rule.check, Check::Throughput { .. });
            measure(rule, cell, metric, *statistic, *max_regression_pct, higher_better, baseline, candidate)
        }
        Check::Failures { cell, max_failed } => failures(rule, cell.as_deref(), *max_failed, baseline, candidate),
        Check::Parity => parity(rule, baseline, candidate),
        Check::Qualified => qualified(rule, baseline, candidate),
        Check::Bound { gate, control, max_upper } => {
            bound(rule, gate, control.as_deref(), *max_upper, baseline, candidate)
        }
    }
}

fn side_name(baseline_side: bool) -> &'static str {
    if baseline_side { "baseline" } else { "candidate" }
}

/// The rows of one (arm, cell) on one side, sorted by block, or what is missing.
fn cell_rows<'a>(side: &'a Side, rule: &Rule, cell: &str, baseline_side: bool) -> Result<Vec<&'a MatrixRow>, String> {
    let who = side_name(baseline_side);
    let Some(matrix) = &side.matrix else {
        return Err(format!("{who} has no results/matrix.csv ({})", side.evidence));
    };
    let in_cell: Vec<&MatrixRow> = matrix.iter().filter(|r| r.cell == cell).collect();
    if in_cell.is_empty() {
        return Err(format!("cell {cell} is missing from the {who} (its cells: {})", side.cells().join(", ")));
    }
    let mut arms: Vec<&str> = Vec::new();
    for r in in_cell.iter().filter(|r| rule.arms.matches(&r.arm, &r.role, baseline_side)) {
        if !arms.contains(&r.arm.as_str()) {
            arms.push(&r.arm);
        }
    }
    let mut all: Vec<String> = Vec::new();
    for r in &in_cell {
        let a = format!("{} ({})", r.arm, r.role);
        if !all.contains(&a) {
            all.push(a);
        }
    }
    match arms.as_slice() {
        [] => Err(format!(
            "no {} in cell {cell} of the {who} (its arms: {})",
            rule.arms.describe(baseline_side),
            all.join(", ")
        )),
        [arm] => {
            let mut rows: Vec<&MatrixRow> = in_cell.into_iter().filter(|r| r.arm == *arm).collect();
            rows.sort_by_key(|r| r.block);
            Ok(rows)
        }
        many => Err(format!(
            "{} matches {} arms in cell {cell} of the {who} ({}): name one with `arm`",
            rule.arms.describe(baseline_side),
            many.len(),
            many.join(", ")
        )),
    }
}

/// Per-block values of `metric`, or every block that has none.
fn block_values(rows: &[&MatrixRow], metric: &str, who: &str) -> Result<Vec<f64>, Vec<String>> {
    let mut values = Vec::new();
    let mut missing = Vec::new();
    for r in rows {
        if !r.measured() {
            missing.push(format!(
                "{who} block {} arm {} cell {} was not measured ({}, server {})",
                r.block, r.arm, r.cell, r.status, r.unit_status
            ));
        } else {
            match r.values.get(metric) {
                Some(v) if v.is_finite() => values.push(*v),
                _ => missing.push(format!("{who} block {} arm {} cell {} has no {metric}", r.block, r.arm, r.cell)),
            }
        }
    }
    if missing.is_empty() { Ok(values) } else { Err(missing) }
}

fn statistic(values: &[f64], s: Statistic, higher_better: bool) -> f64 {
    match s {
        Statistic::Median => crate::stats::median(values).unwrap_or(f64::NAN),
        Statistic::Mean => values.iter().sum::<f64>() / values.len() as f64,
        Statistic::Worst if higher_better => values.iter().copied().fold(f64::INFINITY, f64::min),
        Statistic::Worst => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

fn blocks_text(rows: &[&MatrixRow]) -> String {
    let b: Vec<String> = rows.iter().map(|r| r.block.to_string()).collect();
    format!("{} block{} ({})", rows.len(), if rows.len() == 1 { "" } else { "s" }, b.join(","))
}

#[allow(clippy::too_many_arguments)]
fn measure<'a>(
    rule: &Rule,
    cell: &str,
    metric: &str,
    stat: Statistic,
    max_pct: f64,
    higher_better: bool,
    baseline: &'a Side,
    candidate: &'a Side,
) -> RuleRow {
    let arm = match &rule.arms {
        ArmSelect::Name { candidate, baseline } if candidate != baseline => {
            format!(", arm {candidate} (baseline arm {baseline})")
        }
        other => format!(", {}", other.describe(false)),
    };
    let subject = format!("{cell} {metric} {}{arm}", stat.as_str());
    let direction = if higher_better { "lower" } else { "higher" };
    let mut out = row(rule, subject, format!("at most {max_pct}% {direction}"));
    // Each side on its own first, so a row shows whatever value one side has.
    let one_side = |side: &'a Side, baseline_side: bool| -> Result<(Vec<&'a MatrixRow>, Vec<f64>), Vec<String>> {
        let rows = cell_rows(side, rule, cell, baseline_side).map_err(|e| vec![e])?;
        let values = block_values(&rows, metric, side_name(baseline_side))?;
        Ok((rows, values))
    };
    let b_side = one_side(baseline, true);
    let c_side = one_side(candidate, false);
    if let Ok((_, v)) = &b_side {
        out.baseline = json!(statistic(v, stat, higher_better));
    }
    if let Ok((_, v)) = &c_side {
        out.candidate = json!(statistic(v, stat, higher_better));
    }
    let ((b_rows, b_vals), (c_rows, c_vals)) = match (b_side, c_side) {
        (Ok(b), Ok(c)) => (b, c),
        (b, c) => {
            out.detail = [b.err(), c.err()].into_iter().flatten().flatten().collect::<Vec<_>>().join("; ");
            return out;
        }
    };
    let mut notes = Vec::new();
    let (b_load, c_load) = (&b_rows[0].load, &c_rows[0].load);
    if b_load != c_load {
        out.detail = format!("the loads differ: baseline {b_load:?}, candidate {c_load:?}: not comparable");
        return out;
    }
    let b = statistic(&b_vals, stat, higher_better);
    let c = statistic(&c_vals, stat, higher_better);
    notes.push(format!("candidate {}, baseline {}", blocks_text(&c_rows), blocks_text(&b_rows)));
    let b_failed: u64 = b_rows.iter().map(|r| r.failed()).sum();
    if b_failed > 0 {
        notes.push(format!("the baseline had {b_failed} failed requests in this cell"));
    }
    if !(b.is_finite() && b > 0.0 && c.is_finite()) {
        out.detail = format!("no relative change: baseline {stat_name} is {b}", stat_name = stat.as_str());
        return out;
    }
    let change = (c / b - 1.0) * 100.0;
    let regression = if higher_better { -change } else { change };
    out.change_pct = Some(change);
    out.regression_pct = Some(regression);
    // Reaching the limit exactly passes; 1e-9 points absorb decimal rounding (52.5 vs 50 is 5.000000000000004%).
    out.pass = regression <= max_pct + LIMIT_SLACK_PCT;
    if !out.pass {
        notes.insert(0, format!("{regression:.2}% {} than the baseline, above the {max_pct}% limit", direction));
    }
    out.detail = notes.join("; ");
    out
}

fn failures(rule: &Rule, cell: Option<&str>, max_failed: u64, baseline: &Side, candidate: &Side) -> RuleRow {
    let subject =
        format!("{}, {}", cell.map_or("every cell".to_string(), |c| format!("cell {c}")), rule.arms.describe(false));
    let mut out = row(rule, subject, format!("at most {max_failed} failed, every cell measured"));
    let select = |side: &Side, baseline_side: bool| -> Result<Vec<MatrixRow>, String> {
        let who = side_name(baseline_side);
        let matrix =
            side.matrix.as_ref().ok_or_else(|| format!("{who} has no results/matrix.csv ({})", side.evidence))?;
        let rows: Vec<MatrixRow> = matrix
            .iter()
            .filter(|r| cell.is_none_or(|c| r.cell == c) && rule.arms.matches(&r.arm, &r.role, baseline_side))
            .cloned()
            .collect();
        if rows.is_empty() {
            let what = cell.map_or(String::new(), |c| format!(" in cell {c}"));
            return Err(format!("no rows for {}{what} in the {who}", rule.arms.describe(baseline_side)));
        }
        Ok(rows)
    };
    if let Ok(rows) = select(baseline, true) {
        out.baseline = json!(rows.iter().map(MatrixRow::failed).sum::<u64>());
    }
    let rows = match select(candidate, false) {
        Ok(r) => r,
        Err(e) => {
            out.detail = e;
            return out;
        }
    };
    let failed: u64 = rows.iter().filter(|r| r.measured()).map(MatrixRow::failed).sum();
    out.candidate = json!(failed);
    let mut problems = Vec::new();
    for r in &rows {
        if !r.measured() {
            problems.push(format!(
                "block {} arm {} cell {} not measured ({}, server {})",
                r.block, r.arm, r.cell, r.status, r.unit_status
            ));
        } else if r.failed() > 0 {
            let classes: Vec<String> = r
                .values
                .iter()
                .filter(|(k, v)| k.starts_with("failed_") && **v > 0.0)
                .map(|(k, v)| format!("{} {v}", &k["failed_".len()..]))
                .collect();
            let classes = if classes.is_empty() { String::new() } else { format!(" ({})", classes.join(", ")) };
            problems.push(format!("block {} arm {} cell {}: {} failed{classes}", r.block, r.arm, r.cell, r.failed()));
        }
    }
    out.pass = failed <= max_failed && rows.iter().all(MatrixRow::measured);
    let shown = problems.len().min(8);
    out.detail = problems[..shown].join("; ");
    if problems.len() > shown {
        out.detail.push_str(&format!("; and {} more", problems.len() - shown));
    }
    if out.pass && out.detail.is_empty() {
        out.detail = format!("{} rows", rows.len());
    }
    out
}

fn qual(side: &Side, baseline_side: bool) -> Result<&Qualification, String> {
    side.qualification.as_ref().ok_or_else(|| {
        format!(
            "the {} has no qualification (no qualification.json in {}; pass --qualification)",
            side_name(baseline_side),
            side.evidence
        )
    })
}

/// Whether an arm named in a qualification is selected (its role from `arms[]`).
fn qual_selected(rule: &Rule, q: &Qualification, arm: &str, baseline_side: bool) -> bool {
    rule.arms.matches(arm, q.role_of(arm).unwrap_or(""), baseline_side)
}

fn verdict_text(pass: bool, failed: &[String]) -> Value {
    if pass { json!("pass") } else { json!(format!("fail: {}", failed.join(", "))) }
}

fn parity(rule: &Rule, baseline: &Side, candidate: &Side) -> RuleRow {
    let out = row(rule, format!("serial parity, {}", rule.arms.describe(false)), "every result passes".into());
    let pick = |side: &Side, baseline_side: bool| -> Verdict {
        let q = qual(side, baseline_side)?;
        let results: Vec<_> = q.parity.iter().filter(|p| qual_selected(rule, q, &p.arm, baseline_side)).collect();
        if results.is_empty() {
            return Err(format!(
                "no serial parity result for {} in the {} ({})",
                rule.arms.describe(baseline_side),
                side_name(baseline_side),
                q.source
            ));
        }
        let failed: Vec<String> = results.iter().filter(|p| !p.pass).map(|p| p.arm.clone()).collect();
        let detail = results
            .iter()
            .filter(|p| !p.pass)
            .map(|p| format!("{}: {} mismatches ({})", p.arm, p.mismatches, p.rule))
            .collect();
        Ok((failed.is_empty(), failed, detail))
    };
    fill_verdicts(out, pick(baseline, true), pick(candidate, false))
}

/// (pass, failed arms, detail lines) of one side of a pass/fail rule, or why it has none.
type Verdict = Result<(bool, Vec<String>, Vec<String>), String>;

/// A pass/fail row: the baseline's verdict for reference, the candidate's decides.
fn fill_verdicts(mut out: RuleRow, baseline: Verdict, candidate: Verdict) -> RuleRow {
    if let Ok((pass, failed, _)) = baseline {
        out.baseline = verdict_text(pass, &failed);
    }
    match candidate {
        Ok((pass, failed, detail)) => {
            out.candidate = verdict_text(pass, &failed);
            out.pass = pass;
            out.detail = detail.join("; ");
        }
        Err(e) => out.detail = e,
    }
    out
}

fn qualified(rule: &Rule, baseline: &Side, candidate: &Side) -> RuleRow {
    let out = row(rule, format!("qualification, {}", rule.arms.describe(false)), "every arm qualified".into());
    let pick = |side: &Side, baseline_side: bool| -> Verdict {
        let q = qual(side, baseline_side)?;
        let arms: Vec<_> = q.arms.iter().filter(|a| rule.arms.matches(&a.arm, &a.role, baseline_side)).collect();
        if arms.is_empty() {
            return Err(format!(
                "no verdict for {} in the {} ({})",
                rule.arms.describe(baseline_side),
                side_name(baseline_side),
                q.source
            ));
        }
        let failed: Vec<String> = arms.iter().filter(|a| !a.qualified).map(|a| a.arm.clone()).collect();
        let detail =
            arms.iter().filter(|a| !a.qualified).map(|a| format!("{}: {}", a.arm, a.reasons.join("; "))).collect();
        Ok((failed.is_empty(), failed, detail))
    };
    fill_verdicts(out, pick(baseline, true), pick(candidate, false))
}

fn bound(rule: &Rule, gate: &str, control: Option<&str>, max_upper: f64, baseline: &Side, candidate: &Side) -> RuleRow {
    let vs = control.map_or(String::new(), |c| format!(" vs {c}"));
    let what = if gate == "nll" { "NLL difference upper bound" } else { "loss-rate upper bound" };
    let subject = format!("{gate} {what}, {}{vs}", rule.arms.describe(false));
    let mut out = row(rule, subject, format!("below {max_upper:.6}"));
    // Each selected comparison's upper bound (None: it could not be computed).
    let pick = |side: &Side, baseline_side: bool| -> Result<Vec<(String, Option<f64>)>, String> {
        let q = qual(side, baseline_side)?;
        let sel: Vec<(String, Option<f64>)> = q
            .comparisons
            .iter()
            .filter(|c| c.gate == gate && control.is_none_or(|x| c.control == x))
            .filter(|c| qual_selected(rule, q, &c.candidate, baseline_side))
            .map(|c| {
                let label = format!("{} vs {}", c.candidate, c.control);
                match c.upper {
                    Some(u) => (label, Some(u)),
                    None => (format!("{label} ({})", c.detail), None),
                }
            })
            .collect();
        if sel.is_empty() {
            return Err(format!(
                "no {gate} comparison for {}{vs} in the {} ({})",
                rule.arms.describe(baseline_side),
                side_name(baseline_side),
                q.source
            ));
        }
        Ok(sel)
    };
    // The largest bound, or None when any selected comparison has none.
    let worst = |sel: &[(String, Option<f64>)]| -> Option<f64> {
        sel.iter().try_fold(f64::NEG_INFINITY, |a, (_, u)| u.map(|u| a.max(u)))
    };
    if let Some(w) = pick(baseline, true).ok().and_then(|sel| worst(&sel)) {
        out.baseline = json!(w);
    }
    let sel = match pick(candidate, false) {
        Ok(s) => s,
        Err(e) => {
            out.detail = e;
            return out;
        }
    };
    let mut problems = Vec::new();
    for (label, upper) in &sel {
        match upper {
            None => problems.push(format!("{label}: no bound")),
            Some(u) if u.is_nan() || *u >= max_upper => {
                problems.push(format!("{label}: upper bound {u:.6} is not below {max_upper:.6}"))
            }
            Some(_) => {}
        }
    }
    if let Some(w) = worst(&sel) {
        out.candidate = json!(w);
    }
    out.pass = problems.is_empty();
    out.detail = if out.pass {
        sel.iter().map(|(l, u)| format!("{l}: {:.6}", u.unwrap_or(f64::NAN))).collect::<Vec<_>>().join("; ")
    } else {
        problems.join("; ")
    };
    out
}
