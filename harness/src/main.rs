//! The `harness` command line. Owns argument parsing, printing and exit codes; the
//! work itself lives in the library (`harness::plan`, `harness::trace`, ...). Must not
//! hold study logic: each subcommand loads, calls the library, and reports.
//!
//! Subcommands: `plan check`, `plan derive`, `trace`, `run` (with `--resume`),
//! `report`, `replay`, `gate`, `qualify`, `accept`, `compare`, `bench-client`,
//! `export`; each
//! is one `Command` variant and one function or match arm.
//!
//! Exit codes (one mapping, [`exit_code`]): 0 success; 2 bad input, as the engine
//! and clap use it (a plan that cannot be read, does not parse, misses a key, has
//! an invalid value or is not derived yet; bad arguments), the message naming the
//! problem, nothing written; 2 also when the
//! command completed with a negative verdict: `run` with arm faults (a server
//! failed to start, warm up, or died; the evidence is complete and says what
//! happened), a failed `replay` check, a violated `gate` rule, an unqualified arm
//! in `qualify`, a failed `accept` case, failed parity in `compare`; 1 any other
//! error (nothing or an incomplete study was produced; `gate` keeps 1 for an
//! invalid rules file, docs/gate.md: its 2 means a rule failed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use harness::plan::{self, FrozenPlan, PlanError};
use harness::run::{RunOptions, TokenizerEncoder};
use harness::trace;

#[derive(Parser)]
#[command(name = "harness", version, about = "Frozen-plan benchmark and qualification harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate plans and derive pilot-based loads.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Write a plan's inputs: prompts.jsonl, traces/<cell>.trace.jsonl, catalog.json.
    Trace {
        /// The plan file.
        plan: PathBuf,
        /// Directory to write into (created if missing), e.g. reports/<study>/inputs.
        #[arg(long)]
        out: PathBuf,
        /// Write only the traces and catalog, not prompts.jsonl.
        #[arg(long)]
        traces_only: bool,
    },
    /// Run a study: fresh servers per block and arm, every cell, raw evidence,
    /// per-cell summaries and a manifest, in reports/<study>/ (or --out).
    Run {
        /// The plan file (its loads must be derived).
        plan: PathBuf,
        /// Evidence directory (default: reports/<study>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace an earlier evidence directory there.
        #[arg(long)]
        force: bool,
        /// Continue the interrupted study in DIR: verifies the plan, the inputs and
        /// every completed server invocation by hash, moves partial ones aside to
        /// DIR/discarded/, and runs the rest with fresh servers.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "force"])]
        resume: Option<PathBuf>,
        /// No progress bars: one line per cell (for CI and logs).
        #[arg(long)]
        quiet: bool,
    },
    /// Regenerate results/ (matrix, evidence.json, figures, report.md) of an evidence
    /// directory from its raw evidence, and update their manifest entries.
    Report {
        /// The evidence directory (e.g. reports/<study>).
        dir: PathBuf,
    },
    /// HTTP acceptance suite for one OpenAI-compatible server (--url, or an arm of a plan).
    Accept(harness::accept::AcceptArgs),
    /// Quality gates only (the plan's [qualification]): GSM strict match, NLL,
    /// passkey retrieval and serial parity, each arm on a fresh server.
    Qualify(harness::quality::QualifyArgs),
    /// Benchmark of the load generator itself against a built-in minimal streaming endpoint.
    BenchClient(harness::bench_client::Args),
    /// Independent audit of an evidence directory: hashes, completeness, and every
    /// derived number recomputed from raw records; exit 2 when a check fails.
    Replay(harness::replay::ReplayArgs),
    /// CI regression gate: a candidate evidence directory against a baseline (directory
    /// or baseline file) under a rules file; exit 2 on any violated rule.
    Gate(harness::gate::GateArgs),
    /// Binding comparison of the plan's candidate against its reference ([compare]):
    /// token parity first, then a noise band, then interleaved rounds over the ladder.
    Compare(harness::compare::CompareArgs),
    /// A study's results in a peer tool's format (`vllm-bench`: the JSON `vllm bench
    /// serve --save-result --save-detailed` writes, one object per block, arm, cell).
    Export(harness::export::ExportArgs),
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Validate a plan and print its full schedule, without running anything.
    Check {
        /// The plan file.
        plan: PathBuf,
    },
    /// Compute the loads and count of the plan's [derive] formula.
    Derive {
        /// The plan file.
        plan: PathBuf,
        /// Rewrite the plan's [derived] table (every other byte is kept).
        #[arg(long)]
        write: bool,
    },
}

