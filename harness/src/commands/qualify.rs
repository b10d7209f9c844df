//! `harness qualify PLAN`: only the plan's quality gates (GSM8K strict match, NLL,
//! passkey retrieval, serial-vs-batched parity), each arm on a fresh server, into a
//! new evidence directory. Owns the command's flags and its evidence directory;
//! the gates themselves are `quality`'s. Prints the verdict table; `main.rs` turns
//! an unqualified arm into exit code 2.

use std::path::PathBuf;

use crate::quality::{QualifyOutcome, QualityError};

/// `harness qualify PLAN`: only the quality gates, each arm on a fresh server.
#[derive(Debug, Clone, clap::Args)]
pub struct QualifyArgs {
    /// The plan file (with a [qualification] table).
    pub plan: PathBuf,
    /// Evidence directory (default: reports/<study>-qualify).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace an earlier evidence directory at --out.
    #[arg(long)]
    pub force: bool,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// Freezes the plan into a new evidence directory (`plan.toml`, `manifest.json`),
/// runs [`crate::quality::qualify_plan`] into its `qualification/` and prints the summary. `Ok`
/// even when arms are not qualified: the caller decides the exit code
/// (`QualifyOutcome::all_qualified`).
pub fn run_blocking(args: QualifyArgs) -> Result<QualifyOutcome, QualityError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| QualityError::Runtime(e.to_string()))?;
    rt.block_on(async move {
        let frozen = crate::plan::freeze_file(&args.plan)?;
        let plan = &frozen.plan;
        let out =
            args.out.clone().unwrap_or_else(|| PathBuf::from("reports").join(format!("{}-qualify", plan.study.name)));
        let ev = crate::evidence::Evidence::create(&out, args.force)?;
        crate::evidence::write_bytes(&ev.plan_path(), &frozen.bytes)?;
        let base = std::env::current_dir().map_err(|error| QualityError::Io { path: PathBuf::from("."), error })?;
        let outcome = crate::quality::qualify_plan(
            plan,
            &base,
            &ev.root().join(crate::evidence::QUALIFICATION_DIR),
            crate::quality::Progress { quiet: args.quiet },
        )
        .await?;
        crate::evidence::write_manifest(ev.root(), &plan.study.name, &frozen.sha256, crate::evidence::git_info(&base))?;
        print!("{}", outcome.render_text());
        println!("evidence: {}", ev.root().display());
        Ok(outcome)
    })
}
