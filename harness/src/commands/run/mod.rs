//! `harness run PLAN`: one study from a frozen plan. Freezes the plan into the
//! evidence directory first, runs the in-study pilots when the plan declares
//! `[pilots]` (`pilots`: the loads they derive go into the frozen plan in memory,
//! never into `plan.toml`), writes and re-reads the inputs, runs the quality gates
//! when the plan requires qualification (`qualify`), then for each block and each
//! arm in the block's counterbalanced order runs one server invocation (`unit`),
//! closing each with its completion record (`unit.json`, `evidence::UnitRecord`), and finally
//! writes `results/summaries.json`, `run.json`, the report (`report::build`:
//! matrix, evidence.json, figures, report.md) and the manifest.
//!
//! `--resume DIR` (`resume`) continues an interrupted study: it verifies the plan,
//! the inputs and every completed unit by hash, moves partial units aside to
//! `discarded/`, and runs the remaining units with fresh servers in a new session
//! (`session`: each session has its own clock and is recorded in `run.json`).
//! An arm that fails to start `max_start_failures` times in one session stops the
//! study (`RunError::StartFailures`: `run.json` says `stopped`, no manifest, so it
//! can be resumed), and so does a server that fails its arm's identity checks
//! (`RunError::Identity`); `plan check --probe` runs the same lifecycle once per arm
//! (`commands::plan`).
//! Owns the orchestration and `RunError`. Must not read a setting from anywhere but
//! the frozen plan (CLI options only choose where evidence goes and how progress is
//! shown) and must not retry anything.

mod cell;
mod interleave;
mod pilots;
mod progress;
mod qualify;
mod resume;
mod session;
mod slurm;
mod unit;

use std::path::{Path, PathBuf};

use crate::arm::{ArmError, find_nvidia_smi};
use crate::evidence::GitInfo;
use crate::evidence::{
    BodyHashes, Evidence, EvidenceError, RUN_FORMAT, RunRecord, RunUnit, Session, SessionState, UNIT_FILE, UnitOutcome,
    UnitStatus, git_info, write_bytes, write_json, write_manifest,
};
use crate::inputs::Inputs;
use crate::load::{LoadError, SPIN_NS, StudyClock};
use crate::plan::{FrozenPlan, PlanError, ResolvedCell, ScheduledBlock, freeze_file};
use crate::trace::TraceError;

pub use progress::Progress;
pub use slurm::{SlurmError, WorkerOptions, WorkerOutcome, run_worker};

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: PathBuf,
    /// Evidence directory; default `reports/<study>` under `base_dir`.
    pub out: Option<PathBuf>,
    /// Replace an earlier evidence directory at `out`.
    pub force: bool,
    /// Continue the interrupted study in this evidence directory (`--resume DIR`).
    pub resume: Option<PathBuf>,
    /// No bars: one line per cell.
    pub quiet: bool,
    /// Without `quiet`, print each cell's table as the cell ends (`harness bench`
    /// prints them once, at the end, instead).
    pub cell_tables: bool,
    /// Where the plan's relative paths resolve (the working directory).
    pub base_dir: PathBuf,
    /// `--executor`: where the blocks run, over the plan's `[executor] kind`.
    pub executor: Option<crate::plan::ExecutorKind>,
}

impl RunOptions {
    pub fn new(plan: PathBuf) -> RunOptions {
        RunOptions {
            plan,
            out: None,
            force: false,
            resume: None,
            quiet: false,
            cell_tables: true,
            base_dir: PathBuf::from("."),
            executor: None,
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
    #[error(transparent)]
    Inputs(#[from] crate::inputs::InputsError),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("qualification: {0}")]
    Quality(#[from] crate::quality::QualityError),
    #[error("cannot resume {dir}: {why}")]
    Resume { dir: PathBuf, why: String },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
    #[error(
        "interrupted (Ctrl-C or SIGTERM): the evidence directory {0} is incomplete and has no manifest; continue it with \
         `harness run PLAN --resume {0}`"
    )]
    Interrupted(PathBuf),
    #[error(
        "arm {arm} failed to start {failures} time(s) (its max_start_failures is {max}), so the study stopped; \
         the last failure: {last}\nthe evidence directory {dir} is incomplete and has no manifest: fix the cause, \
         then continue it with `harness run PLAN --resume {dir}` (or `harness plan check --probe PLAN` first)"
    )]
    StartFailures { arm: String, failures: u32, max: u32, last: String, dir: PathBuf },
    #[error(
        "block {block} arm {arm}: the server is not what the arm claims, so the study stopped before timing it: \
         {detail}\nthe evidence directory {dir} is incomplete and has no manifest: fix the arm's argv or its \
         [arms.identity] claims and start a new study (`harness plan check --probe PLAN` runs the same checks), \
         or, when the server itself was at fault, `harness run PLAN --resume {dir}`"
    )]
    Identity { block: u32, arm: String, detail: String, dir: PathBuf },
    #[error(
        "pilot {unit} gave no rate ({why}), so its loads cannot be derived and the study stopped before any \
         confirmation block; the evidence directory {dir} is incomplete and has no manifest: fix the cause, then \
         `harness run PLAN --resume {dir}` repeats that pilot"
    )]
    Pilot { unit: String, why: String, dir: PathBuf },
    /// An input (dataset, tokenizer, trace file) that cannot be read or used,
    /// found before anything was written: bad input.
    #[error(transparent)]
    Input(Box<RunError>),
    /// The slurm executor: Slurm missing or refusing, a task that failed or never
    /// started (`slurm::SlurmError` says which are bad input).
    #[error(transparent)]
    Slurm(Box<SlurmError>),
}

