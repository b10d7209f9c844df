//! The inputs directory (`inputs/` of the evidence layout): `prompts.jsonl`,
//! `traces/<cell>.trace.jsonl`, `arrivals/<cell>.<ext>` (exact copies of trace
//! files) and `catalog.json`, which lists every file with its
//! size and SHA-256; and the check that a directory still matches its catalog. Owns
//! that layout and the catalog format. Must not decide what the traces contain
//! (`arrivals`, `panel`) and must not repair a directory that fails verification.

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::arrival_file::{ArrivalFormat, ArrivalRow};
use super::arrivals::{Trace, cell_trace_from};
use super::panel::Panel;
use super::replayed::{arrival_copy_path, read_arrival_file};
use super::{CatalogProblem, TraceError};
use crate::evidence::{CATALOG_FILE, PROMPTS_FILE, hex, sha256_hex, trace_file, write_atomic};
use crate::plan::seed::cell_seed;
use crate::plan::{Load, Plan};

/// The `format` value of catalogs this code writes and reads.
pub const CATALOG_FORMAT: &str = "harness-trace-catalog/1";

/// `catalog.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub format: String,
    pub study: String,
    /// SHA-256 of the plan file the inputs were generated from.
    pub plan_sha256: String,
    /// Every file, in write order: `prompts.jsonl` (when written), then the traces.
    pub files: Vec<CatalogFile>,
    /// One entry per cell trace.
    pub traces: Vec<CatalogTrace>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    /// Relative to the directory holding `catalog.json`, `/`-separated.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogTrace {
    pub cell: String,
    pub path: String,
    pub requests: u64,
    /// Hex of the cell's 32-byte arrival seed (see `seed`).
    pub seed: String,
    /// Trace-file cells: the file the arrivals were replayed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<CatalogSource>,
}

/// Where a trace-file cell's arrivals came from (`load = "trace"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogSource {
    /// The plan's `trace` path, as written.
    pub path: String,
    /// The exact copy under this directory (listed in `files`), e.g. `arrivals/<cell>.jsonl`.
    pub copy: String,
    /// `Mooncake trace JSONL` or `Azure LLM inference trace CSV`.
    pub format: String,
    /// Rows in the file; the cell uses the first `requests`.
    pub rows: u64,
    pub time_scale: f64,
    /// Whether prompts and output lengths follow the rows (`trace_lengths`).
    pub lengths: bool,
}

/// Relative path of a cell's trace file.
pub fn trace_path(cell: &str) -> String {
    trace_file(cell)
}

fn write(dir: &Path, rel: &str, bytes: &[u8]) -> Result<CatalogFile, TraceError> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|error| TraceError::Io { path: parent.to_path_buf(), error })?;
    }
    write_atomic(&path, bytes).map_err(|error| TraceError::Io { path, error })?;
    Ok(CatalogFile { path: rel.to_string(), bytes: bytes.len() as u64, sha256: sha256_hex(bytes) })
}

/// Every cell's trace, in plan order, trace files read relative to the working
/// directory. Fails if a load is not derived yet.
pub fn generate_traces(plan: &Plan) -> Result<Vec<Trace>, TraceError> {
    generate_traces_in(plan, Path::new("."))
}

/// A trace-file cell's file (bytes, rows); `None` for other loads.
type Source = Option<(Vec<u8>, Vec<ArrivalRow>)>;

fn traces_and_sources(plan: &Plan, base: &Path) -> Result<Vec<(Trace, Source)>, TraceError> {
    let mut out = Vec::new();
    for cell in plan.resolved_cells()? {
        let source = match plan.cell(&cell.name).map(|c| &c.load) {
            Some(Load::Trace { path, .. }) => Some(read_arrival_file(base, path)?),
            _ => None,
        };
        let trace = cell_trace_from(plan, &cell, source.as_ref().map(|s| s.1.as_slice()))?;
        out.push((trace, source));
    }
    Ok(out)
}

/// Every cell's trace, in plan order, trace files read relative to `base`.
pub fn generate_traces_in(plan: &Plan, base: &Path) -> Result<Vec<Trace>, TraceError> {
    Ok(traces_and_sources(plan, base)?.into_iter().map(|(t, _)| t).collect())
}

/// [`write_inputs_in`] with trace files read relative to the working directory.
pub fn write_inputs(dir: &Path, plan: &Plan, plan_sha256: &str, panel: Option<&Panel>) -> Result<Catalog, TraceError> {
    write_inputs_in(dir, plan, plan_sha256, panel, Path::new("."))
}

