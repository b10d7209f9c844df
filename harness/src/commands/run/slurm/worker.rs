//! `harness run --block K --study DIR --shared-root ROOT`: one array task, one
//! block. It checks that it can see the shared root and the study, that the plan,
//! the pilots' loads and the inputs are the ones the coordinator dispatched
//! (`slurm/dispatch.json`), and that the block holds no units yet; takes its CPUs,
//! GPUs and ports from Slurm's allocation (`resources`); claims a session number
//! (`slurm/sessions/<n>.json`, its record of the task); then runs every arm of the
//! block on this node exactly as a local run would (fresh servers, the block's
//! order, interleaved rounds, identity checks, completion records), and rewrites
//! its claim with how it ended. Writes nothing but its block's units, their cell
//! summaries and its claim. Must not touch another block or decide a resubmission.

use std::path::{Path, PathBuf};

use super::resources::{self, TaskIdentity};
use super::{SlurmError, dispatched_frozen};
use crate::commands::run::{Ledger, Progress, RunError, Study, interleave, unit};
use crate::evidence::{
    Evidence, SessionClaim, SessionRole, TaskOutcome, TaskPlacement, claim_session, files_under, git_info,
    read_dispatch, sha256_hex, unix_ms, write_claim,
};
use crate::load::StudyClock;
use crate::plan::{ScheduledBlock, Server};

/// What runs the worker of one block.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The evidence directory, as this node sees it.
    pub study: PathBuf,
    pub block: u32,
    /// The directory every node must see (the evidence directory lies under it).
    pub shared_root: PathBuf,
    pub quiet: bool,
    /// Where the plan's relative paths resolve (the task's working directory).
    pub base_dir: PathBuf,
}

/// How the block went.
#[derive(Debug, Clone)]
pub struct WorkerOutcome {
    pub block: u32,
    pub session: u32,
    pub hostname: String,
    pub units: usize,
    /// Why the block stopped the study (a failed identity check, an arm past its
    /// `max_start_failures`), as a local run would have; `None`: it finished.
    pub stopped: Option<String>,
}

/// The shared root and the study are visible here, and the study was dispatched.
fn check_visible(opts: &WorkerOptions, node: &str) -> Result<(), SlurmError> {
    let not_visible =
        |path: &Path, why: String| SlurmError::NotVisible { path: path.to_path_buf(), node: node.to_string(), why };
    match std::fs::metadata(&opts.shared_root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(not_visible(&opts.shared_root, "not a directory".into())),
        Err(e) => return Err(not_visible(&opts.shared_root, e.to_string())),
    }
    if !opts.study.starts_with(&opts.shared_root) {
        return Err(SlurmError::Worker {
            block: opts.block,
            why: format!(
                "the study {} is not under the shared root {}",
                opts.study.display(),
                opts.shared_root.display()
            ),
        });
    }
    for p in [
        opts.study.clone(),
        opts.study.join(crate::evidence::PLAN_FILE),
        opts.study.join(crate::evidence::DISPATCH_FILE),
    ] {
        if let Err(e) = std::fs::metadata(&p) {
            return Err(not_visible(&p, e.to_string()));
        }
    }
    Ok(())
}

/// Files the block already holds (its units' directories and cell summaries).
fn block_files(ev: &Evidence, block: &ScheduledBlock) -> Result<Vec<PathBuf>, RunError> {
    let mut out = Vec::new();
    for arm in &block.arms {
        let dir = ev.unit_dir(block.index, arm);
        if dir.exists() {
            out.extend(files_under(&dir)?);
        }
        out.extend(crate::commands::run::resume::summary_paths(ev, block, arm).into_iter().filter(|p| p.exists()));
    }
    Ok(out)
}

