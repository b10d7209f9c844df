//! Completion records: `unit.json`, written last and atomically when a unit of a
//! study is whole — one server invocation (`raw/b<k>/<arm>/unit.json`) or the
//! qualification (`qualification/unit.json`). It lists every file of the unit
//! (its directory, plus the files it owns elsewhere: the cells' summaries under
//! `results/cells/`, `results/qualification.json`) with size and SHA-256, and the
//! session that ran it (its timestamps are on that session's clock). `--resume`
//! trusts a unit only when its record exists and every file still matches it;
//! a unit without a record is partial. Must not repair anything.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{EvidenceError, ManifestFile, RecordStatus, Secrets, sha256_hex, write_json};

/// The `format` of `unit.json`.
pub const UNIT_FORMAT: &str = "harness-unit/1";
/// The file name of a completion record.
pub const UNIT_FILE: &str = "unit.json";
/// The `unit` name of the qualification's record.
pub const QUALIFICATION_UNIT: &str = "qualification";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    pub format: String,
    /// `b<block>/<arm>` or `qualification`.
    pub unit: String,
    pub block: Option<u32>,
    /// The session (index into `run.json` `sessions`) that ran the unit.
    pub session: u32,
    /// The unit's outcome (`arm_outcome.json` status, or the qualification verdict).
    pub status: RecordStatus,
    /// Every file of the unit except this record, relative to the evidence root, sorted.
    pub files: Vec<ManifestFile>,
}

/// `b<block>/<arm>`: how units are named in records, `run.json` and the report.
pub fn unit_name(block: u32, arm: &str) -> String {
    format!("b{block}/{arm}")
}

fn rel(root: &Path, path: &Path) -> String {
    let r = path.strip_prefix(root).unwrap_or(path);
    r.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Every file under `dir` (recursively) except its `unit.json`.
pub fn files_under(dir: &Path) -> Result<Vec<PathBuf>, EvidenceError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|error| EvidenceError::Io { path: d.clone(), error })?;
        for entry in entries {
            let entry = entry.map_err(|error| EvidenceError::Io { path: d.clone(), error })?;
            let path = entry.path();
            if entry.file_type().map_err(|error| EvidenceError::Io { path: path.clone(), error })?.is_dir() {
                stack.push(path);
            } else if path != dir.join(UNIT_FILE) {
                out.push(path);
            }
        }
    }
    Ok(out)
}

fn hash(root: &Path, path: &Path) -> Result<ManifestFile, EvidenceError> {
    let bytes = std::fs::read(path).map_err(|error| EvidenceError::Io { path: path.to_path_buf(), error })?;
    Ok(ManifestFile { path: rel(root, path), bytes: bytes.len() as u64, sha256: sha256_hex(&bytes) })
}

/// Who completed a unit and how: the fields of its record besides the files.
#[derive(Debug, Clone, Copy)]
pub struct Completion<'a> {
    /// `b<block>/<arm>` or `qualification`.
    pub unit: &'a str,
    pub block: Option<u32>,
    pub session: u32,
    pub status: RecordStatus,
}

/// Scrubs `secrets` from every file of `dir` and the existing files of `extra`,
/// hashes them, then writes `dir/unit.json` atomically (the last write of the unit).
pub fn write_record(
    root: &Path,
    dir: &Path,
    extra: &[PathBuf],
    done: Completion<'_>,
    secrets: &Secrets,
) -> Result<UnitRecord, EvidenceError> {
    let mut paths = files_under(dir)?;
    paths.extend(extra.iter().filter(|p| p.is_file()).cloned());
    // A key a server echoed (an error body, a log line) never reaches the record.
    secrets.scrub_files(&paths)?;
    let mut files = paths.iter().map(|p| hash(root, p)).collect::<Result<Vec<_>, _>>()?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let Completion { unit, block, session, status } = done;
    let record = UnitRecord { format: UNIT_FORMAT.into(), unit: unit.into(), block, session, status, files };
    write_json(&dir.join(UNIT_FILE), &record)?;
    Ok(record)
}

/// What a unit's directory holds, for `--resume`.
#[derive(Debug)]
pub enum RecordCheck {
    /// No record: partial (or never started when `dir` and `extra` are absent).
    Partial,
    /// Whole and unchanged.
    Complete(UnitRecord),
    /// A record exists but the files differ from it: each problem named.
    Changed(Vec<String>),
}

/// Checks `dir/unit.json` against the files: every listed file with its size and
/// SHA-256, and no unlisted file in `dir` or among the existing `extra`.
pub fn check_record(root: &Path, dir: &Path, extra: &[PathBuf]) -> RecordCheck {
    let path = dir.join(UNIT_FILE);
    if !path.is_file() {
        return RecordCheck::Partial;
    }
    let record: UnitRecord = match std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => return RecordCheck::Changed(vec![format!("{}: unreadable: {e}", rel(root, &path))]),
    };
    let mut problems = Vec::new();
    if record.format != UNIT_FORMAT {
        problems.push(format!("{}: format {:?}, expected {UNIT_FORMAT:?}", rel(root, &path), record.format));
    }
    for want in &record.files {
        match hash(root, &root.join(&want.path)) {
            Err(_) => problems.push(format!("{}: missing", want.path)),
            Ok(got) if got != *want => problems.push(format!(
                "{}: changed ({} bytes, sha256 {}; unit.json says {} bytes, sha256 {})",
                want.path, got.bytes, got.sha256, want.bytes, want.sha256
            )),
            Ok(_) => {}
        }
    }
    let mut present = files_under(dir).unwrap_or_default();
    present.extend(extra.iter().filter(|p| p.is_file()).cloned());
    for p in present {
        let r = rel(root, &p);
        if !record.files.iter().any(|f| f.path == r) {
            problems.push(format!("{r}: not in {}", rel(root, &path)));
        }
    }
    if problems.is_empty() { RecordCheck::Complete(record) } else { RecordCheck::Changed(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::UnitStatus;

    #[test]
    fn a_record_catches_changed_missing_and_extra_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let dir = root.join("raw/b0/a");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(root.join("results/cells")).unwrap();
        std::fs::write(dir.join("x.requests.jsonl"), "1\n").unwrap();
        let summary = root.join("results/cells/b0-a-x.summary.json");
        std::fs::write(&summary, "{}").unwrap();
        assert!(matches!(check_record(root, &dir, std::slice::from_ref(&summary)), RecordCheck::Partial));
        let rec = write_record(
            root,
            &dir,
            std::slice::from_ref(&summary),
            Completion {
                unit: "b0/a",
                block: Some(0),
                session: 0,
                status: RecordStatus::Server(UnitStatus::Completed),
            },
            &Default::default(),
        )
        .unwrap();
        let paths: Vec<_> = rec.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["raw/b0/a/x.requests.jsonl", "results/cells/b0-a-x.summary.json"]);
        assert!(matches!(check_record(root, &dir, std::slice::from_ref(&summary)), RecordCheck::Complete(_)));
        std::fs::write(&summary, "{ }").unwrap();
        std::fs::write(dir.join("extra"), "").unwrap();
        let RecordCheck::Changed(p) = check_record(root, &dir, &[summary]) else { panic!("not detected") };
        assert!(p[0].starts_with("results/cells/b0-a-x.summary.json: changed"), "{p:?}");
        assert!(p[1].starts_with("raw/b0/a/extra: not in raw/b0/a/unit.json"), "{p:?}");
    }
}
