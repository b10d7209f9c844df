//! `sequential.json` of a `[sequential]` study against replay's own recomputation:
//! every recorded look at the plan's looks (or, for a time stop, one earlier block
//! count as the last), per hypothesis the pairs of blocks below the look with both
//! arms measured (from replay's own cell measures), the worse-is-positive
//! log-ratios (throughput ln(control / candidate), latency ln(candidate / control)),
//! mean, sample SD, the alarm and within t intervals at levels alpha / (family x
//! looks) and beta / looks, each verdict, the gate state of each look, and that
//! the study stopped at its first look whose state was not "continue". Written
//! from the rule's definition (`docs/gate.md`) without calling `stats` or
//! `crate::analysis::sequential`: of those it takes only the spellings of a
//! verdict, a gate state and a stop reason (`Verdict`, `GateState`, `StopReason`). `None` for a plan without `[sequential]`.

use std::path::Path;

use serde_json::Value;
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::measures::CellMeasures;
use super::read::read_json;
use super::{Check, Mismatch, close, num};
use crate::analysis::sequential::StopReason;
use crate::metrics::metric_field;
use crate::plan::{FrozenPlan, Hypothesis, MetricKind, Sequential};
use crate::stats::{GateState, Verdict};

pub const NAME: &str = "sequential.json: looks, intervals, verdicts, stop";
const FILE: &str = crate::evidence::SEQUENTIAL_FILE;

/// One hypothesis at one look, by the rule's definition.
struct Mine {
    blocks: Vec<u32>,
    xs: Vec<f64>,
    mean: Option<f64>,
    sd: Option<f64>,
    alarm: Option<(f64, f64)>,
    within: Option<(f64, f64)>,
    verdict: Verdict,
}

/// Mean, SD, alarm interval, within interval and verdict of one hypothesis at one look.
type Judged = (Option<f64>, Option<f64>, Option<(f64, f64)>, Option<(f64, f64)>, Verdict);

