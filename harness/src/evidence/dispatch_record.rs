//! The records of a study whose blocks ran as Slurm array tasks (DESIGN section 3,
//! "Blocks on a cluster"): under `slurm/`, the frozen dispatch (`dispatch.json`,
//! what every worker checks before it runs), the batch script, one record per
//! `sbatch` (`submissions/<n>.json`), one per claimed session (`sessions/<n>.json`:
//! the coordinator's and each worker's, a worker's with its task and what it was
//! given) and Slurm's own log of each task (`logs/`); in `run.json`, the
//! `executor` field ([`ExecutorRecord`]): per block the task whose units are its
//! evidence (job, array task, node, host facts, CPUs, GPUs, ports, start, end),
//! earlier attempts, and what Slurm said of tasks that failed.
//!
//! Sessions are numbered by claims: [`claim_session`] links a complete record to
//! `sessions/<n>.json` with the first free `n` (a hard link fails when the name is
//! taken, also on NFS), so workers starting at once on many nodes, and a resumed
//! coordinator, never share a number and every number has its record.
//!
//! Owns these files' names, formats and the claim. Must not decide what to submit,
//! resubmit or keep (`commands::run::slurm` does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{EvidenceError, Session, io_err, write_json};
use crate::host::HostFacts;

/// The directory of a dispatched study's Slurm records.
pub const SLURM_DIR: &str = "slurm";
/// The frozen dispatch, written before the first `sbatch`.
pub const DISPATCH_FILE: &str = "slurm/dispatch.json";
/// The batch script every submission runs (readable, and `sbatch`-able by hand).
pub const SBATCH_FILE: &str = "slurm/blocks.sbatch";
pub const SUBMISSIONS_DIR: &str = "slurm/submissions";
pub const SESSIONS_DIR: &str = "slurm/sessions";
/// Slurm's stdout and stderr of each task: `b<block>.j<array job>.log`.
pub const LOGS_DIR: &str = "slurm/logs";
/// One record per task that ended without its block (`<n>.json`, in order seen).
pub const FAILURES_DIR: &str = "slurm/failures";
pub const DISPATCH_FORMAT: &str = "harness-dispatch/1";

/// `slurm/dispatch.json`: what the blocks were dispatched with. A worker refuses to
/// run unless the plan, the pilots' loads and the inputs are these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchRecord {
    pub format: String,
    pub study: String,
    pub plan_sha256: String,
    /// SHA-256 of `pilots/derived.json` (a plan with `[pilots]`).
    pub derived_sha256: Option<String>,
    /// SHA-256 of `inputs/catalog.json`.
    pub catalog_sha256: String,
    /// The array's `--job-name`: every task of this study carries it.
    pub job_name: String,
    /// Absolute paths as the coordinator saw them (every node must see the same).
    pub shared_root: String,
    pub study_dir: String,
    pub working_dir: String,
    /// The harness executable the tasks run.
    pub harness: String,
    pub ports_per_task: u16,
    /// Every scheduled block, confirmation then descriptive.
    pub blocks: Vec<u32>,
    pub script_sha256: String,
    pub created_unix_ms: u64,
}

/// `slurm/submissions/<n>.json`: one `sbatch --array`, written before it is run and
/// again with the job id Slurm gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmissionRecord {
    pub submission: u32,
    /// The coordinator session that submitted it.
    pub session: u32,
    pub blocks: Vec<u32>,
    /// The `--array` value (`0-3%2`, `1,3`).
    pub array: String,
    /// The whole command.
    pub argv: Vec<String>,
    /// The array's job id; `None` until `sbatch` answered.
    pub job_id: Option<String>,
    pub submitted_unix_ms: u64,
}

/// Who claimed a session number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionRole {
    /// `harness run --executor slurm` (the first or a `--resume`).
    Coordinator,
    /// `harness run --block K` in an array task.
    Worker,
}

/// How a worker's task ended, as far as the evidence knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    /// Working (or killed while it worked, until the coordinator says so).
    Running,
    /// Every unit of its block closed.
    Finished,
    /// It stopped the study as a local run would (a failed identity check, an
    /// arm's `max_start_failures`).
    Stopped,
    /// It ended with an error of its own (its record says which).
    Failed,
    /// It ended without a final record: killed, timed out, preempted, its node
    /// lost (the coordinator records what Slurm said).
    Interrupted,
}

impl TaskOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Running => "running",
            TaskOutcome::Finished => "finished",
            TaskOutcome::Stopped => "stopped",
            TaskOutcome::Failed => "failed",
            TaskOutcome::Interrupted => "interrupted",
        }
    }
}

