//! The analysis of one study, from per-cell summaries to claims (DESIGN section 6).
//! Pure: no I/O. Owns the wiring between the plan and `stats`: which summary is the
//! candidate's and which the control's, the orientation of each plan `Metric` (the
//! `CellSummary::metric` value: request or output-token throughput; TTFT, TPOT and
//! E2E p95 from HTTP send; E2E p95 from intended arrival), the per-block effects over
//! the confirmation blocks, and the claim of each hypothesis:
//! - blocked, with every reason: a failed request in the hypothesis's cell (either
//!   arm, any confirmation block), and with study-level blocking (`analysis.blocking
//!   = "study"`, the default) a failed request anywhere else in the confirmation
//!   (any confirmation cell, any arm, confirmation blocks), an arm fault in a confirmation block (the arm's
//!   `arm_outcome.json` is not `completed`), a block without a paired measurement, or
//!   an arm that `results/qualification.json` marks as not qualified;
//! - otherwise what `stats::decide_family` decides: supported, or not supported with
//!   each failed rule named. Never "equivalent".
//!
//! The Holm family is the plan's whole hypothesis list. A hypothesis that cannot be
//! tested as planned (arm fault, missing measurement) enters it with p = 1, the most
//! conservative choice for the others; its available block effects are still shown.
//! Also computes, for every (cell, arm), the medians across blocks of every summary
//! field (descriptive cells are reported this way only, never tested). Must not read
//! files or decide anything `stats` decides.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::evidence::UnitState;
use crate::metrics::CellSummary;
use crate::metrics::FIELDS;
use crate::plan::{Blocking, CellKind, Metric, MetricKind, Plan};
use crate::stats::{
    BlockPair, DEFAULT_INTERVAL_COVERAGE, Decision, EffectKind, HolmResult, HypothesisInput, MedianInterval,
    MedianScreen, Rule, SignTest, StatsError, decide_family, effect, median,
};

/// One scheduled server invocation and how it ended, from its `arm_outcome.json`
/// (`missing` when the file is absent).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitRow {
    pub block: u32,
    pub arm: String,
    pub status: UnitState,
    pub detail: Option<String>,
}

/// One request that did not complete validly, and where.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedRequest {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub index: u64,
    pub id: String,
    pub class: String,
    pub detail: String,
}

/// The paired values of one confirmation block and their effect (positive: the
/// candidate is better). `None`: no value (the reason is in the claim).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockEffect {
    pub block: u32,
    pub control: Option<f64>,
    pub candidate: Option<f64>,
    pub effect: Option<f64>,
}

/// The claim for one hypothesis. Serialized with a `claim` tag.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "claim", rename_all = "snake_case")]
pub enum Claim {
    Supported,
    /// Every failed rule, in the order sign test, median screen.
    NotSupported {
        failed_rules: Vec<Rule>,
    },
    /// Blocked: failed requests (counted) and every other reason.
    Blocked {
        failed_requests: u64,
        reasons: Vec<String>,
    },
}

impl Claim {
    pub fn label(&self) -> &'static str {
        match self {
            Claim::Supported => "supported",
            Claim::NotSupported { .. } => "not supported",
            Claim::Blocked { .. } => "blocked",
        }
    }
}

/// Everything derived for one hypothesis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HypothesisReport {
    pub name: String,
    pub metric: Metric,
    pub kind: MetricKind,
    pub cell: String,
    pub candidate: String,
    pub control: String,
    pub threshold: f64,
    pub alpha: f64,
    /// One entry per confirmation block, in block order.
    pub blocks: Vec<BlockEffect>,
    /// Whether the sign test ran on every confirmation block (false: p = 1 in Holm).
    pub tested: bool,
    pub failed_requests: u64,
    pub failed_by_class: BTreeMap<String, u64>,
    pub sign_test: Option<SignTest>,
    pub holm: HolmResult,
    pub median: Option<MedianScreen>,
    pub interval: Option<MedianInterval>,
    pub claim: Claim,
}

/// Medians across blocks of every summary field of one (cell, arm).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellMedians {
    pub cell: String,
    pub kind: CellKind,
    pub arm: String,
    /// Blocks with a summary for this (cell, arm).
    pub blocks: Vec<u32>,
    /// Sums over those blocks (failures are never hidden by a median).
    pub requests: u64,
    pub failed: u64,
    /// Sample median across blocks (mean of the two middle values for an even count);
    /// `None`: no block had a sample.
    pub medians: BTreeMap<String, Option<f64>>,
}

impl CellMedians {
    pub fn get(&self, field: &str) -> Option<f64> {
        self.medians.get(field).copied().flatten()
    }
}

