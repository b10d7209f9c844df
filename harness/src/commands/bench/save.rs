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

/// Whether `--result-dir` and `--result-filename` can take the result, checked
/// before anything runs: the directory, when it exists, is a directory (it is
/// created after the run otherwise, as vLLM does), and the name is one plain file
/// name (not empty, no path separator, not `.` or `..`).
pub fn check_destination(a: &BenchArgs) -> Result<(), BenchError> {
    let bad = |m: String| BenchError::Args(m);
    if let Some(dir) = &a.result_dir
        && dir.exists()
        && !dir.is_dir()
    {
        return Err(bad(format!("--result-dir {}: exists and is not a directory", dir.display())));
    }
    if let Some(name) = &a.result_filename
        && (name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']))
    {
        return Err(bad(format!(
            "--result-filename {name:?}: must be one file name (no directory part; --result-dir says where)"
        )));
    }
    if let (Some(name), dir) = (&a.result_filename, a.result_dir.clone().unwrap_or_else(|| PathBuf::from(".")))
        && dir.join(name).is_dir()
    {
        return Err(bad(format!("--result-filename {name:?}: {} is a directory", dir.join(name).display())));
    }
    Ok(())
}

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
        // vLLM: `backend` and `endpoint_type` are `--backend` as given (the
        // export's are the route's name, vLLM's default `openai` or `openai-chat`),
        // and `label` is `--label or --backend`.
        if let Some(backend) = &a.backend {
            result.backend = backend.clone();
            result.endpoint_type = backend.clone();
        }
        result.label = a.label.clone().unwrap_or_else(|| result.backend.clone());
        let path = dir.join(file_name(a, &result, &c.cell, cells.len()));
        // vLLM's --metadata: extra top-level string keys.
        let mut value = serde_json::to_value(&result).unwrap_or_default();
        if let Value::Object(map) = &mut value {
            for (k, v) in a.metadata.iter().filter_map(|m| m.split_once('=')) {
                map.insert(k.trim().to_string(), v.trim().to_string().into());
            }
            keep_vllm_keys(a, map)?;
        }
        let io = |error| BenchError::Io { path: path.clone(), error };
        if a.append_result {
            // vLLM's --append-result: one JSON object per line, appended.
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io)?;
            let empty = f.metadata().map_err(io)?.len() == 0;
            let line = serde_json::to_string(&value).unwrap_or_default();
            f.write_all(format!("{}{line}", if empty { "" } else { "\n" }).as_bytes()).map_err(io)?;
        } else {
            let text = serde_json::to_vec(&value).unwrap_or_default();
            crate::evidence::write_atomic(&path, &text)
                .map_err(|e| BenchError::Io { path: path.clone(), error: std::io::Error::other(e.to_string()) })?;
        }
        written.push(path);
    }
    Ok(written)
}

/// The keys vLLM writes: only the `--percentile-metrics` sections (default
/// ttft,tpot,itl) and `--metric-percentiles` lines (default 99); without
/// `--save-detailed`, none of the per-request lists.
fn keep_vllm_keys(a: &BenchArgs, map: &mut serde_json::Map<String, Value>) -> Result<(), BenchError> {
    const DETAILED: [&str; 9] = [
        "input_lens",
        "output_lens",
        "start_times",
        "ttfts",
        "itls",
        "generated_texts",
        "errors",
        "server_queue_times",
        "server_ttfts",
    ];
    if !a.save_detailed {
        for k in DETAILED {
            map.remove(k);
        }
    }
    let metrics: Vec<&str> =
        a.percentile_metrics.as_deref().unwrap_or("ttft,tpot,itl").split(',').map(str::trim).collect();
    let levels: Vec<String> = super::metric_percentiles(a)?
        .into_iter()
        .map(|p| if p.fract() == 0.0 { format!("p{}", p as u64) } else { format!("p{p}") })
        .collect();
    map.retain(|k, _| {
        let Some(stem) = k.strip_suffix("_ms") else { return true };
        let Some((stat, metric)) = stem.split_once('_') else { return true };
        if !matches!(metric, "ttft" | "tpot" | "itl" | "e2el") {
            return true;
        }
        let kept_stat = matches!(stat, "mean" | "median" | "std") || levels.iter().any(|l| l == stat);
        metrics.contains(&metric) && kept_stat
    });
    Ok(())
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
