//! AIPerf 0.13's metrics of one run, computed from our raw request records with
//! AIPerf's definitions (`aiperf/metrics/types/*.py`, read from the 0.13.0
//! wheel): each record's values, then each metric's summary as AIPerf's
//! `metric_result_from_array` builds it (sorted values, NumPy's linear
//! percentiles p1 .. p99, population std, `avg = sum / n`). Owns the metric
//! table (tag, header, display unit, console order) and the per-record formulas.
//! Must not read files or format anything (`aiperf` writes the files).
//!
//! A request's AIPerf timeline on ours: request start = HTTP send (`send_ns`),
//! content responses = token-bearing events, credit issued = intended arrival
//! (open loops) or the closed loop's admission, end = `[DONE]` (else the last
//! thing seen). Token counts are the server's (the token IDs it streamed, usage
//! when it sends one), not a client-side re-tokenization of the text (AIPerf's
//! default; its `--use-server-token-count` reads usage as here). ISL is the number
//! of prompt tokens the harness sent.

use crate::evidence::request_record::RequestRecord;
use crate::metrics::{last_seen_ns, measure_request};

/// One AIPerf metric: its tag, header, display unit, console position (AIPerf's
/// `display_order`; `None`: its console group is NONE) and direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    pub tag: &'static str,
    pub header: &'static str,
    pub unit: &'static str,
    pub display_order: Option<u32>,
    pub larger_is_better: bool,
}

const fn m(tag: &'static str, header: &'static str, unit: &'static str, order: Option<u32>, larger: bool) -> MetricDef {
    MetricDef { tag, header, unit, display_order: order, larger_is_better: larger }
}

/// Record metrics (a value per request), in the order AIPerf's JSONL lists them.
pub const RECORD_METRICS: &[MetricDef] = &[
    m("output_sequence_length", "Output Sequence Length", "tokens", Some(600), true),
    m("usage_total_tokens", "Usage Total Tokens", "tokens", None, true),
    m("usage_completion_tokens", "Usage Completion Tokens", "tokens", None, true),
    m("usage_prompt_tokens", "Usage Prompt Tokens", "tokens", None, true),
    m("output_token_count", "Output Token Count", "tokens", None, true),
    m("time_to_first_token", "Time to First Token", "ms", Some(100), false),
    m("request_latency", "Request Latency", "ms", Some(300), false),
    m("input_sequence_length", "Input Sequence Length", "tokens", Some(700), true),
    m("inter_chunk_latency", "Inter Chunk Latency", "ms", None, false),
    m("time_to_second_token", "Time to Second Token", "ms", Some(200), false),
    m("time_to_first_output_token", "Time to First Output Token", "ms", Some(210), false),
    m("usage_completion_tokens_diff_pct", "Usage Completion Diff %", "%", None, false),
    m("usage_prompt_tokens_diff_pct", "Usage Prompt Diff %", "%", None, false),
    m("inter_token_latency", "Inter Token Latency", "ms", Some(400), false),
    m("decode_duration", "Decode Duration", "ms", Some(350), false),
    m("e2e_output_token_throughput", "E2E Output Token Throughput", "tokens/sec/user", Some(510), true),
    m("osl_mismatch_diff_pct", "OSL Mismatch Diff %", "%", None, false),
    m("prefill_throughput_per_user", "Prefill Throughput Per User", "tokens/sec/user", None, true),
    m("output_token_throughput_per_user", "Output Token Throughput Per User", "tokens/sec/user", Some(500), true),
];

/// Metrics of error records (AIPerf's ERROR_ONLY record metric).
pub const ERROR_ISL: MetricDef = m("error_isl", "Error Input Sequence Length", "tokens", None, true);

/// The derived per-request latencies AIPerf injects at summary time
/// (`metrics/derived_latency.py`).
pub const CREDIT_TO_START: MetricDef = m("credit_to_start_latency", "Credit-to-Start Latency", "ms", None, false);
pub const EFFECTIVE_LATENCY: MetricDef = m("effective_latency", "Effective Latency (CO-aware)", "ms", None, false);