/// The analysis of a study.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub alpha: Option<f64>,
    /// Requested coverage of the median intervals (each states its exact coverage).
    pub interval_target: f64,
    pub confirmation_blocks: u32,
    /// Which claims a failed request blocks (`analysis.blocking`).
    pub blocking: Blocking,
    pub hypotheses: Vec<HypothesisReport>,
    /// Every (cell, arm) in plan order.
    pub cells: Vec<CellMedians>,
}

/// What the analysis reads.
pub struct AnalysisInput<'a> {
    pub plan: &'a Plan,
    pub summaries: &'a [CellSummary],
    pub units: &'a [UnitRow],
    pub failures: &'a [FailedRequest],
    /// Arms that `results/qualification.json` marks as not qualified.
    pub unqualified: &'a [String],
}

impl AnalysisInput<'_> {
    fn summary(&self, block: u32, arm: &str, cell: &str) -> Option<&CellSummary> {
        self.summaries.iter().find(|s| s.block == block && s.arm == arm && s.cell == cell)
    }
}

fn effect_kind(kind: MetricKind) -> EffectKind {
    match kind {
        MetricKind::Throughput => EffectKind::Throughput,
        MetricKind::Latency => EffectKind::Latency,
    }
}

/// Per-block effects of one hypothesis, and the reasons it cannot be tested as planned.
fn block_effects(input: &AnalysisInput<'_>, h: &crate::plan::Hypothesis) -> (Vec<BlockEffect>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut reasons = Vec::new();
    for b in 0..input.plan.blocks.count {
        for arm in [&h.candidate, &h.control] {
            match input.units.iter().find(|u| u.block == b && &u.arm == arm) {
                None => reasons.push(format!("block {b}: arm {arm} has no arm_outcome.json")),
                Some(u) if !u.status.is_completed() => reasons.push(format!(
                    "block {b}: arm {arm}: server {}{}",
                    u.status,
                    u.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
                )),
                Some(_) => {}
            }
        }
        let value = |arm: &str| input.summary(b, arm, &h.cell).and_then(|s| s.metric(h.metric));
        let (control, candidate) = (value(&h.control), value(&h.candidate));
        let mut e = None;
        match (control, candidate) {
            (Some(control), Some(candidate)) => {
                match effect(effect_kind(h.metric.kind()), BlockPair { control, candidate }) {
                    Ok(v) => e = Some(v),
                    Err(err) => reasons.push(format!("block {b}: no effect ({err})")),
                }
            }
            _ => {
                let missing: Vec<&str> = [(&h.control, control), (&h.candidate, candidate)]
                    .iter()
                    .filter(|(_, v)| v.is_none())
                    .map(|(a, _)| a.as_str())
                    .collect();
                reasons.push(format!("block {b}: no {} for arm {}", h.metric.as_str(), missing.join(" and ")));
            }
        }
        blocks.push(BlockEffect { block: b, control, candidate, effect: e });
    }
    reasons.dedup();
    (blocks, reasons)
}

/// Failed requests of the hypothesis's cell, either arm, confirmation blocks.
fn failures_of(input: &AnalysisInput<'_>, h: &crate::plan::Hypothesis) -> BTreeMap<String, u64> {
    let mut by_class = BTreeMap::new();
    for f in input.failures {
        if f.block < input.plan.blocks.count && f.cell == h.cell && (f.arm == h.candidate || f.arm == h.control) {
            *by_class.entry(f.class.clone()).or_insert(0) += 1;
        }
    }
    by_class
}

/// Under study-level blocking: the failed requests of the confirmation (any
/// confirmation cell, any arm, confirmation blocks) outside this hypothesis's own
/// cell and arms, as one reason; `None` when there are none.
fn elsewhere_reason(input: &AnalysisInput<'_>, h: &crate::plan::Hypothesis) -> Option<String> {
    let plan = input.plan;
    let mut where_: BTreeMap<(String, String), u64> = BTreeMap::new();
    for f in input.failures {
        let confirmation = plan.cell(&f.cell).is_some_and(|c| c.kind == CellKind::Confirmation);
        let own = f.cell == h.cell && (f.arm == h.candidate || f.arm == h.control);
        if f.block < plan.blocks.count && confirmation && !own {
            *where_.entry((f.cell.clone(), f.arm.clone())).or_insert(0) += 1;
        }
    }
    let total: u64 = where_.values().sum();
    (total > 0).then(|| {
        let list: Vec<String> = where_.iter().map(|((c, a), n)| format!("{n} in cell {c} arm {a}")).collect();
        format!(
            "study-level blocking (analysis.blocking = \"study\"): {total} failed request(s) elsewhere in the \
             confirmation ({})",
            list.join(", ")
        )
    })
}

