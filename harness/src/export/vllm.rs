//! The `vllm bench serve --save-result --save-detailed --percentile-metrics
//! ttft,tpot,itl,e2el` result JSON, one object per (block, arm, cell), keys and
//! units as `vllm/benchmarks/serve.py` writes them (see [`VLLM_SOURCE`]; the key
//! list is [`VLLM_BENCH_KEYS`]). Owns the mapping from our records to those keys.
//! Must not compute the harness's own measures differently: this is an export.
//!
//! Per key (vLLM's definition, computed from our raw records):
//! - `duration`: seconds; ours is the cell's observation interval (first intended
//!   arrival to the last thing seen, drain included), vLLM's the wall time from
//!   the benchmark start until every request returned.
//! - `completed` / `failed`: valid completed requests / the others.
//! - `total_input_tokens`: sum of intended prompt lengths of completed requests;
//!   `total_output_tokens`: sum of `output_lens` (usage `completion_tokens`, else
//!   the streamed tokens; 0 for a failed request).
//! - `request_throughput` = completed / duration, `output_throughput` =
//!   total_output_tokens / duration, `total_token_throughput` = (input + output) /
//!   duration, `request_goodput` = requests meeting every `[slo]` target / duration
//!   (`null` without `[slo]`), requests/s and tokens/s.
//! - `input_lens`, `output_lens`, `ttfts` (s, 0.0 for a failed request or one
//!   without a token), `itls` (s, gaps between token-bearing events, `[]` for a
//!   failed request), `generated_texts` (always "": the harness records token IDs,
//!   not text), `errors` ("" for a completed request, else failure class and
//!   detail): one entry per planned request, in trace order.
//! - `latencies` (s): E2E = `[DONE]` - HTTP send per request, 0.0 for a failed
//!   one; `start_times` (s): the HTTP send on the session's study clock (vLLM's is
//!   `time.perf_counter()`: both monotonic with their own origin, only differences
//!   mean anything), 0.0 when never sent; `queue_times` (s): send - intended
//!   arrival (vLLM's `client_queue_time`, the wait for a `--max-concurrency` slot;
//!   in an open loop our dispatch lag), 0.0 when never sent; `rtfx`: 0.0 (vLLM's
//!   audio real-time factor; no audio here).
//! - `max_output_tokens_per_s` / `max_concurrent_requests`: vLLM's one-second
//!   buckets from the earliest send of a completed request: a token-bearing event
//!   counts once in its bucket (as vLLM counts one token per chunk), a request
//!   counts in every bucket from its send's to its end's.
//! - `{mean,median,std,p99}_{ttft,tpot,itl,e2el}_ms`: NumPy's mean, median,
//!   population std and linear-interpolation percentile (`stats`), in ms, over
//!   completed requests; TTFT from HTTP send to the first token-bearing event;
//!   TPOT = (E2E - TTFT) / (output tokens - 1) for requests with more than one
//!   output token (vLLM's TPOT; the harness's own `tpot_*` ends at the last token
//!   event instead of `[DONE]`); E2E = `[DONE]` - HTTP send. `harness bench
//!   --metric-percentiles 50,90,99` adds `p50_*` and `p90_*` the same way.
//! - Traffic: `request_rate` is the open-loop or constant rate, 1 / spacing for an
//!   isolated cell, `"inf"` for closed loop (with `max_concurrency`) and, for a
//!   trace-file cell, the mean offered rate (requests - 1) / (last - first
//!   intended arrival); `burstiness` is 1.0 for Poisson, the gamma shape, `"inf"`
//!   for constant arrivals (vLLM's evenly spaced limit), `null` otherwise.
//! - `endpoint_type` and `backend`: vLLM's name of the cell's route, `"openai"`
//!   (`/v1/completions`) or `"openai-chat"` (a cell on the chat endpoint).
//! - `date`: the study start (`run.json`), UTC, `%Y%m%d-%H%M%S`; `label`: the arm;
//!   `harness_*` keys are `--metadata`-style strings naming the study, block, arm,
//!   role and cell, and `harness_token_ids` how output tokens were counted
//!   (`streamed` token IDs, which vLLM bench does not ask for, or `usage`).

use serde::Serialize;
use serde_json::Value;

