//! The concurrency ladder on one running server: for each closed-loop cell in order,
//! settle, drive its trace through the study's load client (`load::drive_cell`: the
//! closed-loop semaphore and SSE recorder), write `<cell>.requests.jsonl` whole, and
//! summarize it through `metrics` (`results/cells/<phase>-<label>-<cell>.summary.json`).
//! Must not retry, skip a failure or compute ratios (`band` does).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::CompareError;
use super::server::Running;
use crate::evidence::{Evidence, requests_file, summary_path, write_json, write_jsonl};
use crate::inputs::Inputs;
use crate::load::{
    CellDrive, Connections, Counters, RequestCtx, StudyClock, drive_cell, exited, prewarm, warm_connections,
};
use crate::metrics::{CellSummary, summarize_cell};
use crate::plan::{Plan, ResolvedCell, ResolvedLoad};

/// The cell start is this far after it is scheduled, so the first intended arrival is
/// not already past when the dispatcher reaches it.
const CELL_LEAD_NS: u64 = 10_000_000;

/// One cell on one server.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    pub cell: String,
    pub concurrency: u32,
    pub requests: u64,
    pub failed: u64,
    pub summary: Option<CellSummary>,
    /// Why there is no summary.
    pub error: Option<String>,
}

/// Everything one ladder run needs.
pub struct Ladder<'a> {
    pub plan: &'a Plan,
    pub inputs: &'a Inputs,
    pub ev: &'a Evidence,
    pub clock: StudyClock,
    /// Record `block` field: the noise round or schedule block.
    pub block: u32,
    /// Record `arm` field: the arm, or `<arm>.a` / `<arm>.b`.
    pub label: &'a str,
    /// Prefix of the summary file names: `noise0`, `b1`.
    pub tag: &'a str,
}

impl Ladder<'_> {
    /// Runs `cells` in order; stops early if the server dies (the rest do not run).
    pub async fn run(&self, server: &Running, cells: &[&ResolvedCell]) -> Result<Vec<CellResult>, CompareError> {
        let plan = self.plan;
        let ctx = RequestCtx {
            client: server.client.clone(),
            url: format!("{}/v1/completions", server.base_url),
            clock: self.clock,
            timeout: Duration::from_secs_f64(plan.timing.request_timeout_s),
            server_exit: server.exit.clone(),
            drain_expired: tokio::sync::watch::channel(false).1,
            forced_output: true,
            light: false,
            source_clients: Default::default(),
        };
        let mut out = Vec::with_capacity(cells.len());
        for cell in cells {
            let ResolvedLoad::Closed { concurrency } = cell.load else { continue };
            let Some(trace) = self.inputs.trace(&cell.name) else { continue };
            let _ = server.phase().send(format!("settle:{}", cell.name));
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs_f64(plan.timing.settle_s)) => {}
                _ = exited(server.exit.clone()) => {}
            }
            if server.died().is_some() {
                break;
            }
            prewarm(&ctx, warm_connections(Connections::KeepAlive, Some(concurrency), &trace.entries)).await;
            let _ = server.phase().send(format!("cell:{}", cell.name));
            let drive = CellDrive {
                block: self.block,
                arm: self.label,
                cell: &cell.name,
                entries: &trace.entries,
                start_ns: self.clock.now_ns() + CELL_LEAD_NS,
                concurrency: Some(concurrency),
                bodies: self.inputs.bodies_for(plan.body_kind(crate::plan::Endpoint::Completions)),
                entry_bodies: None,
                sessions: None,
                drain_timeout: Duration::from_secs_f64(plan.timing.drain_timeout_s),
            };
            let records = drive_cell(&drive, &ctx, &Arc::new(Counters::default())).await?;
            let _ = server.phase().send("idle".into());
            write_jsonl(&server.dir.join(requests_file(&cell.name)), &records)?;
            let failed = records.iter().filter(|r| !r.is_valid()).count() as u64;
            let (summary, error) = match summarize_cell(&records) {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let path = self.ev.root().join(summary_path(&format!("{}-{}-{}", self.tag, self.label, cell.name)));
            match &summary {
                Some(s) => write_json(&path, s)?,
                None => write_json(&path, &serde_json::json!({"cell": cell.name, "error": error}))?,
            }
            out.push(CellResult {
                cell: cell.name.clone(),
                concurrency,
                requests: records.len() as u64,
                failed,
                summary,
                error,
            });
            if server.died().is_some() {
                break;
            }
        }
        Ok(out)
    }
}
