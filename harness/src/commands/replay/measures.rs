//! Replay's own recomputation of every per-cell measure from raw records, written
//! from the definitions of DESIGN section 5 (restated in `metrics`' doc) without
//! calling `metrics` or `stats`: token-bearing events have tokens > 0; TTFT from
//! HTTP send and from intended arrival; TPOT = (last - first token event) /
//! (output tokens - 1) per request; E2E = [DONE] - send and - intended; ITL = gaps
//! between token events, pooled; dispatch lag = dispatch - intended (signed);
//! observation interval from the earliest intended arrival to the latest thing seen
//! of any record; nearest-rank percentiles (rank ceil(p/100 n), an integer within
//! max(1e-9, 1e-15 p/100 n) taken as exact) over valid completed requests; a light
//! record (`"light": true`, one token event kept) has no TPOT and no gaps, and is
//! not counted as a usage/event mismatch; the engine's decode measures from the
//! kept receipts (`engine_decode`). Owns the
//! field list (the matrix columns, in order). Must not read files.

use std::collections::{BTreeMap, HashSet};

use super::complete::Study;
use super::records::Rec;
use crate::metrics::FIELD_NAMES;
use crate::plan::Slo;

/// A recomputed field: a count, or a value that may have no sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val {
    Int(u64),
    Float(Option<f64>),
}

/// One invalid record.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub index: u64,
    pub id: String,
    pub class: String,
}

/// The recomputation of one (block, arm, cell) that has records.
#[derive(Debug, Clone)]
pub struct CellMeasures {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    /// Field values in `FIELD_NAMES` order, or why no summary exists.
    pub values: Result<Vec<Val>, String>,
    pub failed_by_class: BTreeMap<String, u64>,
    pub failures: Vec<Failed>,
    /// A session cell's per-turn-index rows (`turn_rows`; empty without sessions),
    /// or why they cannot be formed.
    pub turns: Result<Vec<super::turn_rows::TurnRow>, String>,
}

impl CellMeasures {
    pub fn get(&self, name: &str) -> Option<Val> {
        let i = FIELD_NAMES.iter().position(|n| *n == name)?;
        self.values.as_ref().ok().map(|v| v[i])
    }

    /// A field as a float (`None`: no summary or no sample).
    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            Val::Int(n) => Some(n as f64),
            Val::Float(v) => v,
        }
    }
}

/// Nearest rank (1-based) of level `p` percent among `n` values.
pub fn rank(n: usize, p: f64) -> usize {
    let exact = p / 100.0 * n as f64;
    let nearest = exact.round();
    let r = if (exact - nearest).abs() <= 1e-9_f64.max(exact * 1e-15) { nearest } else { exact.ceil() };
    (r as usize).clamp(1, n.max(1))
}

/// `[samples, mean, p50, p95, p99, max]` in ms of nanosecond values.
fn dist(ns: &[f64]) -> (u64, [Option<f64>; 5]) {
    if ns.is_empty() {
        return (0, [None; 5]);
    }
    let mean = ns.iter().sum::<f64>() / ns.len() as f64;
    let mut s = ns.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |p: f64| Some(s[rank(s.len(), p) - 1] / 1e6);
    (ns.len() as u64, [Some(mean / 1e6), at(50.0), at(95.0), at(99.0), at(100.0)])
}

/// Nearest-rank min, p50, p90 and max of token counts.
fn lengths(counts: impl Iterator<Item = u64>) -> [Val; 4] {
    let mut s: Vec<u64> = counts.collect();
    if s.is_empty() {
        return [Val::Float(None); 4];
    }
    s.sort_unstable();
    [0.0, 50.0, 90.0, 100.0].map(|p| Val::Float(Some(s[rank(s.len(), p) - 1] as f64)))
}

fn last_seen(r: &Rec) -> u64 {
    let timeout = match (&r.failure, r.send_ns) {
        (Some(f), Some(send)) if f.class == "timeout" => f.after_ns.map(|a| send.saturating_add(a)),
        _ => None,
    };
    let last_event = r.events.iter().map(|e| e.t_ns).max();
    [r.done_ns, last_event, r.headers_ns, r.send_ns, r.admitted_ns, r.dispatch_ns, timeout]
        .into_iter()
        .flatten()
        .fold(r.intended_ns, u64::max)
}

