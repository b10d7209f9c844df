//! The session's measurement floor (`evidence::MeasurementFloor`): about two seconds
//! at session start, on a thread and runtimes of its own, measuring how exact this
//! client's readings are on this machine now: the clock's resolution and smallest
//! step, how late a 1 ms sleep and the dispatcher's sleep-then-spin wake, and the
//! send-to-first-byte overhead of the study's own dispatcher and recorder
//! (`drive_cell`, `execute`) against an in-process mock (`crate::mock`, TTFT and ITL
//! 0) at the study's highest planned rate: per request, the client's TTFT and E2E
//! minus the mock's true ones (written minus arrival, matched by server request id).
//! Owns the measurement's procedure and its size. Must not write evidence or decide
//! what the floor means for a claim (`evidence::MeasurementFloor` does).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use tokio::sync::watch;

use super::{
    CellDrive, Connections, Counters, LoadError, PreparedRequest, RequestCtx, StudyClock, drive_cell, http_client,
    prewarm, warm_connections,
};
use crate::evidence::{MeasurementFloor, Spread};
use crate::mock::{Mock, MockOptions, MockSpec, TimeSpec};
use crate::plan::{ResolvedCell, ResolvedLoad};
use crate::trace::TraceEntry;

/// The rate the floor is measured at when the study plans no open-loop rate.
pub const FLOOR_DEFAULT_RATE: f64 = 100.0;
/// Seconds of requests at the measured rate, and the most requests sent.
const DRIVE_S: f64 = 1.0;
const MAX_REQUESTS: u64 = 1000;
const MIN_REQUESTS: u64 = 20;
/// Wake-up samples of each kind, 1 ms apart.
const WAKE_SAMPLES: u32 = 150;

/// The study's highest planned open-loop rate (isolated cells: one over their
/// spacing); `FLOOR_DEFAULT_RATE` when it plans none.
pub fn planned_rate(cells: &[ResolvedCell]) -> f64 {
    cells
        .iter()
        .filter_map(|c| match c.load {
            ResolvedLoad::Open { rate_rps, .. } => Some(rate_rps),
            ResolvedLoad::Isolated { spacing_ns } if spacing_ns > 0 => Some(1e9 / spacing_ns as f64),
            _ => None,
        })
        .filter(|r| r.is_finite() && *r > 0.0)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
        .unwrap_or(FLOOR_DEFAULT_RATE)
}

fn spread(mut us: Vec<f64>) -> Spread {
    us.sort_by(f64::total_cmp);
    let n = us.len();
    let at = |p: f64| if n == 0 { 0.0 } else { us[((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1] };
    Spread { samples: n as u64, p50_us: at(50.0), p99_us: at(99.0), max_us: at(100.0) }
}

fn clock_resolution_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_getres writes the struct it is given.
    unsafe {
        libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64).max(1)
}

fn clock_step_ns() -> u64 {
    let mut last = Instant::now();
    let mut step = u64::MAX;
    for _ in 0..20_000 {
        let now = Instant::now();
        let d = now.duration_since(last).as_nanos() as u64;
        if d > 0 {
            step = step.min(d);
        }
        last = now;
    }
    step.clamp(1, 1_000_000)
}

fn wake_lateness() -> (Spread, Spread) {
    let mut sleep = Vec::new();
    for _ in 0..WAKE_SAMPLES {
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        sleep.push((t.elapsed().as_nanos() as f64 - 1e6) / 1e3);
    }
    let clock = StudyClock::start();
    let mut dispatch = Vec::new();
    let start = clock.now_ns() + 1_000_000;
    for k in 0..u64::from(WAKE_SAMPLES) {
        let target = start + k * 1_000_000;
        clock.block_until(target, || None::<()>);
        dispatch.push((clock.now_ns() as f64 - target as f64) / 1e3);
    }
    (spread(sleep), spread(dispatch))
}

fn body() -> Bytes {
    let v = serde_json::json!({
        "model": "floor", "prompt": [1, 2, 3, 4], "max_tokens": 2, "min_tokens": 2, "ignore_eos": true,
        "temperature": 0.0, "stream": true, "stream_options": {"include_usage": true}, "return_token_ids": true,
    });
    Bytes::from(v.to_string())
}

fn runtime(name: &str, threads: Option<usize>) -> Result<tokio::runtime::Runtime, LoadError> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        b.worker_threads(n);
    }
    b.thread_name(name).enable_all().build().map_err(|e| LoadError::Task(format!("floor runtime: {e}")))
}

