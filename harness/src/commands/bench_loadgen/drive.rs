//! One measured offered rate of `harness bench-client`: a seeded schedule, driven by
//! the study's own open-loop dispatcher and recorder (`load::drive_cell`), summarized
//! by `metrics::summarize_cell`, plus the dispatcher's own figures (achieved dispatch
//! rate, dispatch and send lag over every dispatched request) and CPU time. Owns the
//! benchmark's figures. Must not time anything with a clock other than the study clock
//! it is handed, and must not assert on timings (a benchmark reports, never fails).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde::Serialize;
use tokio::sync::watch;

use super::cpu::{self, CpuSnapshot};
use super::{BenchArrival, BenchError};
use crate::evidence::request_record::RequestRecord;
use crate::load::{
    CellDrive, Connections, Counters, PreparedRequest, RequestCtx, StudyClock, drive_cell, prewarm, warm_connections,
};
use crate::metrics::{CellSummary, summarize_cell};
use crate::plan::Arrival;
use crate::plan::seed::cell_seed;
use crate::stats::percentiles;
use crate::trace::{TraceEntry, open_loop_offsets};

/// Thread-name prefixes of the two runtimes (see `cpu`).
pub const CLIENT_THREADS: &str = "bench-client";
pub const SERVER_THREADS: &str = "bench-server";

/// What the drive of one rate needs.
#[derive(Clone)]
pub struct RateSpec {
    pub rate_rps: f64,
    pub arrival: BenchArrival,
    pub count: u64,
    pub seed: u64,
    pub chunks: u32,
    pub prompt_tokens: u32,
    /// The variable-length workload (`--sharegpt`): request i sends entry i mod n;
    /// `None`: every request sends the fixed body.
    pub panel: Option<Arc<[PreparedRequest]>>,
}

impl RateSpec {
    /// `"fixed"` or `"sharegpt"`.
    pub fn workload(&self) -> &'static str {
        if self.panel.is_some() { "sharegpt" } else { "fixed" }
    }
}

/// The figures of one offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct RateResult {
    /// `"fixed"` (every request the same prompt and `--chunks` tokens) or
    /// `"sharegpt"` (the `--sharegpt` panel's own lengths).
    pub workload: String,
    pub offered_rate_rps: f64,
    pub arrival: BenchArrival,
    pub requests: u64,
    /// Keep-alive connections opened before the first timed send (0: `--connections
    /// fresh`).
    pub warm_connections: usize,
    /// Realized rate of the seeded schedule: (n - 1) / (last offset - first offset).
    pub scheduled_rate_rps: f64,
    /// (n - 1) / (last dispatch - first dispatch).
    pub achieved_dispatch_rate_rps: f64,
    /// (n - 1) / (last HTTP send - first HTTP send).
    pub achieved_send_rate_rps: f64,
    /// achieved dispatch rate / offered - 1 (Poisson: includes the schedule's own
    /// sampling deviation from the offered rate).
    pub dispatch_rate_error_vs_offered: f64,
    /// achieved dispatch rate / scheduled rate - 1 (the dispatcher's own error).
    pub dispatch_rate_error_vs_schedule: f64,
    /// Valid completions / (first intended arrival .. last completion), from metrics.
    pub completion_throughput_rps: f64,
    pub completed: u64,
    pub failed: u64,
    pub failed_by_class: BTreeMap<String, u64>,
    /// dispatch - intended over every dispatched request (nearest rank), microseconds.
    pub dispatch_lag_p50_us: f64,
    pub dispatch_lag_p99_us: f64,
    pub dispatch_lag_max_us: f64,
    /// HTTP send - intended over every sent request, microseconds.
    pub send_lag_p50_us: f64,
    pub send_lag_p99_us: f64,
    pub send_lag_max_us: f64,
    /// Wall time of the drive (first dispatch wait to last record), seconds.
    pub wall_s: f64,
    /// CPU seconds during the drive: the whole process (client + fake server, as
    /// getrusage(RUSAGE_SELF) would say), the client runtime's threads, the fake's.
    pub process_cpu_s: f64,
    pub client_cpu_s: f64,
    pub server_cpu_s: f64,
    pub client_cpu_s_per_request: f64,
    pub process_cpu_s_per_request: f64,
    /// 1-minute load average of the machine before and after the drive (other work
    /// on the machine competes with the client and the fake).
    pub loadavg_1m_before: Option<f64>,
    pub loadavg_1m_after: Option<f64>,
    /// Busy cores of the whole machine during the drive (from `/proc/stat`), and the
    /// part of it not spent by this process: what competed with the benchmark.
    pub machine_busy_cores: Option<f64>,
    pub other_processes_cores: Option<f64>,
    /// The cell summary of the measured records (latencies of the fake, etc.).
    pub summary: CellSummary,
}

