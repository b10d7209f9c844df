//! One cell on one server invocation: settle, drive the trace through `load` (the
//! whole trace, or in an interleaved block one round's slice at a time), write
//! `<cell>.requests.jsonl` as a whole, then summarize through `metrics` (stored as
//! `results/cells/b<block>-<arm>-<cell>.summary.json`, printed as a table, or one
//! line with `--quiet`). Must not retry, and must not skip a record or a failure.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{RunError, Study};
use crate::evidence::request_record::RequestRecord;
use crate::evidence::{CellOutcome, CellStatus, write_json, write_jsonl};
use crate::load::{CellDrive, Connections, Counters, RequestCtx, drive_cell, exited, prewarm, warm_connections};
use crate::metrics::{parse_receipts, render_line, render_turns, summarize_cell_with_slo, summarize_turns};
use crate::plan::{Endpoint, ResolvedCell, ResolvedLoad};
use crate::trace::TraceEntry;

/// The cell start is this far after the moment it is scheduled, so the first
/// intended arrival is not already past when the dispatcher reaches it.
pub const CELL_LEAD_NS: u64 = 10_000_000;

/// Cells that never ran (their server was down), in order.
pub fn not_run(cells: &[String]) -> Vec<CellOutcome> {
    cells
        .iter()
        .map(|c| CellOutcome {
            cell: c.clone(),
            status: CellStatus::NotRun,
            requests: 0,
            completed: 0,
            failed: 0,
            start_ns: None,
            end_ns: None,
        })
        .collect()
}

/// The server's URL of each endpoint (a cell takes its own).
#[derive(Debug, Clone)]
pub struct EndpointUrls {
    pub completions: String,
    pub chat: String,
}

impl EndpointUrls {
    pub fn of(&self, endpoint: Endpoint) -> &str {
        match endpoint {
            Endpoint::Completions => &self.completions,
            Endpoint::Chat => &self.chat,
        }
    }
}

/// What one cell run needs from its server invocation.
pub struct CellRun<'a> {
    pub study: &'a Study<'a>,
    /// The requests' context; its `url` is replaced by the cell's endpoint's.
    pub ctx: &'a RequestCtx,
    pub urls: &'a EndpointUrls,
    pub block: u32,
    pub arm: &'a str,
    /// `b<block> <arm>`, for progress lines.
    pub label: &'a str,
    /// The sampler's phase tag.
    pub phase: &'a watch::Sender<String>,
    /// The file the server writes its receipts to, when the arm keeps them: the
    /// summary adds the engine's decode measures of the cell from it.
    pub receipts: Option<&'a Path>,
}

/// The records one drive of a cell (the whole cell, or one round of it) produced.
pub struct Driven {
    pub records: Vec<RequestRecord>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// How the server died during it, when it did.
    pub died: Option<String>,
}

