//! The guidellm benchmarks report (`benchmarks.json`, report schema version 2 of
//! guidellm 0.8.1, `GenerativeBenchmarksReport`): one `GenerativeBenchmark` per
//! (block, arm, cell) with its per-request `GenerativeRequestStats` and the
//! `GenerativeMetrics` guidellm would compile from them. Owns the mapping from our
//! raw records to guidellm's request timings and metrics. Must not change a number
//! to fit the format: each metric is guidellm's definition over our timestamps.
//!
//! Timestamps are Unix seconds: `run.json`'s `started_unix_ms` plus our monotonic
//! nanoseconds (0 when the study start is not recorded). Per request:
//! `targeted_start` = intended arrival, `resolve_start` = dispatch, `request_start`
//! = HTTP send, `first_request_iteration` = the first event, `first_token_iteration`
//! (and `first_output_token_iteration`) / `last_token_iteration` = the first / last
//! token-bearing event, `request_iterations` = events, `token_iterations` =
//! token-bearing events, `request_end` = `[DONE]`, `resolve_end` = `[DONE]` or the
//! last thing seen. Input tokens: usage `prompt_tokens`, else the panel's length;
//! output tokens: usage (else streamed) for a completed request, none for a failed
//! one. Every failed request is `errored` (guidellm's `incomplete` means cancelled by
//! its own duration limit, which the harness never does).
//!
//! Metrics (guidellm's `GenerativeMetrics.compile`, window = the cell's observation
//! interval, which holds every request): request totals, requests per second and
//! concurrency, request latency, streaming iterations, prompt / output / total token
//! counts, TTFT, time to first output token, TPOT (guidellm's: from send to the last
//! token over all output tokens, so it includes TTFT), ITL (our TPOT), token rates
//! and tokens per iteration; round-trip times are 0 as guidellm reports them for a
//! backend without them. Left null: confidence intervals (`confidence` is null),
//! schedule-relative delays (`request_dispatch_delay`, `request_scheduled_latency`,
//! `turn_predecessor_delay`, `turn_scheduling_delay`: the harness reports dispatch
//! lag itself), text words and characters and the text/image/video/audio/tool-call
//! summaries (the harness records token IDs, not text).
//!
//! Multi-turn sessions (`prompts.max_turns`): each turn's request carries guidellm's
//! `info.conversation_id` (`s<session>`), `turn_index` (k), `preceding_nodes` (k: a
//! session is a chain of turns), `history_len` (2k: the user and assistant messages
//! of the k earlier turns; a system message is not counted) and
//! `timings.predecessor_completed` (turn k - 1's `[DONE]`, or the last thing seen of
//! it when it failed); the metrics carry `turns` (guidellm's
//! `GenerativeTurnMetrics.compile_by_turn`: per turn index, request totals, latency,
//! prompt tokens, TTFT and ITL, null when every request is at turn 0, as for a cell
//! without sessions) and `root_dispatch_delay` (guidellm's: request start minus
//! targeted start of every request at `preceding_nodes` 0, i.e. each session's first
//! turn, or every request of a cell without sessions). Light-recorder cells
//! (`recorder = "light"`, the observer-effect check) are left out: without per-token
//! events guidellm's ITL and TPOT cannot be formed. With `[slo]`, the
//! benchmark's `slo` and guidellm's goodput (`slo_attainment`,
//! `slo_determined_requests`, `request_goodput`) by guidellm's rules: its TPOT
//! target is compared with its ITL, which is our TPOT (the harness's own goodput
//! follows vLLM's TPOT instead, so the two can differ); an errored request counts
//! against attainment.

use serde_json::{Value, json};

use super::CellRecords;
use super::guidellm_stats::{ByStatus, concurrency, from_values, rate};
use crate::metrics::{last_seen_ns, measure_request};
use crate::plan::{Arrival, Endpoint, Plan, ResolvedLoad, Slo};

/// guidellm's report schema this export writes.
pub const GUIDELLM_SOURCE: &str = "guidellm 0.8.1 (PyPI), guidellm/benchmark/schemas/report.py, report version 2";

