//! The slurm executor (DESIGN section 3, "Blocks on a cluster"): a study's blocks
//! as the tasks of one `sbatch --array`, one block per task with all of its arms on
//! the task's node, merged into one evidence directory and one report.
//!
//! - `preflight`: before anything is written, Slurm's commands on PATH, a
//!   controller that answers, the evidence directory under `executor.shared_root`,
//!   and `sbatch --test-only` of the real script (Slurm's own refusal of a
//!   partition, account or GRES, exit 2);
//! - `coordinator`: after the pilots and the qualification, freezes the dispatch
//!   (`slurm/dispatch.json`, `slurm/blocks.sbatch`), submits, follows the tasks
//!   with `squeue` (and `scontrol`/`sacct` once they end), resubmits a failed one up
//!   to `executor.max_resubmits` (its partial units moved to `discarded/` first),
//!   stops at `executor.start_timeout_s` in the queue, and when every block is whole
//!   merges the workers' sessions and tasks into `run.json` (`executor`);
//! - `worker`: `harness run --block K`, one task;
//! - `resources`: a task's CPUs, GPUs and identity from its allocation; `script`:
//!   the batch script and the array's name; `cli`: Slurm's commands.
//!
//! Owns `SlurmError` and the dispatched study's frozen plan. Must not read a
//! setting from anywhere but the frozen plan (and Slurm's own environment in a
//! task), and must not run a block twice: a block is submitted only when no task
//! of it is queued or running and its earlier files were moved aside.

pub mod cli;
mod coordinator;
mod resources;
pub mod script;
mod worker;

use std::path::{Path, PathBuf};

pub use coordinator::{Coordinator, claim, merge_sessions, run_blocks};
pub use worker::{WorkerOptions, WorkerOutcome, run_worker};

use super::RunError;
use crate::evidence::{DispatchRecord, PLAN_FILE, RAW_DIR, sha256_hex};
use crate::plan::{Executor, FrozenPlan};

/// What stops a dispatched study, or one of its tasks.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(
        "the slurm executor needs Slurm's `{command}` on PATH, and it is not there: install Slurm's client commands \
         (Debian: slurm-client), or start a local cluster with scripts/slurm-local start"
    )]
    Missing { command: String },
    #[error(
        "SLURM_CONF names {path}, which does not exist: point it at the cluster's slurm.conf (scripts/slurm-local \
         start prints the one of the local cluster)"
    )]
    NoConf { path: PathBuf },
    #[error(
        "no Slurm cluster answers (`scontrol ping`: {said}): start one (scripts/slurm-local start) or set SLURM_CONF \
         to a cluster's slurm.conf"
    )]
    NoCluster { said: String },
    #[error("Slurm refused the study's batch script: {message}")]
    Refused { message: String },
    #[error("executor.shared_root: {why}")]
    SharedRoot { why: String },
    #[error("{command}: {why}")]
    Call { command: String, why: String },
    #[error(
        "{path} is not visible on node {node} ({why}): the shared root must be mounted at the same path on every node"
    )]
    NotVisible { path: PathBuf, node: String, why: String },
    #[error("worker of block {block}: {why}")]
    Worker { block: u32, why: String },
    #[error(
        "block {block} already holds {files} file(s) ({first}, ...): a task runs only a block that holds none (the \
         coordinator moves a failed attempt's files to discarded/ before resubmitting it)"
    )]
    BlockTaken { block: u32, files: usize, first: String },
    #[error(
        "block {block}'s task {job} waited {waited_s:.0} s in the queue without starting (Slurm's reason: {reason}), \
         past executor.start_timeout_s = {limit_s} s: the study stopped and its tasks were cancelled; the evidence \
         directory {dir} is incomplete and has no manifest: continue it with `harness run PLAN --resume {dir}` when \
         the partition has room"
    )]
    StartTimeout { block: u32, job: String, waited_s: f64, limit_s: f64, reason: String, dir: PathBuf },
    #[error(
        "block {block} failed {attempts} time(s) (executor.max_resubmits is {max}), so the study stopped and its \
         tasks were cancelled; the last failure: {last}\nthe evidence directory {dir} is incomplete and has no \
         manifest: fix the cause, then continue it with `harness run PLAN --resume {dir}`"
    )]
    BlockFailed { block: u32, attempts: u32, max: u32, last: String, dir: PathBuf },
    #[error(
        "the queue cannot be read ({why}) for {secs} s: the study's tasks are left as they are; continue with `harness run PLAN --resume {dir}`"
    )]
    QueueLost { why: String, secs: u64, dir: PathBuf },
}

impl crate::BadInput for SlurmError {
    /// What the plan or the cluster's setup gets wrong (exit 2): Slurm missing,
    /// refusing the script, a shared root no node sees, a task that never starts or
    /// keeps failing; not a command that could not run.
    fn is_bad_input(&self) -> bool {
        !matches!(self, SlurmError::Call { .. } | SlurmError::QueueLost { .. })
    }
}

impl From<SlurmError> for RunError {
    fn from(e: SlurmError) -> RunError {
        RunError::Slurm(Box::new(e))
    }
}

/// The shared root as an absolute path (relative: against `base`), which must be
/// an existing directory holding `study_dir`.
pub fn shared_root(exec: &Executor, base: &Path, study_dir: &Path) -> Result<PathBuf, SlurmError> {
    let given = exec.shared_root.clone().unwrap_or_else(|| PathBuf::from("."));
    let path = if given.is_absolute() { given.clone() } else { base.join(&given) };
    let root = std::fs::canonicalize(&path)
        .map_err(|e| SlurmError::SharedRoot { why: format!("{}: {e}", given.display()) })?;
    if !root.is_dir() {
        return Err(SlurmError::SharedRoot { why: format!("{} is not a directory", root.display()) });
    }
    if !study_dir.starts_with(&root) {
        return Err(SlurmError::SharedRoot {
            why: format!(
                "the evidence directory {} is not under the shared root {} (the directory every node sees): set \
                 executor.shared_root, or --out a directory under it",
                study_dir.display(),
                root.display()
            ),
        });
    }
    Ok(root)
}

