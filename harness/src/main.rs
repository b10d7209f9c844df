//! The `harness` command line. Owns argument parsing, printing and exit codes; the
//! work itself lives in the library (`harness::plan`, `harness::trace`, ...). Must not
//! hold study logic: each subcommand loads, calls the library, and reports.
//!
//! Subcommands: `plan check`, `plan derive`, `plan power`, `trace`, `run` (with
//! `--resume`), `report`, `replay`, `gate`, `qualify`, `accept`, `compare`,
//! `bench-loadgen` (hidden alias `bench-client`), `mock`, `export`, `noise`, `bench`,
//! `benchmark`, `profile`, `completions`; each is one `Command` variant and
//! one function or match arm, and each `--help` ends with a worked example.
//!
//! Exit codes (one mapping, [`exit_code`]): 0 success; 2 bad input, as the engine
//! and clap use it (a plan that cannot be read, does not parse, misses a key, has
//! an invalid value or is not derived yet; an input file that cannot be read or
//! used, or is not a regular file; an occupied `--out`; evidence `replay` cannot
//! read at all; an evidence directory any other reader refuses because it is not
//! finished or differs from its manifest, `evidence::Sealed`; bad arguments), the
//! message naming the problem, nothing written;
//! 2 also when the
//! command completed with a negative verdict: `run` with arm faults (a server
//! failed to start, warm up, or died; the evidence is complete and says what
//! happened), a failed `replay` check, a violated `gate` rule, an unqualified arm
//! in `qualify`, a failed `accept` case, failed parity in `compare`; 1 any other
//! error (nothing or an incomplete study was produced; `gate` keeps 1 for an
//! invalid rules file, docs/gate.md: its 2 means a rule failed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use harness::Failure;

/// Every command ends in an exit code: [`Failure`] carries it from the error that decided it.
type Result<T> = std::result::Result<T, Failure>;
use clap::{Parser, Subcommand};
use harness::BadInput;
use harness::commands::{self, run::RunOptions};

/// The exit codes, as `harness --help` prints them (the mapping is [`exit_code`]).
const EXIT_CODES: &str = "Exit codes:\n  \
    0  success\n  \
    2  bad input (a plan, dataset, tokenizer or trace that cannot be read or used, bad arguments, an occupied \
    --out, an evidence directory that is unfinished or differs from its manifest): the message names it and \
    nothing is written\n  \
    2  a completed command with a negative verdict: arm faults in `run`, a cell over [limits] max_error_rate, \
    `run` stopped after an arm's max_start_failures or a failed identity check (resumable), a failed `replay` \
    check, a violated `gate` rule or a paired gate that found a regression, an unqualified arm, a failed \
    `accept` case, failed parity in `compare`, a failed `plan check --probe`\n  \
    3  a paired gate (`harness gate --paired`) still undecided at its cap\n  \
    1  anything else (an I/O failure, Ctrl-C: an incomplete study, resumable with `run --resume`)";