impl crate::BadInput for RunError {
    /// The plan, its inputs, a missing API key, and a study stopped because an arm
    /// could not start or was not what it claimed (fix the cause, then resume).
    fn is_bad_input(&self) -> bool {
        match self {
            RunError::Plan(p) => p.is_bad_input(),
            RunError::Trace(t) => t.is_bad_input(),
            RunError::Evidence(e) => e.is_bad_input(),
            RunError::Inputs(e) => e.is_bad_input(),
            RunError::Slurm(e) => e.is_bad_input(),
            RunError::StartFailures { .. }
            | RunError::Identity { .. }
            | RunError::Input(_)
            | RunError::Arm(crate::arm::ArmError::MissingApiKey { .. }) => true,
            _ => false,
        }
    }
}

impl RunError {
    /// `e` found while checking the inputs, before anything was written.
    pub fn input(e: impl Into<RunError>) -> RunError {
        RunError::Input(Box::new(e.into()))
    }
}

/// The result of a study that ran to its end.
#[derive(Debug, Clone)]
pub struct StudyOutcome {
    pub dir: PathBuf,
    pub units: Vec<UnitOutcome>,
    pub manifest_files: usize,
    /// Every session, this one last (one unless the study was resumed).
    pub sessions: Vec<Session>,
    /// Units verified by their completion record rather than run by this session.
    pub verified_units: usize,
    /// The analysis (`results/` report files), or why it could not be built; the
    /// evidence and its manifest are complete either way.
    pub report: Result<crate::report::ReportOutcome, String>,
    /// Requests the schedule plans over every unit.
    pub planned_requests: u64,
    /// The plan's `[limits] max_error_rate`.
    pub max_error_rate: f64,
    /// Where a dispatched study's blocks ran (`None`: here).
    pub dispatched: Option<DispatchSummary>,
}

/// What `harness run --executor slurm` did with the blocks.
#[derive(Debug, Clone)]
pub struct DispatchSummary {
    /// The array jobs submitted (the first, then any resubmission).
    pub jobs: Vec<String>,
    /// The machines that ran the kept blocks.
    pub machines: Vec<String>,
    pub blocks: usize,
    /// Tasks that failed and were submitted again.
    pub resubmitted: usize,
    /// Seconds from the last block seen whole to the manifest.
    pub merge_s: f64,
}

/// A cell whose failed fraction exceeds the plan's `max_error_rate`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorRateExcess {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub failed: u64,
    pub requests: u64,
}

impl StudyOutcome {
    /// Server invocations that did not complete every cell.
    pub fn faults(&self) -> Vec<&UnitOutcome> {
        self.units.iter().filter(|u| u.status != UnitStatus::Completed).collect()
    }

    pub fn failed_requests(&self) -> u64 {
        self.units.iter().flat_map(|u| &u.cells).map(|c| c.failed).sum()
    }

    /// Planned requests that never ran (their server failed to start, warm up, or died).
    pub fn requests_not_run(&self) -> u64 {
        let run: u64 = self.units.iter().flat_map(|u| &u.cells).map(|c| c.requests).sum();
        self.planned_requests.saturating_sub(run)
    }

    /// Cells that ran and failed more than `max_error_rate` of their requests.
    pub fn error_rate_excess(&self) -> Vec<ErrorRateExcess> {
        let mut out = Vec::new();
        for u in &self.units {
            for c in u.cells.iter().filter(|c| c.requests > 0) {
                if c.failed as f64 > self.max_error_rate * c.requests as f64 {
                    out.push(ErrorRateExcess {
                        block: u.block,
                        arm: u.arm.clone(),
                        cell: c.cell.clone(),
                        failed: c.failed,
                        requests: c.requests,
                    });
                }
            }
        }
        out
    }
}

/// Shared, read-only state of one study.
pub(crate) struct Study<'a> {
    pub frozen: &'a FrozenPlan,
    pub resolved: &'a [ResolvedCell],
    pub ev: &'a Evidence,
    /// This session's clock (a resumed session starts a new one).
    pub clock: StudyClock,
    /// This session's index in `run.json` `sessions`.
    pub session: u32,
    pub inputs: &'a Inputs,
    pub progress: &'a Progress,
    pub base_dir: &'a Path,
    pub nvidia_smi: Option<PathBuf>,
}