/// One request in guidellm's terms (Unix seconds).
#[derive(Debug, Clone)]
struct Req {
    id: String,
    error: Option<String>,
    targeted: f64,
    resolve_start: Option<f64>,
    request_start: Option<f64>,
    first_iteration: Option<f64>,
    first_token: Option<f64>,
    last_token: Option<f64>,
    last_iteration: Option<f64>,
    request_iterations: u64,
    token_iterations: u64,
    request_end: Option<f64>,
    resolve_end: f64,
    prompt_tokens: u64,
    output_tokens: Option<u64>,
    /// A session's turn: (session, turn index).
    turn: Option<(u64, u32)>,
    /// Unix seconds at which turn k - 1 of the session ended (turn k > 0).
    predecessor_completed: Option<f64>,
}

impl Req {
    fn from_record(r: &crate::evidence::request_record::RequestRecord, zero_s: f64) -> Req {
        let at = |ns: u64| zero_s + ns as f64 / 1e9;
        let measured = if r.is_valid() { measure_request(r).ok() } else { None };
        let tokens: Vec<u64> = r.events.iter().filter(|e| e.tokens > 0).map(|e| e.t_ns).collect();
        let error = match (&measured, &r.failure) {
            (Some(_), _) => None,
            (None, Some(f)) => Some(format!("{}: {}", f.class(), serde_json::to_string(f).unwrap_or_default())),
            (None, None) => Some("incomplete: no [DONE]".into()),
        };
        Req {
            id: r.id.clone(),
            error,
            targeted: at(r.intended_ns),
            resolve_start: r.dispatch_ns.map(at),
            request_start: r.send_ns.map(at),
            first_iteration: r.events.first().map(|e| at(e.t_ns)),
            first_token: tokens.first().copied().map(at),
            last_token: tokens.last().copied().map(at),
            last_iteration: r.events.last().map(|e| at(e.t_ns)),
            request_iterations: r.events.len() as u64,
            token_iterations: tokens.len() as u64,
            request_end: measured.as_ref().and(r.done_ns).map(at),
            resolve_end: at(last_seen_ns(r)),
            prompt_tokens: r.usage.as_ref().map_or(u64::from(r.prompt_tokens_intended), |u| u64::from(u.prompt_tokens)),
            output_tokens: measured.map(|m| m.output_tokens),
            turn: r.turn.as_ref().map(|t| (t.session, t.turn)),
            predecessor_completed: None,
        }
    }

    fn end_time(&self) -> f64 {
        self.request_end.unwrap_or(self.resolve_end)
    }
    fn start_time(&self) -> Option<f64> {
        self.request_start.or(self.resolve_start)
    }
    fn latency(&self) -> Option<f64> {
        Some(self.request_end? - self.request_start?)
    }
    /// guidellm's `output_tokens`: usage, else one token per token iteration.
    fn output(&self) -> Option<u64> {
        self.output_tokens.or(Some(self.token_iterations).filter(|&n| n > 0))
    }
    fn ttft_ms(&self) -> Option<f64> {
        Some(1000.0 * (self.first_token? - self.request_start?))
    }
    fn tpot_ms(&self) -> Option<f64> {
        let out = self.output().filter(|&n| n > 0)?;
        Some(1000.0 * (self.last_token.unwrap_or(self.end_time()) - self.request_start?) / out as f64)
    }
    fn itl_ms(&self) -> Option<f64> {
        let out = self.output().filter(|&n| n > 1)?;
        Some(1000.0 * (self.last_token? - self.first_token?) / (out - 1) as f64)
    }
    fn iter_tokens_per_iteration(&self) -> Option<f64> {
        let out = self.output().filter(|&n| n > 1)?;
        (self.token_iterations > 1).then(|| (out as f64 - 1.0) / (self.token_iterations as f64 - 1.0))
    }
    fn iter_tokens_timings(&self) -> Vec<(f64, f64)> {
        let (Some(first), Some(last), Some(per)) =
            (self.first_token, self.last_token, self.iter_tokens_per_iteration())
        else {
            return Vec::new();
        };
        let n = self.token_iterations;
        (1..n).map(|i| (first + (last - first) * i as f64 / (n - 1) as f64, per)).collect()
    }
    fn output_tokens_timings(&self) -> Vec<(f64, f64)> {
        let out = self.output().unwrap_or(0) as f64;
        match (self.first_token, self.last_token) {
            (Some(first), Some(_)) if self.token_iterations > 1 => {
                let mut t = vec![(first, if out > 0.0 { 1.0 } else { 0.0 })];
                t.extend(self.iter_tokens_timings());
                t
            }
            _ => vec![(self.last_token.unwrap_or(self.end_time()), out)],
        }
    }
    /// guidellm's `request_dispatch_delay`: request start minus targeted start.
    fn dispatch_delay(&self) -> Option<f64> {
        Some(self.request_start? - self.targeted)
    }
    fn turn_index(&self) -> u32 {
        self.turn.map_or(0, |t| t.1)
    }
    fn prompt_tokens_timing(&self) -> (f64, f64) {
        (self.first_token.unwrap_or(self.end_time()), self.prompt_tokens as f64)
    }