#[derive(Parser)]
#[command(name = "harness", version, about = "Frozen-plan benchmark and qualification harness", after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate plans and derive pilot-based loads.
    #[command(subcommand, after_help = "Example:\n  harness plan check plans/quickstart.toml --probe")]
    Plan(PlanCommand),
    /// Write a plan's inputs: prompts.jsonl, traces/<cell>.trace.jsonl, catalog.json.
    #[command(after_help = "Example:\n  harness trace plans/e2e-synthetic.toml --out /tmp/e2e-inputs")]
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
    #[command(after_help = "Example:\n  harness run plans/quickstart.toml --out reports/qs --quiet\n  \
                            harness run plans/quickstart.toml --resume reports/qs")]
    Run {
        /// The plan file (its loads derived, or a `[pilots]` table: the run derives them).
        #[arg(required_unless_present = "block")]
        plan: Option<PathBuf>,
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
        /// Where the blocks run: `local` (here) or `slurm` (one Slurm array task
        /// per block, all its arms on one node; docs/slurm.md). Default: the plan's
        /// `[executor] kind`, else local.
        #[arg(long, value_name = "KIND", value_parser = ["local", "slurm"])]
        executor: Option<String>,
        /// Worker mode, inside a dispatched study's Slurm array task (its
        /// slurm/blocks.sbatch runs it): run block K of the study in --study.
        #[arg(long, value_name = "K", requires_all = ["study", "shared_root"], conflicts_with_all = ["plan", "out", "force", "resume", "executor"])]
        block: Option<u32>,
        /// Worker mode: the evidence directory the block belongs to.
        #[arg(long, value_name = "DIR", requires = "block")]
        study: Option<PathBuf>,
        /// Worker mode: the directory every node sees (the evidence directory lies under it).
        #[arg(long, value_name = "DIR", requires = "block")]
        shared_root: Option<PathBuf>,
    },
    /// Regenerate results/ (matrix, requests, evidence.json, figures, report.md and
    /// report.html) of an evidence
    /// directory from its raw evidence, and update their manifest entries.
    #[command(after_help = "Example:\n  harness report reports/quickstart")]
    Report {
        /// The evidence directory (e.g. reports/<study>).
        dir: PathBuf,
    },
    /// HTTP acceptance suite for one OpenAI-compatible server (--url, or an arm of a plan).
    #[command(after_help = "Example:\n  harness accept --url http://127.0.0.1:8000\n  \
                            harness accept --plan plans/quickstart.toml --arm f16\n  \
                            OPENAI_API_KEY=... harness accept --url http://127.0.0.1:8000 --api-key-env OPENAI_API_KEY \\\n    \
                            --header 'X-Tenant: blue'")]
    Accept(harness::commands::accept::AcceptArgs),
    /// Quality gates only (the plan's [qualification]): GSM strict match, NLL,
    /// passkey retrieval and serial parity, each arm on a fresh server.
    #[command(after_help = "Example:\n  harness qualify plans/quickstart-qualified.toml --out reports/qualify")]
    Qualify(harness::commands::qualify::QualifyArgs),
    /// Benchmark of the harness's own load generator against a built-in fake
    /// streaming endpoint (dispatch precision and client CPU); no server is measured.
    #[command(
        name = "bench-loadgen",
        alias = "bench-client",
        after_help = "Example:\n  harness bench-loadgen --rates 100,500 --duration-s 5"
    )]
    BenchClient(harness::commands::bench_loadgen::Args),
    /// An OpenAI-compatible streaming server whose token times are known (fixed or
    /// drawn TTFT and ITL, a queue, reasoning deltas, injected errors), writing the
    /// ground truth of every request; for measuring clients (docs/fidelity.md).
    #[command(
        after_help = "Example:\n  harness mock --port 8123 --ttft-ms 20 --itl-ms 5 --ground-truth /tmp/truth.jsonl --cpus 1"
    )]
    Mock(harness::commands::mock::MockArgs),
    /// Independent audit of an evidence directory: hashes, completeness, and every
    /// derived number recomputed from raw records; exit 2 when a check fails.
    #[command(after_help = "Example:\n  harness replay reports/quickstart --max-mismatches 5")]
    Replay(harness::commands::replay::ReplayArgs),
    /// CI regression gate: a candidate evidence directory against a baseline (directory
    /// or baseline file) under a rules file; exit 2 on any violated rule.
    #[command(
        after_help = "Example:\n  harness gate --baseline plans/baselines/ci-smoke.json --candidate reports/ci-smoke \\\n    \
                            --rules plans/gate-ci-smoke.toml"
    )]
    Gate(harness::commands::gate::GateArgs),
    /// Binding comparison of the plan's candidate against its reference ([compare]):
    /// token parity first, then a noise band, then interleaved rounds over the ladder.
    #[command(after_help = "Example:\n  harness compare plans/compare-engine-vs-llamacpp-f32-cpu.toml")]
    Compare(harness::commands::compare::CompareArgs),
    /// A study's results in a peer tool's format (`vllm-bench`: the JSON `vllm bench
    /// serve --save-result --save-detailed` writes, one object per block, arm, cell;
    /// `guidellm`: one guidellm benchmarks report, one benchmark per block, arm, cell).
    #[command(
        after_help = "Example:\n  harness export reports/quickstart --format vllm-bench --out /tmp/quickstart.vllm.jsonl\n  \
                      harness export reports/quickstart --format guidellm --out /tmp/benchmarks.json"
    )]
    Export(harness::commands::export::ExportArgs),
    /// Where a finished study's noise comes from: each measure's variance (log units)
    /// split into blocks (drift), fresh servers within a block, and repeats of a cell
    /// on one server, with intervals; for A/A plans such as plans/noise-cpu.toml.
    #[command(after_help = "Example:\n  harness noise reports/noise-cpu --metrics throughput_rps,e2e_p95_intended")]
    Noise(harness::commands::noise::NoiseArgs),
    /// `vllm bench serve` (vLLM 0.34): its flags, defaults and datasets (docs/bench.md),
    /// as a one-arm plan run as `harness run` runs one (evidence, report, manifest),
    /// then vLLM's result block per cell; `harness replay OUT` audits it.
    #[command(
        after_help = "Example:\n  harness bench --host 127.0.0.1 --port 8000 --model Qwen/Qwen3-0.6B --tokenizer assets/qwen3-tokenizer \\\n    \
                            --request-rate 4 --num-prompts 100 --out reports/bench-m\n  \
                            harness replay reports/bench-m"
    )]
    Bench(Box<harness::commands::bench::BenchArgs>),
    /// guidellm's `guidellm run` (guidellm 0.8.1): its registry options in its own
    /// `kind=...` syntax (docs/bench.md), run by the same engine as `harness bench`,
    /// then its benchmarks report (JSON, YAML) written from the study.
    #[command(
        after_help = "Example:\n  harness benchmark run --backend kind=openai_http,target=http://localhost:8000 \\\n    \
                            --profile kind=constant,rate=10 --constraint kind=max_duration,seconds=20 \\\n    \
                            --data kind=synthetic_text,prompt_tokens=128,output_tokens=256"
    )]
    Benchmark(Box<harness::commands::benchmark::BenchmarkArgs>),
    /// AIPerf's `aiperf profile` (AIPerf 0.13): its flags (docs/bench.md), run by the
    /// same engine as `harness bench`, then AIPerf's export files
    /// (profile_export_aiperf.json, .csv, profile_export.jsonl) in the artifact directory.
    #[command(
        after_help = "Example:\n  harness profile -m Qwen/Qwen3-0.6B --url localhost:8000 --endpoint-type completions \\\n    \
                            --streaming --concurrency 4 --request-count 40 --isl 128 --osl 64 --artifact-dir artifacts/q"
    )]
    Profile(Box<harness::commands::profile::ProfileArgs>),
    /// Shell completions for bash, zsh, fish, elvish or powershell, on stdout.
    #[command(after_help = "Example:\n  harness completions bash > ~/.local/share/bash-completion/completions/harness")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Validate a plan and print its full schedule, without running anything.
    #[command(after_help = "Example:\n  harness plan check plans/quickstart.toml --probe")]
    Check {
        /// The plan file.
        plan: PathBuf,
        /// Also start each arm once (fresh server, health wait, stop; an external
        /// arm: health only) and report each ok or failed with its log's tail;
        /// exit 2 when any failed.
        #[arg(long)]
        probe: bool,
        /// A plan with [pilots]: estimate its closed loops and pilot-derived loads
        /// with the rates the pilots of an earlier run measured (its
        /// `pilots/derived.json`); the study still measures its own.
        #[arg(long, value_name = "DIR")]
        pilots_from: Option<PathBuf>,
    },
    /// Compute the loads and count of the plan's [derive] formula.
    #[command(after_help = "Example:\n  harness plan derive plans/quickstart.toml --write")]
    Derive {
        /// The plan file.
        plan: PathBuf,
        /// Rewrite the plan's [derived] table (every other byte is kept).
        #[arg(long)]
        write: bool,
    },
    /// How small an effect the plan can see: power of its rule from A/A or pilot noise.
    #[command(
        after_help = "Example:\n  harness plan power plans/quickstart.toml --noise reports/aa --target-effect 0.05 \\\n    \
                            --json /tmp/power.json"
    )]
    Power {
        /// The plan file.
        plan: PathBuf,
        /// An A/A or pilot evidence directory (a `harness run` study) to take the noise from.
        #[arg(long)]
        noise: PathBuf,
        /// Also write the result as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// A true effect (fraction, e.g. 0.05) whose needed block count is reported.
        #[arg(long)]
        target_effect: Option<f64>,
        /// The probability that needed block count must reach.
        #[arg(long, default_value_t = 0.8)]
        target_power: f64,
        /// Simulation seed (default: the plan's study.seed).
        #[arg(long)]
        seed: Option<u64>,
        /// Simulated studies per point.
        #[arg(long, default_value_t = harness::analysis::power::DEFAULT_DRAWS)]
        draws: usize,
    },
}

