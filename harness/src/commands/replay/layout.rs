//! Which kind of evidence directory replay is reading, decided from what is on
//! disk before any check runs:
//! - a study of `harness run` (`run.json`; the default: anything else is audited as
//!   one, so a run directory with files removed fails its checks instead of passing
//!   as another kind);
//! - a comparison of `harness compare` (`compare.json` `harness-compare/`, no
//!   `run.json`: see `compare`);
//! - quality gates alone, from `harness qualify`: `qualification/qualification.json`
//!   and nothing of a timing study (no `run.json`, no `compare.json`, nothing under
//!   `raw/`, `inputs/` or `results/`). Only the files, the plan hash and the
//!   qualification are audited there; every timing check is skipped, saying why.

use std::path::Path;

use super::compare;
use super::files::Scan;

/// The qualification outcome `harness qualify` writes.
const QUALIFY_OUTCOME: &str = crate::evidence::QUALIFICATION_OUTCOME_PATH;

/// A timing study writes under these; `harness qualify` never does.
const TIMING_DIRS: [&str; 3] = [crate::evidence::RAW_DIR, crate::evidence::INPUTS_DIR, crate::evidence::RESULTS_DIR];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    Run,
    /// Why this is compare evidence.
    Compare(String),
    /// Why this is qualification-only evidence.
    Qualify(String),
}

pub fn detect(root: &Path, scan: &Scan) -> Layout {
    if let Some(why) = compare::layout(root, scan) {
        return Layout::Compare(why);
    }
    let present = |rel: &str| scan.files.contains_key(rel) || root.join(rel).symlink_metadata().is_ok();
    let timing = scan
        .files
        .keys()
        .chain(scan.unreadable.iter().map(|(p, _)| p))
        .any(|p| TIMING_DIRS.iter().any(|d| p.strip_prefix(d).is_some_and(|r| r.starts_with('/'))));
    if present(crate::evidence::RUN_FILE)
        || present(crate::evidence::COMPARE_FILE)
        || timing
        || !scan.files.contains_key(QUALIFY_OUTCOME)
    {
        return Layout::Run;
    }
    Layout::Qualify(format!(
        "qualification-only evidence ({QUALIFY_OUTCOME}; no run.json, raw/, inputs/ or results/): no timing to audit"
    ))
}