/// Scalar metrics (one value per run).
pub const SCALAR_METRICS: &[MetricDef] = &[
    m("request_throughput", "Request Throughput", "requests/sec", Some(900), true),
    m("request_count", "Request Count", "requests", Some(1100), true),
    m("error_request_count", "Error Request Count", "requests", None, false),
    m("good_request_count", "Good Request Count", "requests", None, true),
    m("goodput", "Goodput", "requests/sec", Some(1000), true),
    m("output_token_throughput", "Output Token Throughput", "tokens/sec", Some(800), true),
    m("total_output_tokens", "Total Output Tokens", "tokens", None, true),
    m("benchmark_duration", "Benchmark Duration", "sec", None, false),
    m("total_isl", "Total Input Sequence Length", "tokens", None, true),
    m("total_osl", "Total Output Sequence Length", "tokens", None, true),
    m("total_error_isl", "Total Error Input Sequence Length", "tokens", None, true),
    m("osl_mismatch_count", "OSL Mismatch Count", "requests", None, false),
    m("usage_discrepancy_count", "Usage Discrepancy Count", "requests", None, false),
    m("total_usage_total_tokens", "Total Usage Total Tokens", "tokens", None, true),
    m("total_usage_completion_tokens", "Total Usage Completion Tokens", "tokens", None, true),
    m("total_usage_prompt_tokens", "Total Usage Prompt Tokens", "tokens", None, true),
    m("completed_request_count", "Completed Requests (Success + Error)", "requests", Some(1075), false),
    m("request_error_rate", "Request Error Rate", "%", Some(1080), false),
    m("total_token_throughput", "Total Token Throughput", "tokens/sec", None, true),
    m("input_token_throughput", "Input Token Throughput", "tokens/sec", Some(805), true),
];

/// The definition of `tag`, whatever its kind.
pub fn def(tag: &str) -> Option<MetricDef> {
    RECORD_METRICS
        .iter()
        .chain(SCALAR_METRICS)
        .chain([&ERROR_ISL, &CREDIT_TO_START, &EFFECTIVE_LATENCY])
        .find(|d| d.tag == tag)
        .copied()
}

/// AIPerf's thresholds (`Environment.METRICS` defaults): OSL mismatch 5 % capped
/// at 50 tokens, usage discrepancy 10 %.
const OSL_MISMATCH_PCT: f64 = 5.0;
const OSL_MISMATCH_MAX_TOKENS: f64 = 50.0;
const USAGE_DIFF_PCT: f64 = 10.0;

/// How the run was asked for, where it changes what AIPerf computes.
#[derive(Debug, Clone, Default)]
pub struct RunShape {
    /// `--streaming`: AIPerf's streaming-only metrics (TTFT, ITL, ...) exist.
    pub streaming: bool,
    /// Each request asked for a set output length (`--osl`, or the dataset
    /// row's own): its `max_tokens` is AIPerf's requested OSL.
    pub requested_osl: bool,
    /// `--per-chunk-usage`: ITL's divisor subtracts the first content chunk's tokens.
    pub per_chunk_usage: bool,
    /// `--goodput` SLOs: (tag, threshold in the metric's display unit).
    pub goodput: Vec<(String, f64)>,
    /// Closed loop: a request's credit is its admission, not its intended arrival.
    pub closed_loop: bool,
}

/// One value of a record metric: a number, or a list (inter-chunk latency).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    List(Vec<f64>),
}

impl Value {
    fn numbers(&self) -> Vec<f64> {
        match self {
            Value::Int(n) => vec![*n as f64],
            Value::Float(x) => vec![*x],
            Value::List(xs) => xs.clone(),
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(n) => Some(*n as f64),
            Value::Float(x) => Some(*x),
            Value::List(_) => None,
        }
    }
}

/// One request in AIPerf's terms.
#[derive(Debug, Clone)]
pub struct RecordMetrics<'a> {
    pub record: &'a RequestRecord,
    /// (tag, value) in `RECORD_METRICS` order; only the metrics AIPerf can form.
    pub values: Vec<(&'static str, Value)>,
    /// Whether the request failed (its only metric is `error_isl`).
    pub error: bool,
    /// AIPerf's ISL of the request (the prompt tokens sent).
    pub isl: u64,
    /// Credit issue and end, ns on the study clock.
    pub credit_ns: u64,
    pub start_ns: Option<u64>,
    pub end_ns: u64,
}

