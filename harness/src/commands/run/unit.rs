//! One server invocation: block b, arm a. Starts the server (or checks an external
//! one), runs the arm's identity checks, writes `startup.json`, warms up (`warmup.json`), samples while it runs, runs
//! the block's cells in order (settle, drive, record `<cell>.requests.jsonl`, then
//! the cell summary), stops the server, keeps its receipts, and writes
//! `arm_outcome.json`. A server that fails to start or dies is an arm fault: recorded
//! (with the tail of its log, also on stderr), and the study goes on (the runner
//! stops it after an arm's `max_start_failures`). Must not retry a request or
//! restart a server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use super::cell::{CellRun, EndpointUrls, not_run};
use super::{RunError, Study};
use crate::arm::{ArmError, Invocation};
use crate::evidence::sha256_hex;
use crate::evidence::{
    ARM_OUTCOME_FILE, CellOutcome, MEMORY_FILE, RECEIPTS_FILE, SCRAPES_FILE, SERVER_LOG_FILE, STARTUP_FILE,
    StartupRecord, UnitOutcome, UnitStatus, WARMUP_FILE, write_bytes, write_json,
};
use crate::load::RequestCtx;
use crate::plan::{Arm, ScheduledBlock};

fn program_sha256(program: &str, base: &Path) -> Option<String> {
    let path = if program.contains('/') {
        base.join(program)
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())?
    };
    std::fs::read(path).ok().map(|b| sha256_hex(&b))
}

fn kv_inventory(log: &Path) -> Option<serde_json::Value> {
    crate::arm::log_scan::engine_startup_in(log)
}

/// A started unit: its server healthy, warmed up and sampled; cells run on it
/// until [`Live::finish`] stops it.
pub(super) struct Live {
    pub dir: PathBuf,
    pub out: UnitOutcome,
    server: Invocation,
    pub ctx: RequestCtx,
    pub urls: EndpointUrls,
    /// `b<block> <arm>`, for progress lines.
    pub label: String,
    receipts: Option<PathBuf>,
    arm: Arm,
}

/// What starting a unit came to: a live server, or an arm fault already recorded
/// (`arm_outcome.json` written, the server stopped).
pub(super) enum Started {
    Live(Box<Live>),
    Fault(Box<UnitOutcome>),
}

impl Live {
    /// The cell runner of this unit in `block`.
    pub fn cell_run<'a>(&'a self, s: &'a Study<'a>, block: u32) -> CellRun<'a> {
        CellRun {
            study: s,
            ctx: &self.ctx,
            urls: &self.urls,
            block,
            arm: &self.out.arm,
            label: &self.label,
            phase: self.server.phase(),
            receipts: self.receipts.as_deref(),
        }
    }

    /// Stops the server, keeps its receipts and writes `arm_outcome.json`.
    pub async fn finish(self, s: &Study<'_>) -> Result<UnitOutcome, RunError> {
        let Live { dir, out, server, receipts, arm, .. } = self;
        stop_and_keep(s, &dir, out, Some(server), receipts, &arm).await
    }
}

/// Runs one invocation alone (`blocks.rounds` = 0); returns its outcome and its
/// cells' summaries (JSON).
pub(super) async fn run_unit(
    s: &Study<'_>,
    block: &ScheduledBlock,
    arm: &Arm,
    done: &mut u64,
) -> Result<(UnitOutcome, Vec<serde_json::Value>), RunError> {
    let mut live = match start_unit(s, block, arm).await? {
        Started::Fault(out) => return Ok((*out, Vec::new())),
        Started::Live(live) => live,
    };
    let mut summaries = Vec::new();
    for (ci, cell_name) in block.cells.iter().enumerate() {
        let (Some(cell), Some(trace)) = (s.resolved.iter().find(|c| &c.name == cell_name), s.inputs.trace(cell_name))
        else {
            continue;
        };
        match live.cell_run(s, block.index).run(cell, &trace.entries, done).await? {
            None => {
                live.out.status = UnitStatus::ServerDied;
                live.out.detail = live.ctx.server_exit.borrow().clone();
                live.out.cells.extend(not_run(&block.cells[ci..]));
                break;
            }
            Some((cell_outcome, summary, died)) => {
                live.out.cells.push(cell_outcome);
                summaries.push(summary);
                if let Some(detail) = died {
                    live.out.status = UnitStatus::ServerDied;
                    live.out.detail = Some(detail);
                    live.out.cells.extend(not_run(&block.cells[ci + 1..]));
                    break;
                }
            }
        }
    }
    Ok((live.finish(s).await?, summaries))
}

