//! `harness replay DIR`: an independent audit of one evidence directory (DESIGN
//! section 3, step 5). Reads only that directory and
//! - verifies every file against `manifest.json` (size, SHA-256), names files on
//!   disk that the manifest does not list, and refuses a study whose `run.json`
//!   says a session still runs (`files`: the first pass of the evidence opener,
//!   `evidence::Sealed`, shared; replay reports each finding as a failed check);
//! - verifies `plan.toml` against the plan hash of the manifest, `run.json`, the
//!   catalog and `evidence.json`, and the inputs against `inputs/catalog.json`
//!   (`inputs`), and recomputes constant and trace-file arrivals (`loads`);
//! - rebuilds every panel entry's request body on each endpoint the cells send to
//!   and compares its SHA-256 with `run.json` (`bodies`), and every trace entry's
//!   body of a `trace_lengths` cell (its row's output length as `max_tokens`)
//!   against `run.json` `entry_body_sha256` (`entry_bodies`);
//! - checks that every planned request appears exactly once and follows its trace
//!   (`complete`);
//! - recomputes every per-cell measure (`measures`; a session cell's per-turn rows:
//!   `turn_rows`) and compares it with
//!   `results/matrix.csv`, `results/summaries.json` and the per-cell summaries
//!   (`tables`), `results/requests.csv` row by row (`requests`), and every
//!   paired effect, test, Holm p, median, interval, decision
//!   and cell median of `results/evidence.json` (`decide`, `evidence`);
//! - verifies every unit's completion record `unit.json` against its files (a
//!   second hash chain beside the manifest, `units`), the sessions of `run.json`
//!   against the units, and `discarded/` (partial units a resume moved aside:
//!   verified by the manifest only, never read as evidence) (`sessions`);
//! - joins client records to engine receipts (`receipts`) and recounts the quality
//!   gates under `qualification/` from the raw answers and compares the outcome
//!   field by field (`quality`, `qualification`);
//! - judges every server's identity checks again from what it recorded, and holds
//!   a server that failed them to having stopped before timing (`identity`);
//! - recomputes the in-study pilots' rates from `pilots/` raw records and the
//!   loads derived from them by the formula, against `pilots/derived.json` (`pilots`);
//! - recomputes the power figures of `evidence.json` (noise SD, degrees of freedom,
//!   detectable effects) from the pilots' raw records with its own model (`power`,
//!   `power_model`);
//! - recomputes `evidence.json`'s noise decomposition (`analysis.noise`: blocks,
//!   servers, repeats, their intervals) from its own measures (`noise`);
//! - holds the client and every pinned server to the plan's CPU sets, and a server
//!   found off its set to having stopped before timing (`cpus`);
//! - checks each session's measurement floor is there, consistent, at the plan's
//!   highest rate and stated in the report (`floor`);
//! - in evidence written by `harness compare` (`compare.json` `harness-compare/`,
//!   no `run.json`), skips the run-specific unit, session and discarded checks and
//!   recomputes `compare.json`'s cell observations and parity verdict (`compare`);
//! - in evidence written by `harness qualify` (quality gates alone), skips every
//!   timing check and audits the files, the plan hash and the qualification
//!   (`layout` decides which kind a directory is).
//!
//! Owns `ReplayArgs`, `ReplayError`, the check table and its rendering. The
//! recomputation is its own code: it shares only parsing types (the plan, the
//! manifest and catalog formats) and the definitions of DESIGN sections 5-6, and
//! must never call the analysis path's aggregation (`metrics`, `stats`, `report`),
//! whose output it audits. Must never execute anything named by the evidence (no
//! argv, no scripts, no spawning), never write into the evidence directory, and never
//! panic on malformed input: a bad file is a failed check naming file and line.

mod bodies;
mod compare;
mod complete;
mod cpus;
mod decide;
mod engine_decode;
mod entry_bodies;
mod evidence;
mod files;
mod floor;
mod goodput;
mod identity;
mod inputs;
mod layout;
mod loads;
mod measures;
mod noise;
mod pilots;
mod placement;
mod power;
mod power_model;
mod qualification;
mod quality;
mod read;
mod receipts;
mod records;
mod render;
mod requests;
mod sequential;
mod sessions;
mod setup;
mod spread;
mod tables;
mod tuning;
mod turn_rows;
mod turns;
mod units;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use read::MAX_LINE_BYTES;

use layout::Layout;