    /// A `GenerativeRequestStats` object.
    fn stats(&self) -> Value {
        // guidellm computes `total_tokens` from the per-modality counts.
        let usage = |tokens: Option<u64>| json!({"text_tokens": tokens});
        let mut v = json!({
            "type_": "generative_request_stats",
            "request_id": self.id,
            "info": {
                "request_id": self.id,
                "status": if self.error.is_none() { "completed" } else { "errored" },
                "error": self.error,
                "timings": {
                    "targeted_start": self.targeted,
                    "resolve_start": self.resolve_start,
                    "request_start": self.request_start,
                    "first_request_iteration": self.first_iteration,
                    "first_token_iteration": self.first_token,
                    "first_output_token_iteration": self.first_token,
                    "last_token_iteration": self.last_token,
                    "last_request_iteration": self.last_iteration,
                    "request_iterations": self.request_iterations,
                    "token_iterations": self.token_iterations,
                    "request_end": self.request_end,
                    "resolve_end": self.resolve_end,
                },
            },
            "input_metrics": usage(Some(self.prompt_tokens)),
            "output_metrics": usage(self.output_tokens),
        });
        if let Some((session, k)) = self.turn {
            let info = &mut v["info"];
            info["conversation_id"] = json!(format!("s{session}"));
            info["turn_index"] = json!(k);
            info["preceding_nodes"] = json!(k);
            info["history_len"] = json!(2 * k);
            info["timings"]["predecessor_completed"] = json!(self.predecessor_completed);
        }
        v
    }
}

/// Sets each later turn's `predecessor_completed` from the turn before it.
fn link_turns(reqs: &mut [Req]) {
    let ends: std::collections::HashMap<(u64, u32), f64> =
        reqs.iter().filter_map(|r| Some((r.turn?, r.end_time()))).collect();
    for r in reqs.iter_mut() {
        if let Some((s, k)) = r.turn.filter(|t| t.1 > 0) {
            r.predecessor_completed = ends.get(&(s, k - 1)).copied();
        }
    }
}

/// guidellm's `GenerativeTurnMetrics.compile_by_turn` over the same groups as the
/// aggregate metrics (`g` for latency and prompt tokens, `with_token` for TTFT, `g`
/// for ITL): null when every request is at turn 0.
fn turns(g: &ByStatus<Req>, with_token: &ByStatus<Req>) -> Value {
    let all = g.successful.iter().chain(&g.incomplete).chain(&g.errored);
    let mut indices: Vec<u32> = all.map(Req::turn_index).collect();
    indices.sort_unstable();
    indices.dedup();
    if indices.is_empty() || indices == [0] {
        return Value::Null;
    }
    let at = |g: &ByStatus<Req>, k: u32| {
        let pick = |v: &[Req]| v.iter().filter(|r| r.turn_index() == k).cloned().collect::<Vec<_>>();
        ByStatus { successful: pick(&g.successful), incomplete: pick(&g.incomplete), errored: pick(&g.errored) }
    };
    let rows: Vec<Value> = indices
        .into_iter()
        .map(|k| {
            let (t, tok) = (at(g, k), at(with_token, k));
            json!({
                "turn_index": k,
                "request_totals": {
                    "successful": t.successful.len(), "incomplete": t.incomplete.len(), "errored": t.errored.len(),
                    "total": t.successful.len() + t.incomplete.len() + t.errored.len(),
                },
                "request_latency": t.summary(|rs| values(rs, |r| r.latency().unwrap_or(0.0))),
                "prompt_token_count": t.summary(|rs| values(rs, |r| r.prompt_tokens as f64)),
                "time_to_first_token_ms": tok.summary(|rs| values(rs, |r| r.ttft_ms().unwrap_or(0.0))),
                "inter_token_latency_ms": t.summary(|rs| {
                    let v: Vec<(f64, f64)> =
                        rs.iter().map(|r| (r.itl_ms().unwrap_or(0.0), r.output().unwrap_or(1) as f64 - 1.0)).collect();
                    from_values(&v, None)
                }),
            })
        })
        .collect();
    Value::Array(rows)
}

