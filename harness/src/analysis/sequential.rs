//! A sequential study (`[sequential]`): after each look, every hypothesis's
//! per-block paired log-ratios (oriented so that positive means the candidate is
//! worse) go through `stats::SequentialRule`; the study stops at the first look
//! where the gate state is no longer "continue". The record of every look and of
//! the stop is `sequential.json` at the evidence root, written by `harness run`
//! before the report; every reader takes the study's block count from it
//! ([`apply`], via `pilot::evidence_plan`), and `harness replay` recomputes it from
//! the raw records (`replay::sequential`).
//!
//! Owns `sequential.json` (`harness-sequential/1`) and the per-block inputs of the
//! rule. Must not run anything; must not decide anything the plan does not state.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::metrics::CellSummary;
use crate::plan::{Hypothesis, MetricKind, Plan, Sequential};
use crate::stats::{GateState, Look, SequentialRule, Verdict, combine};

pub const NAME: &str = crate::evidence::SEQUENTIAL_FILE;
pub const FORMAT: &str = "harness-sequential/1";

/// Why the study stopped where it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Every hypothesis decided (or one regressed) at a look.
    Decided,
    /// The last look (`blocks.count`) came undecided.
    Cap,
    /// `sequential.max_minutes` passed: the block that crossed it was the last look.
    Time,
}

impl StopReason {
    /// The spelling in `sequential.json` (`reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Decided => "decided",
            StopReason::Cap => "cap",
            StopReason::Time => "time",
        }
    }
}

/// One hypothesis at one look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HypothesisLook {
    pub name: String,
    pub metric: String,
    pub cell: String,
    pub candidate: String,
    pub control: String,
    pub margin: f64,
    /// Blocks whose pair entered (both arms measured), in order.
    pub blocks: Vec<u32>,
    /// Worse-is-positive log-ratios of those blocks.
    pub worse_log_ratios: Vec<f64>,
    #[serde(flatten)]
    pub look: Look,
    /// exp(mean) - 1: the estimated slowdown (negative: faster), as a fraction.
    #[serde(with = "crate::stats::nan_as_null")]
    pub change: f64,
}

/// The gate after one look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LookRecord {
    /// Completed blocks at this look.
    pub blocks: u32,
    pub state: GateState,
    pub hypotheses: Vec<HypothesisLook>,
}

/// `sequential.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequentialRecord {
    pub format: String,
    pub rule: SequentialRule,
    pub alarm_level: f64,
    pub miss_level: f64,
    pub looks: Vec<LookRecord>,
    /// Blocks the study ran: its effective `blocks.count`.
    pub blocks: u32,
    pub state: GateState,
    pub reason: StopReason,
}

/// Worse-is-positive log-ratio of one pair: ln(control / candidate) for a
/// throughput, ln(candidate / control) for a latency. `None` without a ratio.
pub fn worse_log_ratio(kind: MetricKind, control: f64, candidate: f64) -> Option<f64> {
    if !(control.is_finite() && control > 0.0 && candidate.is_finite() && candidate > 0.0) {
        return None;
    }
    Some(match kind {
        MetricKind::Throughput => (control / candidate).ln(),
        MetricKind::Latency => (candidate / control).ln(),
    })
}

/// `h`'s pairs in blocks `0..blocks` from the cell summaries.
fn pairs(h: &Hypothesis, summaries: &[CellSummary], blocks: u32) -> (Vec<u32>, Vec<f64>) {
    let value = |b: u32, arm: &str| {
        summaries.iter().find(|s| s.block == b && s.arm == arm && s.cell == h.cell).and_then(|s| s.metric(h.metric))
    };
    (0..blocks)
        .filter_map(|b| {
            let r = worse_log_ratio(h.metric.kind(), value(b, &h.control)?, value(b, &h.candidate)?)?;
            Some((b, r))
        })
        .unzip()
}

/// Every hypothesis at the look after `blocks` blocks (`last`: no later look).
pub fn look(plan: &Plan, seq: &Sequential, summaries: &[CellSummary], blocks: u32, last: bool) -> LookRecord {
    let rule = seq.rule(plan.hypotheses.len());
    let hypotheses: Vec<HypothesisLook> = plan
        .hypotheses
        .iter()
        .map(|h| {
            let (used, xs) = pairs(h, summaries, blocks);
            let margin = seq.margin_of(&h.name);
            // The rule and margin are validated with the plan, the ratios finite.
            let look = rule.look(&xs, margin).unwrap_or_else(|_| Look::empty(xs.len()));
            HypothesisLook {
                name: h.name.clone(),
                metric: h.metric.as_str().into(),
                cell: h.cell.clone(),
                candidate: h.candidate.clone(),
                control: h.control.clone(),
                margin,
                blocks: used,
                change: look.mean.exp_m1(),
                worse_log_ratios: xs,
                look,
            }
        })
        .collect();
    let verdicts: Vec<Verdict> = hypotheses.iter().map(|h| h.look.verdict).collect();
    LookRecord { blocks, state: combine(&verdicts, last), hypotheses }
}