impl RecordMetrics<'_> {
    pub fn get(&self, tag: &str) -> Option<&Value> {
        self.values.iter().find(|(t, _)| *t == tag).map(|(_, v)| v)
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The AIPerf metrics of one record.
pub fn record_metrics<'a>(r: &'a RequestRecord, shape: &RunShape) -> RecordMetrics<'a> {
    let isl = u64::from(r.prompt_tokens_intended);
    let credit_ns = if shape.closed_loop { r.admitted_ns.unwrap_or(r.intended_ns) } else { r.intended_ns };
    let base = RecordMetrics {
        record: r,
        values: Vec::new(),
        error: true,
        isl,
        credit_ns,
        start_ns: r.send_ns,
        end_ns: r.done_ns.unwrap_or_else(|| last_seen_ns(r)),
    };
    let (Ok(measured), Some(start)) = (measure_request(r), r.send_ns) else { return base };
    let content: Vec<&crate::evidence::request_record::StreamEvent> =
        r.events.iter().filter(|e| e.tokens > 0).collect();
    let (Some(first), Some(last)) = (content.first(), content.last()) else { return base };
    let mut v: Vec<(&'static str, Value)> = Vec::new();
    let osl = measured.output_tokens;
    let latency_ns = last.t_ns.saturating_sub(start);
    let ttft_ns = first.t_ns.saturating_sub(start);
    v.push(("output_sequence_length", Value::Int(osl)));
    if let Some(u) = &r.usage {
        v.push(("usage_total_tokens", Value::Int(u64::from(u.total_tokens))));
        v.push(("usage_completion_tokens", Value::Int(u64::from(u.completion_tokens))));
        v.push(("usage_prompt_tokens", Value::Int(u64::from(u.prompt_tokens))));
    }
    v.push(("output_token_count", Value::Int(osl)));
    if shape.streaming {
        v.push(("time_to_first_token", Value::Float(ms(ttft_ns))));
    }
    v.push(("request_latency", Value::Float(ms(latency_ns))));
    v.push(("input_sequence_length", Value::Int(isl)));
    if shape.streaming && content.len() >= 2 {
        let gaps = content.windows(2).map(|w| ms(w[1].t_ns.saturating_sub(w[0].t_ns))).collect();
        v.push(("inter_chunk_latency", Value::List(gaps)));
        v.push(("time_to_second_token", Value::Float(ms(content[1].t_ns.saturating_sub(first.t_ns)))));
    }
    if shape.streaming {
        v.push(("time_to_first_output_token", Value::Float(ms(ttft_ns))));
    }
    if let Some(u) = &r.usage {
        if osl > 0 {
            let d = (f64::from(u.completion_tokens) - osl as f64).abs() / osl as f64 * 100.0;
            v.push(("usage_completion_tokens_diff_pct", Value::Float(d)));
        }
        if isl > 0 {
            let d = (f64::from(u.prompt_tokens) - isl as f64).abs() / isl as f64 * 100.0;
            v.push(("usage_prompt_tokens_diff_pct", Value::Float(d)));
        }
    }
    let itl_ms = (shape.streaming && osl >= 2).then(|| {
        let first_chunk = u64::from(first.tokens);
        let decode =
            if shape.per_chunk_usage && first_chunk > 0 && osl > first_chunk { osl - first_chunk } else { osl - 1 };
        ms(latency_ns - ttft_ns) / decode as f64
    });
    if let Some(itl) = itl_ms {
        v.push(("inter_token_latency", Value::Float(itl)));
    }
    if shape.streaming {
        v.push(("decode_duration", Value::Float(ms(latency_ns - ttft_ns))));
    }
    if latency_ns > 0 {
        v.push(("e2e_output_token_throughput", Value::Float(osl as f64 / (latency_ns as f64 / 1e9))));
    }
    let requested = u64::from(r.output_tokens_intended);
    if shape.requested_osl && requested > 0 {
        v.push(("osl_mismatch_diff_pct", Value::Float((osl as f64 - requested as f64) / requested as f64 * 100.0)));
    }
    if shape.streaming && ttft_ns > 0 {
        v.push(("prefill_throughput_per_user", Value::Float(isl as f64 / (ttft_ns as f64 / 1e9))));
    }
    if let Some(itl) = itl_ms.filter(|x| *x > 0.0) {
        v.push(("output_token_throughput_per_user", Value::Float(1.0 / (itl / 1e3))));
    }
    RecordMetrics { values: v, error: false, ..base }
}

/// One metric's summary, as AIPerf's `MetricResult` holds it (display units).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub def: MetricDef,
    pub avg: f64,
    /// `None` for a scalar metric (one value per run).
    pub dist: Option<Dist>,
}

/// The distribution part of a record metric's summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Dist {
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    pub std: f64,
    /// p1, p5, p10, p25, p50, p75, p90, p95, p99.
    pub percentiles: [f64; 9],
    pub count: u64,
}