/// Starts one invocation: spawn (or check) the server, wait for health, write
/// `startup.json`, start sampling, warm up (`warmup.json`). A fault on the way is
/// recorded and returned as [`Started::Fault`].
pub(super) async fn start_unit(s: &Study<'_>, block: &ScheduledBlock, arm: &Arm) -> Result<Started, RunError> {
    let plan = &s.frozen.plan;
    let b = block.index;
    let label = format!("b{b} {}", arm.name);
    let dir = s.ev.unit_dir(b, &arm.name);
    s.ev.ensure_dir(&dir)?;
    let cmd = plan.arm_command(arm, b, &dir)?;
    let base = arm.base_url();
    let mut out = UnitOutcome::new(b, &arm.name, s.session);
    // Start and health.
    s.progress.status(&label, "starting server");
    let log = dir.join(SERVER_LOG_FILE);
    // Hashed before the spawn, so that it does not delay the first health poll.
    let program_sha256 = cmd.as_ref().and_then(|c| c.argv.first()).and_then(|p| program_sha256(p, s.base_dir));
    let mut startup = StartupRecord {
        role: arm.role.as_str().into(),
        url: base.clone(),
        argv: cmd.as_ref().map(|c| c.argv.clone()),
        env: cmd.as_ref().map(|c| c.env.clone()),
        program_sha256,
        cpus: arm.cpus.as_deref().map(crate::host::cpu_list),
        ..StartupRecord::new(b, &arm.name, if cmd.is_some() { "spawn" } else { "external" })
    };
    let mut server = Invocation::new(arm, cmd.clone(), log.clone(), s.clock)?;
    let spawned = server.spawn();
    startup.spawned_ns = server.startup().spawned_ns;
    match spawned {
        Ok(()) => {}
        Err(e) if e.is_arm_fault() => {
            startup.error = Some(e.to_string());
            write_json(&dir.join(STARTUP_FILE), &startup)?;
            return finish_fault(s, &dir, out, UnitStatus::StartFailed, e, not_run(&block.cells), None)
                .await
                .map(|o| Started::Fault(Box::new(o)));
        }
        Err(e) => return Err(e.into()),
    }
    startup.pid = server.pid();
    out.pid = startup.pid;
    match server.wait_healthy().await {
        Ok(()) => {
            let st = server.startup();
            startup.healthy_ns = st.healthy_ns;
            startup.health_polls = st.health_polls;
            startup.startup_s = st.startup_s;
            startup.ok = true;
        }
        Err(e) if e.is_arm_fault() => {
            startup.error = Some(e.to_string());
            startup.kv_inventory = kv_inventory(&log);
            write_json(&dir.join(STARTUP_FILE), &startup)?;
            return finish_fault(s, &dir, out, UnitStatus::StartFailed, e, not_run(&block.cells), Some(server))
                .await
                .map(|o| Started::Fault(Box::new(o)));
        }
        Err(e) => return Err(e.into()),
    }
    startup.kv_inventory = kv_inventory(&log);
    startup.cpus_allowed = startup.pid.and_then(crate::host::process_cpus);
    // Identity: what the server says it is, judged against the arm's claims before
    // any warmup or timing (its CPU set first: a server that left it runs elsewhere).
    let mut not_itself =
        crate::arm::identity::cpus_left(&arm.name, startup.cpus.as_deref(), startup.cpus_allowed.as_deref());
    match &arm.identity {
        Some(spec) => {
            s.progress.status(&label, "identity checks");
            let (seen, results) = server.check_identity(spec).await;
            let n = results.iter().filter(|r| !r.ok).count();
            if n > 0 && not_itself.is_none() {
                let failures = crate::arm::identity::failures(&results);
                not_itself = Some(ArmError::Identity { arm: arm.name.clone(), n, failures });
            }
            startup.identity = Some(seen);
            startup.identity_checks = Some(results);
        }
        None => startup.identity = Some(server.identity().await),
    }
    out.startup_s = startup.startup_s;
    write_json(&dir.join(STARTUP_FILE), &startup)?;
    if let Some(e) = not_itself {
        return finish_fault(s, &dir, out, UnitStatus::IdentityFailed, e, not_run(&block.cells), Some(server))
            .await
            .map(|o| Started::Fault(Box::new(o)));
    }

    // Sampling runs from here to the stop.
    server.start_sampling(dir.join(SCRAPES_FILE), dir.join(MEMORY_FILE), "warmup", s.nvidia_smi.clone())?;
    let request_timeout = Duration::from_secs_f64(plan.timing.request_timeout_s);

    // Warmup: one batched non-streaming call.
    if plan.warmup.prompts > 0 {
        s.progress.status(&label, "warmup");
    }
    if let Some(rec) = server.warm_up(plan, &s.inputs.panel).await {
        write_json(&dir.join(WARMUP_FILE), &rec)?;
        if !rec.ok {
            let e = ArmError::Warmup { detail: rec.detail.clone().unwrap_or_default() };
            return finish_fault(s, &dir, out, UnitStatus::WarmupFailed, e, not_run(&block.cells), Some(server))
                .await
                .map(|o| Started::Fault(Box::new(o)));
        }
    }

    let exit_rx = server.exit_watch();
    // Each cell sends to its own endpoint (`CellRun` sets the URL per cell).
    let urls = EndpointUrls { completions: server.completions_url(), chat: server.chat_url() };
    let ctx = RequestCtx {
        client: server.client().clone(),
        url: urls.of(plan.request.endpoint).to_string(),
        clock: s.clock,
        timeout: request_timeout,
        server_exit: exit_rx.clone(),
        drain_expired: watch::channel(false).1,
        forced_output: plan.request.forced(),
        light: false,
        source_clients: Default::default(),
    };
    let receipts = receipts_source(s, arm, cmd.and_then(|c| c.receipts));
    Ok(Started::Live(Box::new(Live { dir, out, server, ctx, urls, label, receipts, arm: arm.clone() })))
}