/// Runs the worker (see the module doc). `Err` before the claim: nothing was
/// written; after it, the claim says `failed` with the error.
pub fn run_worker(opts: &WorkerOptions) -> Result<WorkerOutcome, RunError> {
    let node = crate::host::hostname().unwrap_or_else(|| "unknown".into());
    check_visible(opts, &node)?;
    let task = TaskIdentity::from_env(opts.block)?;
    let ev = Evidence::open(&opts.study);
    let root = ev.root().to_path_buf();
    let dispatch = read_dispatch(&root)?.ok_or_else(|| SlurmError::Worker {
        block: opts.block,
        why: format!("{} has no {}", root.display(), crate::evidence::DISPATCH_FILE),
    })?;
    let frozen = dispatched_frozen(&root, &dispatch)?;
    let plan = &frozen.plan;
    let schedule = plan.schedule();
    let Some(block) = schedule.blocks.iter().find(|b| b.index == opts.block).cloned() else {
        return Err(SlurmError::Worker {
            block: opts.block,
            why: format!("the plan schedules blocks 0..{}", schedule.blocks.len()),
        }
        .into());
    };
    let catalog = std::fs::read(ev.root().join(crate::evidence::CATALOG_PATH))
        .map_err(|error| RunError::Io { path: ev.root().join(crate::evidence::CATALOG_PATH), error })?;
    if sha256_hex(&catalog) != dispatch.catalog_sha256 {
        return Err(SlurmError::Worker {
            block: opts.block,
            why: "inputs/catalog.json differs from the dispatch".into(),
        }
        .into());
    }
    let held = block_files(&ev, &block)?;
    if !held.is_empty() {
        let rel: Vec<String> =
            held.iter().take(3).map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string()).collect();
        return Err(SlurmError::BlockTaken { block: opts.block, files: held.len(), first: rel.join(", ") }.into());
    }
    crate::arm::check_api_keys(plan, |v| std::env::var(v).ok())?;
    let secrets = crate::arm::plan_secrets(plan, |v| std::env::var(v).ok());

    // This task's own ports, CPUs and GPUs.
    let mut plan = plan.clone();
    let mut ports = std::collections::BTreeMap::new();
    for arm in plan.arms.iter_mut() {
        let port = frozen.plan.dispatched_port(arm, block.index);
        if let (Server::Spawn { port: p, .. }, Some(new)) = (&mut arm.server, port) {
            *p = new;
            ports.insert(arm.name.clone(), new);
        }
    }
    let frozen = crate::plan::FrozenPlan { plan, ..frozen };
    // The machine as found, before the pin (as a local session records it).
    let host = crate::host::facts();
    let cpus = resources::take_cpus(&task, &node);
    let gpus = resources::gpus();
    let git = git_info(&opts.base_dir);

    let placement = TaskPlacement {
        block: block.index,
        session: 0,
        job_id: task.job_id.clone(),
        array_job_id: task.array_job_id.clone(),
        array_task: task.array_task,
        hostname: node.clone(),
        host: host.clone(),
        cpus: cpus.list.clone(),
        cpus_source: cpus.source.to_string(),
        gpus,
        ports,
        started_unix_ms: unix_ms(),
        finished_unix_ms: None,
        outcome: TaskOutcome::Running,
        detail: None,
        kept: false,
    };
    let make = |n: u32| SessionClaim {
        session: n,
        role: SessionRole::Worker,
        hostname: Some(node.clone()),
        pid: std::process::id(),
        claimed_unix_ms: unix_ms(),
        record: Some(crate::evidence::Session::start(n, false, git.clone(), vec![], host.clone(), None)),
        task: Some(TaskPlacement { session: n, ..placement.clone() }),
    };
    let session = claim_session(&root, 0, make)?;
    let (claim, _) = crate::evidence::read_claims(&root);
    let mut claim = claim.into_iter().find(|c| c.session == session).unwrap_or_else(|| make(session));
    let ports: Vec<String> = placement.ports.iter().map(|(arm, p)| format!("{arm} {p}")).collect();
    println!(
        "worker: block {} of study {} on {node} as session {session} (task {}, CPUs {} from {}, ports {})",
        block.index,
        frozen.plan.study.name,
        task.label(),
        cpus.list.as_deref().unwrap_or("unpinned"),
        cpus.source,
        ports.join(", ")
    );

    // The client's measurement floor on this node now, as every local session
    // measures it (replay wants one from each session that ran units).
    let floor_rate =
        frozen.plan.resolved_cells().map_or(crate::load::FLOOR_DEFAULT_RATE, |r| crate::load::planned_rate(&r));
    match crate::load::measure_floor(floor_rate) {
        Ok(floor) => {
            if let Some(r) = claim.record.as_mut() {
                r.measurement_floor = Some(floor);
            }
        }
        Err(e) => eprintln!("harness: worker: measurement floor: not measured: {e}"),
    }
    let result = run_block(&frozen, &ev, &block, session, opts, &secrets);
    let (outcome, detail, units_run) = match &result {
        Ok((None, units)) => (TaskOutcome::Finished, None, units.clone()),
        Ok((Some(stop), units)) => (TaskOutcome::Stopped, Some(stop.to_string()), units.clone()),
        Err(e @ RunError::Interrupted(_)) => (TaskOutcome::Interrupted, Some(e.to_string()), Vec::new()),
        Err(e) => (TaskOutcome::Failed, Some(e.to_string()), Vec::new()),
    };
    let now = unix_ms();
    if let Some(r) = claim.record.as_mut() {
        r.state = match outcome {
            TaskOutcome::Finished => crate::evidence::SessionState::Finished,
            TaskOutcome::Stopped => crate::evidence::SessionState::Stopped,
            _ => crate::evidence::SessionState::Interrupted,
        };
        r.finished_unix_ms = Some(now);
        r.units_run = units_run.clone();
    }
    if let Some(t) = claim.task.as_mut() {
        (t.outcome, t.finished_unix_ms, t.detail) = (outcome, Some(now), detail.clone());
    }
    write_claim(&root, &claim)?;
    let (stop, _) = result?;
    if let Some(stop) = &stop {
        eprintln!("harness: worker: block {}: {stop}", block.index);
    }
    Ok(WorkerOutcome {
        block: block.index,
        session,
        hostname: node,
        units: units_run.len(),
        stopped: stop.map(|e| e.to_string()),
    })
}