/// Drives `rate_rps` against the in-process mock; per request, client minus true
/// TTFT and E2E in microseconds, and the counts.
fn overhead(rate_rps: f64) -> Result<(Vec<f64>, Vec<f64>, u64, u64), LoadError> {
    let mock_rt = runtime("floor-mock", Some(1))?;
    let client_rt = runtime("floor-client", None)?;
    let spec = MockSpec {
        ttft: TimeSpec::fixed(0.0),
        itl: TimeSpec::fixed(0.0),
        model: "floor".into(),
        ..MockSpec::default()
    };
    let opts = MockOptions {
        host: std::net::IpAddr::from([127, 0, 0, 1]),
        port: 0,
        spec,
        ground_truth: None,
        keep_truth: true,
        timer_spin: Duration::ZERO,
    };
    let mock = mock_rt.block_on(Mock::start(&opts)).map_err(|e| LoadError::Task(format!("floor mock: {e}")))?;
    let url = format!("http://{}{}", mock.addr(), crate::protocol::routes::COMPLETIONS_PATH);
    let count = ((rate_rps * DRIVE_S).round() as u64).clamp(MIN_REQUESTS, MAX_REQUESTS);
    let records = client_rt.block_on(async move {
        let clock = StudyClock::start();
        let gap = 1e9 / rate_rps;
        let entries: Vec<TraceEntry> = (0..count)
            .map(|i| TraceEntry {
                index: i,
                offset_ns: (i as f64 * gap).round() as u64,
                prompt: 0,
                input_length: None,
                output_length: None,
            })
            .collect();
        let bodies = [PreparedRequest { body: body(), prompt_tokens: 4, max_tokens: 2, request_id: None }];
        let exit = watch::channel(None);
        let ctx = RequestCtx {
            client: http_client()?,
            url,
            clock,
            timeout: Duration::from_secs(10),
            server_exit: exit.1.clone(),
            drain_expired: watch::channel(false).1,
            forced_output: true,
            light: false,
            source_clients: Default::default(),
        };
        // As a study's cells: warm connections before the first timed send.
        prewarm(&ctx, warm_connections(Connections::KeepAlive, None, &entries)).await;
        let d = CellDrive {
            block: 0,
            arm: "floor",
            cell: "floor",
            entries: &entries,
            start_ns: clock.now_ns() + 20_000_000,
            concurrency: None,
            bodies: &bodies,
            entry_bodies: None,
            sessions: None,
            drain_timeout: Duration::from_secs(5),
        };
        drive_cell(&d, &ctx, &Arc::new(Counters::default())).await
    })?;
    let (_, truth) =
        mock_rt.block_on(mock.stop(Duration::from_secs(1))).map_err(|e| LoadError::Task(format!("floor mock: {e}")))?;
    let truth: HashMap<&str, &crate::mock::TruthRecord> = truth.iter().map(|t| (t.id.as_str(), t)).collect();
    let (mut ttft, mut e2e, mut failed) = (Vec::new(), Vec::new(), 0u64);
    for r in &records {
        let Some(t) = r.server_request_id.as_deref().and_then(|id| truth.get(id)).filter(|_| r.is_valid()) else {
            failed += 1;
            continue;
        };
        let first_written = t.events.iter().find(|e| e.tokens > 0).and_then(|e| e.written_ns);
        let done_written =
            t.events.iter().rev().find(|e| e.kind == crate::mock::truth::EventKind::Done).and_then(|e| e.written_ns);
        let client_first = r.events.iter().find(|e| e.tokens > 0).map(|e| e.t_ns);
        let (Some(send), Some(done)) = (r.send_ns, r.done_ns) else { continue };
        if let (Some(w), Some(c)) = (first_written, client_first) {
            ttft.push(((c - send) as f64 - (w as f64 - t.arrival_ns as f64)) / 1e3);
        }
        if let Some(w) = done_written {
            e2e.push(((done - send) as f64 - (w as f64 - t.arrival_ns as f64)) / 1e3);
        }
    }
    Ok((ttft, e2e, count, failed))
}

/// Measures the floor at `rate_rps` (blocking; about two seconds).
pub fn measure_floor(rate_rps: f64) -> Result<MeasurementFloor, LoadError> {
    let rate_rps = if rate_rps.is_finite() && rate_rps > 0.0 { rate_rps } else { FLOOR_DEFAULT_RATE };
    std::thread::Builder::new()
        .name("floor".into())
        .spawn(move || {
            let wall = Instant::now();
            let loadavg_1m = crate::host::loadavg_1m();
            let (clock_resolution_ns, clock_step_ns) = (clock_resolution_ns(), clock_step_ns());
            let (sleep_lateness, dispatch_lateness) = wake_lateness();
            let (ttft, e2e, requests, failed) = overhead(rate_rps)?;
            Ok(MeasurementFloor {
                clock_resolution_ns,
                clock_step_ns,
                sleep_lateness,
                dispatch_lateness,
                rate_rps,
                requests,
                failed,
                ttft_overhead: spread(ttft),
                e2e_overhead: spread(e2e),
                wall_s: wall.elapsed().as_secs_f64(),
                loadavg_1m,
            })
        })
        .map_err(|e| LoadError::Task(format!("cannot start the floor thread: {e}")))?
        .join()
        .map_err(|_| LoadError::Task("the floor thread panicked".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_measured_against_the_in_process_mock() {
        // Structure only: every request is matched to the mock's truth and every
        // number is a sane measurement; no timing is asserted.
        let f = measure_floor(200.0).unwrap();
        assert_eq!((f.requests, f.failed, f.ttft_overhead.samples), (200, 0, 200), "{f:?}");
        assert!(f.problems().is_empty(), "{:?}", f.problems());
        assert!(f.ttft_overhead.p50_us > 0.0 && f.e2e_overhead.samples == 200, "{f:?}");
        assert!(f.sleep_lateness.p50_us >= 0.0 && f.dispatch_lateness.samples == u64::from(WAKE_SAMPLES));
    }

    #[test]
    fn the_planned_rate_is_the_highest_open_rate() {
        let cell = |load| ResolvedCell {
            name: "c".into(),
            kind: crate::plan::CellKind::Confirmation,
            body: crate::plan::BodyKind { endpoint: crate::plan::Endpoint::Completions, token_ids: true },
            recorder: crate::plan::Recorder::Full,
            load,
            count: 1,
            input_tokens: None,
            retries: 0,
            max_concurrency: None,
        };
        let open = |r| cell(ResolvedLoad::Open { rate_rps: r, arrival: crate::plan::Arrival::Poisson });
        assert_eq!(planned_rate(&[open(5.0), open(80.0), cell(ResolvedLoad::Closed { concurrency: 4 })]), 80.0);
        assert_eq!(planned_rate(&[cell(ResolvedLoad::Isolated { spacing_ns: 2_000_000 })]), 500.0);
        assert_eq!(planned_rate(&[cell(ResolvedLoad::Closed { concurrency: 4 })]), FLOOR_DEFAULT_RATE);
    }
}