/// The schedule: Poisson (the trace module's seeded generator) or constant gaps.
pub fn schedule(spec: &RateSpec, name: &str) -> Vec<TraceEntry> {
    let offsets: Vec<u64> = match spec.arrival {
        BenchArrival::Poisson => {
            open_loop_offsets(cell_seed(spec.seed, name), spec.count, spec.rate_rps, Arrival::Poisson)
        }
        BenchArrival::Constant => (0..spec.count).map(|i| (i as f64 * 1e9 / spec.rate_rps).round() as u64).collect(),
    };
    offsets
        .into_iter()
        .enumerate()
        .map(|(i, offset_ns)| TraceEntry {
            index: i as u64,
            offset_ns,
            prompt: spec.panel.as_ref().map_or(0, |p| i as u64 % p.len().max(1) as u64),
            input_length: None,
            output_length: None,
        })
        .collect()
}

/// The timed request body (the same fields `load::stream_body` sends).
pub fn body(spec: &RateSpec) -> Bytes {
    let prompt: Vec<u32> = (1..=spec.prompt_tokens).collect();
    let v = serde_json::json!({
        "model": "fake", "prompt": prompt, "max_tokens": spec.chunks, "min_tokens": spec.chunks,
        "ignore_eos": true, "temperature": 0.0, "stream": true,
        "stream_options": {"include_usage": true}, "return_token_ids": true,
    });
    Bytes::from(v.to_string())
}

/// (n - 1) / (max - min) in events per second; 0 when undefined.
fn rate_of(times_ns: impl Iterator<Item = u64>) -> f64 {
    let (mut n, mut lo, mut hi) = (0u64, u64::MAX, 0u64);
    for t in times_ns {
        n += 1;
        lo = lo.min(t);
        hi = hi.max(t);
    }
    if n < 2 || hi <= lo { 0.0 } else { (n - 1) as f64 * 1e9 / (hi - lo) as f64 }
}

/// Nearest-rank p50, p99 and max of `stamp - intended` over records with a stamp, in us.
fn lag_us(records: &[RequestRecord], stamp: fn(&RequestRecord) -> Option<u64>) -> Result<[f64; 3], BenchError> {
    let lags: Vec<f64> = records
        .iter()
        .filter_map(|r| stamp(r).map(|t| (i128::from(t) - i128::from(r.intended_ns)) as f64 / 1e3))
        .collect();
    if lags.is_empty() {
        return Ok([f64::NAN; 3]);
    }
    let p = percentiles(&lags, &[50.0, 99.0, 100.0]).map_err(crate::metrics::MetricsError::from)?;
    Ok([p[0], p[1], p[2]])
}

/// Everything shared by the rates of one benchmark.
pub struct Driver {
    pub client: reqwest::Client,
    /// Clients bound to `--source-addresses` (empty: `client` only).
    pub sources: Arc<[reqwest::Client]>,
    /// How `client` and `sources` hold connections (what `prewarm` does).
    pub connections: Connections,
    pub url: String,
    pub clock: StudyClock,
    /// Kept alive so the server-exit watch never reports an exit.
    pub server_exit: (watch::Sender<Option<String>>, watch::Receiver<Option<String>>),
}

impl Driver {
    /// Drives `count` requests of `spec`; returns their records and the connections
    /// pre-warmed before the first timed send.
    async fn drive(&self, spec: &RateSpec, name: &str, count: u64) -> Result<(Vec<RequestRecord>, usize), BenchError> {
        let entries: Vec<TraceEntry> = schedule(&RateSpec { count, ..spec.clone() }, name);
        let fixed = [PreparedRequest {
            body: body(spec),
            prompt_tokens: spec.prompt_tokens,
            max_tokens: spec.chunks,
            request_id: None,
        }];
        let bodies: &[PreparedRequest] = spec.panel.as_deref().unwrap_or(&fixed);
        let ctx = RequestCtx {
            client: self.client.clone(),
            url: self.url.clone(),
            clock: self.clock,
            timeout: Duration::from_secs(60),
            server_exit: self.server_exit.1.clone(),
            drain_expired: watch::channel(false).1,
            forced_output: true,
            light: false,
            source_clients: self.sources.clone(),
        };
        let warm = warm_connections(self.connections, None, &entries);
        prewarm(&ctx, warm).await;
        let d = CellDrive {
            block: 0,
            arm: "bench",
            cell: name,
            entries: &entries,
            // A short lead so the first request is not late by the setup itself.
            start_ns: self.clock.now_ns() + 50_000_000,
            concurrency: None,
            bodies,
            entry_bodies: None,
            sessions: None,
            drain_timeout: Duration::from_secs(30),
        };
        Ok((drive_cell(&d, &ctx, &Arc::new(Counters::default())).await?, warm))
    }