/// guidellm's `root_dispatch_delay`: the dispatch delay of every request at
/// `preceding_nodes` 0 (a session's first turn, or any request outside sessions).
fn root_dispatch_delay(g: &ByStatus<Req>) -> Value {
    let v: Vec<(f64, f64)> = g
        .successful
        .iter()
        .chain(&g.incomplete)
        .chain(&g.errored)
        .filter(|r| r.turn_index() == 0)
        .filter_map(|r| Some((r.dispatch_delay()?, 1.0)))
        .collect();
    if v.is_empty() { Value::Null } else { from_values(&v, None) }
}

fn values(reqs: &[Req], f: impl Fn(&Req) -> f64) -> Value {
    let v: Vec<(f64, f64)> = reqs.iter().map(|r| (f(r), 1.0)).collect();
    from_values(&v, None)
}

/// guidellm's `GoodputSLO` of the plan's `[slo]` (`e2e_ms` is its `e2el_ms`).
fn goodput_slo(slo: Option<&Slo>) -> Value {
    slo.map_or(Value::Null, |s| json!({"ttft_ms": s.ttft_ms, "tpot_ms": s.tpot_ms, "e2el_ms": s.e2e_ms}))
}

/// guidellm's name of the route a cell's requests took (its openai_http request types).
fn request_type(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Completions => "text_completions",
        Endpoint::Chat => "chat_completions",
    }
}

/// guidellm's `_compile_goodput`: (slo_attainment, slo_determined_requests,
/// request_goodput). A successful request is undetermined when a target's measure
/// is missing; its TPOT target is compared with guidellm's ITL (our TPOT); every
/// errored request counts as not conforming.
fn goodput(slo: Option<&Slo>, g: &ByStatus<Req>, start: f64, end: f64) -> (Value, usize, Value) {
    let Some(slo) = slo else { return (Value::Null, 0, Value::Null) };
    let verdict = |r: &Req| -> Option<bool> {
        let measured = [r.ttft_ms(), r.itl_ms(), r.latency().map(|l| l * 1000.0)];
        let mut ok = true;
        for (value, target) in measured.into_iter().zip([slo.ttft_ms, slo.tpot_ms, slo.e2e_ms]) {
            let Some(target) = target else { continue };
            ok &= value? <= target;
        }
        Some(ok)
    };
    let verdicts: Vec<(&Req, Option<bool>)> = g.successful.iter().map(|r| (r, verdict(r))).collect();
    let determined = verdicts.iter().filter(|v| v.1.is_some()).count() + g.errored.len();
    if determined == 0 {
        return (Value::Null, 0, Value::Null);
    }
    let conforming: Vec<Req> = verdicts.iter().filter(|v| v.1 == Some(true)).map(|v| v.0.clone()).collect();
    let share = conforming.len() as f64 / determined as f64;
    let good = ByStatus { successful: conforming, incomplete: Vec::new(), errored: Vec::new() };
    let rates = good.summary(|rs| rate(&rs.iter().map(|r| (r.end_time(), 1.0)).collect::<Vec<_>>(), start, end));
    (json!(share), determined, rates)
}

