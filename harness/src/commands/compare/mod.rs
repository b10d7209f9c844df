//! `harness compare PLAN`: a binding comparison of a candidate arm against a
//! reference arm (another engine build, vLLM, llama.cpp's server) from one frozen
//! plan with a `[compare]` table (docs/compare.md). Three phases, in this order:
//!
//! 1. parity (`parity`): a fixed prompt set, greedy and forced-length, on a fresh
//!    server of each arm, compared token for token through each server's dialect
//!    (`dialect`). If any output differs the comparison stops and says where; no
//!    speed is measured or reported.
//! 2. noise band: the noise arm(s) measured twice on fresh servers, interleaved
//!    (A, A'), over the whole ladder, before any comparison round.
//! 3. comparison rounds: the plan's blocks, arm order from `[blocks].arm_order`,
//!    each arm on a fresh server running the closed-loop cells (the concurrency
//!    ladder) through the study's own load client (`ladder`).
//!
//! Then `band` turns the per-cell summaries and per-server records into ratios with
//! the noise band beside them, and `report` writes `compare.json` and `compare.md`;
//! the manifest covers every file. Owns the orchestration, `CompareArgs` and
//! `CompareError`. Must not read a setting from anywhere but the frozen plan, must
//! not retry anything, and must not print except progress lines on stderr (the CLI
//! prints the outcome).

mod band;
mod ladder;
mod parity;
mod report;
mod server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::evidence::{
    CompareRecord, CompareSpec, CompareStatus, Dialect, Measure, NoiseArms, NoiseRatio, Obs, ParityMismatch,
    ParityReport, Phase, RoundRatio, Row,
};
pub use crate::plan::compare::parse as parse_spec;
pub use ladder::CellResult;
pub use parity::Answer;

use crate::arm::{ArmError, find_nvidia_smi};
use crate::evidence::{
    COMPARE_FILE, COMPARE_REPORT_FILE, Evidence, EvidenceError, PARITY_PHASE, RAW_DIR, git_info, write_bytes,
    write_manifest,
};
use crate::load::{LoadError, StudyClock};
use crate::plan::{PlanError, ResolvedCell, freeze_file};

