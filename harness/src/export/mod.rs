//! A study's results in a peer tool's file format (`harness export`, and `harness
//! bench`'s saved result), so dashboards and notebooks written for that tool read
//! our studies. Reads only the evidence directory (the frozen plan, `run.json` for
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
mod guidellm_stats;
mod stats;
mod vllm;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::evidence::Evidence;
use crate::evidence::request_record::RequestRecord;
use crate::plan::{FrozenPlan, freeze};

pub use aiperf::{
    AIPERF_CSV_FILE, AIPERF_JSON_FILE, AIPERF_JSONL_FILE, AIPERF_SCHEMA_VERSION, AIPERF_SOURCE, AIPERF_VERSION,
    AiperfFiles, RunInfo as AiperfRunInfo, aiperf_files,
};
pub use aiperf_metrics::{RunShape as AiperfRunShape, def as aiperf_metric};
pub use guidellm::{GUIDELLM_SOURCE, guidellm_report};
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
}

/// One measured (block, arm, cell) of a study, with its raw records.
pub struct CellRecords {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub records: Vec<RequestRecord>,
}

fn read(path: &Path) -> Result<Vec<u8>, ExportError> {
    std::fs::read(path).map_err(|e| ExportError::Read { path: path.to_path_buf(), message: e.to_string() })
}

/// The frozen plan of an evidence directory.
pub fn read_plan(dir: &Path) -> Result<FrozenPlan, ExportError> {
    let ev = Evidence::open(dir);
    let frozen = freeze(read(&ev.plan_path())?)
        .map_err(|e| ExportError::Plan { dir: dir.to_path_buf(), message: e.to_string() })?;
    // A plan with [pilots]: the loads its pilots derived (pilots/derived.json).
    crate::analysis::pilot::evidence_plan(dir, frozen)
        .map_err(|message| ExportError::Plan { dir: dir.to_path_buf(), message })
}

/// Every scheduled (block, arm, cell) that has a requests file, in schedule order.
pub fn read_cells(dir: &Path, plan: &FrozenPlan) -> Result<Vec<CellRecords>, ExportError> {
    let ev = Evidence::open(dir);
    let mut out = Vec::new();
    for block in &plan.plan.schedule().blocks {
        for arm in &block.arms {
            for cell in &block.cells {
                let path = ev.requests_path(block.index, arm, cell);
                if !path.is_file() {
                    continue;
                }
                let bytes = read(&path)?;
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

/// The study's start (`run.json` `started_unix_ms`), when recorded.
pub fn started_unix_ms(dir: &Path) -> Option<u64> {
    let bytes = std::fs::read(dir.join(crate::evidence::RUN_FILE)).ok()?;
    serde_json::from_slice::<crate::evidence::RunRecord>(&bytes).ok()?.started_unix_ms
}