/// Records an arm fault: stops what was started and writes `arm_outcome.json`.
async fn finish_fault(
    s: &Study<'_>,
    dir: &Path,
    mut out: UnitOutcome,
    status: UnitStatus,
    e: ArmError,
    cells: Vec<CellOutcome>,
    server: Option<Invocation>,
) -> Result<UnitOutcome, RunError> {
    out.status = status;
    out.detail = Some(e.to_string());
    out.cells = cells;
    // One line on stdout; the whole cause (the server log's tail and its path) on stderr.
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    s.progress.println(&format!("b{} {}: {status}: {first}", out.block, out.arm));
    s.progress.eprintln(&format!("harness: b{} {}: {status}: {text}", out.block, out.arm));
    let arm = s.frozen.plan.arm(&out.arm).cloned();
    let receipts = arm.as_ref().and_then(|a| s.frozen.plan.arm_command(a, out.block, dir).ok().flatten()?.receipts);
    match arm {
        Some(arm) => stop_and_keep(s, dir, out, server, receipts, &arm).await,
        None => Ok(out),
    }
}

/// The file the arm's server writes its receipts to: the launched command's
/// (expanded), else an external server's fixed `receipts` path.
fn receipts_source(s: &Study<'_>, arm: &Arm, launched: Option<PathBuf>) -> Option<PathBuf> {
    launched.or_else(|| {
        arm.receipts.as_ref().filter(|r| crate::plan::placeholders_in(r).is_empty()).map(|r| s.base_dir.join(r))
    })
}

/// Stops the server, keeps its receipts as `receipts.jsonl`, writes `arm_outcome.json`.
async fn stop_and_keep(
    s: &Study<'_>,
    dir: &Path,
    mut out: UnitOutcome,
    server: Option<Invocation>,
    receipts: Option<PathBuf>,
    arm: &Arm,
) -> Result<UnitOutcome, RunError> {
    if let Some(server) = server {
        s.progress.status(&format!("b{} {}", out.block, out.arm), "stopping server");
        let stopped = server.stop().await?;
        out.scrapes = stopped.scrapes;
        out.memory_samples = stopped.memory_samples;
        if let (Some(info), UnitStatus::Completed) = (stopped.exited_before_stop, out.status) {
            out.status = UnitStatus::ServerDied;
            out.detail = Some(info.description);
        }
        out.stop = stopped.stop;
    }
    if let Some(src) = receipts_source(s, arm, receipts) {
        let dest = dir.join(RECEIPTS_FILE);
        out.receipts_source = Some(src.display().to_string());
        let same = std::fs::canonicalize(&src).ok().is_some_and(|a| std::fs::canonicalize(&dest).ok() == Some(a));
        out.receipts_kept = if same {
            dest.is_file()
        } else {
            match std::fs::read(&src) {
                Ok(bytes) => write_bytes(&dest, &bytes).map(|()| true)?,
                Err(_) => false,
            }
        };
    }
    write_json(&dir.join(ARM_OUTCOME_FILE), &out)?;
    Ok(out)
}