/// `harness compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The plan file (closed-loop cells and a [compare] table).
    pub plan: PathBuf,
    /// Evidence directory (default: reports/<study>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace an earlier evidence directory there.
    #[arg(long)]
    pub force: bool,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// Why a comparison could not produce an outcome (failed parity is an outcome).
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("inputs: {0}")]
    Inputs(#[from] crate::inputs::InputsError),
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    #[error(transparent)]
    Arm(#[from] ArmError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{label}: {detail}")]
    Server { label: String, detail: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
    #[error("interrupted (Ctrl-C): the evidence directory {0} is incomplete and has no manifest")]
    Interrupted(PathBuf),
}

impl crate::BadInput for CompareError {
    fn is_bad_input(&self) -> bool {
        match self {
            CompareError::Plan(p) => crate::BadInput::is_bad_input(p),
            CompareError::Inputs(e) => crate::BadInput::is_bad_input(e),
            _ => false,
        }
    }
}

/// A finished comparison (parity passed or not).
#[derive(Debug, Clone)]
pub struct CompareOutcome {
    pub dir: PathBuf,
    pub report: CompareRecord,
    pub manifest_files: usize,
}

impl CompareOutcome {
    pub fn parity_passed(&self) -> bool {
        self.report.parity.pass
    }

    /// `compare.md`.
    pub fn markdown(&self) -> String {
        report::markdown(&self.report)
    }

    /// Failed requests over every measured cell.
    pub fn failed_requests(&self) -> u64 {
        self.report.observations.iter().filter(|o| o.measure == Measure::TotalTokensPerS).map(|o| o.failed).sum()
    }
}

fn observe(
    obs: &mut Vec<Obs>,
    at: (Phase, u32, bool),
    arm: &str,
    unit: &crate::evidence::ServerRecord,
    cells: &[CellResult],
) {
    let (phase, round, second) = at;
    let mk = |key: &str, measure: Measure, value: Option<f64>, failed: u64| Obs {
        phase,
        round,
        second,
        arm: arm.to_string(),
        key: key.to_string(),
        measure,
        value,
        failed,
    };
    for m in Measure::SERVER {
        obs.push(mk("server", m, band::unit_value(m, unit), 0));
    }
    for c in cells {
        for m in Measure::CELL {
            obs.push(mk(&c.cell, m, c.summary.as_ref().and_then(|s| band::cell_value(m, s)), c.failed));
        }
    }
}

/// One server start that runs the ladder; its observations go into `obs`.
struct Step<'a> {
    phase: Phase,
    round: u32,
    second: bool,
    arm: &'a str,
    label: String,
    dir: PathBuf,
    tag: String,
}

/// Runs the comparison and writes its evidence.
pub async fn run(args: CompareArgs) -> Result<CompareOutcome, CompareError> {
    let base = PathBuf::from(".");
    let frozen = freeze_file(&args.plan)?;
    let plan = &frozen.plan;
    plan.require_derived()?;
    let spec = parse_spec(std::str::from_utf8(&frozen.bytes).map_err(PlanError::from)?, plan)?;
    let resolved = plan.resolved_cells()?;
    let git = git_info(&base);
    let dir = args.out.clone().unwrap_or_else(|| base.join("reports").join(&plan.study.name));
    let ev = Evidence::create(&dir, args.force)?;
    write_bytes(&ev.plan_path(), &frozen.bytes)?;
    let inputs = crate::inputs::prepare(plan, &frozen.sha256, &base, &ev.inputs_dir())?;
    let clock = StudyClock::start();
    let sh = server::Shared { root: ev.root(), plan, panel: &inputs.panel, clock, nvidia_smi: find_nvidia_smi() };
    let say = |line: String| {
        if !args.quiet {
            eprintln!("compare: {line}");
        }
    };
    let arm_of = |name: &str| {
        plan.arm(name).ok_or_else(|| CompareError::Plan(PlanError::invalid("compare", format!("no arm {name:?}"))))
    };
    let mut units = Vec::new();

    // 1. Parity.
    let prompts: Vec<(u64, &[u32])> = (0..u64::from(spec.parity_prompts))
        .filter_map(|j| plan.prompts.prompt_index(Some(spec.parity_input_tokens), j))
        .filter_map(|i| inputs.panel.get(i).map(|p| (i, p.tokens.as_slice())))
        .collect();
    let timeout = std::time::Duration::from_secs_f64(plan.timing.request_timeout_s);
    let mut answers: BTreeMap<String, Vec<Answer>> = BTreeMap::new();
    let mut dialects = BTreeMap::new();
    for name in [&spec.reference, &spec.candidate] {
        say(format!("parity: {name}: {} prompts on a fresh server", prompts.len()));
        let dir = ev.root().join(RAW_DIR).join(PARITY_PHASE).join(name);
        let running = server::start(&sh, arm_of(name)?, ("parity", 0, name), &dir, false).await?;
        let d = parity::detect(&running, spec.dialects.get(name.as_str()).copied()).await;
        let got = parity::collect(&running, d.kind, &plan.request.model, &prompts, spec.parity_output_tokens, timeout);
        let got = got.await;
        units.push(running.stop().await?);
        answers.insert(name.clone(), got?);
        dialects.insert(name.clone(), d);
    }
    let empty = Vec::new();
    let (ra, ca) = (answers.get(&spec.reference).unwrap_or(&empty), answers.get(&spec.candidate).unwrap_or(&empty));
    let parity = parity::judge(&spec, ra, ca, dialects);
    say(format!("parity: {} ({} mismatches)", if parity.pass { "PASS" } else { "FAIL" }, parity.mismatches.len()));
    let mut obs = Vec::new();
    if parity.pass {
        // 2. Noise band, then 3. comparison rounds.
        let mut steps = Vec::new();
        for r in 0..spec.noise_rounds {
            for second in [false, true] {
                for name in spec.noise_arm_names() {
                    let label = format!("{name}.{}", if second { "b" } else { "a" });
                    let dir = ev.root().join(RAW_DIR).join(format!("noise{r}")).join(&label);
                    let (phase, tag) = (Phase::Noise, format!("noise{r}"));
                    steps.push((Step { phase, round: r, second, arm: name, label, dir, tag }, None));
                }
            }
        }
        for block in plan.schedule().blocks {
            for name in &block.arms {
                let arm = match name {
                    n if *n == spec.reference => spec.reference.as_str(),
                    n if *n == spec.candidate => spec.candidate.as_str(),
                    _ => continue,
                };
                let dir = ev.unit_dir(block.index, arm);
                let (phase, tag) = (Phase::Round, format!("b{}", block.index));
                let (round, label) = (block.index, arm.to_string());
                steps.push((Step { phase, round, second: false, arm, label, dir, tag }, Some(block.cells.clone())));
            }
        }
        let n = steps.len();
        for (i, (step, cell_names)) in steps.into_iter().enumerate() {
            let cells: Vec<&ResolvedCell> = match &cell_names {
                Some(names) => names.iter().filter_map(|c| resolved.iter().find(|x| &x.name == c)).collect(),
                None => resolved.iter().collect(),
            };
            say(format!("{}/{n}: {} {} ({} cells)", i + 1, step.tag, step.label, cells.len()));
            let phase = match step.phase {
                Phase::Noise => "noise",
                Phase::Round => "round",
            };
            let at = (phase, step.round, step.label.as_str());
            let running = server::start(&sh, arm_of(step.arm)?, at, &step.dir, true).await?;
            let ladder = ladder::Ladder {
                plan,
                inputs: &inputs,
                ev: &ev,
                clock,
                block: step.round,
                label: &step.label,
                tag: &step.tag,
            };
            let results = ladder.run(&running, &cells).await;
            let unit = running.stop().await?;
            let results = results?;
            observe(&mut obs, (step.phase, step.round, step.second), step.arm, &unit, &results);
            units.push(unit);
        }
    }
    let mut rows = Vec::new();
    if parity.pass {
        for c in &resolved {
            let conc = match c.load {
                crate::plan::ResolvedLoad::Closed { concurrency } => Some(concurrency),
                _ => None,
            };
            rows.extend(Measure::CELL.iter().map(|&m| band::row(&obs, &spec, &c.name, conc, m)));
        }
        rows.extend(Measure::SERVER.iter().map(|&m| band::row(&obs, &spec, "server", None, m)));
    }
    let report = CompareRecord {
        format: crate::evidence::COMPARE_FORMAT.into(),
        study: plan.study.name.clone(),
        plan_sha256: frozen.sha256.clone(),
        harness_version: env!("CARGO_PKG_VERSION").into(),
        git: git.clone(),
        spec: spec.clone(),
        status: if parity.pass { CompareStatus::Complete } else { CompareStatus::ParityFailed },
        parity,
        rows,
        units,
        observations: obs,
        definitions: report::DEFINITIONS.iter().map(|d| d.to_string()).collect(),
    };
    write_bytes(&ev.root().join(COMPARE_FILE), report::to_json(&report).as_bytes())?;
    write_bytes(&ev.root().join(COMPARE_REPORT_FILE), report::markdown(&report).as_bytes())?;
    let manifest = write_manifest(ev.root(), &plan.study.name, &frozen.sha256, git)?;
    Ok(CompareOutcome { dir: ev.root().to_path_buf(), report, manifest_files: manifest.files.len() })
}

/// `run` on a runtime of its own, for a synchronous caller such as `main`; Ctrl-C
/// stops it (servers are killed; the evidence stays incomplete and unmanifested).
pub fn run_blocking(args: CompareArgs) -> Result<CompareOutcome, CompareError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CompareError::Runtime(e.to_string()))?;
    let out = args.out.clone();
    rt.block_on(async move {
        tokio::select! {
            r = run(args) => r,
            _ = tokio::signal::ctrl_c() => Err(CompareError::Interrupted(out.unwrap_or_else(|| Path::new("reports").to_path_buf()))),
        }
    })
}