use super::CellRecords;
use super::stats::{mean, median, percentile, std};
use crate::metrics::{measure_request, percentile_word, request_meets_slo};
use crate::plan::{Arrival, Endpoint, Plan, ResolvedLoad};

/// Where the key list and definitions come from.
pub const VLLM_SOURCE: &str = "vllm/benchmarks/serve.py of vLLM 0.34.0 (the release wheel's copy, dated 2026-11-16)";

/// Every key of one exported object, in vLLM's order (`result_json`: setup,
/// metadata, traffic, then the benchmark result with `--save-detailed` and
/// `--percentile-metrics ttft,tpot,itl,e2el`, `--metric-percentiles 99`).
pub const VLLM_BENCH_KEYS: [&str; 53] = [
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "harness_study",
    "harness_block",
    "harness_arm",
    "harness_role",
    "harness_cell",
    "harness_token_ids",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "std_e2el_ms",
    "p99_e2el_ms",
];

/// One exported object; serializes with exactly the keys above, in order.
#[derive(Debug, Clone, Serialize)]
pub struct VllmBenchResult {
    pub date: String,
    pub endpoint_type: String,
    pub backend: String,
    pub label: String,
    pub model_id: String,
    pub tokenizer_id: String,
    pub num_prompts: u64,
    pub harness_study: String,
    pub harness_block: String,
    pub harness_arm: String,
    pub harness_role: String,
    pub harness_cell: String,
    /// How output tokens were counted: `"streamed"` (the bodies asked for
    /// `return_token_ids`, which `vllm bench serve` does not send: vLLM then
    /// leaves its cheaper streaming path) or `"usage"` (`request.token_ids =
    /// false`: vLLM bench's own body, one token per text chunk, lengths from usage).
    pub harness_token_ids: String,
    pub request_rate: Value,
    pub burstiness: Value,
    pub max_concurrency: Option<u32>,
    pub duration: f64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub input_lens: Vec<u64>,
    pub output_lens: Vec<u64>,
    pub ttfts: Vec<f64>,
    pub itls: Vec<Vec<f64>>,
    pub latencies: Vec<f64>,
    pub start_times: Vec<f64>,
    pub queue_times: Vec<f64>,
    pub generated_texts: Vec<String>,
    pub errors: Vec<String>,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: u64,
    pub rtfx: f64,
    pub mean_ttft_ms: f64,
    pub median_ttft_ms: f64,
    pub std_ttft_ms: f64,
    pub p99_ttft_ms: f64,
    pub mean_tpot_ms: f64,
    pub median_tpot_ms: f64,
    pub std_tpot_ms: f64,
    pub p99_tpot_ms: f64,
    pub mean_itl_ms: f64,
    pub median_itl_ms: f64,
    pub std_itl_ms: f64,
    pub p99_itl_ms: f64,
    pub mean_e2el_ms: f64,
    pub median_e2el_ms: f64,
    pub std_e2el_ms: f64,
    pub p99_e2el_ms: f64,
    /// vLLM's `--metric-percentiles` beyond 99: `p{P}_{ttft,tpot,itl,e2el}_ms`
    /// (P as Python prints it: `50`, `99.9`); empty unless asked for.
    #[serde(flatten)]
    pub more_percentiles: std::collections::BTreeMap<String, f64>,
}