/// The run's view: the looks so far, and whether to stop after a block.
#[derive(Debug, Clone)]
pub struct Tracker {
    looks: Vec<LookRecord>,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker { looks: Vec::new() }
    }

    /// After `blocks` completed blocks (`over_time`: past `max_minutes`): the
    /// record to write when the study stops here, `None` to go on.
    /// `summaries` gives the cell summaries so far (called only at a look).
    pub fn after_block(
        &mut self,
        plan: &Plan,
        summaries: impl FnOnce() -> Vec<CellSummary>,
        blocks: u32,
        over_time: bool,
    ) -> Option<SequentialRecord> {
        let seq = plan.sequential.as_ref()?;
        let cap = *seq.looks.last()?;
        let at_look = seq.looks.contains(&blocks);
        if !(at_look || over_time && blocks < cap) {
            return None;
        }
        let last = blocks >= cap || over_time;
        let rec = look(plan, seq, &summaries(), blocks, last);
        let state = rec.state;
        self.looks.push(rec);
        if state == GateState::Continue {
            return None;
        }
        let reason = match state {
            GateState::Inconclusive if blocks >= cap => StopReason::Cap,
            GateState::Inconclusive => StopReason::Time,
            _ => StopReason::Decided,
        };
        let rule = seq.rule(plan.hypotheses.len());
        Some(SequentialRecord {
            format: FORMAT.into(),
            alarm_level: rule.alarm_level(),
            miss_level: rule.miss_level(),
            rule,
            looks: self.looks.clone(),
            blocks,
            state,
            reason,
        })
    }
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker::new()
    }
}

/// Reads `sequential.json` under `root` (`Ok(None)`: no such file).
pub fn read(root: &Path) -> Result<Option<SequentialRecord>, String> {
    let path = root.join(NAME);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{NAME}: {e}")),
    };
    parse(&bytes).map(Some)
}

/// Parses the bytes of `sequential.json` (errors name the file).
pub fn parse(bytes: &[u8]) -> Result<SequentialRecord, String> {
    let rec: SequentialRecord = serde_json::from_slice(bytes).map_err(|e| format!("{NAME}: {e}"))?;
    if rec.format != FORMAT {
        return Err(format!("{NAME}: format {:?}, expected {FORMAT:?}", rec.format));
    }
    Ok(rec)
}