/// Runs a study on a new multi-threaded tokio runtime; Ctrl-C or SIGTERM stops it
/// (servers are killed, a dispatched study's Slurm tasks cancelled with `scancel`,
/// the evidence stays incomplete and unmanifested, and can be resumed).
pub fn run(opts: &RunOptions) -> Result<StudyOutcome, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Runtime(e.to_string()))?;
    rt.block_on(async {
        let at = Interruptible::default();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| RunError::Runtime(e.to_string()))?;
        let r = tokio::select! {
            r = run_study_in(opts, &at) => r,
            _ = tokio::signal::ctrl_c() => Err(RunError::Interrupted(at.dir.borrow().clone())),
            _ = term.recv() => Err(RunError::Interrupted(at.dir.borrow().clone())),
        };
        let job = at.slurm_job.borrow().clone();
        if let (Err(RunError::Interrupted(_)), Some(name)) = (&r, job) {
            println!("slurm: {}", slurm::cancel_all(&name).await);
        }
        r
    })
}

/// What an interruption must undo: the evidence directory (to name it) and, once
/// its blocks were dispatched, the Slurm array's job name (to cancel it).
#[derive(Default)]
pub struct Interruptible {
    pub dir: std::cell::RefCell<PathBuf>,
    pub slurm_job: std::cell::RefCell<Option<String>>,
}

/// The evidence directory and where the session starts from: a new directory with
/// the plan frozen into it, or (`--resume`) a verified one.
/// With `[pilots]`, also what stands of the pilot phase (`pilots::resume_check`).
fn open(
    opts: &RunOptions,
    frozen: &FrozenPlan,
) -> Result<(Evidence, resume::ResumeState, pilots::PilotResume), RunError> {
    let plan = &frozen.plan;
    match &opts.resume {
        None => {
            let dir = opts.out.clone().unwrap_or_else(|| opts.base_dir.join("reports").join(&plan.study.name));
            let ev = Evidence::create(&dir, opts.force)?;
            // The plan's exact bytes go in first.
            write_bytes(&ev.plan_path(), &frozen.bytes)?;
            Ok((ev, resume::ResumeState::default(), pilots::PilotResume::default()))
        }
        Some(dir) => {
            let root = std::fs::canonicalize(dir).map_err(|error| RunError::Io { path: dir.clone(), error })?;
            let ev = Evidence::open(&root);
            let mut pilot_state = pilots::PilotResume::default();
            let mut effective = None;
            if plan.pilots.is_some() && ev.plan_path().is_file() && !root.join(crate::evidence::MANIFEST_FILE).is_file()
            {
                pilot_state = pilots::resume_check(&ev, frozen)?;
                if let Some(rec) = &pilot_state.done {
                    let (with, _) = plan.with_pilot_rates(&rec.pilot_rates)?;
                    effective = Some(FrozenPlan { plan: with, ..frozen.clone() });
                }
            }
            let mut state = resume::check(&ev, effective.as_ref().unwrap_or(frozen), &plan.schedule(), &opts.base_dir)?;
            // Pilot units move aside with their own reasons, not as strays.
            let pilot_files: Vec<&PathBuf> = pilot_state.partial.iter().flat_map(|(_, f, _)| f).collect();
            for (_, files, _) in state.partial.iter_mut() {
                files.retain(|f| !pilot_files.contains(&f));
            }
            state.partial.retain(|(_, f, _)| !f.is_empty());
            state.partial.append(&mut pilot_state.partial);
            Ok((ev, state, pilot_state))
        }
    }
}

/// Planned requests of one unit.
fn unit_requests(resolved: &[ResolvedCell], block: &ScheduledBlock) -> u64 {
    block.cells.iter().filter_map(|c| resolved.iter().find(|r| &r.name == c)).map(|c| c.count).sum()
}

/// A completed unit of an earlier session: its outcome and its cells' summaries.
fn verified_unit(
    ev: &Evidence,
    block: &ScheduledBlock,
    arm: &str,
) -> Result<(UnitOutcome, Vec<serde_json::Value>), RunError> {
    let read = |p: &Path| -> Result<serde_json::Value, RunError> {
        let bytes = std::fs::read(p).map_err(|error| RunError::Io { path: p.to_path_buf(), error })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| RunError::Resume { dir: ev.root().to_path_buf(), why: format!("{}: {e}", p.display()) })
    };
    let outcome: UnitOutcome = serde_json::from_value(read(
        &ev.unit_dir(block.index, arm).join(crate::evidence::ARM_OUTCOME_FILE),
    )?)
    .map_err(|e| RunError::Resume {
        dir: ev.root().to_path_buf(),
        why: format!("b{}/{arm}: {}: {e}", block.index, crate::evidence::ARM_OUTCOME_FILE),
    })?;
    let summaries = resume::summary_paths(ev, block, arm)
        .iter()
        .filter(|p| p.is_file())
        .map(|p| read(p))
        .collect::<Result<_, _>>()?;
    Ok((outcome, summaries))
}