/// `GenerativeMetrics` of one benchmark over the window [start, end].
fn metrics(g: &ByStatus<Req>, start: f64, end: f64, slo: Option<&Slo>) -> Value {
    let (slo_attainment, slo_determined, request_goodput) = goodput(slo, g, start, end);
    let with_token = ByStatus {
        successful: g.successful.iter().filter(|r| r.first_token.is_some()).cloned().collect(),
        incomplete: Vec::new(),
        errored: g.errored.iter().filter(|r| r.first_token.is_some()).cloned().collect(),
    };
    let null_group = |names: &[&str]| -> Value { names.iter().map(|n| ((*n).to_string(), Value::Null)).collect() };
    let per = ["input", "input_per_second", "input_concurrency", "output", "output_per_second"];
    let per: Vec<&str> =
        per.into_iter().chain(["output_concurrency", "total", "total_per_second", "total_concurrency"]).collect();
    let domain = |kinds: &[&str]| -> Value { kinds.iter().map(|k| ((*k).to_string(), null_group(&per))).collect() };
    let rates = |f: &dyn Fn(&Req) -> Vec<(f64, f64)>| {
        g.summary(|rs| rate(&rs.iter().flat_map(f).collect::<Vec<_>>(), start, end))
    };
    json!({
        "request_totals": {
            "successful": g.successful.len(), "incomplete": 0, "errored": g.errored.len(),
            "total": g.successful.len() + g.errored.len(),
        },
        "requests_per_second": rates(&|r| vec![(r.end_time(), 1.0)]),
        "request_concurrency": g.summary(|rs| {
            let iv: Vec<(f64, f64)> = rs.iter().filter_map(|r| Some((r.start_time()?, r.end_time()))).collect();
            concurrency(&iv, start, end)
        }),
        "request_latency": g.summary(|rs| values(rs, |r| r.latency().unwrap_or(0.0))),
        "request_dispatch_delay": null, "request_scheduled_latency": null,
        "turn_predecessor_delay": null, "turn_scheduling_delay": null,
        "root_dispatch_delay": root_dispatch_delay(g),
        "request_streaming_iterations_count": g.summary(|rs| values(rs, |r| r.request_iterations as f64)),
        "prompt_token_count": g.summary(|rs| values(rs, |r| r.prompt_tokens as f64)),
        "output_token_count": g.summary(|rs| values(rs, |r| r.output().unwrap_or(0) as f64)),
        "total_token_count": g.summary(|rs| values(rs, |r| (r.prompt_tokens + r.output().unwrap_or(0)) as f64)),
        "time_to_first_token_ms": with_token.summary(|rs| values(rs, |r| r.ttft_ms().unwrap_or(0.0))),
        "time_to_first_output_token_ms": with_token.summary(|rs| values(rs, |r| r.ttft_ms().unwrap_or(0.0))),
        "time_per_output_token_ms": g.summary(|rs| {
            let v: Vec<(f64, f64)> =
                rs.iter().map(|r| (r.tpot_ms().unwrap_or(0.0), r.output().unwrap_or(0) as f64)).collect();
            from_values(&v, None)
        }),
        "inter_token_latency_ms": g.summary(|rs| {
            let v: Vec<(f64, f64)> =
                rs.iter().map(|r| (r.itl_ms().unwrap_or(0.0), r.output().unwrap_or(1) as f64 - 1.0)).collect();
            from_values(&v, None)
        }),
        "time_to_last_round_trip_ms": g.summary(|rs| values(rs, |_| 0.0)),
        "avg_round_trip_time_ms": g.summary(|rs| values(rs, |_| 0.0)),
        "prompt_tokens_per_second": rates(&|r| vec![r.prompt_tokens_timing()]),
        "output_tokens_per_second": rates(&|r| r.output_tokens_timings()),
        "tokens_per_second": rates(&|r| {
            let mut t = vec![r.prompt_tokens_timing()];
            t.extend(r.output_tokens_timings());
            t
        }),
        "output_tokens_per_iteration": g.summary(|rs| {
            let v: Vec<(f64, f64)> = rs.iter().flat_map(|r| r.output_tokens_timings()).map(|t| (t.1, 1.0)).collect();
            from_values(&v, None)
        }),
        "iter_tokens_per_iteration": g.summary(|rs| {
            let v: Vec<(f64, f64)> = rs.iter().flat_map(|r| r.iter_tokens_timings()).map(|t| (t.1, 1.0)).collect();
            from_values(&v, None)
        }),
        "text": domain(&["tokens", "words", "characters"]),
        "image": domain(&["tokens", "images", "pixels", "bytes"]),
        "video": domain(&["tokens", "frames", "seconds", "bytes"]),
        "audio": domain(&["tokens", "samples", "seconds", "bytes"]),
        "tool_call": domain(&["tokens", "mixed_tokens", "count"]),
        "turns": turns(g, &with_token), "slo_attainment": slo_attainment, "slo_determined_requests": slo_determined,
        "request_goodput": request_goodput,
    })
}

