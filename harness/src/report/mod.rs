//! The rendering half of a study (DESIGN sections 4-6): from what `analysis` reads
//! and decides of one evidence directory to `results/`:
//! - `matrix.csv`, `matrix.parquet`: one unpooled row per (block, arm, cell);
//! - `requests.csv`, `requests.parquet`: one row per request (`requests`);
//! - `evidence.json` (units in parallel maps beside the values, `units`): every derived number (per-hypothesis block effects, wins, p,
//!   Holm p, median, interval, screen, claim; descriptive cells' medians; failures;
//!   the summary check; `qualification.json` verbatim when it exists);
//! - `figures/*.svg|png`: latency against load, paired throughput, TTFT/TPOT ECDFs;
//! - `report.md`: the power summary (studies with `[pilots]`, `power`), the tuning
//!   table and recommendation (`tuning`), what was run, plan warnings, the claims
//!   table, the measurement floor beside the per-cell tables (`floor`), per-cell tables (with a session cell's per-turn rows, `turns`), the
//!   observer-effect comparison (`observer`), failures and
//!   the exact definitions with peers' names; `report.html`: the same page, self-contained, figures inline
//!   as SVG (`html`).
//!
//! [`build`] reads only the evidence, through `analysis::study` (`plan.toml`, `raw/`,
//! the git revision from `manifest.json` or `run.json`), which recomputes every
//! per-cell summary from the raw records through `metrics` (the stored summaries are compared, never trusted, and
//! never rewritten), and writes the files above deterministically: no timestamps,
//! plan/schedule order, fixed float formats, so a rebuild is byte-identical.
//! [`regenerate`] (`harness report DIR`) first opens the study through
//! `evidence::Sealed` (refused unless finished and as sealed), then also rewrites
//! the manifest's entries for those files. Owns `ReportError`. Must not run servers, read evidence itself
//! (`analysis::study` does), or decide anything `stats` decides (`analysis::claims`
//! wires plan, summaries and `stats` together).

mod figures;
mod floor;
mod html;
mod machines;
mod markdown;
mod matrix;
mod noise;
mod observer;
mod power;
mod requests;
mod sequential;
mod text;
mod tuning;
mod turns;
mod units;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

pub use matrix::load_label;
pub use requests::{COLUMNS as REQUEST_COLUMNS, RequestRow};
pub use text::{claims_markdown, claims_terminal};
pub use tuning::{ConfigurationScore, TuningSummary};
pub use units::metric_unit;

use crate::analysis::{Analysis, AnalysisError, FailedRequest, Loaded, UnitRow};
use crate::evidence::{
    EVIDENCE_FILE, EvidenceError, FIGURES_DIR, GitInfo, MANIFEST_FILE, MATRIX_CSV_FILE, MATRIX_PARQUET_FILE, Manifest,
    ManifestFile, REPORT_HTML_FILE, REPORT_MD_FILE, REQUESTS_CSV_FILE, REQUESTS_PARQUET_FILE, SealError, Sealed,
    hash_regular, listing, write_bytes, write_json,
};
use crate::metrics::PERCENTILE_METHOD;

/// Version of `evidence.json`.
pub const EVIDENCE_FORMAT: &str = "harness-report-evidence/1";

/// Everything that stops a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {message}")]
    Json { path: PathBuf, message: String },
    #[error("matrix: {0}")]
    Matrix(String),
    #[error("figure {path}: {message}")]
    Figure { path: PathBuf, message: String },
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    #[error(transparent)]
    Analysis(#[from] crate::analysis::AnalysisError),
    /// The evidence directory was refused (unfinished, changed, not regular files).
    #[error(transparent)]
    Sealed(#[from] SealError),
}

impl crate::BadInput for ReportError {
    /// Refused evidence, and a file of it that does not parse, are bad input (exit 2).
    fn is_bad_input(&self) -> bool {
        use crate::analysis::AnalysisError as A;
        matches!(
            self,
            ReportError::Sealed(_) | ReportError::Json { .. } | ReportError::Analysis(A::Json { .. } | A::Plan(_))
        )
    }
}

/// What a report run produced.
#[derive(Debug, Clone)]
pub struct ReportOutcome {
    /// `results/report.md`.
    pub report: PathBuf,
    /// The claims table as terminal text.
    pub claims: String,
    /// Files written, relative to the evidence directory.
    pub files: Vec<String>,
    /// Stored summaries that differ from their recomputation, manifest problems.
    pub warnings: Vec<String>,
    /// Latency thresholds within ten times the client's measurement floor (also in
    /// report.md, `floor`): a fact about the plan on this machine, not a problem
    /// of the evidence.
    pub floor_notes: Vec<String>,
}

#[derive(Serialize)]
struct SummaryCheck<'a> {
    checked: usize,
    mismatches: &'a [String],
}

