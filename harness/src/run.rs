//! `harness run PLAN`: one study from a frozen plan. Freezes the plan into the
//! evidence directory first, writes and re-reads the inputs, then for each block and
//! each arm in the block's counterbalanced order runs one server invocation
//! (`unit`), and finally writes `results/summaries.json`, `run.json`, the report
//! (`report::build`: matrix, evidence.json, figures, report.md) and the manifest.
//! Owns the orchestration and `RunError`. Must not read a setting from anywhere but
//! the frozen plan (CLI options only choose where evidence goes and how progress is
//! shown) and must not retry anything.

mod cell;
mod inputs;
mod progress;
mod unit;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::arm::{ArmError, find_nvidia_smi};
use crate::evidence::{self, Evidence, EvidenceError, git_info, write_json, write_manifest};
use crate::load::{LoadError, SPIN_NS, StudyClock};
use crate::plan::{FrozenPlan, PlanError, ResolvedCell, freeze_file};
use crate::trace::TraceError;

pub use cell::CellOutcome;
pub use inputs::{Inputs, TokenizerEncoder, prepare as prepare_inputs};
pub use progress::Progress;
pub use unit::UnitOutcome;

/// How long a server gets to exit after SIGTERM before SIGKILL.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: PathBuf,
    /// Evidence directory; default `reports/<study>` under `base_dir`.
    pub out: Option<PathBuf>,
    /// Replace an earlier evidence directory at `out`.
    pub force: bool,
    /// No bars: one line per cell.
    pub quiet: bool,
    /// Where the plan's relative paths resolve (the working directory).
    pub base_dir: PathBuf,
    pub stop_grace: Duration,
}

impl RunOptions {
    pub fn new(plan: PathBuf) -> RunOptions {
        RunOptions {
            plan,
            out: None,
            force: false,
            quiet: false,
            base_dir: PathBuf::from("."),
            stop_grace: DEFAULT_STOP_GRACE,
        }
    }
}

/// Everything that stops a study (arm faults do not: they are evidence).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    #[error(transparent)]
    Arm(#[from] ArmError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
    #[error("interrupted (Ctrl-C): the evidence directory {0} is incomplete and has no manifest")]
    Interrupted(PathBuf),
}

/// The result of a study that ran to its end.
#[derive(Debug, Clone)]
pub struct StudyOutcome {
    pub dir: PathBuf,
    pub units: Vec<UnitOutcome>,
    pub manifest_files: usize,
    /// The analysis (`results/` report files), or why it could not be built; the
    /// evidence and its manifest are complete either way.
    pub report: Result<crate::report::ReportOutcome, String>,
}

impl StudyOutcome {
    /// Server invocations that did not complete every cell.
    pub fn faults(&self) -> Vec<&UnitOutcome> {
        self.units.iter().filter(|u| u.status != "completed").collect()
    }

    pub fn failed_requests(&self) -> u64 {
        self.units.iter().flat_map(|u| &u.cells).map(|c| c.failed).sum()
    }
}

/// Shared, read-only state of one study.
pub(crate) struct Study<'a> {
    pub frozen: &'a FrozenPlan,
    pub resolved: &'a [ResolvedCell],
    pub ev: &'a Evidence,
    pub clock: StudyClock,
    pub inputs: &'a Inputs,
    pub progress: &'a Progress,
    pub base_dir: &'a Path,
    pub stop_grace: Duration,
    pub nvidia_smi: Option<PathBuf>,
}

#[derive(Serialize)]
struct RunRecord<'a> {
    format: &'static str,
    study: &'a str,
    plan_sha256: &'a str,
    harness_version: &'static str,
    git: &'a evidence::GitInfo,
    started_unix_ms: u128,
    finished_unix_ms: u128,
    clock: &'static str,
    dispatch_spin_ns: u64,
    stop_grace_s: f64,
    nvidia_smi: Option<String>,
    /// SHA-256 of the request body sent for each panel prompt (same for every arm).
    request_body_sha256: &'a [String],
    units: Vec<serde_json::Value>,
}

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// Runs a study on a new multi-threaded tokio runtime; Ctrl-C stops it (servers are
/// killed, the evidence stays incomplete and unmanifested).
pub fn run(opts: &RunOptions) -> Result<StudyOutcome, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Runtime(e.to_string()))?;
    rt.block_on(async {
        let dir = std::cell::RefCell::new(PathBuf::new());
        tokio::select! {
            r = run_study(opts, &dir) => r,
            _ = tokio::signal::ctrl_c() => Err(RunError::Interrupted(dir.borrow().clone())),
        }
    })
}

