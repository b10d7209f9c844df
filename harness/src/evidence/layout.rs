//! Owns the names of the evidence tree's files and folders, as in the tree drawn in
//! `evidence/mod.rs` (and docs/design.md section 4), for the files no typed record
//! beside it owns (those records keep their own: `RUN_FILE`, `UNIT_FILE`,
//! `MANIFEST_FILE`, `STARTUP_FILE`, `COMPARE_FILE`, `DISPATCH_FILE`, ...). Every
//! evidence file or folder name is written once, here or next to its record; code
//! outside `evidence/` uses these names and never spells one as a string literal
//! Must not decide what the
//! files contain.
//!
//! A name ending in `_FILE` or `_DIR` that holds a `/` is relative to the evidence
//! root; one without is a plain name inside the folder its doc comment gives.

// The study's top level.

/// The plan's exact bytes, at the evidence root (first write).
pub const PLAN_FILE: &str = "plan.toml";
/// With `[sequential]`: every look, verdict and stop, at the evidence root.
pub const SEQUENTIAL_FILE: &str = "sequential.json";
/// `harness compare`'s report for a reader, beside `compare.json`.
pub const COMPARE_REPORT_FILE: &str = "compare.md";

// inputs/ (a study's, the pilots', qualification's).

/// The inputs' folder, at the evidence root (and at the pilots' and qualification's).
pub const INPUTS_DIR: &str = "inputs";
/// The prompt panel, in an inputs folder.
pub const PROMPTS_FILE: &str = "prompts.jsonl";
/// The inputs' catalog (every file, its size and hash), in an inputs folder.
pub const CATALOG_FILE: &str = "catalog.json";
/// `inputs/prompts.jsonl`, relative to the evidence root.
pub const PROMPTS_PATH: &str = "inputs/prompts.jsonl";
/// `inputs/catalog.json`, relative to the evidence root.
pub const CATALOG_PATH: &str = "inputs/catalog.json";
/// The cells' request lists, in an inputs folder.
pub const TRACES_DIR: &str = "traces";
/// The copies of the cells' arrival-trace files, in an inputs folder.
pub const ARRIVALS_DIR: &str = "arrivals";
/// The end of a cell's trace file's name.
pub const TRACE_SUFFIX: &str = ".trace.jsonl";

/// `traces/<cell>.trace.jsonl`, relative to an inputs folder.
pub fn trace_file(cell: &str) -> String {
    format!("{TRACES_DIR}/{cell}{TRACE_SUFFIX}")
}

/// `inputs/traces/<cell>.trace.jsonl`, relative to the evidence root.
pub fn trace_path(cell: &str) -> String {
    format!("{INPUTS_DIR}/{}", trace_file(cell))
}

/// `arrivals/<cell>.<ext>` (`ext`: `jsonl` or `csv`), relative to an inputs folder.
pub fn arrivals_file(cell: &str, ext: &str) -> String {
    format!("{ARRIVALS_DIR}/{cell}.{ext}")
}

/// `inputs/arrivals/<cell>.<ext>`, relative to the evidence root.
pub fn arrivals_path(cell: &str, ext: &str) -> String {
    format!("{INPUTS_DIR}/{}", arrivals_file(cell, ext))
}

// raw/b<block>/<arm>/: one server invocation.

/// The units' folder, at the evidence root (and at the pilots').
pub const RAW_DIR: &str = "raw";
/// The server's stdout and stderr, in a unit's (or a qualification arm's) folder.
pub const SERVER_LOG_FILE: &str = "server.log";
/// The engine's per-request receipts, in a unit's folder.
pub const RECEIPTS_FILE: &str = "receipts.jsonl";
/// The 1 Hz `/metrics` scrapes, in a unit's folder.
pub const SCRAPES_FILE: &str = "scrapes.jsonl";
/// The memory samples, in a unit's folder.
pub const MEMORY_FILE: &str = "memory.jsonl";
/// The end of a cell's raw request records' name.
pub const REQUESTS_SUFFIX: &str = ".requests.jsonl";
/// `harness compare`'s parity run, in its arm's folder under `raw/parity/`.
pub const PARITY_FILE: &str = "parity.jsonl";
/// The phase folder of `harness compare`'s parity runs, under `raw/`.
pub const PARITY_PHASE: &str = "parity";

/// `<cell>.requests.jsonl`, in a unit's folder.
pub fn requests_file(cell: &str) -> String {
    format!("{cell}{REQUESTS_SUFFIX}")
}

/// `raw/b<block>/<arm>`, relative to the evidence root.
pub fn unit_path(block: u32, arm: &str) -> String {
    format!("{RAW_DIR}/b{block}/{arm}")
}

/// `raw/b<block>/<arm>/<cell>.requests.jsonl`, relative to the evidence root.
pub fn requests_path(block: u32, arm: &str, cell: &str) -> String {
    format!("{}/{}", unit_path(block, arm), requests_file(cell))
}

// results/