/// The plan as the study ran it: a sequential study that stopped early ran the
/// first `blocks` blocks of its schedule (the schedule of a block does not depend
/// on the count). A study without the file (still running, or interrupted) keeps
/// the planned count. Fails on a record that cannot belong to the plan.
pub fn apply(root: &Path, mut plan: Plan) -> Result<Plan, String> {
    let Some(seq) = &plan.sequential else { return Ok(plan) };
    let Some(rec) = read(root)? else { return Ok(plan) };
    if rec.blocks == 0 || rec.blocks > plan.blocks.count {
        return Err(format!("{NAME}: {} blocks, outside 1..={} (blocks.count)", rec.blocks, plan.blocks.count));
    }
    if rec.rule.looks != seq.looks {
        return Err(format!("{NAME}: looks {:?}, the plan's are {:?}", rec.rule.looks, seq.looks));
    }
    plan.blocks.count = rec.blocks;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stop_reason_is_spelled_as_sequential_json_writes_it() {
        for r in [StopReason::Decided, StopReason::Cap, StopReason::Time] {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{}\"", r.as_str()));
        }
    }

    fn summary(block: u32, arm: &str, cell: &str, rps: f64) -> CellSummary {
        CellSummary { block, arm: arm.into(), cell: cell.into(), request_throughput_rps: rps, ..CellSummary::default() }
    }

    fn plan(looks: &str, count: u32) -> Plan {
        let text = format!(
            r#"[study]
name = "seq"
seed = 1
[request]
model = "m"
output_tokens = 4
[prompts]
source = "random"
max_token_id = 255
lengths = [8]
documents = 2
[warmup]
prompts = 0
[timing]
settle_s = 0.0
request_timeout_s = 10.0
drain_timeout_s = 10.0
[blocks]
count = {count}
arm_order = "alternate"
cell_order = "fixed"
[[arms]]
name = "baseline"
role = "control"
url = "http://127.0.0.1:1"
[[arms]]
name = "candidate"
role = "candidate"
url = "http://127.0.0.1:2"
[[cells]]
name = "closed"
kind = "confirmation"
load = "closed"
concurrency = 2
count = 4
[sequential]
looks = {looks}
[analysis]
alpha = 0.05
[[hypotheses]]
metric = "throughput_rps"
cell = "closed"
candidate = "candidate"
control = "baseline"
threshold = 0.0
"#
        );
        crate::plan::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn worse_log_ratios_point_up_for_slower_throughput_and_higher_latency() {
        assert!((worse_log_ratio(MetricKind::Throughput, 10.0, 9.0).unwrap() - (10f64 / 9.0).ln()).abs() < 1e-15);
        assert!(worse_log_ratio(MetricKind::Latency, 100.0, 110.0).unwrap() > 0.0);
        assert_eq!(worse_log_ratio(MetricKind::Throughput, 0.0, 9.0), None);
        assert_eq!(worse_log_ratio(MetricKind::Latency, 1.0, f64::NAN), None);
    }

    #[test]
    fn the_tracker_stops_at_the_first_decided_look_and_records_every_look() {
        let p = plan("[3, 5, 8]", 8);
        let h = &p.hypotheses[0];
        assert_eq!(p.hypotheses.len(), 1, "the test plan states one hypothesis");
        // A 20% slower candidate, a little noise.
        let mut s = Vec::new();
        for b in 0..8u32 {
            s.push(summary(b, &h.control, &h.cell, 10.0));
            s.push(summary(b, &h.candidate, &h.cell, 8.3 + 0.01 * f64::from(b % 2)));
        }
        let mut t = Tracker::new();
        assert!(t.after_block(&p, || s.clone(), 1, false).is_none(), "not a look");
        assert!(t.after_block(&p, || s.clone(), 2, false).is_none(), "not a look");
        let rec = t.after_block(&p, || s.clone(), 3, false).expect("decided at the first look");
        assert_eq!((rec.blocks, rec.state, rec.reason), (3, GateState::Regressed, StopReason::Decided));
        assert_eq!(rec.looks.len(), 1);
        assert_eq!(rec.looks[0].hypotheses[0].blocks, vec![0, 1, 2]);
        assert!(rec.looks[0].hypotheses[0].change > 0.19);
    }

    #[test]
    fn undecided_at_the_cap_or_past_the_time_is_inconclusive() {
        let p = plan("[3, 5]", 5);
        let h = &p.hypotheses[0];
        let mut s = Vec::new();
        for (b, x) in [9.0, 11.0, 8.5, 11.5, 9.5].iter().enumerate() {
            s.push(summary(b as u32, &h.control, &h.cell, 10.0));
            s.push(summary(b as u32, &h.candidate, &h.cell, *x));
        }
        let mut t = Tracker::new();
        assert!(t.after_block(&p, || s.clone(), 3, false).is_none());
        let rec = t.after_block(&p, || s.clone(), 5, false).unwrap();
        assert_eq!((rec.state, rec.reason, rec.looks.len()), (GateState::Inconclusive, StopReason::Cap, 2));
        let rec = Tracker::new().after_block(&p, || s.clone(), 4, true).unwrap();
        assert_eq!((rec.blocks, rec.state, rec.reason), (4, GateState::Inconclusive, StopReason::Time));
    }

    #[test]
    fn apply_sets_the_block_count_and_refuses_a_foreign_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan("[3, 5]", 5);
        assert_eq!(apply(dir.path(), p.clone()).unwrap().blocks.count, 5, "no record: the planned count");
        let mut rec = SequentialRecord {
            format: FORMAT.into(),
            rule: p.sequential.as_ref().unwrap().rule(1),
            alarm_level: 0.0,
            miss_level: 0.0,
            looks: Vec::new(),
            blocks: 3,
            state: GateState::Passed,
            reason: StopReason::Decided,
        };
        std::fs::write(dir.path().join(NAME), serde_json::to_vec(&rec).unwrap()).unwrap();
        assert_eq!(apply(dir.path(), p.clone()).unwrap().blocks.count, 3);
        rec.blocks = 6;
        std::fs::write(dir.path().join(NAME), serde_json::to_vec(&rec).unwrap()).unwrap();
        assert!(apply(dir.path(), p.clone()).unwrap_err().contains("outside 1..=5"));
    }
}