/// The checks of a timing study (everything after the files, the plan and the
/// inputs, before the qualification).
const TIMING_CHECKS: [&str; 13] = [
    bodies::NAME,
    entry_bodies::NAME,
    complete::NAME,
    complete::TRACE_NAME,
    tables::SUMMARIES_NAME,
    tables::MATRIX_NAME,
    requests::NAME,
    evidence::NAME,
    evidence::CELLS_NAME,
    receipts::NAME,
    units::NAME,
    sessions::NAME,
    sessions::DISCARDED_NAME,
];

/// `harness replay DIR`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The evidence directory (e.g. reports/<study>).
    pub dir: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Mismatches listed per check (all are counted).
    #[arg(long, default_value_t = 20)]
    pub max_mismatches: usize,
}

/// What stops a replay before any check can be made.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Malformed { path: PathBuf, message: String },
}

impl crate::BadInput for ReplayError {
    /// Evidence that cannot be read at all (a missing directory, a manifest that is
    /// a link or truncated) fails its audit like evidence that fails a check.
    fn is_bad_input(&self) -> bool {
        true
    }
}

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    /// Nothing to check (no receipts, no qualification): not a failure.
    Skip,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One difference: where, which field, what the evidence says, what replay computed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mismatch {
    pub file: String,
    pub field: String,
    pub archived: String,
    pub recomputed: String,
}

impl Mismatch {
    pub fn new(
        file: impl Into<String>,
        field: impl Into<String>,
        archived: impl Into<String>,
        recomputed: impl Into<String>,
    ) -> Mismatch {
        Mismatch { file: file.into(), field: field.into(), archived: archived.into(), recomputed: recomputed.into() }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    /// What was checked (counts), or why it was skipped.
    pub detail: String,
    /// Every difference found (the table lists the first `--max-mismatches`).
    pub mismatches: Vec<Mismatch>,
}

impl Check {
    /// Pass when `mismatches` is empty, else fail.
    pub fn of(name: &str, detail: String, mismatches: Vec<Mismatch>) -> Check {
        let status = if mismatches.is_empty() { Status::Pass } else { Status::Fail };
        Check { name: name.into(), status, detail, mismatches }
    }

    pub fn skip(name: &str, detail: impl Into<String>) -> Check {
        Check { name: name.into(), status: Status::Skip, detail: detail.into(), mismatches: Vec::new() }
    }
}

/// Everything a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayOutcome {
    pub format: &'static str,
    pub dir: PathBuf,
    pub passed: bool,
    pub checks: Vec<Check>,
    /// Per (block, arm, cell): admissions, resumptions, preemptions from receipts.
    pub receipts: Vec<receipts::CellReceipts>,
    pub files_read: u64,
    pub bytes_read: u64,
}

impl ReplayOutcome {
    /// True when no check failed (skipped checks do not fail a replay).
    pub fn all_passed(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    /// Checks that failed.
    pub fn failed(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.status == Status::Fail).collect()
    }

    /// The check named `name`.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The terminal table (first `max` mismatches of each check).
    pub fn render_table(&self, max: usize) -> String {
        render::table(self, max)
    }

    /// The JSON object of `--json`.
    pub fn to_json(&self) -> String {
        render::json(self)
    }
}

/// Replays `args.dir`: runs every check and returns the table. `Err` only when the
/// directory or its manifest cannot be read at all.
pub fn run(args: &ReplayArgs) -> Result<ReplayOutcome, ReplayError> {
    replay_dir(&args.dir)
}