/// The results' folder, at the evidence root (and at the pilots').
pub const RESULTS_DIR: &str = "results";
/// The per-cell summaries' folder, inside `results/`.
pub const CELLS_DIR: &str = "cells";
/// The end of a per-cell summary's name.
pub const SUMMARY_SUFFIX: &str = ".summary.json";
/// Every cell's summary in one file.
pub const SUMMARIES_FILE: &str = "results/summaries.json";
/// The study's qualification outcome, copied into `results/`.
pub const QUALIFICATION_RESULT_FILE: &str = "results/qualification.json";
/// The cell matrix as CSV.
pub const MATRIX_CSV_FILE: &str = "results/matrix.csv";
/// The cell matrix as Parquet.
pub const MATRIX_PARQUET_FILE: &str = "results/matrix.parquet";
/// The per-request table as CSV.
pub const REQUESTS_CSV_FILE: &str = "results/requests.csv";
/// The per-request table as Parquet.
pub const REQUESTS_PARQUET_FILE: &str = "results/requests.parquet";
/// Effects, tests, claims: the report's numbers as JSON.
pub const EVIDENCE_FILE: &str = "results/evidence.json";
/// The report as Markdown.
pub const REPORT_MD_FILE: &str = "results/report.md";
/// The report as HTML.
pub const REPORT_HTML_FILE: &str = "results/report.html";
/// The report's figures.
pub const FIGURES_DIR: &str = "results/figures";

/// `<stem>.summary.json`, in `results/cells/`.
pub fn summary_file(stem: &str) -> String {
    format!("{stem}{SUMMARY_SUFFIX}")
}

/// `results/cells/<stem>.summary.json`, relative to the evidence root.
pub fn summary_path(stem: &str) -> String {
    format!("{RESULTS_DIR}/{CELLS_DIR}/{}", summary_file(stem))
}

/// `results/cells/b<block>-<arm>-<cell>.summary.json`, relative to the evidence root.
pub fn cell_summary_path(block: u32, arm: &str, cell: &str) -> String {
    summary_path(&format!("b{block}-{arm}-{cell}"))
}

// qualification/

/// The quality gates' folder, at the evidence root (or `harness qualify --out`'s).
pub const QUALIFICATION_DIR: &str = "qualification";
/// The qualification outcome, in `qualification/` (copied to `results/`).
pub const QUALIFICATION_FILE: &str = "qualification.json";
/// `qualification/qualification.json`, relative to the evidence root.
pub const QUALIFICATION_OUTCOME_PATH: &str = "qualification/qualification.json";
/// `qualification/unit.json`, relative to the evidence root.
pub const QUALIFICATION_UNIT_PATH: &str = "qualification/unit.json";
/// An arm's gate run, in `qualification/<arm>/`.
pub const ARM_FILE: &str = "arm.json";
/// The GSM set's description, in `qualification/inputs/`.
pub const GSM_SET_FILE: &str = "gsm.set.json";
/// The serial reference answers of the parity gate, in `qualification/<arm>/`.
pub const PARITY_REFERENCE_FILE: &str = "parity.reference.jsonl";

/// `<gate>.items.jsonl`, in `qualification/inputs/`.
pub fn items_file(gate: &str) -> String {
    format!("{gate}.items.jsonl")
}

/// `<gate>.responses.jsonl`, in `qualification/<arm>/`.
pub fn responses_file(gate: &str) -> String {
    format!("{gate}.responses.jsonl")
}

/// `<gate>.scores.json`, in `qualification/<arm>/`.
pub fn scores_file(gate: &str) -> String {
    format!("{gate}.scores.json")
}

// discarded/ (after --resume; not evidence, covered by the manifest)

/// Partial units moved aside by `--resume`, at the evidence root.
pub const DISCARDED_DIR: &str = "discarded";
/// Why a partial unit was moved aside, in `discarded/<n>-<unit>/`.
pub const DISCARD_FILE: &str = "discard.json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_built_from_the_names() {
        let under = |path: &str, dir: &str, name: &str| assert_eq!(path, format!("{dir}/{name}"));
        under(PROMPTS_PATH, INPUTS_DIR, PROMPTS_FILE);
        under(CATALOG_PATH, INPUTS_DIR, CATALOG_FILE);
        under(QUALIFICATION_OUTCOME_PATH, QUALIFICATION_DIR, QUALIFICATION_FILE);
        under(QUALIFICATION_UNIT_PATH, QUALIFICATION_DIR, super::super::UNIT_FILE);
        under(QUALIFICATION_RESULT_FILE, RESULTS_DIR, QUALIFICATION_FILE);
        for p in [
            SUMMARIES_FILE,
            MATRIX_CSV_FILE,
            MATRIX_PARQUET_FILE,
            REQUESTS_CSV_FILE,
            REQUESTS_PARQUET_FILE,
            EVIDENCE_FILE,
            REPORT_MD_FILE,
            REPORT_HTML_FILE,
            FIGURES_DIR,
        ] {
            assert!(p.strip_prefix(RESULTS_DIR).is_some_and(|r| r.starts_with('/') && !r[1..].contains('/')), "{p}");
        }
        assert_eq!(requests_path(0, "a", "c"), "raw/b0/a/c.requests.jsonl");
        assert_eq!(cell_summary_path(1, "a", "c"), "results/cells/b1-a-c.summary.json");
        assert_eq!(trace_path("c"), "inputs/traces/c.trace.jsonl");
        assert_eq!(arrivals_path("c", "csv"), "inputs/arrivals/c.csv");
    }
}
