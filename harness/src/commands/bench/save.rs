//! `harness bench --save-result`: one `vllm bench serve --save-result` JSON file per
//! cell of the finished study, with vLLM's keys (`export::vllm_bench_results`, the
//! same objects `harness export --format vllm-bench` writes), named as vLLM names
//! them (`<label or backend>-<rate>qps[-concurrency<C>]-<model>-<date>.json`) unless
//! `--result-filename` names the file. Owns the file names only. Must not compute a
//! number: the exporter does.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{BenchArgs, BenchError};
use crate::export::{VllmBenchResult, read_cells, read_plan, started_unix_ms, vllm_bench_results_with};

/// Writes one result file per cell of the study at `evidence`; returns their paths.
pub fn save_results(a: &BenchArgs, evidence: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let export = |e: crate::export::ExportError| BenchError::Save { why: e.to_string() };
    let plan = read_plan(evidence).map_err(export)?;
    let cells = read_cells(evidence, &plan).map_err(export)?;
    let started = started_unix_ms(evidence);
    let dir = a.result_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(|error| BenchError::Io { path: dir.clone(), error })?;
    let mut written = Vec::new();
    for c in &cells {
        let percentiles = super::metric_percentiles(a)?;
        let Some(mut result) =
            vllm_bench_results_with(&plan.plan, std::slice::from_ref(c), started, &percentiles).into_iter().next()
        else {
            continue;
        };
        if let Some(label) = &a.label {
            result.label = label.clone();
        }
        let path = dir.join(file_name(a, &result, &c.cell, cells.len()));
        // vLLM's --metadata: extra top-level string keys.
        let mut value = serde_json::to_value(&result).unwrap_or_default();
        if let Value::Object(map) = &mut value {
            for (k, v) in a.metadata.iter().filter_map(|m| m.split_once('=')) {
                map.insert(k.trim().to_string(), Value::String(v.to_string()));
            }
        }
        let text = serde_json::to_vec_pretty(&value).unwrap_or_default();
        crate::evidence::write_atomic(&path, &text)
            .map_err(|e| BenchError::Io { path: path.clone(), error: std::io::Error::other(e.to_string()) })?;
        written.push(path);
    }
    Ok(written)
}

/// `--result-filename` (with several cells, the cell's name before the extension),
/// else vLLM's own pattern.
fn file_name(a: &BenchArgs, r: &VllmBenchResult, cell: &str, cells: usize) -> String {
    match &a.result_filename {
        Some(f) if cells == 1 => f.clone(),
        Some(f) => {
            let p = Path::new(f);
            let stem = p.file_stem().map_or(f.clone(), |s| s.to_string_lossy().into_owned());
            match p.extension() {
                Some(ext) => format!("{stem}-{cell}.{}", ext.to_string_lossy()),
                None => format!("{stem}-{cell}"),
            }
        }
        None => {
            let rate = match &r.request_rate {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let concurrency = r.max_concurrency.map_or(String::new(), |c| format!("-concurrency{c}"));
            let model = r.model_id.rsplit('/').next().unwrap_or(&r.model_id);
            // vLLM: `label or backend`.
            let label = a.label.as_deref().unwrap_or(&r.backend);
            format!("{label}-{rate}qps{concurrency}-{model}-{}.json", r.date)
        }
    }
}
