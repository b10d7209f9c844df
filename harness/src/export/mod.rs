//! A study's results in a peer tool's file format (`harness export`, and `harness
//! bench`'s saved result), so dashboards and notebooks written for that tool read
//! our studies. Reads only the evidence directory, through `evidence::Sealed`
//! (finished, every file as sealed; refused otherwise) (the frozen plan, `run.json` for
//! the start date, the raw `<cell>.requests.jsonl`); computes each exported number
//! from the raw records the way the peer tool does (`vllm`), with the harness's
//! own measures where the definitions agree (`metrics`). Owns `ExportError` and the
//! formats' key lists. Must not write into the evidence
//! directory and must not change a number to fit a format: where the peer's
//! definition differs from the harness's, the peer's is computed and the
//! difference is documented (docs/export.md).

mod aiperf;
mod aiperf_metrics;
mod guidellm;
mod guidellm_csv;
mod guidellm_html;
mod guidellm_stats;
mod pyfmt;
mod stats;
mod vllm;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::evidence::request_record::RequestRecord;
use crate::evidence::{Evidence, PLAN_FILE, SealError, Sealed};
use crate::plan::{FrozenPlan, freeze};

pub use aiperf::{
    AIPERF_CSV_FILE, AIPERF_JSON_FILE, AIPERF_JSONL_FILE, AIPERF_SCHEMA_VERSION, AIPERF_SOURCE, AIPERF_VERSION,
    AiperfFiles, RunInfo as AiperfRunInfo, aiperf_files,
};
pub use aiperf_metrics::{RunShape as AiperfRunShape, def as aiperf_metric};
pub use guidellm::{GUIDELLM_SOURCE, guidellm_report};
pub use guidellm_csv::guidellm_csv;
pub use guidellm_html::guidellm_html;
pub use vllm::{VLLM_BENCH_KEYS, VLLM_SOURCE, VllmBenchResult, vllm_bench_results, vllm_bench_results_with};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}: line {line}: {message}")]
    Record { path: PathBuf, line: usize, message: String },
    #[error("plan.toml of {dir}: {message}")]
    Plan { dir: PathBuf, message: String },
    #[error("cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
    /// The evidence directory was refused (unfinished, changed, not regular files).
    #[error(transparent)]
    Sealed(#[from] SealError),
}

impl crate::BadInput for ExportError {
    /// Refused evidence, and a plan or record of it that does not parse, are bad
    /// input (exit 2); a failed read or write is not.
    fn is_bad_input(&self) -> bool {
        matches!(self, ExportError::Sealed(_) | ExportError::Plan { .. } | ExportError::Record { .. })
    }
}

/// One measured (block, arm, cell) of a study, with its raw records.
pub struct CellRecords {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub records: Vec<RequestRecord>,
}

/// The frozen plan of the evidence directory `dir`, opened through [`Sealed`]
/// (for callers holding a path; `harness export` opens once and uses
/// [`plan_of`]).
pub fn read_plan(dir: &Path) -> Result<FrozenPlan, ExportError> {
    plan_of(&Sealed::open(dir)?)
}

/// The frozen plan of an opened evidence directory, with the loads its pilots
/// derived (`pilots/derived.json`) and the blocks a sequential study ran.
pub fn plan_of(ev: &Sealed) -> Result<FrozenPlan, ExportError> {
    let dir = ev.root();
    let frozen = freeze(ev.read(PLAN_FILE)?)
        .map_err(|e| ExportError::Plan { dir: dir.to_path_buf(), message: e.to_string() })?;
    crate::analysis::pilot::evidence_plan(dir, frozen)
        .map_err(|message| ExportError::Plan { dir: dir.to_path_buf(), message })
}

/// [`cells_of`] for a path (opens it through [`Sealed`]).
pub fn read_cells(dir: &Path, plan: &FrozenPlan) -> Result<Vec<CellRecords>, ExportError> {
    cells_of(&Sealed::open(dir)?, plan)
}

/// Every scheduled (block, arm, cell) whose requests file the manifest lists, in
/// schedule order (a cell never run, after an arm fault, has none).
pub fn cells_of(ev: &Sealed, plan: &FrozenPlan) -> Result<Vec<CellRecords>, ExportError> {
    let layout = Evidence::open(ev.root());
    let mut out = Vec::new();
    for block in &plan.plan.schedule().blocks {
        for arm in &block.arms {
            for cell in &block.cells {
                let path = layout.requests_path(block.index, arm, cell);
                let rel = crate::evidence::requests_path(block.index, arm, cell);
                let Some(bytes) = ev.read_opt(&rel)? else { continue };
                let text = String::from_utf8_lossy(&bytes);
                let mut records = Vec::new();
                for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                    let r: RequestRecord = serde_json::from_str(line).map_err(|e| ExportError::Record {
                        path: path.clone(),
                        line: i + 1,
                        message: e.to_string(),
                    })?;
                    records.push(r);
                }
                out.push(CellRecords { block: block.index, arm: arm.clone(), cell: cell.clone(), records });
            }
        }
    }
    Ok(out)
}

/// The study's start (`run.json` `started_unix_ms`), when recorded (for callers
/// holding a path: opens it through [`Sealed`]).
pub fn started_unix_ms(dir: &Path) -> Option<u64> {
    started_of(&Sealed::open(dir).ok()?)
}

/// The opened study's start (`run.json` `started_unix_ms`), when recorded.
pub fn started_of(ev: &Sealed) -> Option<u64> {
    ev.read_json::<crate::evidence::RunRecord>(crate::evidence::RUN_FILE).ok()??.started_unix_ms
}