    /// Drives `warmup_s` seconds at the rate (not measured), then
    /// drives and measures `spec.count` requests.
    pub async fn measure(
        &self,
        spec: &RateSpec,
        warmup_s: f64,
    ) -> Result<(RateResult, Vec<RequestRecord>), BenchError> {
        // The same name (so the same seeded schedule) for both workloads of a rate.
        let name = format!("rate-{}", spec.rate_rps);
        let warm = (spec.rate_rps * warmup_s).round() as u64;
        if warm > 0 {
            self.drive(spec, &format!("{name}-warmup"), warm).await?;
        }
        let load_before = crate::host::loadavg_1m();
        let machine_before = cpu::machine_busy_s();
        let before: CpuSnapshot = cpu::snapshot(CLIENT_THREADS, SERVER_THREADS)?;
        let wall = Instant::now();
        let (records, warm_connections) = self.drive(spec, &name, spec.count).await?;
        let wall_s = wall.elapsed().as_secs_f64();
        let after = cpu::snapshot(CLIENT_THREADS, SERVER_THREADS)?;
        let machine = cpu::machine_busy_s().zip(machine_before).map(|(a, b)| (a - b) / wall_s);

        let entries = schedule(spec, &name);
        let scheduled = rate_of(entries.iter().map(|e| e.offset_ns));
        let dispatch_rate = rate_of(records.iter().filter_map(|r| r.dispatch_ns));
        let summary = summarize_cell(&records)?;
        let [d50, d99, dmax] = lag_us(&records, |r| r.dispatch_ns)?;
        let [s50, s99, smax] = lag_us(&records, |r| r.send_ns)?;
        let n = records.len().max(1) as f64;
        let (process, client) = (after.process_s - before.process_s, after.client_s - before.client_s);
        let result = RateResult {
            workload: spec.workload().to_string(),
            offered_rate_rps: spec.rate_rps,
            arrival: spec.arrival,
            requests: records.len() as u64,
            warm_connections,
            scheduled_rate_rps: scheduled,
            achieved_dispatch_rate_rps: dispatch_rate,
            achieved_send_rate_rps: rate_of(records.iter().filter_map(|r| r.send_ns)),
            dispatch_rate_error_vs_offered: dispatch_rate / spec.rate_rps - 1.0,
            dispatch_rate_error_vs_schedule: dispatch_rate / scheduled - 1.0,
            completion_throughput_rps: summary.request_throughput_rps,
            completed: summary.completed,
            failed: summary.failed,
            failed_by_class: summary.failed_by_class.clone(),
            dispatch_lag_p50_us: d50,
            dispatch_lag_p99_us: d99,
            dispatch_lag_max_us: dmax,
            send_lag_p50_us: s50,
            send_lag_p99_us: s99,
            send_lag_max_us: smax,
            wall_s,
            process_cpu_s: process,
            client_cpu_s: client,
            server_cpu_s: after.server_s - before.server_s,
            client_cpu_s_per_request: client / n,
            process_cpu_s_per_request: process / n,
            loadavg_1m_before: load_before,
            loadavg_1m_after: crate::host::loadavg_1m(),
            machine_busy_cores: machine,
            other_processes_cores: machine.map(|m| m - process / wall_s),
            summary,
        };
        Ok((result, records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_and_rates() {
        let spec = RateSpec {
            rate_rps: 500.0,
            arrival: BenchArrival::Constant,
            count: 5,
            seed: 0,
            chunks: 16,
            prompt_tokens: 8,
            panel: None,
        };
        let offsets: Vec<u64> = schedule(&spec, "x").iter().map(|e| e.offset_ns).collect();
        assert_eq!(offsets, [0, 2_000_000, 4_000_000, 6_000_000, 8_000_000]);
        assert_eq!(rate_of(offsets.into_iter()), 500.0);
        assert_eq!(rate_of([7u64].into_iter()), 0.0);
        let poisson = schedule(&RateSpec { arrival: BenchArrival::Poisson, count: 2000, ..spec.clone() }, "x");
        let realized = rate_of(poisson.iter().map(|e| e.offset_ns));
        assert!((realized / 500.0 - 1.0).abs() < 0.1, "{realized}");
        let b: serde_json::Value = serde_json::from_slice(&body(&spec)).unwrap();
        assert_eq!((b["prompt"].as_array().unwrap().len(), b["max_tokens"].as_u64()), (8, Some(16)));
    }
}