/// Per valid request (also the requests table's check, `requests`).
pub(super) struct One {
    pub prompt: u64,
    pub output: u64,
    from_usage: bool,
    event_tokens: u64,
    /// (from send, from intended arrival).
    pub ttft: Option<(u64, u64)>,
    pub tpot: Option<f64>,
    /// (from send, from intended arrival).
    pub e2e: (u64, u64),
    pub gaps: Vec<u64>,
    events: u64,
    empty: u64,
    multi: u64,
    lag: i64,
    /// A light record: its one event's tokens are not compared with usage.
    light: bool,
    /// Reasoning tokens (usage's, else the events') and the first content event - send.
    reasoning: u64,
    ttfc: Option<u64>,
}

fn after(id: &str, what: &str, earlier: u64, later: u64) -> Result<u64, String> {
    later.checked_sub(earlier).ok_or_else(|| format!("request {id}: {what} ({later}) before ({earlier})"))
}

pub(super) fn one(r: &Rec) -> Result<One, String> {
    let id = r.id.as_str();
    let done = r.done_ns.ok_or_else(|| format!("request {id}: no [DONE]"))?;
    let dispatch = r.dispatch_ns.ok_or_else(|| format!("request {id}: valid without dispatch_ns"))?;
    let send = r.send_ns.ok_or_else(|| format!("request {id}: valid without send_ns"))?;
    after(id, "HTTP send", dispatch, send)?;
    let e2e = (after(id, "[DONE]", send, done)?, after(id, "[DONE]", r.intended_ns, done)?);
    let lag = i64::try_from(i128::from(dispatch) - i128::from(r.intended_ns)).map_err(|_| format!("{id}: lag"))?;
    let (mut events, mut empty, mut multi, mut tokens) = (0u64, 0u64, 0u64, 0u64);
    let (mut prev, mut first, mut last): (Option<u64>, Option<u64>, Option<u64>) = (None, None, None);
    let mut gaps = Vec::new();
    let (mut event_reasoning, mut first_content) = (0u64, None);
    for e in &r.events {
        if let Some(p) = prev {
            after(id, "event", p, e.t_ns)?;
        }
        event_reasoning += u64::from(e.reasoning.min(e.tokens));
        if e.tokens > e.reasoning && first_content.is_none() {
            first_content = Some(after(id, "first content token", send, e.t_ns)?);
        }
        prev = Some(e.t_ns);
        events += 1;
        tokens += u64::from(e.tokens);
        if e.tokens == 0 {
            empty += 1;
            continue;
        }
        if e.tokens > 1 {
            multi += 1;
        }
        if let (Some(l), false) = (last, r.light) {
            gaps.push(e.t_ns - l);
        }
        first.get_or_insert(e.t_ns);
        last = Some(e.t_ns);
    }
    if let Some(p) = prev {
        after(id, "[DONE] after the last event", p, done)?;
    }
    let (output, from_usage) = match r.usage {
        Some(u) => (u64::from(u.completion_tokens), true),
        None => (tokens, false),
    };
    let prompt = u64::from(r.usage.map_or(r.prompt_tokens_intended, |u| u.prompt_tokens));
    let (mut ttft, mut tpot) = (None, None);
    if let (Some(f), Some(l)) = (first, last) {
        ttft = Some((after(id, "first token", send, f)?, after(id, "first token", r.intended_ns, f)?));
        if output >= 2 && !r.light {
            tpot = Some((l - f) as f64 / (output - 1) as f64);
        }
    }
    Ok(One {
        prompt,
        output,
        from_usage,
        event_tokens: tokens,
        ttft,
        tpot,
        e2e,
        gaps,
        events,
        empty,
        multi,
        lag,
        light: r.light,
        reasoning: r.usage.and_then(|u| u.reasoning_tokens).map_or(event_reasoning, u64::from),
        ttfc: first_content,
    })
}

