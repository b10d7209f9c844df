//! The evidence directory of one study (DESIGN section 4): where every file goes,
//! how it is written (temporary name, flush, fsync, rename, fsync of the directory:
//! `write_atomic`; JSONL streamed to a `.partial` name and committed the same way
//! when whole), `open_regular` (the only way replay opens a file: regular files
//! inside the directory, never a link, FIFO, device or socket), the SHA-256 hex
//! helpers, the manifest that fixes every file by size and SHA-256, [`Sealed`] (the
//! one door every command that reads a finished directory goes through: finished,
//! every file listed with its sealed size and hash, regular files only), and the typed
//! records of the JSON files below (`run_record`, `unit_record`, `server_records`,
//! `compare_record`, `pilots_record`, `request_record`: one definition each for the
//! writer and every reader). Owns paths (every file and folder name in the tree
//! below, defined once: beside its record, or in `layout` for the files no record
//! owns; nothing outside `evidence/` spells one), write discipline and those formats. Must not decide what the files contain (the
//! runner, `trace`, `arm` and `load` do) and must not delete anything except an
//! earlier evidence directory the caller explicitly asked to replace (`--force`).
//!
//! ```text
//! <dir>/plan.toml  manifest.json  run.json  sequential.json ([sequential] only)
//! <dir>/inputs/    prompts.jsonl  traces/<cell>.trace.jsonl  arrivals/  catalog.json
//! <dir>/pilots/    ([pilots] only) inputs/ raw/ results/ derived.json
//! <dir>/raw/b<block>/<arm>/
//!       server.log startup.json warmup.json receipts.jsonl scrapes.jsonl memory.jsonl
//!       <cell>.requests.jsonl arm_outcome.json unit.json (completion record, last)
//! <dir>/results/cells/b<block>-<arm>-<cell>.summary.json  results/summaries.json
//! <dir>/qualification/ results/qualification.json   (required qualification only)
//! <dir>/discarded/<n>-<unit>/<former paths> discard.json  (after --resume only; not evidence)
//! <dir>/slurm/      dispatch.json blocks.sbatch submissions/ sessions/ logs/  (blocks run as Slurm array tasks)
//! ```

mod compare_record;
mod dispatch_record;
mod durable;
mod floor_record;
mod jsonl;
mod layout;
mod manifest;
mod open;
mod pilots_record;
mod records;
pub mod request_record;
mod run_record;
mod sealed;
mod secrets;
mod server_records;
mod unit_record;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use compare_record::{
    COMPARE_FILE, COMPARE_FORMAT, CompareRecord, CompareSpec, CompareStatus, Dialect, Measure, NoiseArms, NoiseRatio,
    Obs, ParityMismatch, ParityReport, Phase, RoundRatio, Row,
};
pub use dispatch_record::{
    DISPATCH_FILE, DISPATCH_FORMAT, DispatchRecord, ExecutorRecord, FAILURES_DIR, GpuFacts, LOGS_DIR, SBATCH_FILE,
    SESSIONS_DIR, SLURM_DIR, SUBMISSIONS_DIR, SessionClaim, SessionRole, SubmissionRecord, TaskFailure, TaskOutcome,
    TaskPlacement, claim_path, claim_session, read_claims, read_dispatch, read_failures, read_submissions,
    submission_path, task_log_path, task_log_pattern, write_claim, write_failure,
};
pub use durable::{commit_rename, hex, sha256_hex, sync_parent, write_atomic};
pub use floor_record::{FLOOR_MARGIN, MeasurementFloor, Spread};
pub use jsonl::JsonlStream;
pub use layout::*;
pub use manifest::{
    GitInfo, MANIFEST_FORMAT, Manifest, ManifestFile, git_info, manifest_files, verify_manifest, write_manifest,
};
pub use open::{BOM, kind_in_words, open_input, open_regular, read_input, read_input_text};
pub use pilots_record::{
    CountRuleRecord, DERIVED_PATH, PILOTS_DIR, PILOTS_FORMAT, PilotRun, PilotsRecord, RATE_RULE, read_pilots_record,
};
pub use records::{CellStatus, QualificationVerdict, RecordStatus, RequestStatus, RowStatus, UnitState, UnitStatus};
pub use run_record::{
    BodyHashes, CLOCK, Discard, RUN_FILE, RUN_FORMAT, RunRecord, RunUnit, SESSION_FORMATS, Session, SessionState,
    unix_ms,
};
pub use sealed::{
    Digest256, Entry, EntryKind, Finding, MANIFEST_FILE, SealError, Sealed, findings, hash_regular, listing,
    read_manifest, running_session,
};
pub use secrets::{REDACTED, Secrets};
pub use server_records::{
    ARM_OUTCOME_FILE, CellOutcome, CheckResult, ExitInfo, LogKept, OversizedAnswer, STARTUP_FILE, STOP_FILE,
    ServerIdentity, ServerRecord, StartupRecord, StopRecord, UnitOutcome, WARMUP_FILE, WarmupRecord,
};
pub use unit_record::{
    Completion, QUALIFICATION_UNIT, RecordCheck, UNIT_FILE, UNIT_FORMAT, UnitRecord, check_record, files_under,
    unit_name, write_record,
};