/// Every input path the study will read (the qualification's only when it is
/// required) exists and is of the right kind, and no arm asks this engine for a
/// device it lacks: checked before anything is written, so a missing texts
/// directory does not stop a study after its pilots.
fn check_inputs_usable(frozen: &FrozenPlan, base: &Path) -> Result<(), RunError> {
    let qualify = qualify::required(frozen);
    let mut issues: Vec<crate::plan::Issue> = frozen
        .plan
        .input_problems(base)
        .into_iter()
        .filter(|(key, _, _)| qualify || !key.starts_with("qualification."))
        .map(|(key, path, problem)| {
            let why = match problem {
                crate::plan::InputProblem::Missing => "does not exist".to_string(),
                crate::plan::InputProblem::WrongKind(what) => format!("is {what}"),
            };
            crate::plan::Issue::new(key, format!("{} {why}", path.display()))
        })
        .collect();
    issues.extend(frozen.plan.engine_device_problems());
    if issues.is_empty() { Ok(()) } else { Err(RunError::input(PlanError::Invalid(issues))) }
}

/// What this session has done so far: the sessions of `run.json` (this one last),
/// every unit's outcome in schedule order, the cell summaries as written, the units
/// an earlier session completed, and each arm's start failures in this session.
struct Ledger {
    sessions: Vec<Session>,
    units: Vec<UnitOutcome>,
    summaries: Vec<serde_json::Value>,
    verified_units: usize,
    start_failures: std::collections::BTreeMap<String, u32>,
}

impl Ledger {
    /// Marks this session ended (`finished` or `stopped`) now.
    fn end_session(&mut self, state: SessionState) {
        if let Some(s) = self.sessions.last_mut() {
            s.state = state;
            s.finished_unix_ms = Some(crate::evidence::unix_ms());
        }
    }

    /// Closes a unit this session ran: its completion record, the unit and its
    /// summaries in the ledger. `Some`: why the study must stop now (a server that
    /// is not what its arm claims, or an arm past its `max_start_failures`).
    fn close_unit(
        &mut self,
        ev: &Evidence,
        block: &ScheduledBlock,
        session: u32,
        arm: &crate::plan::Arm,
        (mut unit, cell_summaries): (UnitOutcome, Vec<serde_json::Value>),
        secrets: &crate::evidence::Secrets,
    ) -> Result<Option<RunError>, RunError> {
        let name = crate::evidence::unit_name(block.index, &arm.name);
        let dir = ev.unit_dir(block.index, &arm.name);
        let extra = resume::summary_paths(ev, block, &arm.name);
        let completion = crate::evidence::Completion {
            unit: &name,
            block: Some(block.index),
            session,
            status: crate::evidence::RecordStatus::Server(unit.status),
        };
        crate::evidence::write_record(ev.root(), &dir, &extra, completion, secrets)?;
        // As its arm_outcome.json now says (run.json repeats the detail).
        unit.detail = unit.detail.map(|d| secrets.redact(&d).into_owned());
        if let Some(s) = self.sessions.last_mut() {
            s.units_run.push(name);
        }
        self.summaries.extend(cell_summaries);
        let failed_start = unit.status == UnitStatus::StartFailed;
        let last = unit.detail.clone().unwrap_or_default();
        let not_itself = unit.status == UnitStatus::IdentityFailed;
        self.units.push(unit);
        // A server that is not what its arm claims: every later block would time the
        // wrong thing (or fail the same way).
        if not_itself {
            let (block, arm, dir) = (block.index, arm.name.clone(), ev.root().to_path_buf());
            return Ok(Some(RunError::Identity { block, arm, detail: last, dir }));
        }
        if failed_start {
            let n = self.start_failures.entry(arm.name.clone()).or_insert(0);
            *n += 1;
            if *n >= arm.max_start_failures {
                return Ok(Some(RunError::StartFailures {
                    arm: arm.name.clone(),
                    failures: *n,
                    max: arm.max_start_failures,
                    last,
                    dir: ev.root().to_path_buf(),
                }));
            }
        }
        Ok(None)
    }
}

/// Requests the schedule plans in all, and the estimated seconds of its cells
/// (`None` when a cell's duration is unknown), for the progress bar.
fn planned_totals(
    plan: &crate::plan::Plan,
    schedule: &crate::plan::Schedule,
    resolved: &[ResolvedCell],
    inputs: &Inputs,
) -> (u64, Option<f64>) {
    let mut total = 0u64;
    let mut expected = Some(0.0);
    for b in &schedule.blocks {
        for c in b.cells.iter().filter_map(|name| resolved.iter().find(|c| c.name == *name)) {
            total += inputs.planned_records(&c.name).unwrap_or(c.count) * b.arms.len() as u64;
            expected = expected.zip(plan.cell_estimate_s(c)).map(|(e, s)| e + s * b.arms.len() as f64);
        }
    }
    (total, expected)
}

