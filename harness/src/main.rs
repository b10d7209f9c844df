//! The `harness` command line. Owns argument parsing, printing and exit codes; the
//! work itself lives in the library (`harness::plan`, `harness::trace`, ...). Must not
//! hold study logic: each subcommand loads, calls the library, and reports.
//!
//! Subcommands now: `plan check`, `plan derive`, `trace`. The study commands of the
//! design (`run`, `replay`, `gate`, `accept`, `qualify`, `report`) are added here as
//! their layers land, each as one more `Command` variant.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use harness::plan::{self, FrozenPlan};
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
        /// Write only the traces and catalog, not prompts.jsonl (for text panels,
        /// which need a tokenizer this build does not have).
        #[arg(long)]
        traces_only: bool,
    },
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
    match p.require_derived() {
        Ok(()) => println!("plan {} is valid", path.display()),
        Err(e) => println!("plan {} is valid but not ready to run:\n{e}", path.display()),
    }
    Ok(())
}

fn derive(path: &Path, write: bool) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = std::str::from_utf8(&bytes).context("the plan is not UTF-8")?;
    let (_, loads) = plan::derive_text(text).with_context(|| format!("plan {}", path.display()))?;
    print!("{}", plan::derived_table_text(&loads));
    if write {
        let new = plan::rewrite_with_derived(text, &loads)?;
        if new == text {
            println!("{} already carries these values", path.display());
        } else {
            plan::write_atomic(path, new.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
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
        // No tokenizer library is linked yet, so no encoder can be offered here.
        match trace::build_panel(p, Path::new("."), None) {
            Ok(panel) => Some(panel),
            Err(e @ trace::TraceError::NoEncoder { .. }) => {
                bail!("{e}; rerun with --traces-only to write the traces alone")
            }
            Err(e) => return Err(e.into()),
        }
    };
    let catalog = trace::write_inputs(out, p, &frozen.sha256, panel.as_ref())?;
    for f in &catalog.files {
        println!("{}  {:>9}  {}", f.sha256, f.bytes, f.path);
    }
    println!("wrote {} files and catalog.json to {}", catalog.files.len(), out.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(PlanCommand::Check { plan }) => check(&plan),
        Command::Plan(PlanCommand::Derive { plan, write }) => derive(&plan, write),
        Command::Trace { plan, out, traces_only } => write_trace(&plan, &out, traces_only),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness: {e:#}");
            ExitCode::FAILURE
        }
    }
}