#[derive(Serialize)]
struct EvidenceJson<'a> {
    format: &'static str,
    study: &'a str,
    plan_sha256: &'a str,
    git: Option<&'a GitInfo>,
    percentile_method: &'static str,
    alpha: Option<f64>,
    interval_target: f64,
    confirmation_blocks: u32,
    descriptive_blocks: u32,
    /// `analysis.blocking`: "study" or "cell".
    blocking: &'static str,
    units: Vec<&'a UnitRow>,
    hypotheses: Vec<units::HypothesisOut<'a>>,
    confirmation_cells: Vec<units::CellOut<'a>>,
    descriptive_cells: Vec<units::CellOut<'a>>,
    failures: &'a [FailedRequest],
    summary_check: SummaryCheck<'a>,
    figures: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    qualification: Option<&'a Value>,
    /// The unit of every key of the cells' `medians` (`units`).
    median_units: std::collections::BTreeMap<&'static str, &'static str>,
    /// `[tuning]`: the recommendation and its rule (absent without `[tuning]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    tuning: Option<TuningSummary>,
    /// The study's power from its pilots' noise (`power`; absent without `[pilots]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    power: Option<power::PowerEvidence>,
    /// `analysis.noise`'s decomposition, or `{"error": why}` (absent without the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    noise: Option<Value>,
}

fn evidence_json<'a>(l: &'a Loaded, a: &'a Analysis, figures: &'a [String]) -> EvidenceJson<'a> {
    let kind = |k: crate::plan::CellKind| a.cells.iter().filter(move |c| c.kind == k).map(units::cell).collect();
    EvidenceJson {
        format: EVIDENCE_FORMAT,
        study: &l.frozen.plan.study.name,
        plan_sha256: &l.frozen.sha256,
        git: l.git.as_ref(),
        percentile_method: PERCENTILE_METHOD,
        alpha: a.alpha,
        interval_target: a.interval_target,
        confirmation_blocks: l.frozen.plan.blocks.count,
        descriptive_blocks: l.frozen.plan.blocks.descriptive,
        blocking: a.blocking.as_str(),
        units: l.units.iter().map(|u| &u.status).collect(),
        hypotheses: a.hypotheses.iter().map(units::hypothesis).collect(),
        confirmation_cells: kind(crate::plan::CellKind::Confirmation),
        descriptive_cells: kind(crate::plan::CellKind::Descriptive),
        failures: &l.failures,
        summary_check: SummaryCheck { checked: l.summaries_checked, mismatches: &l.summary_mismatches },
        figures,
        qualification: l.qualification.as_ref(),
        median_units: units::median_units(),
        tuning: tuning::summarize(&l.frozen.plan, a),
        power: power::evidence(l),
        noise: noise::evidence(l),
    }
}