/// What `harness run` checks and reads before it writes anything: a bad plan, API
/// key, input, trace file or CPU set leaves no directory behind.
struct Preflight {
    frozen: FrozenPlan,
    secrets: crate::evidence::Secrets,
    /// The prompt panel, built once (`None` when resuming: `inputs/` is verified).
    panel: Option<crate::trace::Panel>,
    git: GitInfo,
    host: crate::host::HostFacts,
    /// The client's own CPU set, when the plan pins it (already applied).
    client_cpus: Option<String>,
}

fn preflight(opts: &RunOptions) -> Result<Preflight, RunError> {
    let frozen = freeze_file(&opts.plan)?;
    // A plan with [pilots] is derived by its pilot phase, later.
    if frozen.plan.pilots.is_none() {
        frozen.plan.require_derived()?;
        frozen.plan.resolved_cells()?;
    }
    // A missing key is bad input: refused before anything is written.
    crate::arm::check_api_keys(&frozen.plan, |v| std::env::var(v).ok())?;
    let secrets = crate::arm::plan_secrets(&frozen.plan, |v| std::env::var(v).ok());
    crate::trace::check_trace_files(&frozen.plan, &opts.base_dir, false)?;
    // Every input read and used once before anything is written: a bad dataset,
    // tokenizer or trace file (or a FIFO in its place) leaves no directory behind.
    let panel = match &opts.resume {
        Some(_) => None,
        None => {
            check_inputs_usable(&frozen, &opts.base_dir)?;
            let panel = crate::inputs::build_panel(&frozen.plan, &opts.base_dir).map_err(RunError::input)?;
            if frozen.plan.pilots.is_none() {
                crate::trace::generate_traces_in(&frozen.plan, &opts.base_dir).map_err(RunError::input)?;
            }
            Some(panel)
        }
    };
    // CPU sets this machine cannot give: refused before anything is written (a
    // resumed session too: it may run on another machine than the first).
    if let Some(allowed) = crate::host::allowed_cpus(None).and_then(|l| crate::host::parse_cpu_list(&l).ok()) {
        let issues = frozen.plan.cpu_problems(&allowed);
        if !issues.is_empty() {
            return Err(RunError::input(PlanError::Invalid(issues)));
        }
    }
    let git = git_info(&opts.base_dir);
    // The machine as found, then the client's own CPU set (before any thread of the
    // study's runtime work starts on other CPUs).
    let host = crate::host::facts();
    let client_cpus = match &frozen.plan.client.cpus {
        Some(cpus) => Some(
            crate::host::pin_this_process(cpus)
                .map_err(|m| RunError::input(PlanError::Invalid(vec![crate::plan::Issue::new("client.cpus", m)])))?,
        ),
        None => None,
    };
    Ok(Preflight { frozen, secrets, panel, git, host, client_cpus })
}

/// `run.json` of this session: what stays fixed while the study runs; `write`
/// adds the sessions and units as they stand.
struct RunJson<'a> {
    frozen: &'a FrozenPlan,
    git: &'a GitInfo,
    started_unix_ms: Option<u64>,
    dispatch_realtime: bool,
    nvidia_smi: Option<String>,
    inputs: &'a Inputs,
    root: &'a Path,
}

impl RunJson<'_> {
    fn write(&self, sessions: &[Session], units: &[UnitOutcome], finished: bool) -> Result<(), EvidenceError> {
        self.write_with(sessions, units, finished, None)
    }

    /// `write`, with a dispatched study's `executor` record.
    fn write_with(
        &self,
        sessions: &[Session],
        units: &[UnitOutcome],
        finished: bool,
        executor: Option<&crate::evidence::ExecutorRecord>,
    ) -> Result<(), EvidenceError> {
        let plan = &self.frozen.plan;
        RunRecord {
            format: RUN_FORMAT.into(),
            study: plan.study.name.clone(),
            plan_sha256: self.frozen.sha256.clone(),
            harness_version: env!("CARGO_PKG_VERSION").into(),
            git: self.git.clone(),
            started_unix_ms: self.started_unix_ms,
            finished_unix_ms: if finished { sessions.iter().filter_map(|s| s.finished_unix_ms).max() } else { None },
            clock: crate::evidence::CLOCK.into(),
            dispatch_spin_ns: SPIN_NS,
            dispatch_realtime: self.dispatch_realtime,
            stop_grace_s: plan
                .arms
                .iter()
                .filter(|a| matches!(a.server, crate::plan::Server::Spawn { .. }))
                .map(|a| a.stop_grace_s)
                .fold(0.0, f64::max),
            nvidia_smi: self.nvidia_smi.clone(),
            request_body_sha256: BodyHashes::ByKind(self.inputs.body_sha256.clone()),
            entry_body_sha256: Some(self.inputs.entry_body_sha256.clone()).filter(|m| !m.is_empty()),
            sessions: sessions.to_vec(),
            units: units
                .iter()
                .map(|u| RunUnit {
                    block: u.block,
                    arm: u.arm.clone(),
                    status: u.status,
                    detail: u.detail.clone(),
                    session: u.session,
                })
                .collect(),
            executor: executor.cloned(),
        }
        .write(self.root)
    }
}

