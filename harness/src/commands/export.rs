//! `harness export DIR --format vllm-bench|guidellm --out FILE`: writes a study's
//! results in a peer tool's format (`crate::export` computes them). Owns the
//! command's arguments. Opens the directory through `evidence::Sealed` (refused,
//! exit 2, unless finished and as sealed). Must not write into the evidence directory.

use std::path::PathBuf;

use crate::evidence::Sealed;
use crate::export::{ExportError, cells_of, guidellm_report, plan_of, started_of, vllm_bench_results};

/// The formats `harness export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// One `vllm bench serve --save-result --save-detailed` JSON object per
    /// (block, arm, cell), one per line (as `--append-result` writes them).
    #[value(name = "vllm-bench")]
    VllmBench,
    /// One guidellm benchmarks report (`benchmarks.json`, guidellm 0.8.1's
    /// `GenerativeBenchmarksReport`) with one benchmark per (block, arm, cell).
    #[value(name = "guidellm")]
    Guidellm,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The evidence directory (e.g. reports/<study>).
    pub dir: PathBuf,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// The file to write (replaced if present).
    #[arg(long)]
    pub out: PathBuf,
}

/// What `harness export` did.
#[derive(Debug, Clone)]
pub struct ExportOutcome {
    pub out: PathBuf,
    /// Objects written (one per measured block, arm and cell).
    pub objects: usize,
}

/// `harness export`.
pub fn run(args: &ExportArgs) -> Result<ExportOutcome, ExportError> {
    let ev = Sealed::open(&args.dir)?;
    let plan = plan_of(&ev)?;
    let cells = cells_of(&ev, &plan)?;
    let started = started_of(&ev);
    let text = match args.format {
        ExportFormat::VllmBench => {
            let objects = vllm_bench_results(&plan.plan, &cells, started);
            let mut s = String::new();
            for o in &objects {
                s.push_str(&serde_json::to_string(o).unwrap_or_default());
                s.push('\n');
            }
            (s, objects.len())
        }
        ExportFormat::Guidellm => {
            let report = guidellm_report(&plan.plan, &plan.sha256, &cells, started);
            let n = report["benchmarks"].as_array().map_or(0, Vec::len);
            (serde_json::to_string(&report).unwrap_or_default() + "\n", n)
        }
    };
    crate::evidence::write_atomic(&args.out, text.0.as_bytes())
        .map_err(|e| ExportError::Write { path: args.out.clone(), message: e.to_string() })?;
    Ok(ExportOutcome { out: args.out.clone(), objects: text.1 })
}