/// Replays the evidence directory `root`.
pub fn replay_dir(root: &Path) -> Result<ReplayOutcome, ReplayError> {
    if !root.is_dir() {
        return Err(ReplayError::Unreadable { path: root.to_path_buf(), message: "not a directory".into() });
    }
    let manifest = files::read_manifest(root)?;
    let listing = files::walk(root)?;
    let scan = files::scan(root, &listing, &manifest);
    let mut checks = vec![files::manifest_check(&manifest, &scan), files::unlisted_check(&manifest, &scan)];
    checks.extend(files::running_check(&scan, root));
    let plan = inputs::read_plan(root, &scan);
    checks.push(inputs::plan_hash_check(root, &manifest, &plan, &scan));
    let layout = layout::detect(root, &scan);
    if let Layout::Qualify(why) = &layout {
        checks.push(Check::skip(inputs::CATALOG_NAME, why.clone()));
    } else {
        checks.push(inputs::catalog_check(root, &scan, plan.as_ref().ok()));
        if let Ok(p) = &plan {
            checks.push(loads::check(root, &p.plan));
        }
    }
    checks.push(files::parse_check(&scan));
    checks.push(pilots::check(root));
    let mut cell_receipts = Vec::new();
    match (&plan, &layout) {
        (_, Layout::Qualify(why)) => {
            for name in TIMING_CHECKS {
                checks.push(Check::skip(name, why.clone()));
            }
        }
        (Err(why), _) => {
            let names = TIMING_CHECKS.iter().chain(matches!(layout, Layout::Compare(_)).then_some(&compare::NAME));
            for name in names {
                checks.push(Check::of(
                    name,
                    format!("no valid plan: {why}"),
                    vec![Mismatch::new(crate::evidence::PLAN_FILE, "plan", "unparseable", "a valid plan")],
                ));
            }
        }
        (Ok(frozen), _) => {
            let study = complete::Study::new(root, &frozen.plan, &scan);
            match &layout {
                // Compare writes no arm_outcome.json: completeness by unit would call every
                // round unit faulted. The compare check's coverage rules do this job there.
                Layout::Compare(why) => checks.push(Check::skip(
                    complete::NAME,
                    format!("{why}: every planned request of every round is counted by the compare.json check"),
                )),
                _ => checks.push(complete::completeness_check(&study)),
            }
            checks.push(complete::trace_check(root, &study));
            if frozen.plan.prompts.max_turns.is_some() {
                checks.push(turns::check(root, &study));
            }
            match &layout {
                Layout::Compare(why) => {
                    checks.push(Check::skip(
                        units::NAME,
                        format!("{why}: its unit.json files are compare's server records, not harness-unit/1"),
                    ));
                    checks.push(Check::skip(sessions::NAME, format!("{why}: no sessions")));
                    checks.push(Check::skip(bodies::NAME, format!("{why}: no run.json body hashes")));
                    checks.push(Check::skip(entry_bodies::NAME, format!("{why}: no run.json body hashes")));
                    checks.push(compare::discarded_check(&scan, sessions::DISCARDED_NAME, why));
                    checks.push(compare::check(root, &scan, &frozen.plan));
                }
                _ => {
                    checks.push(bodies::check(root, &frozen.plan));
                    checks.push(entry_bodies::check(root, &frozen.plan, &study.traces));
                    let records = units::Records::read(root, &study);
                    checks.push(units::check(root, &study, &records));
                    checks.push(sessions::check(&study, &records));
                    checks.push(sessions::discarded_check(root, &study, &records));
                    checks.extend(placement::check(root, &study, &records));
                    // Compare's server records hold no environment, CPU set or identity.
                    checks.extend(setup::check(root, &frozen.plan));
                    checks.extend(cpus::check(root, &frozen.plan));
                    checks.extend(floor::check(root, &frozen.plan));
                    checks.extend(identity::check(root, &frozen.plan));
                }
            }
            let cells = measures::recompute(&study);
            checks.push(tables::summaries_check(root, &study, &cells));
            let listed = |rel: &str| manifest.files.iter().any(|f| f.path == rel);
            checks.push(tables::matrix_check(
                root,
                &study,
                &cells,
                &frozen.sha256,
                listed(crate::evidence::MATRIX_CSV_FILE),
            ));
            checks.push(requests::check(root, &study, &frozen.sha256, listed(crate::evidence::REQUESTS_CSV_FILE)));
            let (hyp, med) = evidence::checks(root, &study, &cells, frozen, listed(crate::evidence::EVIDENCE_FILE));
            checks.push(hyp);
            checks.push(med);
            checks.extend(tuning::check(root, &frozen.plan));
            checks.extend(power::check(root, frozen));
            checks.extend(noise::check(root, &frozen.plan, &cells));
            checks.extend(sequential::check(root, frozen, &cells));
            let (check, per_cell) = receipts::check(&study, &scan);
            checks.push(check);
            cell_receipts = per_cell;
        }
    }
    checks.push(qualification::check(root, plan.as_ref().ok()));
    let mut outcome = ReplayOutcome {
        format: "harness-replay/1",
        dir: root.to_path_buf(),
        passed: false,
        checks,
        receipts: cell_receipts,
        files_read: scan.files.len() as u64,
        bytes_read: scan.files.values().map(|f| f.bytes).sum(),
    };
    outcome.passed = outcome.all_passed();
    Ok(outcome)
}

/// Floats written as text: equal within a relative 1e-9 (absolute 1e-12 near zero).
pub(crate) fn close(a: f64, b: f64) -> bool {
    if a == b {
        return true;
    }
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    (a - b).abs() <= 1e-12_f64.max(1e-9 * a.abs().max(b.abs()))
}

/// A float as the table prints it (shortest round-trip text).
pub(crate) fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "null".to_string(), |x| format!("{x}"))
}