/// Analyses the plan's hypothesis family and the medians of every (cell, arm).
pub fn analyse(input: &AnalysisInput<'_>) -> Result<Analysis, StatsError> {
    let plan = input.plan;
    let mut prepared = Vec::new();
    for h in &plan.hypotheses {
        let (blocks, structural) = block_effects(input, h);
        let by_class = failures_of(input, h);
        let failed: u64 = by_class.values().sum();
        let effects: Vec<f64> = blocks.iter().filter_map(|b| b.effect).collect();
        prepared.push((h, blocks, structural, by_class, failed, effects));
    }
    let inputs: Vec<HypothesisInput<'_>> = prepared
        .iter()
        .map(|(h, _, structural, _, failed, effects)| {
            if structural.is_empty() {
                HypothesisInput { id: &h.name, effects, threshold: h.threshold, failed_requests: *failed }
            } else {
                // Not testable as planned: enters Holm with p = 1 (no effects).
                HypothesisInput { id: &h.name, effects: &[], threshold: h.threshold, failed_requests: 1 }
            }
        })
        .collect();
    let alpha = plan.alpha.unwrap_or(0.05);
    let outcomes =
        if inputs.is_empty() { Vec::new() } else { decide_family(&inputs, alpha, DEFAULT_INTERVAL_COVERAGE)? };
    let mut hypotheses = Vec::new();
    for ((h, blocks, structural, by_class, failed, _), o) in prepared.into_iter().zip(outcomes) {
        let mut reasons = Vec::new();
        if failed > 0 {
            let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{n} {c}")).collect();
            reasons.push(format!("{failed} failed request(s) in cell {} ({})", h.cell, classes.join(", ")));
        }
        let tested = structural.is_empty();
        reasons.extend(structural);
        if plan.blocking == Blocking::Study {
            reasons.extend(elsewhere_reason(input, h));
        }
        for arm in [&h.candidate, &h.control] {
            if input.unqualified.contains(arm) {
                reasons.push(format!("arm {arm} is not qualified (results/qualification.json)"));
            }
        }
        let claim = match (&o.decision, reasons.is_empty()) {
            (Decision::Supported, true) => Claim::Supported,
            (Decision::NotSupported { failed_rules }, true) => {
                Claim::NotSupported { failed_rules: failed_rules.clone() }
            }
            _ => Claim::Blocked { failed_requests: failed, reasons },
        };
        hypotheses.push(HypothesisReport {
            name: h.name.clone(),
            metric: h.metric,
            kind: h.metric.kind(),
            cell: h.cell.clone(),
            candidate: h.candidate.clone(),
            control: h.control.clone(),
            threshold: h.threshold,
            alpha,
            blocks,
            tested,
            failed_requests: failed,
            failed_by_class: by_class,
            sign_test: o.sign_test,
            holm: o.holm,
            median: o.median,
            interval: o.interval,
            claim,
        });
    }
    Ok(Analysis {
        alpha: plan.alpha,
        interval_target: DEFAULT_INTERVAL_COVERAGE,
        confirmation_blocks: plan.blocks.count,
        blocking: plan.blocking,
        hypotheses,
        cells: cell_medians(input)?,
    })
}

fn cell_medians(input: &AnalysisInput<'_>) -> Result<Vec<CellMedians>, StatsError> {
    let mut out = Vec::new();
    for cell in &input.plan.cells {
        for arm in &input.plan.arms {
            let mut rows: Vec<&CellSummary> =
                input.summaries.iter().filter(|s| s.cell == cell.name && s.arm == arm.name).collect();
            rows.sort_by_key(|s| s.block);
            let mut medians = BTreeMap::new();
            // Clock positions are not measures: no median of them.
            for &(name, getter) in FIELDS.iter().filter(|(n, _)| !n.starts_with("observation_")) {
                let values: Vec<f64> = rows.iter().filter_map(|s| getter.get(s)).collect();
                let m = if values.is_empty() { None } else { Some(median(&values)?) };
                medians.insert(name.to_string(), m);
            }
            out.push(CellMedians {
                cell: cell.name.clone(),
                kind: cell.kind,
                arm: arm.name.clone(),
                blocks: rows.iter().map(|s| s.block).collect(),
                requests: rows.iter().map(|s| s.requests).sum(),
                failed: rows.iter().map(|s| s.failed).sum(),
                medians,
            });
        }
    }
    Ok(out)
}
