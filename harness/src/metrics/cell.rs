//! The per-cell summary of one arm, one block, one cell (definitions in `metrics`).
//! Owns `CellSummary`, its stable serialized field names (units in the names) and
//! `summarize_cell`. Must not pair arms or blocks, and must not drop a failed record:
//! every record is either a valid completed request or a counted failure.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use super::engine_steps::{EngineStep, cell_decode};
use super::goodput::goodput;
use super::request::{OutputTokenSource, RequestMeasures, last_seen_ns, measure_request};
use super::{INCOMPLETE_CLASS, MetricsError};
use crate::evidence::request_record::RequestRecord;
use crate::plan::{Metric, Slo};
use crate::stats::percentiles;

/// The percentile method of every `*_p50/_p95/_p99` field (see `stats::percentile`).
pub const PERCENTILE_METHOD: &str = "nearest_rank";

/// One cell's measures. Latencies are in milliseconds; `None` (JSON `null`) means no
/// sample (no valid request, or no request for which the measure is defined). The
/// `*_samples` fields say how many values each distribution has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CellSummary {
    pub cell: String,
    pub block: u32,
    pub arm: String,
    /// Always [`PERCENTILE_METHOD`]; "median" / p50 is the nearest-rank p50.
    pub percentile_method: String,
    /// Every record of the cell, valid or failed.
    pub requests: u64,
    /// Valid completed requests (no failure, `[DONE]` received).
    pub completed: u64,
    /// `requests - completed`.
    pub failed: u64,
    /// Failures by `Failure::class()` (or `INCOMPLETE_CLASS`).
    pub failed_by_class: BTreeMap<String, u64>,
    /// Earliest intended arrival of any record.
    pub observation_start_ns: u64,
    /// Latest timestamp of any record (last completion, drain included).
    pub observation_end_ns: u64,
    /// `observation_end_ns - observation_start_ns`, in seconds.
    pub duration_s: f64,
    /// Prompt tokens of valid requests (`usage.prompt_tokens`, else intended).
    pub total_input_tokens: u64,
    /// Output tokens of valid requests (`usage.completion_tokens`, else event sum).
    pub total_output_tokens: u64,
    /// `completed / duration_s`.
    pub request_throughput_rps: f64,
    /// `total_output_tokens / duration_s`.
    pub output_token_throughput_tps: f64,
    /// `(total_input_tokens + total_output_tokens) / duration_s`.
    pub total_token_throughput_tps: f64,
    /// Most requests in flight at once, from HTTP send to last seen (all records).
    pub peak_concurrent_requests: u64,
    pub ttft_samples: u64,
    pub ttft_mean_ms: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub ttft_from_intended_mean_ms: Option<f64>,
    pub ttft_from_intended_p50_ms: Option<f64>,
    pub ttft_from_intended_p95_ms: Option<f64>,
    pub ttft_from_intended_p99_ms: Option<f64>,
    /// Valid requests with at least 2 output tokens and a token-bearing event.
    pub tpot_samples: u64,
    pub tpot_mean_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub tpot_p95_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    /// Gaps between token-bearing events, pooled over valid requests.
    pub itl_samples: u64,
    pub itl_mean_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub e2e_samples: u64,
    pub e2e_mean_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p95_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub e2e_from_intended_mean_ms: Option<f64>,
    pub e2e_from_intended_p50_ms: Option<f64>,
    pub e2e_from_intended_p95_ms: Option<f64>,
    pub e2e_from_intended_p99_ms: Option<f64>,
    pub dispatch_lag_samples: u64,
    pub dispatch_lag_p50_ms: Option<f64>,
    pub dispatch_lag_p99_ms: Option<f64>,
    pub dispatch_lag_max_ms: Option<f64>,
    /// SSE events of valid requests (`[DONE]` excluded).
    pub stream_events: u64,
    /// Events with no tokens (role-only, empty, usage-only).
    pub empty_events: u64,
    /// Events carrying more than one token.
    pub multi_token_events: u64,
    /// Valid requests without any token-bearing event (no TTFT).
    pub requests_without_token_events: u64,
    /// Valid requests whose output count came from usage / from event tokens.
    pub output_tokens_from_usage_requests: u64,
    pub output_tokens_from_events_requests: u64,
    /// Valid requests whose usage count differs from their event-token sum.
    pub usage_event_token_mismatch_requests: u64,
    /// Prompt tokens sent per valid request (as in `total_input_tokens`):
    /// nearest-rank min, p50, p90 and max (`None`: no valid request).
    pub input_tokens_min: Option<f64>,
    pub input_tokens_p50: Option<f64>,
    pub input_tokens_p90: Option<f64>,
    pub input_tokens_max: Option<f64>,
    /// Output tokens received per valid request (as in `total_output_tokens`):
    /// nearest-rank min, p50, p90 and max. Natural outputs vary; forced ones do not.
    pub output_tokens_min: Option<f64>,
    pub output_tokens_p50: Option<f64>,
    pub output_tokens_p90: Option<f64>,
    pub output_tokens_max: Option<f64>,
    /// With `[slo]`: valid requests meeting every target (`goodput`); absent without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_met_requests: Option<u64>,
    /// With `[slo]`: `slo_met_requests / completed` (absent with no valid request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_attainment: Option<f64>,
    /// With `[slo]`: `slo_met_requests / duration_s` (vLLM's request goodput).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_rps: Option<f64>,
    /// With the arm's receipts: the cell's decode steps (`engine_steps`); absent without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_decode_steps: Option<u64>,
    /// With the arm's receipts: the engine's time per decode token, ms (the summed
    /// durations of the cell's decode steps over their decode tokens, `engine_steps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_tpot_ms: Option<f64>,
    /// Reasoning streams (absent when no valid request of the cell reasoned): valid
    /// requests with at least one reasoning token, their reasoning tokens (part of
    /// `total_output_tokens`), the content tokens (output minus reasoning, AIPerf's
    /// "output tokens"), and the time to first content token (`ttfc`, AIPerf's time
    /// to first output token) over valid requests with a content token; `ttft_*`
    /// stays the first token of any kind, as vLLM and AIPerf define TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_content_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfc_samples: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfc_mean_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfc_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfc_p95_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfc_p99_ms: Option<f64>,
}