/// The GPUs a task was given, as Slurm and the node said.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// `SLURM_JOB_GPUS` (the allocation's GPU indexes on the node).
    pub slurm_job_gpus: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` as the task (and so its servers) saw it.
    pub cuda_visible_devices: Option<String>,
    /// `nvidia-smi -L` of the task: one line per GPU it can see; empty without one.
    pub devices: Vec<String>,
}

/// One block's run on one node (a worker session): `run.json` `executor.tasks[]`
/// and its worker's `slurm/sessions/<n>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPlacement {
    pub block: u32,
    /// The worker's session (its units' `unit.json` name it).
    pub session: u32,
    /// `SLURM_JOB_ID`, and the array's `SLURM_ARRAY_JOB_ID` / `SLURM_ARRAY_TASK_ID`.
    pub job_id: String,
    pub array_job_id: String,
    pub array_task: u32,
    /// `SLURMD_NODENAME` (else the kernel's host name): the machine.
    pub hostname: String,
    pub host: HostFacts,
    /// The CPUs the task ran on (its servers inherit them) and where that list came
    /// from (`affinity`: Slurm had bound the task; `scontrol`: the allocation's
    /// `CPU_IDs`, applied by the worker; `none`: unknown, unpinned).
    pub cpus: Option<String>,
    pub cpus_source: String,
    pub gpus: GpuFacts,
    /// Each spawned arm's port in this block.
    pub ports: BTreeMap<String, u16>,
    pub started_unix_ms: u64,
    pub finished_unix_ms: Option<u64>,
    pub outcome: TaskOutcome,
    pub detail: Option<String>,
    /// Whether this task's units are the block's evidence (false: a failed attempt,
    /// its files moved to `discarded/` and the block run again).
    #[serde(default)]
    pub kept: bool,
}

/// `slurm/sessions/<n>.json`: a claimed session number and whose it is. A worker
/// rewrites its claim when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionClaim {
    pub session: u32,
    pub role: SessionRole,
    pub hostname: Option<String>,
    pub pid: u32,
    pub claimed_unix_ms: u64,
    /// A worker's session as `run.json` will record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<Session>,
    /// A worker's task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskPlacement>,
}

/// A task that ended without its block (what Slurm and the task's log said).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFailure {
    pub block: u32,
    /// `<array job>_<task>`.
    pub job: String,
    /// Slurm's state (`FAILED`, `TIMEOUT`, `PREEMPTED`, `NODE_FAIL`, `CANCELLED`,
    /// ...) or `UNKNOWN` once Slurm has forgotten the task.
    pub state: String,
    pub reason: Option<String>,
    pub exit_code: Option<String>,
    pub node: Option<String>,
    /// The worker's session when it had claimed one.
    pub session: Option<u32>,
    pub detail: String,
    /// Submitted again after it (false: the study stopped).
    pub resubmitted: bool,
}

/// `run.json` `executor`: where a dispatched study's blocks ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorRecord {
    /// `slurm`.
    pub kind: String,
    pub job_name: String,
    /// The batch script, relative to the evidence root.
    pub script: String,
    pub submissions: Vec<SubmissionRecord>,
    /// Every worker session, in session order (the kept one of each block and
    /// every earlier attempt).
    pub tasks: Vec<TaskPlacement>,
    pub failures: Vec<TaskFailure>,
}

impl ExecutorRecord {
    /// The task whose units are block `block`'s evidence.
    pub fn kept(&self, block: u32) -> Option<&TaskPlacement> {
        self.tasks.iter().find(|t| t.block == block && t.kept)
    }

    /// The machine (host name) that ran each block's kept units.
    pub fn machine_of_blocks(&self) -> BTreeMap<u32, String> {
        self.tasks.iter().filter(|t| t.kept).map(|t| (t.block, t.hostname.clone())).collect()
    }

    /// The machines that ran kept blocks, sorted.
    pub fn machines(&self) -> Vec<String> {
        let mut m: Vec<String> = self.machine_of_blocks().into_values().collect();
        m.sort();
        m.dedup();
        m
    }

    /// Whether session `n` was a worker's.
    pub fn is_worker(&self, session: u32) -> bool {
        self.tasks.iter().any(|t| t.session == session)
    }
}

/// `slurm/sessions/<n>.json` under `root`.
pub fn claim_path(root: &Path, session: u32) -> PathBuf {
    root.join(SESSIONS_DIR).join(format!("{session}.json"))
}

/// Slurm's log of one task, `slurm/logs/b<block>.j<array job>.log` under `root`.
pub fn task_log_path(root: &Path, block: u32, job: &str) -> PathBuf {
    root.join(LOGS_DIR).join(format!("b{block}.j{job}.log"))
}

/// [`task_log_path`] as the batch script asks Slurm for it (`%a`: the array index,
/// the block; `%A`: the array job), relative to the evidence root.
pub fn task_log_pattern() -> String {
    format!("{LOGS_DIR}/b%a.j%A.log")
}

/// `slurm/submissions/<n>.json` under `root`.
pub fn submission_path(root: &Path, n: u32) -> PathBuf {
    root.join(SUBMISSIONS_DIR).join(format!("{n}.json"))
}