/// `harness run`: returns whether every server invocation completed.
fn run(
    plan: PathBuf,
    out: Option<PathBuf>,
    force: bool,
    resume: Option<PathBuf>,
    quiet: bool,
    executor: Option<String>,
) -> Result<bool> {
    let executor = executor.as_deref().and_then(harness::plan::ExecutorKind::parse);
    run_with(RunOptions { out, force, resume, quiet, executor, ..RunOptions::new(plan) })
}

/// `harness run --block K`: one block of a dispatched study, in its Slurm task.
/// Returns whether the block finished (false: it stopped the study, as a local run
/// would have).
fn run_block(block: u32, study: PathBuf, shared_root: PathBuf, quiet: bool) -> Result<bool> {
    let opts = harness::commands::run::WorkerOptions { study, block, shared_root, quiet, base_dir: PathBuf::from(".") };
    let outcome = harness::commands::run::run_worker(&opts)?;
    println!(
        "worker: block {} done on {} (session {}): {} server invocation(s){}",
        outcome.block,
        outcome.hostname,
        outcome.session,
        outcome.units,
        outcome.stopped.as_deref().map(|s| format!("; it stopped the study: {s}")).unwrap_or_default()
    );
    Ok(outcome.stopped.is_none())
}

fn run_with(opts: RunOptions) -> Result<bool> {
    let outcome = harness::commands::run::run(&opts)?;
    let faults = outcome.faults();
    if let Some(d) = &outcome.dispatched {
        println!(
            "dispatched: {} blocks as Slurm array job(s) {} on {} machine(s) ({}); {} task(s) resubmitted; merged in \
             {:.2} s",
            d.blocks,
            d.jobs.join(", "),
            d.machines.len(),
            d.machines.join(", "),
            d.resubmitted,
            d.merge_s
        );
    } else if outcome.sessions.len() > 1 {
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
    if faults.is_empty() {
        println!(
            "study complete: {} server invocations, {} failed requests, {} files in the manifest; evidence in {}",
            outcome.units.len(),
            outcome.failed_requests(),
            outcome.manifest_files,
            outcome.dir.display()
        );
    } else {
        use harness::evidence::UnitStatus;
        let count = |status: UnitStatus| faults.iter().filter(|u| u.status == status).count();
        println!(
            "study finished with arm faults: {} of {} server invocations did not complete ({} failed to start, {} failed warmup, {} \
             died); {} planned requests never ran; {} failed requests among those that ran; {} files in the \
             manifest; evidence in {}",
            faults.len(),
            outcome.units.len(),
            count(UnitStatus::StartFailed),
            count(UnitStatus::WarmupFailed),
            count(UnitStatus::ServerDied),
            outcome.requests_not_run(),
            outcome.failed_requests(),
            outcome.manifest_files,
            outcome.dir.display()
        );
    }
    // The whole detail (the server log's tail) went to stderr when the fault happened.
    for u in &faults {
        let first = u.detail.as_deref().and_then(|d| d.lines().next()).unwrap_or("");
        println!("arm fault: block {} arm {}: {}: {first}", u.block, u.arm, u.status);
    }
    let excess = outcome.error_rate_excess();
    for c in &excess {
        println!(
            "error rate: block {} arm {} cell {}: {} of {} requests failed ({:.1}%), above max_error_rate {}",
            c.block,
            c.arm,
            c.cell,
            c.failed,
            c.requests,
            100.0 * c.failed as f64 / c.requests as f64,
            outcome.max_error_rate
        );
    }
    match &outcome.report {
        Ok(r) => print_report(r),
        Err(e) => println!("no report: {e} (rerun `harness report {}`)", outcome.dir.display()),
    }
    Ok(faults.is_empty() && excess.is_empty())
}

fn print_report(r: &harness::report::ReportOutcome) {
    for w in &r.warnings {
        println!("warning: {w}");
    }
    for n in &r.floor_notes {
        println!("measurement floor: {n}");
    }
    if !r.claims.trim().is_empty() {
        println!("\nclaims:\n{}", r.claims);
    }
    println!("report: {}", r.report.display());
}

/// `harness report DIR`.
fn report(dir: &Path) -> Result<()> {
    let outcome = harness::report::regenerate(dir)
        .map_err(|e| Failure::from(e).context(format!("report of {}", dir.display())))?;
    println!("wrote {} files under {}", outcome.files.len(), dir.join(harness::evidence::RESULTS_DIR).display());
    print_report(&outcome);
    Ok(())
}

/// `harness bench`: the one-arm plan, run through `run` exactly as `harness run`
/// runs a plan file, then one summary block per cell.
fn bench(args: &harness::commands::bench::BenchArgs) -> Result<bool> {
    bench_study(&harness::commands::bench::with_vllm_request_ids(args)).map(|(ok, _)| ok)
}

/// `harness benchmark`: guidellm's flags as `harness bench`'s, the study, then
/// guidellm's outputs from its evidence.
fn benchmark(args: &harness::commands::benchmark::BenchmarkArgs) -> Result<bool> {
    use harness::commands::bench::BenchArgs;
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let defaults = Defaults::try_parse_from(["bench"]).map_err(Failure::other)?.bench;
    let mut t = harness::commands::benchmark::translate(args, defaults)?;
    if t.data.is_some() && t.bench.out.is_none() {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        t.bench.out = Some(harness::commands::bench::default_out(Path::new("reports"), now));
    }
    if let Some(p) = harness::commands::benchmark::freeze_data(&mut t)? {
        println!("wrote {} (the file dataset's requests, named by the plan)", p.display());
    }
    let (ok, evidence) = bench_study(&t.bench)?;
    if ok && let Some(dir) = evidence {
        for p in harness::commands::benchmark::write_outputs(&t.outputs, &dir)? {
            println!("wrote {}", p.display());
        }
    }
    Ok(ok)
}

/// `harness profile`: AIPerf's flags as `harness bench`'s, the study, then AIPerf's
/// export files from its evidence and its console table.
fn profile(args: &harness::commands::profile::ProfileArgs) -> Result<bool> {
    use harness::commands::bench::BenchArgs;
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let defaults = Defaults::try_parse_from(["bench"]).map_err(Failure::other)?.bench;
    let t = harness::commands::profile::translate(args, defaults)?;
    let (ok, evidence) = bench_study(&t.bench)?;
    if ok && let Some(dir) = evidence {
        let cli = std::env::args().collect::<Vec<_>>().join(" ");
        let (paths, console) = harness::commands::profile::write_exports(&t, &dir, &cli)?;
        print!("\n{console}");
        for p in paths {
            println!("wrote {}", p.display());
        }
    }
    Ok(ok)
}

/// The study of `harness bench`'s flags: whether it completed, and its evidence
/// directory (none with --print-plan).
fn bench_study(args: &harness::commands::bench::BenchArgs) -> Result<(bool, Option<PathBuf>)> {
    use harness::commands::bench;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut args = bench::discover_model(args)?;
    if args.out.is_none() {
        args.out = Some(bench::default_out(std::path::Path::new("reports"), now));
    }
    let args = &args;
    let prepared = bench::prepare(args, bench::free_port, now)?;
    if args.print_plan {
        print!("{}", prepared.text);
        return Ok((true, None));
    }
    let resolved = bench::resolved(args)?;
    let prepared = if resolved.sweep.is_some() {
        // guidellm's sweep: the anchors' study first, beside the sweep's evidence.
        let anchors = bench::BenchPlan { out: bench::anchors_out(&prepared.out), ..prepared };
        println!("sweep: measuring the synchronous and throughput anchors into {}", anchors.out.display());
        if !run_bench_plan(&anchors, args, now)? {
            return Ok((false, Some(anchors.out)));
        }
        let summaries = bench::summaries(&anchors.out)?;
        let sweep = bench::prepare_sweep(&resolved, &summaries, &anchors.out, bench::free_port, now)?;
        println!(
            "sweep: {} benchmarks between the anchors' rates into {}",
            sweep.frozen.plan.cells.len(),
            sweep.out.display()
        );
        sweep
    } else {
        prepared
    };
    let ok = run_bench_plan(&prepared, args, now)?;
    if args.save_result || args.append_result {
        for path in bench::save_results(args, &prepared.out)? {
            println!("saved: {}", path.display());
        }
    }
    Ok((ok, Some(prepared.out)))
}

/// Runs one bench plan as `harness run` would and prints each cell's block.
fn run_bench_plan(
    prepared: &harness::commands::bench::BenchPlan,
    args: &harness::commands::bench::BenchArgs,
    now: u64,
) -> Result<bool> {
    use harness::commands::bench;
    let scratch = std::env::temp_dir().join(format!("harness-bench-{}-{now}", std::process::id()));
    let plan_path = bench::write_plan(prepared, &scratch)?;
    let out = prepared.out.clone();
    // The cells' tables print once, below, with their loads: not also as each ends.
    let opts = RunOptions {
        out: Some(out.clone()),
        force: args.force,
        quiet: args.quiet,
        cell_tables: false,
        ..RunOptions::new(plan_path)
    };
    let ran = run_with(opts);
    let _ = std::fs::remove_dir_all(&scratch);
    let ok = ran?;
    let resolved = prepared.frozen.plan.resolved_cells()?;
    let extras = bench::block_extras(&out, args);
    for s in bench::summaries(&out)? {
        let cell = resolved.iter().find(|c| c.name == s.cell);
        let label = cell.map(harness::report::load_label).unwrap_or_default();
        let mut facts = cell.map(bench::load_facts).unwrap_or_default();
        let extra = extras.get(&(s.block, s.arm.clone(), s.cell.clone())).cloned().unwrap_or_default();
        facts.peak_output_tps = extra.peak_output_tps;
        print!("\n{}", bench::render_block(&s, &label, facts, &extra.percentiles, args.verbose));
    }
    println!(
        "plan: {} (run it again: harness run {} --out DIR)",
        out.join(harness::evidence::PLAN_FILE).display(),
        out.join(harness::evidence::PLAN_FILE).display()
    );
    println!("audit: harness replay {}", out.display());
    Ok(ok)
}

/// Whether the command only reads files and prints (no server, no request), so
/// that a closed stdout (`harness plan check PLAN | head`) may end it as it ends
/// any Unix filter.
fn only_prints(command: &Command) -> bool {
    matches!(
        command,
        Command::Plan(PlanCommand::Check { probe: false, .. } | PlanCommand::Derive { .. } | PlanCommand::Power { .. })
            | Command::Replay(_)
            | Command::Noise(_)
            | Command::Completions { .. }
    )
}

/// Restores the default SIGPIPE action (Rust ignores it, so `println!` panics on a
/// closed pipe). Only for commands that print and run nothing: the others keep
/// SIGPIPE ignored, so a vanished reader never kills a study mid-write.
fn end_quietly_on_closed_stdout() {
    // SAFETY: `signal` with SIG_DFL changes one process-wide disposition before
    // any thread is started; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if only_prints(&cli.command) {
        end_quietly_on_closed_stdout();
    }
    let result = match cli.command {
        Command::Plan(PlanCommand::Check { plan, probe, pilots_from }) => {
            match commands::plan::check(&plan, probe, pilots_from.as_deref()) {
                Ok(true) => Ok(()),
                Ok(false) => return ExitCode::from(2),
                Err(e) => Err(e.into()),
            }
        }
        Command::Plan(PlanCommand::Derive { plan, write }) => commands::plan::derive(&plan, write).map_err(Into::into),
        Command::Plan(PlanCommand::Power { plan, noise, json, target_effect, target_power, seed, draws }) => {
            let opts = harness::analysis::power::PowerOptions { plan, noise, target_effect, target_power, seed, draws };
            commands::plan::power(&opts, json.as_deref()).map_err(Into::into)
        }
        Command::Trace { plan, out, traces_only } => {
            commands::plan::trace(&plan, &out, traces_only).map_err(Into::into)
        }
        Command::Run { plan, out, force, resume, quiet, executor, block, study, shared_root } => {
            let done = match (block, study, shared_root, plan) {
                (Some(k), Some(study), Some(root), _) => run_block(k, study, root, quiet),
                (_, _, _, Some(plan)) => run(plan, out, force, resume, quiet, executor),
                _ => Err(Failure::usage("harness run: a PLAN, or --block with --study and --shared-root")),
            };
            match done {
                Ok(true) => Ok(()),
                Ok(false) => return ExitCode::from(2),
                Err(e) => Err(e),
            }
        }
        Command::Report { dir } => report(&dir),
        Command::Accept(args) => match harness::commands::accept::run_blocking(args) {
            Ok(outcome) => {
                print!("{}", outcome.markdown());
                if outcome.failed() {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::Qualify(args) => match harness::commands::qualify::run_blocking(args) {
            Ok(outcome) => {
                if !outcome.all_qualified() {
                    return ExitCode::from(2);
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::BenchClient(args) => harness::commands::bench_loadgen::run(&args).map_err(Into::into),
        Command::Mock(args) => harness::commands::mock::run(&args).map_err(Into::into),
        Command::Replay(args) => match harness::commands::replay::run(&args) {
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
        Command::Gate(args) => match harness::commands::gate::run(&args) {
            Ok(outcome) => {
                print!("{}", outcome.render_text());
                if outcome.exit_code() != 0 {
                    return ExitCode::from(outcome.exit_code());
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Command::Noise(args) => match harness::commands::noise::run(&args) {
            Ok(report) => {
                print!("{}", report.render_text());
                Ok(())
            }
            Err(e) if e.is_bad_input() => {
                eprintln!("harness noise: {e}");
                return ExitCode::from(2);
            }
            Err(e) => Err(e.into()),
        },
        Command::Export(args) => harness::commands::export::run(&args)
            .map(|o| println!("wrote {} objects to {}", o.objects, o.out.display()))
            .map_err(Into::into),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "harness", &mut std::io::stdout());
            Ok(())
        }
        Command::Bench(args) => match bench(&args) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(2),
            Err(e) => Err(e),
        },
        Command::Benchmark(args) => match benchmark(&args) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(2),
            Err(e) => Err(e),
        },
        Command::Profile(args) => match profile(&args) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(2),
            Err(e) => Err(e),
        },
        Command::Compare(args) => match harness::commands::compare::run_blocking(args) {
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
            eprintln!("harness: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_subcommand_help_ends_with_a_worked_example() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        let mut stack: Vec<(String, &clap::Command)> =
            cli.get_subcommands().map(|c| (c.get_name().into(), c)).collect();
        while let Some((name, cmd)) = stack.pop() {
            stack.extend(cmd.get_subcommands().map(|c| (format!("{name} {}", c.get_name()), c)));
            let help = cmd.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            if cmd.get_name() != "help" && !help.starts_with("Example:\n  harness ") {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "no worked example in --help of: {missing:?}");
    }

    /// Every path argument of every subcommand is classified in
    /// `harness::commands::readers`: an evidence directory the command reads (each
    /// run on damaged evidence by tests/integration/evidence_readers.rs) or another
    /// path. A new command or argument fails here until it is classified.
    #[test]
    fn every_path_argument_is_classified_as_an_evidence_reader_or_not() {
        use harness::commands::readers::{EVIDENCE_READERS, OTHER_PATHS};
        let path = clap::value_parser!(PathBuf).type_id();
        let mut found: Vec<(String, String)> = Vec::new();
        let mut stack: Vec<(String, clap::Command)> =
            Cli::command().get_subcommands().map(|c| (c.get_name().to_string(), c.clone())).collect();
        while let Some((name, cmd)) = stack.pop() {
            stack.extend(cmd.get_subcommands().map(|c| (format!("{name} {}", c.get_name()), c.clone())));
            for a in cmd.get_arguments().filter(|a| a.get_value_parser().type_id() == path) {
                found.push((name.clone(), a.get_id().to_string()));
            }
        }
        let classified: Vec<(String, String)> = EVIDENCE_READERS
            .iter()
            .map(|(c, a)| (c.to_string(), a.to_string()))
            .chain(OTHER_PATHS.iter().map(|(c, a, _)| (c.to_string(), a.to_string())))
            .collect();
        let unclassified: Vec<_> = found.iter().filter(|f| !classified.contains(f)).collect();
        assert!(unclassified.is_empty(), "path arguments to classify in commands/readers.rs: {unclassified:?}");
        let stale: Vec<_> = classified.iter().filter(|c| !found.contains(c)).collect();
        assert!(stale.is_empty(), "commands/readers.rs names arguments the command line lacks: {stale:?}");
        let mut twice = classified.clone();
        twice.sort();
        twice.dedup();
        assert_eq!(twice.len(), classified.len(), "an argument is classified twice");
        assert!(found.len() > 20, "{found:?}");
    }

    #[test]
    fn bench_loadgen_keeps_bench_client_as_a_hidden_alias() {
        assert!(Cli::try_parse_from(["harness", "bench-loadgen", "--rates", "10"]).is_ok());
        assert!(Cli::try_parse_from(["harness", "bench-client", "--rates", "10"]).is_ok());
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("bench-loadgen") && !help.contains("bench-client"), "{help}");
    }

    /// Each error says whether it is bad input, through whatever wraps it.
    #[test]
    fn exit_codes_come_from_the_errors_own_verdicts() {
        use harness::commands::run::RunError;
        use harness::plan::PlanError;
        let code = |e: Failure| e.exit_code();
        assert_eq!(code(PlanError::invalid("blocks.count", "must be at least 1").into()), 2);
        let write = PlanError::Write { path: "p".into(), error: std::io::Error::other("disk full") };
        assert_eq!(code(write.into()), 1);
        assert_eq!(code(RunError::input(PlanError::invalid("k", "m")).into()), 2);
        let stopped =
            RunError::StartFailures { arm: "a".into(), failures: 2, max: 2, last: "x".into(), dir: "d".into() };
        assert_eq!(code(stopped.into()), 2);
        let wrapped = Failure::from(PlanError::invalid("k", "m")).context("while checking");
        assert_eq!((wrapped.to_string(), wrapped.exit_code()), ("while checking: k: m".to_string(), 2));
        assert_eq!(code(Failure::other(std::io::Error::other("something else"))), 1);
        assert_eq!(code(Failure::usage("a PLAN, or --block")), 2);
        use harness::commands::bench_loadgen::BenchError;
        assert_eq!(code(BenchError::Invalid("--rate must be positive".into()).into()), 2);
        assert_eq!(code(BenchError::Runtime("no threads".into()).into()), 1);
    }

    /// One name per concept across subcommands: a rate list is `--rate`, a request
    /// count `--num-prompts` and a JSON file `--json`, each with the older spelling
    /// kept as an alias where one existed.
    #[test]
    fn one_flag_name_per_concept_across_subcommands() {
        let ok = |args: &[&str]| Cli::try_parse_from(args).map_err(|e| e.to_string());
        for flags in [["--rate", "10", "--num-prompts", "5"], ["--rates", "10", "--count", "5"]] {
            ok(&[&["harness", "bench-loadgen"][..], &flags].concat()).unwrap();
            ok(&[&["harness", "bench", "--url", "http://127.0.0.1:1"][..], &flags].concat()).unwrap();
        }
        for json in ["--json", "--json-out"] {
            ok(&["harness", "gate", "--baseline", "a", "--candidate", "b", "--rules", "r", json, "v.json"]).unwrap();
        }
        ok(&["harness", "plan", "power", "p.toml", "--noise", "d", "--json", "x.json"]).unwrap();
        ok(&["harness", "noise", "d", "--json", "x.json"]).unwrap();
        let gate = Cli::command().find_subcommand_mut("gate").unwrap().render_help().to_string();
        assert!(gate.contains("--json <JSON_OUT>") && !gate.contains("--json-out <"), "{gate}");
    }

    #[test]
    fn help_lists_the_exit_codes_and_completions_cover_every_subcommand() {
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("Exit codes:\n  0  success\n  2  bad input"), "{help}");
        assert!(help.contains("3  a paired gate") && help.contains("1  anything else"), "{help}");
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "harness", &mut out);
            let text = String::from_utf8(out).unwrap();
            for sub in ["run", "replay", "bench", "gate", "export", "completions"] {
                assert!(text.contains(sub), "{shell:?} completions lack {sub}");
            }
            assert!(text.contains("random-range-ratio"), "{shell:?}: bench's flags");
        }
    }
}