/// The study itself. `dir_out` receives the evidence directory as soon as it is known.
pub async fn run_study(opts: &RunOptions, dir_out: &std::cell::RefCell<PathBuf>) -> Result<StudyOutcome, RunError> {
    let frozen = freeze_file(&opts.plan)?;
    let plan = &frozen.plan;
    plan.require_derived()?;
    let resolved = plan.resolved_cells()?;
    let git = git_info(&opts.base_dir);
    let dir = opts.out.clone().unwrap_or_else(|| opts.base_dir.join("reports").join(&plan.study.name));
    let ev = Evidence::create(&dir, opts.force)?;
    *dir_out.borrow_mut() = ev.root().to_path_buf();
    // The plan's exact bytes go in first.
    evidence::write_bytes(&ev.plan_path(), &frozen.bytes)?;
    let started_unix_ms = unix_ms();
    let clock = StudyClock::start();
    let inputs = inputs::prepare(plan, &frozen.sha256, &opts.base_dir, &ev.inputs_dir())?;

    let schedule = plan.schedule();
    let count_of = |name: &str| resolved.iter().find(|c| c.name == name);
    let mut total = 0u64;
    let mut expected = Some(0.0);
    for b in &schedule.blocks {
        for c in b.cells.iter().filter_map(|c| count_of(c)) {
            total += c.count * b.arms.len() as u64;
            expected = expected.zip(plan.cell_estimate_s(c)).map(|(e, s)| e + s * b.arms.len() as f64);
        }
    }
    let progress = Progress::new(opts.quiet, total, expected);
    let study = Study {
        frozen: &frozen,
        resolved: &resolved,
        ev: &ev,
        clock,
        inputs: &inputs,
        progress: &progress,
        base_dir: &opts.base_dir,
        stop_grace: opts.stop_grace,
        nvidia_smi: find_nvidia_smi(),
    };
    let mut units = Vec::new();
    let mut summaries = Vec::new();
    let mut done = 0u64;
    for block in &schedule.blocks {
        for arm_name in &block.arms {
            let Some(arm) = plan.arm(arm_name) else { continue };
            let (unit, cell_summaries) = unit::run_unit(&study, block, arm, &mut done).await?;
            summaries.extend(cell_summaries);
            units.push(unit);
        }
    }
    progress.finish();
    write_json(&ev.results_dir().join("summaries.json"), &summaries)?;
    let record = RunRecord {
        format: "harness-run/1",
        study: &plan.study.name,
        plan_sha256: &frozen.sha256,
        harness_version: env!("CARGO_PKG_VERSION"),
        git: &git,
        started_unix_ms,
        finished_unix_ms: unix_ms(),
        clock: "nanoseconds since study start on one monotonic clock (std::time::Instant)",
        dispatch_spin_ns: SPIN_NS,
        stop_grace_s: opts.stop_grace.as_secs_f64(),
        nvidia_smi: study.nvidia_smi.as_ref().map(|p| p.display().to_string()),
        request_body_sha256: &inputs.body_sha256,
        units: units
            .iter()
            .map(|u| serde_json::json!({"block": u.block, "arm": u.arm, "status": u.status, "detail": u.detail}))
            .collect(),
    };
    write_json(&ev.root().join("run.json"), &record)?;
    // The report reads only what is written by now, so the manifest covers its files.
    let report = crate::report::build(ev.root()).map_err(|e| e.to_string());
    let manifest = write_manifest(ev.root(), &plan.study.name, &frozen.sha256, git)?;
    Ok(StudyOutcome { dir: ev.root().to_path_buf(), units, manifest_files: manifest.files.len(), report })
}