/// Claims the first free session number from `from` up: the record `make(n)` is
/// written whole under a name of this process's own, then hard-linked to
/// `sessions/<n>.json` (which fails when another process holds `n`).
pub fn claim_session(root: &Path, from: u32, make: impl Fn(u32) -> SessionClaim) -> Result<u32, EvidenceError> {
    let dir = root.join(SESSIONS_DIR);
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let host = crate::host::hostname().unwrap_or_default();
    // A name of this process and thread alone: claimants never share a temporary.
    let thread: String = format!("{:?}", std::thread::current().id()).chars().filter(char::is_ascii_digit).collect();
    let tmp = dir.join(format!(".claim-{host}-{}-{thread}.tmp", std::process::id()));
    let mut n = from;
    loop {
        let mut text = serde_json::to_string_pretty(&make(n))
            .map_err(|e| EvidenceError::Json { what: tmp.display().to_string(), message: e.to_string() })?;
        text.push('\n');
        super::write_atomic(&tmp, text.as_bytes()).map_err(io_err(&tmp))?;
        let path = claim_path(root, n);
        match std::fs::hard_link(&tmp, &path) {
            Ok(()) => {
                std::fs::remove_file(&tmp).map_err(io_err(&tmp))?;
                super::sync_parent(&path).map_err(io_err(&path))?;
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(EvidenceError::Io { path, error: e });
            }
        }
    }
}

/// Rewrites a claim (atomically).
pub fn write_claim(root: &Path, claim: &SessionClaim) -> Result<(), EvidenceError> {
    write_json(&claim_path(root, claim.session), claim)
}

/// Every readable claim under `root`, by session number; unreadable ones are
/// returned as `(n, why)`.
pub fn read_claims(root: &Path) -> (Vec<SessionClaim>, Vec<(String, String)>) {
    let dir = root.join(SESSIONS_DIR);
    let mut claims = Vec::new();
    let mut bad = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return (claims, bad) };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".json").filter(|s| s.parse::<u32>().is_ok()) else { continue };
        let path = e.path();
        match super::read_input(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<SessionClaim>(&b).map_err(|e| e.to_string()))
        {
            Ok(c) if c.session.to_string() == stem => claims.push(c),
            Ok(c) => bad.push((name, format!("names session {}", c.session))),
            Err(why) => bad.push((name, why)),
        }
    }
    claims.sort_by_key(|c| c.session);
    (claims, bad)
}

/// Every submission record under `root`, in order.
pub fn read_submissions(root: &Path) -> Result<Vec<SubmissionRecord>, EvidenceError> {
    let dir = root.join(SUBMISSIONS_DIR);
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(out) };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.strip_suffix(".json").is_none_or(|s| s.parse::<u32>().is_err()) {
            continue;
        }
        let path = e.path();
        let bytes = super::read_input(&path)
            .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
        let rec: SubmissionRecord = serde_json::from_slice(&bytes)
            .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
        out.push(rec);
    }
    out.sort_by_key(|s| s.submission);
    Ok(out)
}

/// Records a task that ended without its block as `slurm/failures/<n>.json`, `n`
/// counting on from those there.
pub fn write_failure(root: &Path, f: &TaskFailure) -> Result<(), EvidenceError> {
    let n = read_failures(root)?.len();
    write_json(&root.join(FAILURES_DIR).join(format!("{n}.json")), f)
}

/// Every failure recorded under `root`, in the order seen.
pub fn read_failures(root: &Path) -> Result<Vec<TaskFailure>, EvidenceError> {
    let dir = root.join(FAILURES_DIR);
    let mut out: Vec<(u32, TaskFailure)> = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(Vec::new()) };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(n) = name.strip_suffix(".json").and_then(|s| s.parse::<u32>().ok()) else { continue };
        let path = e.path();
        let bytes = super::read_input(&path)
            .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
        let f = serde_json::from_slice(&bytes)
            .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
        out.push((n, f));
    }
    out.sort_by_key(|(n, _)| *n);
    Ok(out.into_iter().map(|(_, f)| f).collect())
}

/// Reads `slurm/dispatch.json`; `None` when the study was never dispatched.
pub fn read_dispatch(root: &Path) -> Result<Option<DispatchRecord>, EvidenceError> {
    let path = root.join(DISPATCH_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = super::read_input(&path)
        .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(n: u32) -> SessionClaim {
        SessionClaim {
            session: n,
            role: SessionRole::Worker,
            hostname: Some("node1".into()),
            pid: 7,
            claimed_unix_ms: 1,
            record: None,
            task: None,
        }
    }

    #[test]
    fn claims_take_the_first_free_number_and_never_share_one() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        assert_eq!(claim_session(root, 0, claim).unwrap(), 0);
        assert_eq!(claim_session(root, 0, claim).unwrap(), 1);
        assert_eq!(claim_session(root, 5, claim).unwrap(), 5);
        assert_eq!(claim_session(root, 1, claim).unwrap(), 2);
        // Many claimants at once: every number once.
        let taken: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| claim_session(root, 0, claim).unwrap())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = taken.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "{taken:?}");
        let (claims, bad) = read_claims(root);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(claims.len(), 12);
        assert!(claims.windows(2).all(|w| w[0].session < w[1].session));
        let leftovers: Vec<_> = std::fs::read_dir(root.join(SESSIONS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