fn judge(xs: &[f64], margin: f64, alarm_level: f64, miss_level: f64) -> Judged {
    let n = xs.len();
    if n < 2 {
        return (xs.first().copied(), None, None, None, Verdict::Undecided);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sd = (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n as f64 - 1.0)).sqrt();
    let Ok(t) = StudentsT::new(0.0, 1.0, n as f64 - 1.0) else {
        return (Some(mean), Some(sd), None, None, Verdict::Undecided);
    };
    let se = sd / (n as f64).sqrt();
    let a = t.inverse_cdf(1.0 - alarm_level) * se;
    let b = t.inverse_cdf(1.0 - miss_level) * se;
    let m = (1.0 + margin).ln();
    let verdict = if mean - a > 0.0 && mean >= m / 2.0 {
        Verdict::Regressed
    } else if mean + a < 0.0 && mean <= -m / 2.0 {
        Verdict::Improved
    } else if mean - b > -m && mean + b < m {
        Verdict::Within
    } else {
        Verdict::Undecided
    };
    (Some(mean), Some(sd), Some((mean - a, mean + a)), Some((mean - b, mean + b)), verdict)
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

pub fn check(root: &Path, frozen: &FrozenPlan, cells: &[CellMeasures]) -> Option<Check> {
    let plan = &frozen.plan;
    let seq = plan.sequential.as_ref()?;
    let mut m = Vec::new();
    let rec: Value = match read_json(root, FILE) {
        Ok(v) => v,
        Err(e) => {
            let what = "the record of every look (a sequential study writes it at its stop)";
            m.push(Mismatch::new(FILE, "file", e, what));
            return Some(Check::of(NAME, "no record".into(), m));
        }
    };
    let family = plan.hypotheses.len();
    let levels =
        Levels { alarm: seq.alpha / (family * seq.looks.len()) as f64, miss: seq.beta / seq.looks.len() as f64 };
    float(&mut m, "alarm_level".into(), f(&rec, "alarm_level"), Some(levels.alarm));
    float(&mut m, "miss_level".into(), f(&rec, "miss_level"), Some(levels.miss));
    let looks = rec.get("looks").and_then(Value::as_array).cloned().unwrap_or_default();
    let stop = rec.get("blocks").and_then(Value::as_u64).unwrap_or(0) as u32;
    let reason = rec.get("reason").and_then(Value::as_str).unwrap_or("");
    let timed_out = reason == StopReason::Time.as_str();
    let got = check_look_blocks(&mut m, &looks, seq, stop, timed_out, plan.blocks.count);
    let cap = seq.looks.last().copied().unwrap_or(0);
    let mut last_state = None;
    for (i, look) in looks.iter().enumerate() {
        let at = got[i];
        let last = i + 1 == looks.len();
        let final_look = at >= cap || (last && timed_out);
        let hs = look.get("hypotheses").and_then(Value::as_array).cloned().unwrap_or_default();
        if hs.len() != family {
            m.push(Mismatch::new(FILE, format!("looks[{i}].hypotheses"), hs.len().to_string(), family.to_string()));
        }
        let mut verdicts = Vec::new();
        for (j, h) in plan.hypotheses.iter().enumerate() {
            let margin = seq.margins.get(&h.name).copied().unwrap_or(seq.margin);
            let mine = judge_at(h, at, cells, margin, levels);
            verdicts.push(mine.verdict);
            if let Some(a) = hs.get(j) {
                check_hypothesis_look(&mut m, &format!("looks[{i}].hypotheses[{j}]"), a, h, &mine, margin);
            }
        }
        let state = look_state(&verdicts, final_look);
        check_look_state(&mut m, i, look, state, last);
        last_state = Some(state);
    }
    let last_state = last_state.map_or("", GateState::as_str);
    let archived = rec.get("state").and_then(Value::as_str).unwrap_or("absent");
    if archived != last_state {
        m.push(Mismatch::new(FILE, "state", archived, last_state));
    }
    let inconclusive = last_state == GateState::Inconclusive.as_str();
    let want_reason = if !inconclusive {
        StopReason::Decided
    } else if stop >= cap {
        StopReason::Cap
    } else {
        StopReason::Time
    };
    if reason != want_reason.as_str() {
        m.push(Mismatch::new(FILE, "reason", reason, want_reason.as_str()));
    }
    Some(Check::of(NAME, format!("{} looks, stopped {last_state} after {stop} blocks", looks.len()), m))
}

/// The rule's two levels: the alarm interval's and the within interval's.
#[derive(Clone, Copy)]
struct Levels {
    alarm: f64,
    miss: f64,
}

fn float(m: &mut Vec<Mismatch>, field: String, got: Option<f64>, mine: Option<f64>) {
    let ok = match (got, mine) {
        (Some(a), Some(b)) => close(a, b),
        (None, None) => true,
        _ => false,
    };
    if !ok {
        m.push(Mismatch::new(FILE, field, num(got), num(mine)));
    }
}

/// The looks the rule must have taken (the plan's up to the stop, and for a time
/// stop the stopping block count as the last) and the stop at the study's blocks;
/// returns the block count of each recorded look.
fn check_look_blocks(
    m: &mut Vec<Mismatch>,
    looks: &[Value],
    seq: &Sequential,
    stop: u32,
    timed_out: bool,
    blocks: u32,
) -> Vec<u32> {
    let mut expected: Vec<u32> = seq.looks.iter().copied().filter(|&l| l <= stop).collect();
    if timed_out && expected.last() != Some(&stop) {
        expected.push(stop);
    }
    let got: Vec<u32> = looks.iter().map(|l| l.get("blocks").and_then(Value::as_u64).unwrap_or(0) as u32).collect();
    if got != expected {
        m.push(Mismatch::new(FILE, "looks[].blocks", format!("{got:?}"), format!("{expected:?}")));
    }
    if stop != blocks {
        m.push(Mismatch::new(FILE, "blocks", stop.to_string(), format!("{blocks} (the blocks of the study)")));
    }
    got
}

/// One hypothesis at the look after `at` blocks: the pairs with both arms measured
/// (positive and finite), their worse-is-positive log-ratios and the rule's verdict.
fn judge_at(h: &Hypothesis, at: u32, cells: &[CellMeasures], margin: f64, levels: Levels) -> Mine {
    let field = metric_field(h.metric);
    let value = |b: u32, arm: &str| {
        cells.iter().find(|c| c.block == b && c.arm == arm && c.cell == h.cell).and_then(|c| c.float(field))
    };
    let mut mine = Mine {
        blocks: Vec::new(),
        xs: Vec::new(),
        mean: None,
        sd: None,
        alarm: None,
        within: None,
        verdict: Verdict::Undecided,
    };
    for b in 0..at {
        let (Some(c), Some(x)) = (value(b, &h.control), value(b, &h.candidate)) else {
            continue;
        };
        if !(c > 0.0 && x > 0.0 && c.is_finite() && x.is_finite()) {
            continue;
        }
        mine.blocks.push(b);
        mine.xs.push(if h.metric.kind() == MetricKind::Throughput { (c / x).ln() } else { (x / c).ln() });
    }
    (mine.mean, mine.sd, mine.alarm, mine.within, mine.verdict) = judge(&mine.xs, margin, levels.alarm, levels.miss);
    mine
}

/// One archived hypothesis look against replay's.
fn check_hypothesis_look(m: &mut Vec<Mismatch>, k: &str, a: &Value, h: &Hypothesis, mine: &Mine, margin: f64) {
    if a.get("name").and_then(Value::as_str) != Some(h.name.as_str()) {
        m.push(Mismatch::new(
            FILE,
            format!("{k}.name"),
            a.get("name").map_or("absent".into(), Value::to_string),
            h.name.clone(),
        ));
    }
    let blocks: Vec<u64> =
        a.get("blocks").and_then(Value::as_array).map_or(Vec::new(), |v| v.iter().filter_map(Value::as_u64).collect());
    if blocks != mine.blocks.iter().map(|&b| u64::from(b)).collect::<Vec<_>>() {
        m.push(Mismatch::new(FILE, format!("{k}.blocks"), format!("{blocks:?}"), format!("{:?}", mine.blocks)));
    }
    let xs: Vec<f64> = a
        .get("worse_log_ratios")
        .and_then(Value::as_array)
        .map_or(Vec::new(), |v| v.iter().filter_map(Value::as_f64).collect());
    if xs.len() != mine.xs.len() || xs.iter().zip(&mine.xs).any(|(p, q)| !close(*p, *q)) {
        m.push(Mismatch::new(FILE, format!("{k}.worse_log_ratios"), format!("{xs:?}"), format!("{:?}", mine.xs)));
    }
    float(m, format!("{k}.margin"), f(a, "margin"), Some(margin));
    float(m, format!("{k}.mean"), f(a, "mean"), mine.mean);
    float(m, format!("{k}.sd"), f(a, "sd"), mine.sd);
    float(m, format!("{k}.alarm_lower"), f(a, "alarm_lower"), mine.alarm.map(|p| p.0));
    float(m, format!("{k}.alarm_upper"), f(a, "alarm_upper"), mine.alarm.map(|p| p.1));
    float(m, format!("{k}.within_lower"), f(a, "within_lower"), mine.within.map(|p| p.0));
    float(m, format!("{k}.within_upper"), f(a, "within_upper"), mine.within.map(|p| p.1));
    let verdict = a.get("verdict").and_then(Value::as_str).unwrap_or("absent");
    if verdict != mine.verdict.as_str() {
        m.push(Mismatch::new(FILE, format!("{k}.verdict"), verdict, mine.verdict.as_str()));
    }
}

/// The gate's state after a look: regressed if any measure regressed, passed when
/// every one is decided, else inconclusive at the final look and continue before it.
fn look_state(verdicts: &[Verdict], final_look: bool) -> GateState {
    if verdicts.contains(&Verdict::Regressed) {
        GateState::Regressed
    } else if !verdicts.is_empty() && verdicts.iter().all(|v| *v != Verdict::Undecided) {
        GateState::Passed
    } else if final_look {
        GateState::Inconclusive
    } else {
        GateState::Continue
    }
}

/// A look's archived state, and that the study went on exactly while it said continue.
fn check_look_state(m: &mut Vec<Mismatch>, i: usize, look: &Value, state: GateState, last: bool) {
    let archived = look.get("state").and_then(Value::as_str).unwrap_or("absent");
    if archived != state.as_str() {
        m.push(Mismatch::new(FILE, format!("looks[{i}].state"), archived, state.as_str()));
    }
    if !last && state != GateState::Continue {
        m.push(Mismatch::new(FILE, format!("looks[{i}].state"), state.as_str(), "continue (a later look was taken)"));
    }
    if last && state == GateState::Continue {
        m.push(Mismatch::new(FILE, format!("looks[{i}].state"), state.as_str(), "a decision (the study stopped here)"));
    }
}