/// Every unit of `block` on this node, closed one by one; the units run and why
/// the block stopped the study, if it did.
fn run_block(
    frozen: &crate::plan::FrozenPlan,
    ev: &Evidence,
    block: &ScheduledBlock,
    session: u32,
    opts: &WorkerOptions,
    secrets: &crate::evidence::Secrets,
) -> Result<(Option<RunError>, Vec<String>), RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Runtime(e.to_string()))?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| RunError::Runtime(e.to_string()))?;
        tokio::select! {
            r = block_units(frozen, ev, block, session, opts, secrets) => r,
            _ = tokio::signal::ctrl_c() => Err(RunError::Interrupted(ev.root().to_path_buf())),
            _ = term.recv() => Err(RunError::Interrupted(ev.root().to_path_buf())),
        }
    })
}

async fn block_units(
    frozen: &crate::plan::FrozenPlan,
    ev: &Evidence,
    block: &ScheduledBlock,
    session: u32,
    opts: &WorkerOptions,
    secrets: &crate::evidence::Secrets,
) -> Result<(Option<RunError>, Vec<String>), RunError> {
    let plan = &frozen.plan;
    let resolved = plan.resolved_cells()?;
    let inputs = crate::inputs::load(plan, &ev.inputs_dir())?;
    let total: u64 = block
        .cells
        .iter()
        .filter_map(|c| resolved.iter().find(|r| &r.name == c))
        .map(|c| inputs.planned_records(&c.name).unwrap_or(c.count) * block.arms.len() as u64)
        .sum();
    let progress = Progress::new(opts.quiet, total, None);
    let study = Study {
        frozen,
        resolved: &resolved,
        ev,
        clock: StudyClock::start(),
        session,
        inputs: &inputs,
        progress: &progress,
        base_dir: &opts.base_dir,
        nvidia_smi: crate::arm::find_nvidia_smi(),
    };
    let mut ledger = Ledger {
        sessions: Vec::new(),
        units: Vec::new(),
        summaries: Vec::new(),
        verified_units: 0,
        start_failures: std::collections::BTreeMap::new(),
    };
    let mut done = 0u64;
    let mut units_run = Vec::new();
    // As a local run closes them: each unit as it ends (an interleaved block's
    // together, in arm order); a unit that stops the study stops the block.
    let interleaved = plan.blocks.rounds > 0;
    for name in &block.arms {
        let ran = if interleaved {
            let arms: Vec<&crate::plan::Arm> = block.arms.iter().filter_map(|n| plan.arm(n)).collect();
            interleave::run_block(&study, block, &arms, &mut done).await?
        } else {
            let Some(arm) = plan.arm(name) else { continue };
            vec![unit::run_unit(&study, block, arm, &mut done).await?]
        };
        for u in ran {
            let Some(arm) = plan.arm(&u.0.arm) else { continue };
            units_run.push(crate::evidence::unit_name(block.index, &arm.name));
            if let Some(stop) = ledger.close_unit(ev, block, session, arm, u, secrets)? {
                progress.finish();
                return Ok((Some(stop), units_run));
            }
        }
        if interleaved {
            break;
        }
    }
    progress.finish();
    Ok((None, units_run))
}