/// Everything that can go wrong while laying out or writing evidence.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The cause is part of the message (not `#[source]`): chains print it once.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path} is not empty; pass --force to replace an earlier evidence directory")]
    NotEmpty { path: PathBuf },
    #[error(
        "{path} is not empty and does not look like an evidence directory (no plan.toml or \
         manifest.json); refusing to delete it even with --force"
    )]
    NotEvidence { path: PathBuf },
    #[error("{what}: {message}")]
    Json { what: String, message: String },
    /// A directory refused by [`Sealed::open`].
    #[error(transparent)]
    Sealed(#[from] SealError),
}

impl EvidenceError {
    /// Whether the user's choice of directory is at fault (an occupied `--out`),
    /// not the machine: bad input, exit 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, EvidenceError::NotEmpty { .. } | EvidenceError::NotEvidence { .. } | EvidenceError::Sealed(_))
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EvidenceError + '_ {
    move |error| EvidenceError::Io { path: path.to_path_buf(), error }
}

/// The layout of one evidence directory.
#[derive(Debug, Clone)]
pub struct Evidence {
    root: PathBuf,
}

impl Evidence {
    /// Creates `dir` (and parents) for a new study. A non-empty `dir` is refused unless
    /// `force`, and even then only when it holds an earlier study (`plan.toml` or
    /// `manifest.json`), which is then deleted whole.
    pub fn create(dir: &Path, force: bool) -> Result<Evidence, EvidenceError> {
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
            if entries.next().is_some() {
                if !force {
                    return Err(EvidenceError::NotEmpty { path: dir.to_path_buf() });
                }
                if !dir.join(PLAN_FILE).is_file() && !dir.join(MANIFEST_FILE).is_file() {
                    return Err(EvidenceError::NotEvidence { path: dir.to_path_buf() });
                }
                std::fs::remove_dir_all(dir).map_err(io_err(dir))?;
            }
        }
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let root = std::fs::canonicalize(dir).map_err(io_err(dir))?;
        Ok(Evidence { root })
    }

    /// An existing evidence directory (for readers and tests).
    pub fn open(dir: &Path) -> Evidence {
        Evidence { root: dir.to_path_buf() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn plan_path(&self) -> PathBuf {
        self.root.join(PLAN_FILE)
    }

    pub fn inputs_dir(&self) -> PathBuf {
        self.root.join(INPUTS_DIR)
    }

    /// `raw/b<block>/<arm>/`: one server invocation.
    pub fn unit_dir(&self, block: u32, arm: &str) -> PathBuf {
        self.root.join(unit_path(block, arm))
    }

    pub fn requests_path(&self, block: u32, arm: &str, cell: &str) -> PathBuf {
        self.unit_dir(block, arm).join(requests_file(cell))
    }

    pub fn results_dir(&self) -> PathBuf {
        self.root.join(RESULTS_DIR)
    }

    pub fn cell_summary_path(&self, block: u32, arm: &str, cell: &str) -> PathBuf {
        self.root.join(layout::cell_summary_path(block, arm, cell))
    }

    /// Creates a directory inside the evidence tree.
    pub fn ensure_dir(&self, dir: &Path) -> Result<(), EvidenceError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))
    }
}

/// Writes `bytes` atomically (temporary name, flush, rename), creating parents.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), EvidenceError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    write_atomic(path, bytes).map_err(io_err(path))
}

/// Writes `value` as pretty JSON with a final newline, atomically.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), EvidenceError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
    text.push('\n');
    write_bytes(path, text.as_bytes())
}

/// Writes one compact JSON line per item, atomically, as a whole.
pub fn write_jsonl<T: Serialize>(path: &Path, items: &[T]) -> Result<(), EvidenceError> {
    let mut text = String::new();
    for item in items {
        let line = serde_json::to_string(item)
            .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
        text.push_str(&line);
        text.push('\n');
    }
    write_bytes(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_empty_and_foreign_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("study");
        let ev = Evidence::create(&dir, false).unwrap();
        write_bytes(&ev.plan_path(), b"x").unwrap();
        assert!(matches!(Evidence::create(&dir, false), Err(EvidenceError::NotEmpty { .. })));
        let ev = Evidence::create(&dir, true).unwrap();
        assert!(!ev.plan_path().exists(), "--force starts from an empty directory");
        let foreign = tmp.path().join("foreign");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("notes.txt"), "keep me").unwrap();
        assert!(matches!(Evidence::create(&foreign, true), Err(EvidenceError::NotEvidence { .. })));
        assert!(foreign.join("notes.txt").exists());
    }

    #[test]
    fn atomic_writes_leave_no_temporary_files() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a/b/c.jsonl");
        write_jsonl(&p, &[1, 2, 3]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "1\n2\n3\n");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