/// The study itself. `at` receives the evidence directory as soon as it is known
/// (and a dispatched study's job name before its first submission).
async fn run_study_in(opts: &RunOptions, at: &Interruptible) -> Result<StudyOutcome, RunError> {
    let Preflight { frozen, secrets, panel, git, host, client_cpus } = preflight(opts)?;
    let dispatch = opts.executor.unwrap_or(frozen.plan.executor.kind) == crate::plan::ExecutorKind::Slurm;
    // Slurm's commands, a cluster, the shared root and Slurm's verdict on the
    // script: checked before anything is written.
    let shared_root = if dispatch {
        let dir = match (&opts.resume, &opts.out) {
            (Some(d), _) | (None, Some(d)) => slurm::absolute(d, &opts.base_dir),
            (None, None) => {
                slurm::absolute(&opts.base_dir.join("reports").join(&frozen.plan.study.name), &opts.base_dir)
            }
        };
        Some(slurm::preflight(&frozen, &dir, &opts.base_dir).await?)
    } else {
        None
    };
    let (ev, state, pilot_state) = open(opts, &frozen)?;
    *at.dir.borrow_mut() = ev.root().to_path_buf();
    slurm::check_resume_executor(&ev, dispatch, opts.resume.is_some())?;
    let mut sessions = state.sessions.clone();
    let index = u32::try_from(sessions.len()).unwrap_or(u32::MAX);
    // A dispatched study's session numbers are claimed (its workers claim theirs).
    let index = if dispatch { slurm::claim(ev.root(), index)? } else { index };
    let discarded = resume::discard(&ev, &state, index)?;
    if let Some(g) = sessions.iter().rev().find_map(|s| s.git.as_ref()).filter(|g| **g != git) {
        println!(
            "resume: note: the earlier session ran from git {} (dirty {:?}); this one from {} (dirty {:?})",
            g.revision, g.dirty, git.revision, git.dirty
        );
    }
    sessions.push(Session::start(index, opts.resume.is_some(), git.clone(), discarded, host, client_cpus));
    let clock = StudyClock::start();
    let nvidia_smi = find_nvidia_smi();
    let frozen = if frozen.plan.pilots.is_some() {
        let cx = pilots::PhaseCtx {
            ev: &ev,
            clock,
            session: index,
            base_dir: &opts.base_dir,
            quiet: opts.quiet,
            nvidia_smi: nvidia_smi.clone(),
            secrets: &secrets,
        };
        pilots::run_phase(&frozen, &pilot_state, &cx).await?.0
    } else {
        frozen
    };
    let plan = &frozen.plan;
    let resolved = plan.resolved_cells()?;
    // The client's measurement floor on this machine now (about two seconds).
    let floor_rate = crate::load::planned_rate(&resolved);
    match tokio::task::spawn_blocking(move || crate::load::measure_floor(floor_rate)).await {
        Ok(Ok(floor)) => {
            if !opts.quiet {
                println!(
                    "measurement floor: TTFT overhead p50 {:.0} us, p99 {:.0} us at {floor_rate} req/s ({:.1} s)",
                    floor.ttft_overhead.p50_us, floor.ttft_overhead.p99_us, floor.wall_s
                );
            }
            if let Some(s) = sessions.last_mut() {
                s.measurement_floor = Some(floor);
            }
        }
        Ok(Err(e)) => eprintln!("measurement floor: not measured: {e}"),
        Err(e) => eprintln!("measurement floor: not measured: {e}"),
    }
    let inputs = if state.inputs_ok {
        crate::inputs::load(plan, &ev.inputs_dir())?
    } else if let Some(panel) = &panel {
        crate::inputs::prepare_with(plan, &frozen.sha256, &opts.base_dir, &ev.inputs_dir(), panel)?
    } else {
        crate::inputs::prepare(plan, &frozen.sha256, &opts.base_dir, &ev.inputs_dir())?
    };
    let schedule = plan.schedule();
    let run_json = RunJson {
        frozen: &frozen,
        git: &git,
        started_unix_ms: state.started_unix_ms.or(sessions.last().and_then(|s| s.started_unix_ms)),
        dispatch_realtime: crate::load::realtime_dispatch_available(),
        nvidia_smi: nvidia_smi.as_ref().map(|p| p.display().to_string()),
        inputs: &inputs,
        root: ev.root(),
    };
    run_json.write(&sessions, &[], false)?;
    if qualify::required(&frozen) {
        if state.qualification_done {
            println!("resume: qualification verified (qualification/unit.json)");
        } else {
            qualify::run(&frozen, &ev, &opts.base_dir, index, opts.quiet, &secrets).await?;
            if let Some(s) = sessions.last_mut() {
                s.qualification_run = true;
            }
        }
    }

    let (total, expected) = planned_totals(plan, &schedule, &resolved, &inputs);
    if let Some(shared_root) = &shared_root {
        *at.slurm_job.borrow_mut() = Some(slurm::script::job_name(&plan.study.name, ev.root()));
        let cx = slurm::Coordinator { frozen: &frozen, ev: &ev, base_dir: &opts.base_dir, shared_root, session: index };
        let ledger = Ledger {
            sessions,
            units: Vec::new(),
            summaries: Vec::new(),
            verified_units: 0,
            start_failures: std::collections::BTreeMap::new(),
        };
        return run_dispatched(&cx, &schedule, ledger, &run_json, &git, total).await;
    }
    let progress = Progress::new(opts.quiet, total, expected).with_cell_tables(opts.cell_tables);
    let study = Study {
        frozen: &frozen,
        resolved: &resolved,
        ev: &ev,
        clock,
        session: index,
        inputs: &inputs,
        progress: &progress,
        base_dir: &opts.base_dir,
        nvidia_smi: nvidia_smi.clone(),
    };
    let mut ledger = Ledger {
        sessions,
        units: Vec::new(),
        summaries: Vec::new(),
        verified_units: 0,
        start_failures: std::collections::BTreeMap::new(),
    };
    if let Some(stop) = run_blocks(&study, &schedule, &state, &mut ledger, &secrets).await? {
        progress.finish();
        ledger.end_session(SessionState::Stopped);
        run_json.write(&ledger.sessions, &ledger.units, false)?;
        return Err(stop);
    }
    progress.finish();
    write_json(&ev.root().join(crate::evidence::SUMMARIES_FILE), &ledger.summaries)?;
    ledger.end_session(SessionState::Finished);
    run_json.write(&ledger.sessions, &ledger.units, true)?;
    // The report reads only what is written by now, so the manifest covers its files.
    let report = crate::report::build(ev.root()).map_err(|e| e.to_string());
    let manifest = write_manifest(ev.root(), &plan.study.name, &frozen.sha256, git.clone())?;
    Ok(StudyOutcome {
        dir: ev.root().to_path_buf(),
        units: ledger.units,
        manifest_files: manifest.files.len(),
        sessions: ledger.sessions,
        verified_units: ledger.verified_units,
        report,
        planned_requests: total,
        max_error_rate: plan.max_error_rate,
        dispatched: None,
    })
}