impl CellSummary {
    /// The cell-level value a hypothesis on `metric` compares (`None`: no sample).
    pub fn metric(&self, metric: Metric) -> Option<f64> {
        super::getter(super::metric_field(metric))?.get(self)
    }

    /// The field named `name` as a float (`None`: no such field, or no sample).
    pub fn field(&self, name: &str) -> Option<f64> {
        super::getter(name)?.get(self)
    }

    /// Adds the engine's decode measures of this cell from its server's receipts
    /// (`steps`), joined through the records' response ids.
    pub fn add_engine_decode(&mut self, records: &[RequestRecord], steps: &[EngineStep]) {
        let ids: HashSet<&str> = records.iter().filter_map(|r| r.server_request_id.as_deref()).collect();
        let d = cell_decode(steps, &ids);
        self.engine_decode_steps = Some(d.steps);
        self.engine_tpot_ms = d.tpot_ms();
    }
}

/// Mean and nearest-rank p50/p95/p99/max of nanosecond values, in milliseconds.
#[derive(Debug, Default)]
struct Dist {
    samples: u64,
    mean: Option<f64>,
    p50: Option<f64>,
    p95: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
}

fn dist_ms(ns: &[f64]) -> Result<Dist, MetricsError> {
    if ns.is_empty() {
        return Ok(Dist::default());
    }
    let p = percentiles(ns, &[50.0, 95.0, 99.0, 100.0])?;
    let ms = |v: f64| Some(v / 1e6);
    let mean = ns.iter().sum::<f64>() / ns.len() as f64;
    Ok(Dist { samples: ns.len() as u64, mean: ms(mean), p50: ms(p[0]), p95: ms(p[1]), p99: ms(p[2]), max: ms(p[3]) })
}