/// guidellm's scheduling strategy for one of our loads.
fn strategy(load: ResolvedLoad, seed: u64) -> Value {
    match load {
        ResolvedLoad::Closed { concurrency } => json!({"type_": "concurrent", "streams": concurrency}),
        ResolvedLoad::Open { rate_rps, arrival: Arrival::Constant } => json!({"type_": "constant", "rate": rate_rps}),
        ResolvedLoad::Open { rate_rps, arrival: Arrival::Poisson } => {
            json!({"type_": "poisson", "rate": rate_rps, "random_seed": seed})
        }
        // Explicit arrival offsets (gamma gaps, a trace file, isolated spacing):
        // guidellm's trace replay of timestamps.
        ResolvedLoad::Open { arrival: Arrival::Gamma { .. }, .. } | ResolvedLoad::Isolated { .. } => {
            json!({"type_": "trace", "time_scale": 1.0})
        }
        ResolvedLoad::Trace { time_scale, .. } => json!({"type_": "trace", "time_scale": time_scale}),
    }
}

/// The report's `config.spec.profile`: concurrent or constant/poisson rates when
/// every cell shares that kind, else guidellm's replay of explicit timestamps.
fn profile(loads: &[ResolvedLoad]) -> Value {
    let closed: Option<Vec<u32>> = loads
        .iter()
        .map(|l| if let ResolvedLoad::Closed { concurrency } = l { Some(*concurrency) } else { None })
        .collect();
    let open = |want: Arrival| -> Option<Vec<f64>> {
        loads
            .iter()
            .map(|l| match l {
                ResolvedLoad::Open { rate_rps, arrival } if *arrival == want => Some(*rate_rps),
                _ => None,
            })
            .collect()
    };
    if let Some(streams) = closed.filter(|s| !s.is_empty()) {
        return json!({"kind": "concurrent", "streams": streams});
    }
    for (kind, arrival) in [("constant", Arrival::Constant), ("poisson", Arrival::Poisson)] {
        if let Some(rate) = open(arrival).filter(|r| !r.is_empty()) {
            return json!({"kind": kind, "rate": rate});
        }
    }
    json!({"kind": "replay", "time_scale": 1.0})
}