/// The blocks as Slurm array tasks (`slurm`), then the same summaries, `run.json`,
/// report and manifest as a local run, `run.json` with every worker's session and
/// the `executor` record.
async fn run_dispatched(
    cx: &slurm::Coordinator<'_>,
    schedule: &crate::plan::Schedule,
    mut ledger: Ledger,
    run_json: &RunJson<'_>,
    git: &GitInfo,
    total: u64,
) -> Result<StudyOutcome, RunError> {
    let (ev, plan) = (cx.ev, &cx.frozen.plan);
    let dispatched = slurm::run_blocks(cx, schedule, &mut ledger).await?;
    if let Some(stop) = dispatched.stop {
        ledger.end_session(SessionState::Stopped);
        let sessions = slurm::merge_sessions(ev.root(), &ledger.sessions);
        run_json.write_with(&sessions, &ledger.units, false, Some(&dispatched.record))?;
        return Err(stop);
    }
    let merge = std::time::Instant::now();
    write_json(&ev.root().join(crate::evidence::SUMMARIES_FILE), &ledger.summaries)?;
    ledger.end_session(SessionState::Finished);
    let sessions = slurm::merge_sessions(ev.root(), &ledger.sessions);
    run_json.write_with(&sessions, &ledger.units, true, Some(&dispatched.record))?;
    let report = crate::report::build(ev.root()).map_err(|e| e.to_string());
    let manifest = write_manifest(ev.root(), &plan.study.name, &cx.frozen.sha256, git.clone())?;
    let record = dispatched.record;
    Ok(StudyOutcome {
        dir: ev.root().to_path_buf(),
        units: ledger.units,
        manifest_files: manifest.files.len(),
        sessions,
        verified_units: 0,
        report,
        planned_requests: total,
        max_error_rate: plan.max_error_rate,
        dispatched: Some(DispatchSummary {
            jobs: record.submissions.iter().filter_map(|s| s.job_id.clone()).collect(),
            machines: record.machines(),
            blocks: schedule.blocks.len(),
            resubmitted: record.failures.iter().filter(|f| f.resubmitted).count(),
            merge_s: dispatched.merge_s + merge.elapsed().as_secs_f64(),
        }),
    })
}