pub fn summarize(records: &[Rec], slo: Option<&Slo>) -> Result<Vec<Val>, String> {
    if records.is_empty() {
        return Err("no request records".into());
    }
    let mut seen = std::collections::HashSet::new();
    for r in records {
        if !seen.insert(r.index) {
            return Err(format!("trace index {} appears twice", r.index));
        }
    }
    let start = records.iter().map(|r| r.intended_ns).min().unwrap_or(0);
    let end = records.iter().map(last_seen).max().unwrap_or(start);
    if end <= start {
        return Err(format!("empty observation interval {start}..{end}"));
    }
    // Interleaved blocks: each round's own span, summed.
    let mut rounds: Vec<Option<u32>> = records.iter().map(|r| r.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let span = |k: Option<u32>| {
        let of = || records.iter().filter(move |r| r.round == k);
        let lo = of().map(|r| r.intended_ns).min().unwrap_or(0);
        of().map(last_seen).max().unwrap_or(lo).saturating_sub(lo)
    };
    let dur = rounds.into_iter().map(span).sum::<u64>() as f64 / 1e9;
    let valid: Vec<One> = records.iter().filter(|r| r.valid()).map(one).collect::<Result<_, _>>()?;
    let completed = valid.len() as u64;
    let input: u64 = valid.iter().map(|o| o.prompt).sum();
    let output: u64 = valid.iter().map(|o| o.output).sum();
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for r in records {
        if let Some(s) = r.send_ns {
            edges.push((s, 1));
            edges.push((last_seen(r).max(s), -1));
        }
    }
    edges.sort_unstable();
    let (mut open, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        open += d;
        peak = peak.max(open);
    }
    let col = |f: &dyn Fn(&One) -> Option<f64>| valid.iter().filter_map(f).collect::<Vec<f64>>();
    let ttft = dist(&col(&|o| o.ttft.map(|t| t.0 as f64)));
    let ttft_i = dist(&col(&|o| o.ttft.map(|t| t.1 as f64)));
    let tpot = dist(&col(&|o| o.tpot));
    let e2e = dist(&col(&|o| Some(o.e2e.0 as f64)));
    let e2e_i = dist(&col(&|o| Some(o.e2e.1 as f64)));
    let lag = dist(&col(&|o| Some(o.lag as f64)));
    let gaps: Vec<f64> = valid.iter().flat_map(|o| o.gaps.iter().map(|&g| g as f64)).collect();
    let itl = dist(&gaps);
    let count = |f: &dyn Fn(&One) -> bool| Val::Int(valid.iter().filter(|o| f(o)).count() as u64);
    let sum = |f: &dyn Fn(&One) -> u64| Val::Int(valid.iter().map(f).sum());
    let mut v = vec![
        Val::Int(records.len() as u64),
        Val::Int(completed),
        Val::Int(records.len() as u64 - completed),
        Val::Int(start),
        Val::Int(end),
        Val::Float(Some(dur)),
        Val::Int(input),
        Val::Int(output),
        Val::Float(Some(completed as f64 / dur)),
        Val::Float(Some(output as f64 / dur)),
        Val::Float(Some((input + output) as f64 / dur)),
        Val::Int(peak.max(0) as u64),
    ];
    // The from-intended distributions share the samples column of their send-based twin.
    for ((n, d), samples) in [(ttft, true), (ttft_i, false), (tpot, true), (itl, true), (e2e, true), (e2e_i, false)] {
        if samples {
            v.push(Val::Int(n));
        }
        v.extend(d[..4].iter().map(|x| Val::Float(*x)));
    }
    v.push(Val::Int(lag.0));
    v.extend([lag.1[1], lag.1[3], lag.1[4]].map(Val::Float));
    v.extend([
        sum(&|o| o.events),
        sum(&|o| o.empty),
        sum(&|o| o.multi),
        count(&|o| o.ttft.is_none()),
        count(&|o| o.from_usage),
        count(&|o| !o.from_usage),
        count(&|o| !o.light && o.output != o.event_tokens),
    ]);
    v.extend(lengths(valid.iter().map(|o| o.prompt)));
    v.extend(lengths(valid.iter().map(|o| o.output)));
    let good = slo
        .map(|slo| valid.iter().filter(|o| super::goodput::good(slo, o.ttft.map(|t| t.0), o.e2e.0, o.output)).count());
    v.extend([
        Val::Float(good.map(|g| g as f64)),
        Val::Float(good.filter(|_| completed > 0).map(|g| g as f64 / completed as f64)),
        Val::Float(good.map(|g| g as f64 / dur)),
    ]);
    // The engine's decode measures come from receipts (`recompute`), not records.
    v.extend([Val::Float(None), Val::Float(None)]);
    // Reasoning streams: absent unless some valid request reasoned.
    let reasoners = valid.iter().filter(|o| o.reasoning > 0).count() as u64;
    if reasoners == 0 {
        v.extend([Val::Float(None); 8]);
    } else {
        let reasoning: u64 = valid.iter().map(|o| o.reasoning).sum();
        let ttfc = dist(&col(&|o| o.ttfc.map(|t| t as f64)));
        v.extend([reasoners, reasoning, output.saturating_sub(reasoning), ttfc.0].map(|n| Val::Float(Some(n as f64))));
        v.extend(ttfc.1[..4].iter().map(|x| Val::Float(*x)));
    }
    debug_assert_eq!(v.len(), FIELD_NAMES.len());
    Ok(v)
}

/// The fields from receipts, expected only in a `harness-run/3` study.
pub const ENGINE_FIELDS: [&str; 2] = ["engine_decode_steps", "engine_tpot_ms"];

/// Whether the study's tables are expected to hold field `name` (the engine's
/// decode measures only since `harness-run/3`; every other field always).
pub fn expected(s: &Study<'_>, name: &str) -> bool {
    s.engine_measures || !ENGINE_FIELDS.contains(&name)
}

/// Recomputes every scheduled (block, arm, cell) with parsed records; in a
/// `harness-run/3` study, the engine's decode measures of each cell whose unit
/// kept receipts too.
pub fn recompute(s: &Study<'_>) -> Vec<CellMeasures> {
    s.cells
        .iter()
        .filter_map(|c| {
            let records = c.records?;
            let mut failed_by_class = BTreeMap::new();
            let mut failures = Vec::new();
            for r in records.iter().filter(|r| !r.valid()) {
                *failed_by_class.entry(r.failure_class().to_string()).or_insert(0) += 1;
                failures.push(Failed { index: r.index, id: r.id.clone(), class: r.failure_class().to_string() });
            }
            let mut values = summarize(records, s.plan.slo.as_ref());
            let receipts =
                s.scan.receipts.get(&crate::evidence::unit_path(c.block, &c.arm)).filter(|_| s.engine_measures);
            if let (Ok(v), Some(idx)) = (values.as_mut(), receipts) {
                let ids: HashSet<&str> = records.iter().filter_map(|r| r.server_request_id.as_deref()).collect();
                let (steps, tpot) = super::engine_decode::measure(&idx.timeline, &ids);
                let at = |name: &str| FIELD_NAMES.iter().position(|n| *n == name).unwrap_or(0);
                v[at("engine_decode_steps")] = Val::Float(Some(steps as f64));
                v[at("engine_tpot_ms")] = Val::Float(tpot);
            }
            Some(CellMeasures {
                block: c.block,
                arm: c.arm.clone(),
                cell: c.cell.clone(),
                values,
                failed_by_class,
                failures,
                turns: super::turn_rows::rows(records),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_takes_near_integers_as_exact() {
        assert_eq!(rank(20, 95.0), 19);
        assert_eq!(rank(10, 50.0), 5);
        assert_eq!(rank(3, 50.0), 2);
        assert_eq!(rank(1, 99.0), 1);
        assert_eq!(rank(7, 100.0), 7);
        assert_eq!(rank(100, 99.0), 99);
    }

    #[test]
    fn distribution_in_ms() {
        let (n, d) = dist(&[3e6, 1e6, 2e6, 4e6]);
        assert_eq!(n, 4);
        assert_eq!(d, [Some(2.5), Some(2.0), Some(4.0), Some(4.0), Some(4.0)]);
    }
}