/// The whole report for a study's measured cells.
pub fn guidellm_report(plan: &Plan, plan_sha256: &str, cells: &[CellRecords], started_unix_ms: Option<u64>) -> Value {
    let resolved = plan.resolved_cells().unwrap_or_default();
    let zero_s = started_unix_ms.map_or(0.0, |ms| ms as f64 / 1e3);
    let mut benchmarks = Vec::new();
    let mut loads = Vec::new();
    for c in cells {
        let Some(rc) = resolved.iter().find(|r| r.name == c.cell) else { continue };
        // A light-recorder cell (the observer-effect check) has no last-token time or
        // per-token events: guidellm would read its ITL and TPOT as zero, so it is left out.
        if c.records.iter().any(|r| r.light) {
            continue;
        }
        let arm = plan.arm(&c.arm);
        let mut reqs: Vec<Req> = c.records.iter().map(|r| Req::from_record(r, zero_s)).collect();
        link_turns(&mut reqs);
        let (ok, failed): (Vec<Req>, Vec<Req>) = reqs.into_iter().partition(|r| r.error.is_none());
        let g = ByStatus { successful: ok, incomplete: Vec::new(), errored: failed };
        let all = || g.successful.iter().chain(&g.errored);
        let start = all().map(|r| r.targeted).fold(f64::INFINITY, f64::min);
        let end = all().map(|r| r.resolve_end).fold(f64::NEG_INFINITY, f64::max);
        let (start, end) = if start.is_finite() { (start, end) } else { (zero_s, zero_s) };
        let first_send = all().filter_map(Req::start_time).fold(f64::INFINITY, f64::min);
        let made = json!({
            "successful": g.successful.len(), "incomplete": 0, "errored": g.errored.len(),
            "total": g.successful.len() + g.errored.len(),
        });
        let strategy_value = strategy(rc.load, plan.study.seed);
        loads.push(rc.load);
        benchmarks.push(json!({
            "type_": "generative_benchmark",
            "config": {
                "id_": format!("{}/b{}/{}/{}", plan.study.name, c.block, c.arm, c.cell),
                "run_id": format!("{}@{}", plan.study.name, plan_sha256),
                "run_index": benchmarks.len(),
                "strategy": strategy_value,
                "constraints": {},
                "prefer_response_metrics": true,
                "confidence": null,
                "slo": goodput_slo(plan.slo.as_ref()),
                "profile": {"harness_cell": c.cell, "harness_block": c.block, "count": rc.count},
                "requests": {"panel": crate::evidence::PROMPTS_PATH, "requests": c.records.len()},
                "backend": {
                    "kind": "openai_http", "target": arm.map(|a| a.base_url()), "model": plan.request.model,
                    "request_type": request_type(rc.body.endpoint),
                    "harness_arm": c.arm, "harness_role": arm.map(|a| a.role.as_str()),
                },
                "environment": {"harness_version": env!("CARGO_PKG_VERSION"), "harness_study": plan.study.name},
            },
            "scheduler_state": {
                "start_time": start, "end_time": end,
                "created_requests": c.records.len(), "processed_requests": c.records.len(),
                "successful_requests": g.successful.len(), "errored_requests": g.errored.len(),
            },
            "scheduler_metrics": {
                "start_time": start,
                "request_start_time": if first_send.is_finite() { first_send } else { start },
                "measure_start_time": start, "measure_end_time": end,
                "request_end_time": end, "end_time": end,
                "requests_made": made,
                // guidellm's "unavailable" for its own worker-pipeline averages.
                "queued_time_avg": -1.0, "resolve_start_delay_avg": -1.0,
                "resolve_targeted_start_delay_avg": -1.0, "request_start_delay_avg": -1.0,
                "request_targeted_start_delay_avg": -1.0, "request_time_avg": -1.0,
                "resolve_end_delay_avg": -1.0, "resolve_time_avg": -1.0,
                "finalized_delay_avg": -1.0, "processed_delay_avg": -1.0,
                "dataset_incomplete": false,
                "strategy_type": strategy_value["type_"],
            },
            "metrics": metrics(&g, start, end, plan.slo.as_ref()),
            "requests": {
                "successful": g.successful.iter().map(Req::stats).collect::<Vec<_>>(),
                "incomplete": [],
                "errored": g.errored.iter().map(Req::stats).collect::<Vec<_>>(),
                "total": null,
            },
        }));
    }
    let target = plan.arms.first().map(|a| a.base_url()).unwrap_or_default();
    json!({
        "metadata": {
            "version": 2,
            "guidellm_version": format!("none: written by harness {} in guidellm 0.8.1's format", env!("CARGO_PKG_VERSION")),
            "python_version": "none",
            "platform": format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        },
        "config": {
            "metadata": {"labels": {"harness_study": plan.study.name, "harness_plan_sha256": plan_sha256}},
            "spec": {
                "backend": {"kind": "openai_http", "target": target, "model": plan.request.model},
                "profile": profile(&loads),
                "data": [{"kind": "json_file", "path": crate::evidence::PROMPTS_PATH}],
            },
        },
        "benchmarks": benchmarks,
    })
}