/// Runs every unit of the schedule in order (a completed one of an earlier session
/// verified instead), closing each into `ledger`, until the schedule ends or the
/// sequential rule decides. `Some(stop)` when a unit stopped the study (too many
/// start failures, a failed identity check: the caller records the session as
/// stopped); `Err` for a failure of the run itself.
async fn run_blocks(
    study: &Study<'_>,
    schedule: &crate::plan::Schedule,
    state: &resume::ResumeState,
    ledger: &mut Ledger,
    secrets: &crate::evidence::Secrets,
) -> Result<Option<RunError>, RunError> {
    let (plan, ev, progress) = (&study.frozen.plan, study.ev, study.progress);
    let mut done = 0u64;
    let mut sequential = crate::analysis::sequential::Tracker::new();
    let blocks_started = std::time::Instant::now();
    for block in &schedule.blocks {
        for arm_name in &block.arms {
            let Some(arm) = plan.arm(arm_name) else { continue };
            let name = crate::evidence::unit_name(block.index, arm_name);
            if let Some(rec) = state.completed(block.index, arm_name) {
                let (unit, cell_summaries) = verified_unit(ev, block, arm_name)?;
                progress.println(&format!("resume: {name} verified ({UNIT_FILE}, session {})", rec.session));
                done += unit_requests(study.resolved, block);
                progress.set_done(done);
                ledger.summaries.extend(cell_summaries);
                ledger.units.push(unit);
                ledger.verified_units += 1;
                continue;
            }
            let ran = if plan.blocks.rounds > 0 {
                // Interleaved: the whole block at once, its units closed in arm order.
                let arms: Vec<&crate::plan::Arm> = block.arms.iter().filter_map(|n| plan.arm(n)).collect();
                interleave::run_block(study, block, &arms, &mut done).await?
            } else {
                vec![unit::run_unit(study, block, arm, &mut done).await?]
            };
            for ran_unit in ran {
                let Some(arm) = plan.arm(&ran_unit.0.arm) else { continue };
                if let Some(stop) = ledger.close_unit(ev, block, study.session, arm, ran_unit, secrets)? {
                    return Ok(Some(stop));
                }
            }
            if plan.blocks.rounds > 0 {
                break;
            }
        }
        let over_time = plan
            .sequential
            .as_ref()
            .and_then(|s| s.max_minutes)
            .is_some_and(|m| blocks_started.elapsed().as_secs_f64() > m * 60.0);
        // The summaries as written (a cell without one is a JSON record of why): typed here.
        let typed = || -> Vec<crate::metrics::CellSummary> {
            ledger.summaries.iter().filter_map(|v| serde_json::from_value(v.clone()).ok()).collect()
        };
        if let Some(rec) = sequential.after_block(plan, typed, block.index + 1, over_time) {
            write_json(&ev.root().join(crate::analysis::sequential::NAME), &rec)?;
            progress.println(&format!(
                "sequential: {} after {} of {} blocks ({:?}); {}",
                rec.state.as_str(),
                rec.blocks,
                plan.blocks.count,
                rec.reason,
                crate::analysis::sequential::NAME
            ));
            break;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(block: u32, status: UnitStatus, cells: &[(u64, u64)]) -> UnitOutcome {
        UnitOutcome {
            block,
            arm: "a".into(),
            session: 0,
            status,
            detail: None,
            pid: None,
            startup_s: None,
            cells: cells
                .iter()
                .map(|&(requests, failed)| crate::evidence::CellOutcome {
                    cell: "c".into(),
                    status: if requests == 0 {
                        crate::evidence::CellStatus::NotRun
                    } else {
                        crate::evidence::CellStatus::Completed
                    },
                    requests,
                    completed: requests - failed,
                    failed,
                    start_ns: None,
                    end_ns: None,
                })
                .collect(),
            stop: None,
            scrapes: 0,
            memory_samples: 0,
            receipts_source: None,
            receipts_kept: false,
        }
    }

    fn outcome(units: Vec<UnitOutcome>, max_error_rate: f64) -> StudyOutcome {
        StudyOutcome {
            dir: PathBuf::new(),
            units,
            manifest_files: 0,
            sessions: Vec::new(),
            verified_units: 0,
            report: Err("none".into()),
            planned_requests: 30,
            max_error_rate,
            dispatched: None,
        }
    }

    #[test]
    fn the_error_rate_limit_is_strict_by_default_and_skips_cells_that_never_ran() {
        let units = vec![
            unit(0, UnitStatus::Completed, &[(10, 0)]),
            unit(1, UnitStatus::Completed, &[(10, 1)]),
            unit(2, UnitStatus::StartFailed, &[(0, 0)]),
        ];
        let strict = outcome(units.clone(), 0.0);
        let excess = strict.error_rate_excess();
        assert_eq!(excess.len(), 1, "{excess:?}");
        assert_eq!((excess[0].block, excess[0].failed, excess[0].requests), (1, 1, 10));
        assert_eq!(strict.requests_not_run(), 10);
        assert_eq!(strict.faults().len(), 1);
        assert!(outcome(units.clone(), 0.1).error_rate_excess().is_empty(), "1 of 10 is not above 10%");
        assert_eq!(outcome(units, 0.05).error_rate_excess().len(), 1);
    }
}