/// The samples of TTFT, TPOT, ITL (every gap of every request) and E2E of valid
/// requests' measures, in nanoseconds (the module's definitions).
fn latency_samples_ns(valid: &[RequestMeasures]) -> [Vec<f64>; 4] {
    [
        valid.iter().filter_map(|m| m.ttft_ns.map(|v| v as f64)).collect(),
        valid.iter().filter_map(|m| m.tpot_ns).collect(),
        valid.iter().flat_map(|m| m.gaps_ns.iter().map(|&g| g as f64)).collect(),
        valid.iter().map(|m| m.e2e_ns as f64).collect(),
    ]
}

/// Nearest-rank percentiles `ps` (each in [0, 100]) of TTFT, TPOT, ITL and E2E
/// over the valid requests of `records`, in milliseconds: one `[TTFT, TPOT, ITL,
/// E2E]` per percentile, `None` where a measure has no sample. What vLLM's
/// `--metric-percentiles` asks of `harness bench`'s block, by this module's
/// definitions (the summary's p50/p95/p99 are the same numbers).
pub fn latency_percentiles_ms(records: &[RequestRecord], ps: &[f64]) -> Result<Vec<[Option<f64>; 4]>, MetricsError> {
    let valid = records.iter().filter(|r| r.is_valid()).map(measure_request).collect::<Result<Vec<_>, _>>()?;
    let mut out = vec![[None; 4]; ps.len()];
    for (metric, ns) in latency_samples_ns(&valid).iter().enumerate() {
        if ns.is_empty() {
            continue;
        }
        for (row, v) in out.iter_mut().zip(percentiles(ns, ps)?) {
            row[metric] = Some(v / 1e6);
        }
    }
    Ok(out)
}

/// Nearest-rank min, p50, p90 and max of token counts (`None`s when empty).
fn lengths(counts: &[f64]) -> Result<[Option<f64>; 4], MetricsError> {
    if counts.is_empty() {
        return Ok([None; 4]);
    }
    let p = percentiles(counts, &[0.0, 50.0, 90.0, 100.0])?;
    Ok([Some(p[0]), Some(p[1]), Some(p[2]), Some(p[3])])
}

fn cell_key(r: &RequestRecord) -> String {
    format!("{}/b{}/{}", r.cell, r.block, r.arm)
}

/// Most intervals `[send, last seen]` open at once; an interval that ends at the
/// instant another starts does not overlap it.
fn peak_concurrency(records: &[RequestRecord]) -> u64 {
    let mut edges: Vec<(u64, i64)> =
        records.iter().filter_map(|r| r.send_ns.map(|s| [(s, 1), (last_seen_ns(r).max(s), -1)])).flatten().collect();
    edges.sort_unstable();
    let (mut open, mut peak) = (0i64, 0i64);
    for (_, delta) in edges {
        open += delta;
        peak = peak.max(open);
    }
    peak.max(0) as u64
}

/// The cell's observation time, in nanoseconds: from the earliest intended arrival
/// to the last thing seen; in an interleaved block (records with a `round`), the
/// sum of that span over the cell's rounds, so the other arms' turns between them
/// do not count as this arm's time.
pub fn active_ns(records: &[RequestRecord]) -> u64 {
    let mut spans: BTreeMap<Option<u32>, (u64, u64)> = BTreeMap::new();
    for r in records {
        let (lo, hi) = spans.entry(r.round).or_insert((u64::MAX, 0));
        *lo = (*lo).min(r.intended_ns);
        *hi = (*hi).max(last_seen_ns(r));
    }
    spans.values().map(|&(lo, hi)| hi.saturating_sub(lo)).sum()
}