/// Writes the traces (and the panel, when given) under `dir`, an exact copy of each
/// trace-file cell's file (`arrivals/<cell>.<ext>`, read relative to `base`), then
/// `catalog.json`. The same plan, panel and files give byte-identical files.
pub fn write_inputs_in(
    dir: &Path,
    plan: &Plan,
    plan_sha256: &str,
    panel: Option<&Panel>,
    base: &Path,
) -> Result<Catalog, TraceError> {
    let traces = traces_and_sources(plan, base)?;
    let mut files = Vec::new();
    if let Some(panel) = panel {
        panel.check(plan)?;
        files.push(write(dir, PROMPTS_FILE, panel.to_jsonl().as_bytes())?);
    }
    let mut entries = Vec::new();
    for (t, source) in &traces {
        let rel = trace_path(&t.cell);
        files.push(write(dir, &rel, t.to_jsonl().as_bytes())?);
        let source = match (source, plan.cell(&t.cell).map(|c| &c.load)) {
            (Some((bytes, rows)), Some(Load::Trace { path, time_scale, lengths })) => {
                let copy = arrival_copy_path(&t.cell, path);
                files.push(write(dir, &copy, bytes)?);
                let format = ArrivalFormat::of_path(path).map_or("", |f| f.label()).to_string();
                Some(CatalogSource {
                    path: path.clone(),
                    copy,
                    format,
                    rows: rows.len() as u64,
                    time_scale: *time_scale,
                    lengths: *lengths,
                })
            }
            _ => None,
        };
        entries.push(CatalogTrace {
            cell: t.cell.clone(),
            path: rel,
            requests: t.entries.len() as u64,
            seed: hex(&cell_seed(plan.study.seed, &t.cell)),
            source,
        });
    }
    let catalog = Catalog {
        format: CATALOG_FORMAT.into(),
        study: plan.study.name.clone(),
        plan_sha256: plan_sha256.to_string(),
        files,
        traces: entries,
    };
    let mut json = serde_json::to_string_pretty(&catalog)
        .map_err(|e| TraceError::Malformed { what: CATALOG_FILE.into(), message: e.to_string() })?;
    json.push('\n');
    write(dir, CATALOG_FILE, json.as_bytes())?;
    Ok(catalog)
}

fn safe_relative(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Reads `dir/catalog.json` and checks every listed file's size and SHA-256. Names
/// every missing or changed file; returns the catalog when all match.
pub fn verify_catalog(dir: &Path) -> Result<Catalog, TraceError> {
    let path = dir.join(CATALOG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|error| TraceError::Io { path: path.clone(), error })?;
    let catalog: Catalog = serde_json::from_str(&text)
        .map_err(|e| TraceError::Malformed { what: path.display().to_string(), message: e.to_string() })?;
    if catalog.format != CATALOG_FORMAT {
        return Err(TraceError::Malformed {
            what: path.display().to_string(),
            message: format!("format {:?}, expected {CATALOG_FORMAT:?}", catalog.format),
        });
    }
    let mut problems = Vec::new();
    for f in &catalog.files {
        if !safe_relative(&f.path) {
            problems.push(CatalogProblem::UnsafePath { path: f.path.clone() });
            continue;
        }
        match std::fs::read(dir.join(&f.path)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                problems.push(CatalogProblem::Missing { path: f.path.clone() });
            }
            Err(e) => problems.push(CatalogProblem::Unreadable { path: f.path.clone(), message: e.to_string() }),
            Ok(bytes) => {
                let sha256 = sha256_hex(&bytes);
                if sha256 != f.sha256 || bytes.len() as u64 != f.bytes {
                    problems.push(CatalogProblem::Changed {
                        path: f.path.clone(),
                        expected_sha256: f.sha256.clone(),
                        actual_sha256: sha256,
                        expected_bytes: f.bytes,
                        actual_bytes: bytes.len() as u64,
                    });
                }
            }
        }
    }
    if problems.is_empty() { Ok(catalog) } else { Err(TraceError::Catalog(problems)) }
}

/// Reads one cell's trace from a verified inputs directory.
pub fn read_trace(dir: &Path, cell: &str) -> Result<Trace, TraceError> {
    let path = dir.join(trace_path(cell));
    let text = std::fs::read_to_string(&path).map_err(|error| TraceError::Io { path, error })?;
    Trace::from_jsonl(cell, &text)
}
