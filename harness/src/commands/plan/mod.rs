//! `harness plan check` (with `--probe` and `--pilots-from`), `plan derive`, `plan
//! power` and `harness trace`: the commands that read a plan and say what it will
//! do, without running a study. Each prints its own lines to stdout (a probe's
//! failure detail also to stderr) and returns; `main.rs` maps the error to an exit
//! code. Owns the probe (`probe`: each arm started once through the study's own
//! lifecycle). Must not write evidence: `derive --write` rewrites only the plan
//! file, `trace` only its `--out` directory.

mod probe;

pub use probe::{ArmProbe, ProbeOutcome, probe};

use std::path::{Path, PathBuf};

use crate::analysis::power::{PowerError, PowerOptions};
use crate::arm::ArmError;
use crate::inputs::InputsError;
use crate::plan::{self, FrozenPlan, PlanError};
use crate::trace::TraceError;

/// What stops a plan command.
#[derive(Debug, thiserror::Error)]
pub enum PlanCommandError {
    /// `what` (`plan PATH`, `power of PATH`), then the error it explains.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<PlanCommandError>,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Power(#[from] PowerError),
    /// The panel's inputs (dataset, tokenizer) cannot be read or used.
    #[error(transparent)]
    Inputs(#[from] InputsError),
    #[error(transparent)]
    Arm(#[from] ArmError),
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
}

impl crate::BadInput for PlanCommandError {
    /// The plan, its inputs and its trace files; not a failed write or probe.
    fn is_bad_input(&self) -> bool {
        match self {
            PlanCommandError::Context { source, .. } => source.is_bad_input(),
            PlanCommandError::Plan(e) => e.is_bad_input(),
            PlanCommandError::Trace(e) => e.is_bad_input(),
            PlanCommandError::Power(e) => e.is_bad_input(),
            PlanCommandError::Inputs(_) | PlanCommandError::Arm(ArmError::MissingApiKey { .. }) => true,
            _ => false,
        }
    }
}

impl PlanCommandError {
    fn about(what: String) -> impl FnOnce(PlanCommandError) -> PlanCommandError {
        move |e| PlanCommandError::Context { what, source: Box::new(e) }
    }
}

type Result<T, E = PlanCommandError> = std::result::Result<T, E>;

fn in_plan(path: &Path) -> impl FnOnce(PlanCommandError) -> PlanCommandError {
    PlanCommandError::about(format!("plan {}", path.display()))
}

fn freeze(path: &Path) -> Result<FrozenPlan> {
    plan::freeze_file(path).map_err(|e| in_plan(path)(e.into()))
}

/// `harness plan check PLAN`: prints what the plan will run, its identity checks,
/// its warnings and whether it is ready; with `probe`, starts each arm once and
/// returns whether every arm passed.
pub fn check(path: &Path, probe: bool, pilots_from: Option<&Path>) -> Result<bool> {
    let frozen = freeze(path)?;
    let p = &frozen.plan;
    match pilots_from {
        Some(dir) => {
            let bad = |m: String| PlanError::invalid("--pilots-from", m);
            let rec = crate::evidence::read_pilots_record(dir).map_err(|e| bad(format!("{}: {e}", dir.display())))?;
            let (shown, _) = p.with_pilot_rates(&rec.pilot_rates)?;
            let rates: Vec<String> = rec.pilot_rates.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "estimated with the pilot rates of {} ({} req/s): the loads below are what those rates derive; \
                 the study measures its own",
                dir.display(),
                rates.join(", ")
            );
            print!("{}", shown.render_check(&frozen.sha256));
        }
        None => print!("{}", p.render_check(&frozen.sha256)),
    }
    print_identity_checks(p);
    let mut wrong = Vec::new();
    for (key, path, problem) in p.input_problems(Path::new(".")) {
        match problem {
            plan::InputProblem::Missing => println!("warning: {key}: {} does not exist (yet)", path.display()),
            plan::InputProblem::WrongKind(what) => {
                wrong.push(plan::Issue::new(key, format!("{} is {what}", path.display())));
            }
        }
    }
    wrong.extend(p.engine_device_problems());
    if !wrong.is_empty() {
        return Err(in_plan(path)(PlanError::Invalid(wrong).into()));
    }
    for w in p.warnings() {
        println!("warning: {w}");
    }
    crate::trace::check_trace_files(p, Path::new("."), true).map_err(|e| in_plan(path)(e.into()))?;
    if let Ok(text) = std::str::from_utf8(&frozen.bytes)
        && text.lines().any(|l| l.trim() == "[compare]")
    {
        let spec = plan::compare::parse(text, p).map_err(|e| in_plan(path)(e.into()))?;
        println!(
            "compare: candidate {} against reference {}, {} parity prompts, {} noise round(s)",
            spec.candidate, spec.reference, spec.parity_prompts, spec.noise_rounds
        );
    }
    match p.require_derived() {
        Ok(()) => println!("plan {} is valid", path.display()),
        Err(_) if p.pilots.is_some() => println!(
            "plan {} is valid; its loads are derived by its in-study pilots when `harness run` runs them",
            path.display()
        ),
        Err(e) => println!("plan {} is valid but not ready to run:\n{e}", path.display()),
    }
    if probe { probe_arms(p) } else { Ok(true) }
}

/// The identity checks each arm's servers will face (block 0's argv placeholders
/// unexpanded: a `--served-model-name {model}` is checked only at run time).
fn print_identity_checks(p: &plan::Plan) {
    for a in &p.arms {
        let Some(spec) = &a.identity else { continue };
        let argv = match &a.server {
            plan::Server::Spawn { argv, .. } => Some(argv.as_slice()),
            plan::Server::External { .. } => None,
        };
        let checks = crate::arm::identity::planned(spec, argv);
        println!("identity of arm {}: {} check(s) after health, before warmup, in every block", a.name, checks.len());
        for c in &checks {
            println!("  {} (from {})", c.check.expected(), c.source);
        }
        for w in crate::arm::identity::contradictions(&checks) {
            println!("warning: arm {}: {w}", a.name);
        }
        for w in crate::arm::identity::unverifiable(spec, argv) {
            println!("warning: arm {}: {w}", a.name);
        }
    }
}

/// `plan check --probe`: every arm started once; logs kept only when one failed.
fn probe_arms(p: &plan::Plan) -> Result<bool> {
    let dir = std::env::temp_dir().join(format!("harness-probe-{}-{}", p.study.name, std::process::id()));
    let outcome = probe(p, Path::new("."), &dir)?;
    for a in &outcome.arms {
        let checks = match a.identity.len() {
            0 => String::new(),
            n => format!("; {} of {n} identity checks passed", a.identity.iter().filter(|r| r.ok).count()),
        };
        match (&a.detail, a.startup_s) {
            (None, s) => {
                println!("probe: arm {} ({}): ok, healthy after {:.2} s{checks}", a.arm, a.kind, s.unwrap_or(0.0));
                if let Some(r) = &a.request {
                    println!("probe:   {r}");
                }
            }
            (Some(d), _) => {
                println!("probe: arm {} ({}): FAILED: {}", a.arm, a.kind, d.lines().next().unwrap_or_default());
                eprintln!("harness: probe of arm {}: {d}", a.arm);
            }
        }
    }
    if outcome.all_ok() {
        let _ = std::fs::remove_dir_all(&dir);
        println!(
            "probe: every arm started, answered its health path, passed its identity checks and served the \
             study's request"
        );
    } else {
        println!("probe: logs kept in {}", dir.display());
    }
    Ok(outcome.all_ok())
}

/// `harness plan derive PLAN [--write]`: prints the derived loads; with `write`,
/// rewrites the plan's `[derived]` table in place (atomically).
pub fn derive(path: &Path, write: bool) -> Result<()> {
    let bytes =
        crate::evidence::read_input(path).map_err(|error| PlanError::Read { path: path.to_path_buf(), error })?;
    let text = std::str::from_utf8(&bytes).map_err(PlanError::NotUtf8)?;
    let (_, loads) = plan::derive_text(text).map_err(|e| in_plan(path)(e.into()))?;
    print!("{}", plan::derived_table_text(&loads));
    if write {
        let new = plan::rewrite_with_derived(text, &loads)?;
        if new == text {
            println!("{} already carries these values", path.display());
        } else {
            crate::evidence::write_atomic(path, new.as_bytes())
                .map_err(|source| PlanCommandError::Write { path: path.to_path_buf(), source })?;
            println!("wrote [derived] into {}", path.display());
        }
    }
    Ok(())
}

/// `harness plan power`: prints the power table, and writes it as JSON to `json`.
pub fn power(opts: &PowerOptions, json: Option<&Path>) -> Result<()> {
    let about = || PlanCommandError::about(format!("power of {}", opts.plan.display()));
    let report = crate::analysis::power::run(opts).map_err(|e| about()(e.into()))?;
    print!("{}", report.render());
    if let Some(path) = json {
        report.write_json(path)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// `harness trace PLAN --out DIR`: writes the study's inputs (arrival traces and,
/// unless `traces_only`, the prompt panel) with their catalog, and lists them.
pub fn trace(path: &Path, out: &Path, traces_only: bool) -> Result<()> {
    let frozen = freeze(path)?;
    let p = &frozen.plan;
    p.require_derived()?;
    // The trace files and the panel's sources are checked as `plan check` and `run`
    // check them: a bad one is bad input (exit 2), and nothing is written.
    crate::trace::check_trace_files(p, Path::new("."), false)?;
    let panel = if traces_only { None } else { Some(crate::inputs::build_panel(p, Path::new("."))?) };
    let catalog = crate::trace::write_inputs(out, p, &frozen.sha256, panel.as_ref())?;
    for f in &catalog.files {
        println!("{}  {:>9}  {}", f.sha256, f.bytes, f.path);
    }
    println!("wrote {} files and catalog.json to {}", catalog.files.len(), out.display());
    Ok(())
}