/// Summarizes the records of one arm in one block of one cell. Errors when the slice
/// is empty, mixes cells/blocks/arms, repeats a trace index, spans an empty
/// observation interval, or holds a valid record with inconsistent timestamps.
pub fn summarize_cell(records: &[RequestRecord]) -> Result<CellSummary, MetricsError> {
    summarize_cell_with_slo(records, None)
}

/// [`summarize_cell`], with goodput against `slo` when given.
pub fn summarize_cell_with_slo(records: &[RequestRecord], slo: Option<&Slo>) -> Result<CellSummary, MetricsError> {
    let first = records.first().ok_or(MetricsError::Empty)?;
    let mut seen = BTreeSet::new();
    for r in records {
        if (r.cell.as_str(), r.block, r.arm.as_str()) != (first.cell.as_str(), first.block, first.arm.as_str()) {
            return Err(MetricsError::MixedCell { first: cell_key(first), other: cell_key(r) });
        }
        if !seen.insert(r.index) {
            return Err(MetricsError::DuplicateIndex { index: r.index, id: r.id.clone() });
        }
    }
    let start = records.iter().map(|r| r.intended_ns).min().unwrap_or(first.intended_ns);
    let end = records.iter().map(last_seen_ns).max().unwrap_or(start);
    if end <= start {
        return Err(MetricsError::EmptyInterval { start_ns: start, end_ns: end });
    }
    let duration_s = active_ns(records) as f64 / 1e9;

    let mut valid: Vec<RequestMeasures> = Vec::with_capacity(records.len());
    let mut failed_by_class: BTreeMap<String, u64> = BTreeMap::new();
    for r in records {
        if r.is_valid() {
            valid.push(measure_request(r)?);
        } else {
            let class = r.failure.as_ref().map_or(INCOMPLETE_CLASS, |f| f.class());
            *failed_by_class.entry(class.to_string()).or_default() += 1;
        }
    }
    let completed = valid.len() as u64;
    let failed = records.len() as u64 - completed;
    let total_input_tokens: u64 = valid.iter().map(|m| m.prompt_tokens).sum();
    let total_output_tokens: u64 = valid.iter().map(|m| m.output_tokens).sum();

    let collect = |f: &dyn Fn(&RequestMeasures) -> Option<f64>| valid.iter().filter_map(f).collect::<Vec<f64>>();
    let [ttft, tpot, itl, e2e] = latency_samples_ns(&valid).map(|ns| dist_ms(&ns));
    let (ttft, tpot, itl, e2e) = (ttft?, tpot?, itl?, e2e?);
    let ttft_i = dist_ms(&collect(&|m| m.ttft_intended_ns.map(|v| v as f64)))?;
    let e2e_i = dist_ms(&collect(&|m| Some(m.e2e_intended_ns as f64)))?;
    let lag = dist_ms(&collect(&|m| Some(m.dispatch_lag_ns as f64)))?;
    let count = |f: &dyn Fn(&RequestMeasures) -> bool| valid.iter().filter(|m| f(m)).count() as u64;
    let input_lengths = lengths(&collect(&|m| Some(m.prompt_tokens as f64)))?;
    let output_lengths = lengths(&collect(&|m| Some(m.output_tokens as f64)))?;
    let good = slo.map(|slo| goodput(&valid, slo, duration_s));
    let reasoning_requests = count(&|m| m.reasoning_tokens > 0);
    let reasoned = reasoning_requests > 0;
    let ttfc = dist_ms(&collect(&|m| m.ttfc_ns.map(|v| v as f64)))?;
    let total_reasoning: u64 = valid.iter().map(|m| m.reasoning_tokens).sum();

    Ok(CellSummary {
        cell: first.cell.clone(),
        block: first.block,
        arm: first.arm.clone(),
        percentile_method: PERCENTILE_METHOD.to_string(),
        requests: records.len() as u64,
        completed,
        failed,
        failed_by_class,
        observation_start_ns: start,
        observation_end_ns: end,
        duration_s,
        total_input_tokens,
        total_output_tokens,
        request_throughput_rps: completed as f64 / duration_s,
        output_token_throughput_tps: total_output_tokens as f64 / duration_s,
        total_token_throughput_tps: (total_input_tokens + total_output_tokens) as f64 / duration_s,
        peak_concurrent_requests: peak_concurrency(records),
        ttft_samples: ttft.samples,
        ttft_mean_ms: ttft.mean,
        ttft_p50_ms: ttft.p50,
        ttft_p95_ms: ttft.p95,
        ttft_p99_ms: ttft.p99,
        ttft_from_intended_mean_ms: ttft_i.mean,
        ttft_from_intended_p50_ms: ttft_i.p50,
        ttft_from_intended_p95_ms: ttft_i.p95,
        ttft_from_intended_p99_ms: ttft_i.p99,
        tpot_samples: tpot.samples,
        tpot_mean_ms: tpot.mean,
        tpot_p50_ms: tpot.p50,
        tpot_p95_ms: tpot.p95,
        tpot_p99_ms: tpot.p99,
        itl_samples: itl.samples,
        itl_mean_ms: itl.mean,
        itl_p50_ms: itl.p50,
        itl_p95_ms: itl.p95,
        itl_p99_ms: itl.p99,
        e2e_samples: e2e.samples,
        e2e_mean_ms: e2e.mean,
        e2e_p50_ms: e2e.p50,
        e2e_p95_ms: e2e.p95,
        e2e_p99_ms: e2e.p99,
        e2e_from_intended_mean_ms: e2e_i.mean,
        e2e_from_intended_p50_ms: e2e_i.p50,
        e2e_from_intended_p95_ms: e2e_i.p95,
        e2e_from_intended_p99_ms: e2e_i.p99,
        dispatch_lag_samples: lag.samples,
        dispatch_lag_p50_ms: lag.p50,
        dispatch_lag_p99_ms: lag.p99,
        dispatch_lag_max_ms: lag.max,
        stream_events: valid.iter().map(|m| m.events).sum(),
        empty_events: valid.iter().map(|m| m.empty_events).sum(),
        multi_token_events: valid.iter().map(|m| m.multi_token_events).sum(),
        requests_without_token_events: count(&|m| m.ttft_ns.is_none()),
        output_tokens_from_usage_requests: count(&|m| m.output_tokens_source == OutputTokenSource::Usage),
        output_tokens_from_events_requests: count(&|m| m.output_tokens_source == OutputTokenSource::Events),
        usage_event_token_mismatch_requests: count(&|m| !m.light && m.output_tokens != m.event_tokens),
        input_tokens_min: input_lengths[0],
        input_tokens_p50: input_lengths[1],
        input_tokens_p90: input_lengths[2],
        input_tokens_max: input_lengths[3],
        output_tokens_min: output_lengths[0],
        output_tokens_p50: output_lengths[1],
        output_tokens_p90: output_lengths[2],
        output_tokens_max: output_lengths[3],
        slo_met_requests: good.map(|g| g.0),
        slo_attainment: good.and_then(|g| g.1),
        goodput_rps: good.map(|g| g.2),
        engine_decode_steps: None,
        engine_tpot_ms: None,
        reasoning_requests: reasoned.then_some(reasoning_requests),
        total_reasoning_tokens: reasoned.then_some(total_reasoning),
        total_content_tokens: reasoned.then(|| total_output_tokens.saturating_sub(total_reasoning)),
        ttfc_samples: reasoned.then_some(ttfc.samples),
        ttfc_mean_ms: ttfc.mean.filter(|_| reasoned),
        ttfc_p50_ms: ttfc.p50.filter(|_| reasoned),
        ttfc_p95_ms: ttfc.p95.filter(|_| reasoned),
        ttfc_p99_ms: ttfc.p99.filter(|_| reasoned),
    })
}