/// The percentile points AIPerf reports.
pub const PERCENTILES: [u32; 9] = [1, 5, 10, 25, 50, 75, 90, 95, 99];

/// AIPerf's `metric_result_from_array` over `values` (none: `None`).
pub fn summarize(def: MetricDef, values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let sum: f64 = s.iter().sum();
    let mean = sum / n as f64;
    let std = (s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64).sqrt();
    let mut percentiles = [0.0; 9];
    for (p, q) in percentiles.iter_mut().zip(PERCENTILES) {
        let idx = f64::from(q) / 100.0 * (n - 1) as f64;
        let lo = idx as usize;
        let hi = (lo + 1).min(n - 1);
        *p = s[lo] + (idx - lo as f64) * (s[hi] - s[lo]);
    }
    Some(Summary {
        def,
        avg: mean,
        dist: Some(Dist { min: s[0], max: s[n - 1], sum, std, percentiles, count: n as u64 }),
    })
}

fn scalar(tag: &str, avg: f64) -> Summary {
    Summary { def: def(tag).unwrap_or(m("", "", "", None, false)), avg, dist: None }
}

/// Whether a record meets every `--goodput` SLO (AIPerf's `GoodRequestCountMetric`:
/// a missing value fails; larger-is-better metrics pass at >=, the others at <=).
fn is_good(r: &RecordMetrics, slos: &[(String, f64)]) -> bool {
    slos.iter().all(|(tag, threshold)| {
        let (Some(v), Some(d)) = (r.get(tag).and_then(Value::as_f64), def(tag)) else { return false };
        if d.larger_is_better { v >= *threshold } else { v <= *threshold }
    })
}