/// `dir` made absolute without creating it: its nearest existing ancestor
/// canonicalized, the rest appended.
pub fn absolute(dir: &Path, base: &Path) -> PathBuf {
    let full = if dir.is_absolute() { dir.to_path_buf() } else { base.join(dir) };
    let mut head = full.clone();
    let mut tail = Vec::new();
    while !head.exists() {
        match (head.file_name().map(|n| n.to_os_string()), head.parent()) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                head = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut out = std::fs::canonicalize(&head).unwrap_or(head);
    for name in tail.into_iter().rev() {
        out.push(name);
    }
    out
}

/// Everything checked before a dispatched study writes anything: Slurm's commands,
/// a cluster, the shared root, and Slurm's verdict on the script. Returns the
/// shared root.
pub async fn preflight(frozen: &FrozenPlan, study_dir: &Path, base: &Path) -> Result<PathBuf, RunError> {
    let plan = &frozen.plan;
    let issues = plan.dispatch_problems();
    if !issues.is_empty() {
        return Err(RunError::input(crate::plan::PlanError::Invalid(issues)));
    }
    for command in cli::COMMANDS {
        if !cli::on_path(command) {
            return Err(SlurmError::Missing { command: command.into() }.into());
        }
    }
    if let Some(conf) = std::env::var_os("SLURM_CONF").map(PathBuf::from)
        && !conf.is_file()
    {
        return Err(SlurmError::NoConf { path: conf }.into());
    }
    cli::ping().await.map_err(|said| SlurmError::NoCluster { said })?;
    let root = shared_root(&plan.executor, base, study_dir)?;
    let harness = std::env::current_exe().map_err(|error| RunError::Io { path: "harness".into(), error })?;
    let job_name = script::job_name(&plan.study.name, study_dir);
    let paths = script::ScriptPaths {
        study_dir,
        shared_root: &root,
        working_dir: &absolute(base, Path::new("/")),
        harness: &harness,
        job_name: &job_name,
    };
    let text = script::render(plan, &frozen.sha256, &paths);
    let blocks: Vec<u32> = plan.schedule().blocks.iter().map(|b| b.index).collect();
    cli::test_only(&text, &script::array_spec(&blocks, plan.executor.max_parallel))
        .await
        .map_err(|message| SlurmError::Refused { message })?;
    Ok(root)
}

/// The plan a dispatched study's blocks run: the frozen `plan.toml`, checked
/// against the dispatch, with the pilots' derived loads (`pilots/derived.json`,
/// checked against the dispatch) when the plan has `[pilots]`.
pub fn dispatched_frozen(root: &Path, d: &DispatchRecord) -> Result<FrozenPlan, RunError> {
    let frozen = crate::plan::freeze_file(&root.join(PLAN_FILE))?;
    let mismatch = |what: &str| SlurmError::Worker {
        block: u32::MAX,
        why: format!("{what} differs from the one dispatched ({})", crate::evidence::DISPATCH_FILE),
    };
    if frozen.sha256 != d.plan_sha256 {
        return Err(mismatch(PLAN_FILE).into());
    }
    if frozen.plan.pilots.is_none() {
        return Ok(frozen);
    }
    let path = root.join(crate::evidence::DERIVED_PATH);
    let bytes = std::fs::read(&path).map_err(|error| RunError::Io { path: path.clone(), error })?;
    if Some(sha256_hex(&bytes)) != d.derived_sha256 {
        return Err(mismatch(crate::evidence::DERIVED_PATH).into());
    }
    let rec = crate::evidence::read_pilots_record(root).map_err(|why| SlurmError::Worker { block: u32::MAX, why })?;
    let (plan, _) = frozen.plan.with_pilot_rates(&rec.pilot_rates)?;
    Ok(FrozenPlan { plan, ..frozen })
}

/// `scancel` of every task named `job_name`, waiting for the queue to empty (Ctrl-C
/// or SIGTERM of the coordinator); what happened, in words.
pub async fn cancel_all(job_name: &str) -> String {
    coordinator::cancel(job_name).await
}

/// A study continues with the executor it started with: a dispatched one
/// (`slurm/dispatch.json`) only as a dispatched one, and one whose blocks began
/// here only here.
pub fn check_resume_executor(ev: &crate::evidence::Evidence, dispatch: bool, resumed: bool) -> Result<(), RunError> {
    let root = ev.root();
    let dispatched = root.join(crate::evidence::DISPATCH_FILE).is_file();
    if dispatched && !dispatch {
        return Err(RunError::Resume {
            dir: root.to_path_buf(),
            why: format!(
                "its blocks were dispatched to Slurm ({}): continue it with --executor slurm",
                crate::evidence::DISPATCH_FILE
            ),
        });
    }
    let began_here = resumed
        && !dispatched
        && crate::evidence::files_under(&root.join(RAW_DIR))
            .is_ok_and(|f| f.iter().any(|p| p.ends_with(crate::evidence::UNIT_FILE)));
    if dispatch && began_here {
        return Err(RunError::Resume {
            dir: root.to_path_buf(),
            why: "its blocks began on this machine: continue it with the local executor (blocks of one study run \
                  either here or as Slurm tasks)"
                .into(),
        });
    }
    Ok(())
}