fn freeze(path: &Path) -> Result<FrozenPlan> {
    plan::freeze_file(path).with_context(|| format!("plan {}", path.display()))
}

fn check(path: &Path) -> Result<()> {
    let frozen = freeze(path)?;
    let p = &frozen.plan;
    print!("{}", p.render_check(&frozen.sha256));
    for (key, missing) in p.missing_inputs(Path::new(".")) {
        println!("warning: {key}: {} does not exist (yet)", missing.display());
    }
    trace::check_trace_files(p, Path::new("."), true).with_context(|| format!("plan {}", path.display()))?;
    if let Ok(text) = std::str::from_utf8(&frozen.bytes)
        && text.lines().any(|l| l.trim() == "[compare]")
    {
        let spec = harness::compare::parse_spec(text, p).with_context(|| format!("plan {}", path.display()))?;
        println!(
            "compare: candidate {} against reference {}, {} parity prompts, {} noise round(s)",
            spec.candidate, spec.reference, spec.parity_prompts, spec.noise_rounds
        );
    }
    match p.require_derived() {
        Ok(()) => println!("plan {} is valid", path.display()),
        Err(e) => println!("plan {} is valid but not ready to run:\n{e}", path.display()),
    }
    Ok(())
}

fn derive(path: &Path, write: bool) -> Result<()> {
    let bytes = std::fs::read(path).map_err(|error| PlanError::Read { path: path.to_path_buf(), error })?;
    let text = std::str::from_utf8(&bytes).map_err(PlanError::NotUtf8)?;
    let (_, loads) = plan::derive_text(text).with_context(|| format!("plan {}", path.display()))?;
    print!("{}", plan::derived_table_text(&loads));
    if write {
        let new = plan::rewrite_with_derived(text, &loads)?;
        if new == text {
            println!("{} already carries these values", path.display());
        } else {
            harness::evidence::write_atomic(path, new.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote [derived] into {}", path.display());
        }
    }
    Ok(())
}

fn write_trace(path: &Path, out: &Path, traces_only: bool) -> Result<()> {
    let frozen = freeze(path)?;
    let p = &frozen.plan;
    p.require_derived()?;
    let panel = if traces_only {
        None
    } else {
        let encoder = match &p.prompts.source {
            plan::PanelSource::Text { tokenizer, .. } => Some(TokenizerEncoder::from_file(Path::new(tokenizer))?),
            _ => None,
        };
        let encoder = encoder.as_ref().map(|e| e as &dyn trace::Encoder);
        Some(trace::build_panel(p, Path::new("."), encoder)?)
    };
    let catalog = trace::write_inputs(out, p, &frozen.sha256, panel.as_ref())?;
    for f in &catalog.files {
        println!("{}  {:>9}  {}", f.sha256, f.bytes, f.path);
    }
    println!("wrote {} files and catalog.json to {}", catalog.files.len(), out.display());
    Ok(())
}

/// `harness run`: returns whether every server invocation completed.
fn run(plan: PathBuf, out: Option<PathBuf>, force: bool, resume: Option<PathBuf>, quiet: bool) -> Result<bool> {
    let opts = RunOptions { out, force, resume, quiet, ..RunOptions::new(plan) };
    let outcome = harness::run::run(&opts)?;
    let faults = outcome.faults();
    if outcome.sessions.len() > 1 {
        let discarded: usize = outcome.sessions.iter().map(|s| s.discarded.len()).sum();
        println!(
            "resumed: session {} of {}; {} server invocations verified from earlier sessions, {} run now, {} \
             partial unit(s) kept aside under discarded/",
            outcome.sessions.len() - 1,
            outcome.sessions.len(),
            outcome.verified_units,
            outcome.units.len() - outcome.verified_units,
            discarded
        );
    }
    println!(
        "study complete: {} server invocations, {} failed requests, {} files in the manifest; evidence in {}",
        outcome.units.len(),
        outcome.failed_requests(),
        outcome.manifest_files,
        outcome.dir.display()
    );
    for u in &faults {
        println!("arm fault: block {} arm {}: {}: {}", u.block, u.arm, u.status, u.detail.as_deref().unwrap_or(""));
    }
    match &outcome.report {
        Ok(r) => print_report(r),
        Err(e) => println!("no report: {e} (rerun `harness report {}`)", outcome.dir.display()),
    }
    Ok(faults.is_empty())
}

fn print_report(r: &harness::report::ReportOutcome) {
    for w in &r.warnings {
        println!("warning: {w}");
    }
    println!("\nclaims:\n{}", r.claims);
    println!("report: {}", r.report.display());
}

/// `harness report DIR`.
fn report(dir: &Path) -> Result<()> {
    let outcome = harness::report::regenerate(dir).with_context(|| format!("report of {}", dir.display()))?;
    println!("wrote {} files under {}", outcome.files.len(), dir.join("results").display());
    print_report(&outcome);
    Ok(())
}

/// Whether a plan error is bad input (everything but failing to write the plan back).
fn bad_plan(e: &PlanError) -> bool {
    !matches!(e, PlanError::Write { .. })
}

/// The exit code of an error: 2 for bad input, 1 for anything else. The wrapping
/// enums forward a plan error transparently, so each is looked into here.
fn exit_code(e: &anyhow::Error) -> u8 {
    use harness::accept::AcceptError;
    use harness::compare::CompareError;
    use harness::quality::QualityError;
    use harness::run::RunError;
    let bad = e.chain().any(|c| {
        if let Some(p) = c.downcast_ref::<PlanError>() {
            return bad_plan(p);
        }
        if let Some(RunError::Plan(p)) = c.downcast_ref::<RunError>() {
            return bad_plan(p);
        }
        if let Some(CompareError::Plan(p) | CompareError::Inputs(RunError::Plan(p))) = c.downcast_ref::<CompareError>()
        {
            return bad_plan(p);
        }
        match c.downcast_ref::<QualityError>() {
            Some(QualityError::Plan(p)) => return bad_plan(p),
            Some(QualityError::NotConfigured) => return true,
            _ => {}
        }
        match c.downcast_ref::<AcceptError>() {
            Some(AcceptError::Plan(p)) => bad_plan(p),
            Some(AcceptError::Args(_) | AcceptError::NotLoopback { .. } | AcceptError::UnknownArm { .. }) => true,
            _ => false,
        }
    });
    if bad { 2 } else { 1 }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(PlanCommand::Check { plan }) => check(&plan),
        Command::Plan(PlanCommand::Derive { plan, write }) => derive(&plan, write),
        Command::Trace { plan, out, traces_only } => write_trace(&plan, &out, traces_only),
        Command::Run { plan, out, force, resume, quiet } => match run(plan, out, force, resume, quiet) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(2),
            Err(e) => Err(e),
        },
        Command::Report { dir } => report(&dir),
        Command::Accept(args) => match harness::accept::run_blocking(args) {
            Ok(outcome) => {
                print!("{}", outcome.markdown());
                if outcome.failed() {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::Qualify(args) => match harness::quality::run_blocking(args) {
            Ok(outcome) => {
                if !outcome.all_qualified() {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::BenchClient(args) => harness::bench_client::run(&args).map_err(Into::into),
        Command::Replay(args) => match harness::replay::run(&args) {
            Ok(outcome) => {
                if args.json {
                    println!("{}", outcome.to_json());
                } else {
                    print!("{}", outcome.render_table(args.max_mismatches));
                }
                if !outcome.all_passed() {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::Gate(args) => match harness::gate::run(&args) {
            Ok(outcome) => {
                print!("{}", outcome.render_text());
                if !outcome.passed() {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::Export(args) => harness::export::run(&args)
            .map(|o| println!("wrote {} objects to {}", o.objects, o.out.display()))
            .map_err(Into::into),
        Command::Compare(args) => match harness::compare::run_blocking(args) {
            Ok(outcome) => {
                print!("{}", outcome.markdown());
                println!("evidence: {} ({} files in the manifest)", outcome.dir.display(), outcome.manifest_files);
                if !outcome.parity_passed() || outcome.failed_requests() > 0 {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}