/// Builds every report file under `root/results/` from the raw evidence (see the
/// module doc). Does not touch the manifest.
pub fn build(root: &Path) -> Result<ReportOutcome, ReportError> {
    let mut l = crate::analysis::load(root)?;
    l.power = crate::analysis::power::pilot_noise::power_summary(root, &l.frozen);
    l.noise = noise::decomposition(&l);
    let unqualified = crate::analysis::study::unqualified_arms(l.qualification.as_ref());
    let a = l.analyse(&unqualified).map_err(AnalysisError::from)?;
    if let Some(Ok(power)) = l.power.as_mut() {
        for h in &a.hypotheses {
            power.add_realised(&h.name, &power::realised_log_ratios(h)).map_err(AnalysisError::from)?;
        }
    }
    let results = crate::analysis::study::results_dir(root);
    let fig_dir = root.join(FIGURES_DIR);
    if fig_dir.exists() {
        std::fs::remove_dir_all(&fig_dir).map_err(|error| ReportError::Io { path: fig_dir.clone(), error })?;
    }
    std::fs::create_dir_all(&fig_dir).map_err(|error| ReportError::Io { path: fig_dir.clone(), error })?;
    let mut files = Vec::new();
    let mut df = matrix::dataframe(&l)?;
    write_bytes(&root.join(MATRIX_CSV_FILE), &matrix::csv_bytes(&mut df)?)?;
    write_bytes(&root.join(MATRIX_PARQUET_FILE), &matrix::parquet_bytes(&mut df)?)?;
    files.extend([MATRIX_CSV_FILE.to_string(), MATRIX_PARQUET_FILE.to_string()]);
    files.extend(requests::write(root, &l)?);
    let figures = figures::write_all(&l, &a, &fig_dir)?;
    files.extend(figures.iter().map(|f| format!("{FIGURES_DIR}/{f}")));
    write_json(&root.join(EVIDENCE_FILE), &evidence_json(&l, &a, &figures))?;
    let report = root.join(REPORT_MD_FILE);
    let md = markdown::render(&l, &a, &figures);
    write_bytes(&report, md.as_bytes())?;
    write_bytes(&root.join(REPORT_HTML_FILE), html::render(&md, &results).as_bytes())?;
    files.extend([EVIDENCE_FILE.to_string(), REPORT_MD_FILE.to_string()]);
    files.push(REPORT_HTML_FILE.to_string());
    let mut claims = claims_terminal(&a);
    claims.push_str(&tuning::terminal_line(&l.frozen.plan, &a));
    let mut warnings = l.summary_mismatches.clone();
    // The machine holding most of a measure's variance (a dispatched study).
    if let Some(Ok(n)) = &l.noise {
        warnings.extend(n.warnings.iter().cloned());
    }
    let floor_notes = floor::warnings(&l);
    Ok(ReportOutcome { report, claims, files, warnings, floor_notes })
}

/// The report's own files (besides `results/figures/*`), relative to the evidence root.
pub const REPORT_FILES: [&str; 7] = [
    MATRIX_CSV_FILE,
    MATRIX_PARQUET_FILE,
    EVIDENCE_FILE,
    REPORT_MD_FILE,
    REQUESTS_CSV_FILE,
    REQUESTS_PARQUET_FILE,
    REPORT_HTML_FILE,
];

fn report_owned(path: &str) -> bool {
    path.strip_prefix(FIGURES_DIR).is_some_and(|f| f.starts_with('/')) || REPORT_FILES.contains(&path)
}

/// `harness report DIR`: opens the finished study through [`Sealed`] first (every
/// raw file, input, stored summary and report file as sealed, regular files only:
/// refused otherwise, before anything is rewritten), then [`build`], then the
/// manifest's entries for the report's own files (`REPORT_FILES`,
/// `results/figures/*`) are replaced by the files now there. Every other entry is
/// kept as it was.
pub fn regenerate(root: &Path) -> Result<ReportOutcome, ReportError> {
    let sealed = Sealed::open(root)?;
    let outcome = build(root)?;
    let mut manifest: Manifest = sealed.manifest().clone();
    let mut now = Vec::new();
    for e in listing(root)?.into_iter().filter(|e| report_owned(&e.rel)) {
        let d =
            hash_regular(root, &e.rel, u64::MAX).map_err(|error| ReportError::Io { path: e.path.clone(), error })?;
        now.push(ManifestFile { path: e.rel, bytes: d.bytes, sha256: d.sha256 });
    }
    manifest.files.retain(|f| !report_owned(&f.path));
    manifest.files.extend(now);
    manifest.files.sort_by(|a, b| a.path.cmp(&b.path));
    write_json(&root.join(MANIFEST_FILE), &manifest)?;
    Ok(outcome)
}