impl CellRun<'_> {
    /// Settles and runs `cell`. `None` when the server was already dead before the
    /// first dispatch (the cell does not run); else its outcome, its summary (JSON)
    /// and, when the server died during it, how.
    pub async fn run(
        &self,
        cell: &ResolvedCell,
        entries: &[TraceEntry],
        done: &mut u64,
    ) -> Result<Option<(CellOutcome, serde_json::Value, Option<String>)>, RunError> {
        let Some(d) = self.drive(cell, entries, None, true, done).await? else { return Ok(None) };
        self.finish(&cell.name, d).map(Some)
    }

    /// Settles (when `settle`) and drives `entries` of `cell` from now; records of a
    /// round carry it. `None` when the server was dead before the first dispatch.
    pub async fn drive(
        &self,
        cell: &ResolvedCell,
        entries: &[TraceEntry],
        round: Option<u32>,
        settle: bool,
        done: &mut u64,
    ) -> Result<Option<Driven>, RunError> {
        let s = self.study;
        let plan = &s.frozen.plan;
        let name = &cell.name;
        let dead = || self.ctx.server_exit.borrow().clone();
        if settle && dead().is_none() {
            let _ = self.phase.send(format!("settle:{name}"));
            s.progress.status(self.label, &format!("{name}: settle {} s", plan.timing.settle_s));
            let settle = tokio::time::sleep(Duration::from_secs_f64(plan.timing.settle_s));
            tokio::select! {
                () = settle => {}
                _ = exited(self.ctx.server_exit.clone()) => {}
            }
        }
        if dead().is_some() {
            return Ok(None);
        }
        let concurrency = match cell.load {
            ResolvedLoad::Closed { concurrency } => Some(concurrency),
            _ => cell.max_concurrency,
        };
        // The cell's own route: its bodies and URL; the recorder skips the
        // prompt-length check on chat.
        let light = cell.recorder == crate::plan::Recorder::Light;
        let url = self.urls.of(cell.body.endpoint).to_string();
        let ctx = crate::load::RequestCtx { light, url, ..self.ctx.clone() };
        // Warm keep-alive connections before the first timed send, so that no timed
        // request pays for a connect it would not pay in steady state.
        prewarm(&ctx, warm_connections(Connections::KeepAlive, concurrency, entries)).await;
        let entry_bodies = s.inputs.entry_bodies(plan, name);
        let _ = self.phase.send(format!("cell:{name}"));
        let counters = Arc::new(Counters::default());
        let what = match round {
            Some(k) => format!("{} {name} round {}/{}", self.label, k + 1, plan.blocks.rounds),
            None => format!("{} {name}", self.label),
        };
        let ticker = s.progress.cell(what, counters.clone(), *done);
        let start_ns = s.clock.now_ns() + CELL_LEAD_NS;
        let drive = CellDrive {
            block: self.block,
            arm: self.arm,
            cell: name,
            entries,
            start_ns,
            concurrency,
            bodies: s.inputs.bodies_for(cell.body),
            entry_bodies: entry_bodies.as_deref(),
            sessions: s.inputs.sessions.as_deref(),
            drain_timeout: Duration::from_secs_f64(plan.timing.drain_timeout_s),
        };
        let mut records = drive_cell(&drive, &ctx, &counters).await?;
        drop(ticker);
        let _ = self.phase.send("idle".to_string());
        let end_ns = s.clock.now_ns();
        *done += records.len() as u64;
        s.progress.set_done(*done);
        for r in &mut records {
            r.round = round;
        }
        Ok(Some(Driven { records, start_ns, end_ns, died: dead() }))
    }

    /// Writes `<cell>.requests.jsonl` (every round's records, in round order) as a
    /// whole and summarizes the cell.
    pub fn finish(&self, name: &str, d: Driven) -> Result<(CellOutcome, serde_json::Value, Option<String>), RunError> {
        let s = self.study;
        write_jsonl(&s.ev.requests_path(self.block, self.arm, name), &d.records)?;
        let completed = d.records.iter().filter(|r| r.is_valid()).count() as u64;
        let outcome = CellOutcome {
            cell: name.to_string(),
            status: if d.died.is_some() { CellStatus::Interrupted } else { CellStatus::Completed },
            requests: d.records.len() as u64,
            completed,
            failed: d.records.len() as u64 - completed,
            start_ns: Some(d.start_ns),
            end_ns: Some(d.end_ns),
        };
        // An interleaved cell's own time is that of its rounds, not the span that
        // holds the other arms' turns too.
        let own_ns = if d.records.iter().any(|r| r.round.is_some()) {
            crate::metrics::active_ns(&d.records)
        } else {
            d.end_ns - d.start_ns
        };
        let summary = summarize(s, self.block, self.arm, name, &d.records, own_ns as f64 / 1e9, self.receipts)?;
        Ok((outcome, summary, d.died))
    }
}

/// Summarizes one cell through `metrics`, stores the JSON and prints the table (or,
/// with `--quiet`, one line).
fn summarize(
    s: &Study<'_>,
    block: u32,
    arm: &str,
    cell: &str,
    records: &[RequestRecord],
    wall_s: f64,
    receipts: Option<&Path>,
) -> Result<serde_json::Value, RunError> {
    let path = s.ev.cell_summary_path(block, arm, cell);
    let label = format!("b{block} {arm} {cell}");
    let (value, line) = match summarize_cell_with_slo(records, s.frozen.plan.slo.as_ref()) {
        Ok(mut sum) => {
            if let Some(file) = receipts {
                // Every step of the cell was written before its last [DONE] was sent.
                match std::fs::read_to_string(file).map_err(|e| e.to_string()).and_then(|t| parse_receipts(&t)) {
                    Ok(steps) => sum.add_engine_decode(records, &steps),
                    Err(e) => s.progress.println(&format!("{label}: receipts {}: {e}", file.display())),
                }
            }
            let lag = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.3}"));
            let line = format!(
                "{label}: {} requests, {} completed, {} failed, {wall_s:.1} s; dispatch lag ms p50 {} p99 {} max {}",
                sum.requests,
                sum.completed,
                sum.failed,
                lag(sum.dispatch_lag_p50_ms),
                lag(sum.dispatch_lag_p99_ms),
                lag(sum.dispatch_lag_max_ms),
            );
            // Cannot fail where the cell summary did not (the same measures of the same records).
            let turns = summarize_turns(records).unwrap_or_default();
            if s.progress.cell_tables() {
                let per_turn = if turns.is_empty() { String::new() } else { render_turns(&turns) };
                s.progress.println(&format!("{label}: {}\n{per_turn}", render_line(&sum)));
            }
            let mut value = serde_json::to_value(&sum).unwrap_or_default();
            // A session cell's summary also holds its per-turn-index rows.
            if let (false, Some(obj)) = (turns.is_empty(), value.as_object_mut()) {
                obj.insert("turns".into(), serde_json::to_value(&turns).unwrap_or_default());
            }
            (value, line)
        }
        Err(e) => {
            let failed = records.iter().filter(|r| !r.is_valid()).count();
            let line = format!("{label}: {} requests, {failed} failed; no summary: {e}", records.len());
            let v = serde_json::json!({"cell": cell, "block": block, "arm": arm, "error": e.to_string()});
            (v, line)
        }
    };
    s.progress.println(&line);
    write_json(&path, &value)?;
    Ok(value)
}