/// `YYYYmmdd-HHMMSS` (UTC) of a Unix time in milliseconds.
pub fn vllm_date(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn traffic(load: ResolvedLoad, intended: &[u64]) -> (Value, Value, Option<u32>) {
    let inf = || Value::String("inf".into());
    match load {
        ResolvedLoad::Closed { concurrency } => (inf(), Value::Null, Some(concurrency)),
        ResolvedLoad::Open { rate_rps, arrival } => {
            let b = match arrival {
                Arrival::Poisson => Value::from(1.0),
                Arrival::Gamma { burstiness } => Value::from(burstiness),
                Arrival::Constant => inf(),
            };
            (Value::from(rate_rps), b, None)
        }
        ResolvedLoad::Isolated { spacing_ns } => (Value::from(1e9 / spacing_ns as f64), Value::Null, None),
        ResolvedLoad::Trace { .. } => {
            let (first, last) = (intended.iter().min(), intended.iter().max());
            let rate = match (first, last) {
                (Some(&f), Some(&l)) if l > f => Value::from((intended.len() - 1) as f64 / ((l - f) as f64 / 1e9)),
                _ => inf(),
            };
            (rate, Value::Null, None)
        }
    }
}

/// Per completed request: (send, end, token event times) in ns, for the peaks.
type Timeline = (u64, u64, Vec<u64>);

/// vLLM's `max_output_tokens_per_s` and `max_concurrent_requests`.
fn peaks(lines: &[Timeline]) -> (f64, u64) {
    let Some(start) = lines.iter().map(|l| l.0).min() else { return (0.0, 0) };
    let end = lines.iter().map(|l| l.1).max().unwrap_or(start);
    let buckets = (end - start).div_ceil(1_000_000_000) as usize + 1;
    let (mut tokens, mut conc) = (vec![0u64; buckets], vec![0u64; buckets]);
    for (send, done, events) in lines {
        for &t in events {
            if let Some(b) = tokens.get_mut(((t - start) / 1_000_000_000) as usize) {
                *b += 1;
            }
        }
        let (a, z) = (((send - start) / 1_000_000_000) as usize, ((done - start) / 1_000_000_000) as usize);
        for b in conc.iter_mut().take(z + 1).skip(a) {
            *b += 1;
        }
    }
    (tokens.iter().copied().max().unwrap_or(0) as f64, conc.iter().copied().max().unwrap_or(0))
}

/// One object per measured (block, arm, cell), in schedule order.
pub fn vllm_bench_results(plan: &Plan, cells: &[CellRecords], started_unix_ms: Option<u64>) -> Vec<VllmBenchResult> {
    vllm_bench_results_with(plan, cells, started_unix_ms, &[])
}

/// [`vllm_bench_results`] with the percentiles `--metric-percentiles` lists (each
/// in [0, 100]; 99 is always written) of the four metrics.
pub fn vllm_bench_results_with(
    plan: &Plan,
    cells: &[CellRecords],
    started_unix_ms: Option<u64>,
    percentiles: &[f64],
) -> Vec<VllmBenchResult> {
    let resolved = plan.resolved_cells().unwrap_or_default();
    let date = started_unix_ms.map(vllm_date).unwrap_or_default();
    let mut out = Vec::new();
    for c in cells {
        let Some(rc) = resolved.iter().find(|r| r.name == c.cell) else { continue };
        let arm = plan.arm(&c.arm);
        let n = c.records.len();
        let (mut input_lens, mut output_lens, mut ttfts) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::new());
        let (mut itls, mut errors) = (Vec::with_capacity(n), Vec::with_capacity(n));
        // vLLM's start_time (the send) and client_queue_time (send - arrival) are set
        // for every request, its latency only for a completed one (0.0 otherwise).
        let secs = |ns: u64| ns as f64 / 1e9;
        let start_times: Vec<f64> = c.records.iter().map(|r| r.send_ns.map_or(0.0, secs)).collect();
        let queue_times: Vec<f64> =
            c.records.iter().map(|r| r.send_ns.map_or(0.0, |s| secs(s.saturating_sub(r.intended_ns)))).collect();
        let mut latencies = Vec::with_capacity(n);
        let (mut ttft_s, mut tpot_s, mut itl_s, mut e2e_s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut completed, mut total_input, mut good) = (0u64, 0u64, 0u64);
        let mut lines: Vec<Timeline> = Vec::new();
        for r in &c.records {
            input_lens.push(u64::from(r.prompt_tokens_intended));
            let measured = if r.is_valid() { measure_request(r).ok() } else { None };
            let Some(m) = measured else {
                output_lens.push(0);
                ttfts.push(0.0);
                itls.push(Vec::new());
                latencies.push(0.0);
                errors.push(match &r.failure {
                    Some(f) => format!("{}: {}", f.class(), serde_json::to_string(f).unwrap_or_default()),
                    None => "incomplete: no [DONE]".into(),
                });
                continue;
            };
            completed += 1;
            total_input += u64::from(r.prompt_tokens_intended);
            if plan.slo.as_ref().is_some_and(|slo| request_meets_slo(&m, slo)) {
                good += 1;
            }
            output_lens.push(m.output_tokens);
            let ttft = m.ttft_ns.unwrap_or(0) as f64 / 1e9;
            let e2e = m.e2e_ns as f64 / 1e9;
            ttfts.push(ttft);
            ttft_s.push(ttft);
            e2e_s.push(e2e);
            latencies.push(e2e);
            if m.output_tokens > 1 {
                tpot_s.push((e2e - ttft) / (m.output_tokens - 1) as f64);
            }
            let gaps: Vec<f64> = m.gaps_ns.iter().map(|&g| g as f64 / 1e9).collect();
            itl_s.extend(&gaps);
            itls.push(gaps);
            errors.push(String::new());
            let (send, done) = (r.send_ns.unwrap_or(0), r.done_ns.unwrap_or(0));
            lines.push((send, done.max(send), r.events.iter().filter(|e| e.tokens > 0).map(|e| e.t_ns).collect()));
        }
        let total_output: u64 = output_lens.iter().sum();
        let duration = crate::metrics::active_ns(&c.records) as f64 / 1e9;
        let per_s = |x: f64| if duration > 0.0 { x / duration } else { 0.0 };
        let intended: Vec<u64> = c.records.iter().map(|r| r.intended_ns).collect();
        let (request_rate, burstiness, max_concurrency) = traffic(rc.load, &intended);
        let max_concurrency = max_concurrency.or(rc.max_concurrency);
        let (max_tps, max_conc) = peaks(&lines);
        let ms = |x: &[f64]| [mean(x) * 1e3, median(x) * 1e3, std(x) * 1e3, percentile(x, 99.0) * 1e3];
        let ([mt, dt, st, pt], [mo, d_o, so, po]) = (ms(&ttft_s), ms(&tpot_s));
        let ([mi, di, si, pi], [me, de, se, pe]) = (ms(&itl_s), ms(&e2e_s));
        let mut more_percentiles = std::collections::BTreeMap::new();
        for &p in percentiles.iter().filter(|&&p| p != 99.0) {
            for (metric, x) in [("ttft", &ttft_s), ("tpot", &tpot_s), ("itl", &itl_s), ("e2el", &e2e_s)] {
                more_percentiles.insert(format!("p{}_{metric}_ms", percentile_word(p)), percentile(x, p) * 1e3);
            }
        }
        // vLLM's names of the two routes (`--backend openai` / `openai-chat`).
        let route = match rc.body.endpoint {
            Endpoint::Completions => "openai",
            Endpoint::Chat => "openai-chat",
        };
        out.push(VllmBenchResult {
            date: date.clone(),
            endpoint_type: route.into(),
            backend: route.into(),
            label: c.arm.clone(),
            model_id: plan.request.model.clone(),
            tokenizer_id: arm.and_then(|a| a.tokenizer.clone()).unwrap_or_else(|| plan.request.model.clone()),
            num_prompts: n as u64,
            harness_study: plan.study.name.clone(),
            harness_block: c.block.to_string(),
            harness_arm: c.arm.clone(),
            harness_role: arm.map_or("", |a| a.role.as_str()).to_string(),
            harness_cell: c.cell.clone(),
            harness_token_ids: if rc.body.token_ids { "streamed" } else { "usage" }.into(),
            request_rate,
            burstiness,
            max_concurrency,
            duration,
            completed,
            failed: n as u64 - completed,
            total_input_tokens: total_input,
            total_output_tokens: total_output,
            request_throughput: per_s(completed as f64),
            request_goodput: plan.slo.as_ref().map(|_| per_s(good as f64)),
            output_throughput: per_s(total_output as f64),
            total_token_throughput: per_s((total_input + total_output) as f64),
            input_lens,
            output_lens,
            ttfts,
            itls,
            latencies,
            start_times,
            queue_times,
            generated_texts: vec![String::new(); n],
            errors,
            max_output_tokens_per_s: max_tps,
            max_concurrent_requests: max_conc,
            // Inverse real-time factor of audio input: no audio, 0.0 as vLLM writes it.
            rtfx: 0.0,
            mean_ttft_ms: mt,
            median_ttft_ms: dt,
            std_ttft_ms: st,
            p99_ttft_ms: pt,
            mean_tpot_ms: mo,
            median_tpot_ms: d_o,
            std_tpot_ms: so,
            p99_tpot_ms: po,
            mean_itl_ms: mi,
            median_itl_ms: di,
            std_itl_ms: si,
            p99_itl_ms: pi,
            mean_e2el_ms: me,
            median_e2el_ms: de,
            std_e2el_ms: se,
            p99_e2el_ms: pe,
            more_percentiles,
        });
    }
    out
}