/// Every metric of a run (records in the cell's order; `zero_unix_ns`: the Unix
/// time of the study clock's zero, for AIPerf's wall-clock timestamps), in the
/// order AIPerf's JSON export lists them.
pub fn run_metrics(records: &[RecordMetrics], shape: &RunShape) -> Vec<Summary> {
    let valid: Vec<&RecordMetrics> = records.iter().filter(|r| !r.error).collect();
    let errors: Vec<&RecordMetrics> = records.iter().filter(|r| r.error).collect();
    let series = |tag: &str| -> Vec<f64> {
        valid.iter().filter_map(|r| r.get(tag)).flat_map(Value::numbers).collect::<Vec<f64>>()
    };
    let total = |tag: &str| series(tag).iter().sum::<f64>();
    let mut out: Vec<Summary> = Vec::new();
    // benchmark_duration: first request start to the last response (ns).
    let starts = valid.iter().filter_map(|r| r.start_ns);
    let ends = valid.iter().filter_map(|r| Some(r.start_ns? + (r.get("request_latency")?.as_f64()? * 1e6) as u64));
    let duration_s = match (starts.min(), ends.max()) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    let per_s = |x: f64| duration_s.map(|d| x / d);
    if let Some(rps) = per_s(valid.len() as f64).filter(|_| !valid.is_empty()) {
        out.push(scalar("request_throughput", rps));
    }
    let by_tag = |tag: &str| def(tag).and_then(|d| summarize(d, &series(tag)));
    out.extend(by_tag("request_latency"));
    if !valid.is_empty() {
        out.push(scalar("request_count", valid.len() as f64));
    }
    for tag in ["time_to_first_token", "time_to_second_token", "inter_token_latency"] {
        out.extend(by_tag(tag));
    }
    if let Some(tps) = per_s(total("output_sequence_length")) {
        out.push(scalar("output_token_throughput", tps));
    }
    for tag in ["output_token_throughput_per_user", "output_sequence_length", "input_sequence_length"] {
        out.extend(by_tag(tag));
    }
    if !shape.goodput.is_empty() && duration_s.is_some() {
        let good = valid.iter().filter(|r| is_good(r, &shape.goodput)).count() as f64;
        out.push(scalar("good_request_count", good));
        out.extend(per_s(good).map(|g| scalar("goodput", g)));
    }
    for tag in ["output_token_count", "inter_chunk_latency"] {
        out.extend(by_tag(tag));
    }
    if !valid.is_empty() {
        out.push(scalar("total_output_tokens", total("output_token_count")));
    }
    out.extend(duration_s.map(|d| scalar("benchmark_duration", d)));
    if !valid.is_empty() {
        out.push(scalar("total_isl", total("input_sequence_length")));
        out.push(scalar("total_osl", total("output_sequence_length")));
    }
    if !errors.is_empty() {
        out.push(scalar("error_request_count", errors.len() as f64));
        let isl: Vec<f64> = errors.iter().map(|r| r.isl as f64).collect();
        out.extend(summarize(ERROR_ISL, &isl));
        out.push(scalar("total_error_isl", isl.iter().sum()));
    }
    for tag in [
        "usage_total_tokens",
        "usage_completion_tokens",
        "usage_prompt_tokens",
        "time_to_first_output_token",
        "usage_completion_tokens_diff_pct",
        "decode_duration",
        "e2e_output_token_throughput",
        "osl_mismatch_diff_pct",
        "prefill_throughput_per_user",
        "usage_prompt_tokens_diff_pct",
    ] {
        out.extend(by_tag(tag));
    }
    if shape.requested_osl && !valid.is_empty() {
        let mismatched = valid
            .iter()
            .filter(|r| {
                let requested = f64::from(r.record.output_tokens_intended);
                let actual = r.get("output_sequence_length").and_then(Value::as_f64).unwrap_or(0.0);
                requested > 0.0
                    && (actual - requested).abs() > (requested * OSL_MISMATCH_PCT / 100.0).min(OSL_MISMATCH_MAX_TOKENS)
            })
            .count();
        out.push(scalar("osl_mismatch_count", mismatched as f64));
    }
    let with_usage: Vec<&&RecordMetrics> = valid.iter().filter(|r| r.record.usage.is_some()).collect();
    if !with_usage.is_empty() {
        let discrepant = with_usage
            .iter()
            .filter(|r| {
                ["usage_prompt_tokens_diff_pct", "usage_completion_tokens_diff_pct"]
                    .iter()
                    .any(|t| r.get(t).and_then(Value::as_f64).is_some_and(|d| d > USAGE_DIFF_PCT))
            })
            .count();
        out.push(scalar("usage_discrepancy_count", discrepant as f64));
        for (tag, of) in [
            ("total_usage_total_tokens", "usage_total_tokens"),
            ("total_usage_completion_tokens", "usage_completion_tokens"),
            ("total_usage_prompt_tokens", "usage_prompt_tokens"),
        ] {
            out.push(scalar(tag, total(of)));
        }
    }
    if !records.is_empty() {
        out.push(scalar("completed_request_count", records.len() as f64));
        out.push(scalar("request_error_rate", 100.0 * errors.len() as f64 / records.len() as f64));
    }
    if let Some(tps) = per_s(total("input_sequence_length") + total("output_sequence_length")) {
        out.push(scalar("total_token_throughput", tps));
    }
    if let Some(tps) = per_s(total("input_sequence_length")) {
        out.push(scalar("input_token_throughput", tps));
    }
    // The derived latencies, over every record that was sent (AIPerf's column store
    // holds failed requests too).
    let sent: Vec<&RecordMetrics> = records.iter().filter(|r| r.start_ns.is_some()).collect();
    let credit: Vec<f64> = sent.iter().map(|r| ms(r.start_ns.unwrap_or(0).saturating_sub(r.credit_ns))).collect();
    out.extend(summarize(CREDIT_TO_START, &credit));
    let effective: Vec<f64> = sent.iter().map(|r| ms(r.end_ns.saturating_sub(r.credit_ns))).collect();
    out.extend(summarize(EFFECTIVE_LATENCY, &effective));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NumPy's values for [1, 2, 3, 4, 10]: np.percentile(x, [1, 5, 10, 25, 50, 75,
    /// 90, 95, 99]) = [1.04, 1.2, 1.4, 2, 3, 4, 7.6, 8.8, 9.76], np.std = 3.162...
    #[test]
    fn summaries_are_numpys() {
        let s = summarize(RECORD_METRICS[6], &[4.0, 1.0, 10.0, 3.0, 2.0]).unwrap();
        let d = s.dist.unwrap();
        let want = [1.04, 1.2, 1.4, 2.0, 3.0, 4.0, 7.6, 8.8, 9.76];
        for (got, want) in d.percentiles.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        assert_eq!((s.avg, d.min, d.max, d.sum, d.count), (4.0, 1.0, 10.0, 20.0, 5));
        assert!((d.std - 10f64.sqrt()).abs() < 1e-12);
        assert!(summarize(RECORD_METRICS[6], &[]).is_none());
    }
}
