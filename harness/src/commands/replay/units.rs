//! Completion records, a second hash chain beside the manifest: every scheduled
//! server invocation's `raw/b<k>/<arm>/unit.json` (and `qualification/unit.json`
//! when the plan requires qualification) lists exactly the unit's files (its
//! directory, except the record, plus the unit's `results/cells/` summaries or
//! `results/qualification.json`) with the size and SHA-256 read from disk, names
//! its unit, block and status as `arm_outcome.json` does. Studies written before
//! completion records (`run.json` `harness-run/1`, no `unit.json` anywhere) skip the
//! check. Owns `Records` (the parsed `run.json` and `unit.json`s that `sessions`
//! checks further). Must not hash anything again: digests come from the scan.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::complete::Study;
use super::files::Scan;
use super::read::read_json;
use super::{Check, Mismatch};
use crate::evidence::{
    QUALIFICATION_DIR, QUALIFICATION_RESULT_FILE, QUALIFICATION_UNIT_PATH, QualificationVerdict, RAW_DIR, RUN_FILE,
    RUN_FORMAT, RecordStatus, RunRecord, SESSION_FORMATS, UNIT_FILE, UNIT_FORMAT, UnitRecord, cell_summary_path,
    unit_path,
};

pub const NAME: &str = "unit records: unit.json of every unit against its files";
/// The unit name of the qualification's record.
pub const QUALIFICATION: &str = "qualification";

/// `run.json`'s `format` alone (read when the whole record does not parse).
#[derive(serde::Deserialize)]
struct FormatOnly {
    format: String,
}

/// Whether the study's cell summaries carry the engine's decode measures
/// (`run.json` is `harness-run/3`).
pub fn engine_measures(root: &Path) -> bool {
    read_json::<FormatOnly>(root, RUN_FILE).is_ok_and(|r| r.format == RUN_FORMAT)
}

/// `run.json` and every completion record, parsed once.
pub struct Records {
    /// `run.json` (`Err`: missing or malformed, with why).
    pub run: Result<RunRecord, String>,
    /// Sessions and completion records are expected (`run.json` `harness-run/2`, or
    /// any `unit.json` present).
    pub expected: bool,
    /// Unit name (`b<k>/<arm>` or `qualification`) -> its record, in schedule order
    /// (the qualification first). `Err`: missing or malformed.
    pub units: Vec<(String, String, Result<UnitRecord, String>)>,
}

impl Records {
    pub fn read(root: &Path, s: &Study<'_>) -> Records {
        let present = root.join(RUN_FILE).symlink_metadata().is_ok();
        let run = if present { read_json::<RunRecord>(root, RUN_FILE) } else { Err("missing".to_string()) };
        let any_record = s.scan.files.keys().any(|p| p == QUALIFICATION_UNIT_PATH || is_raw_record(p));
        let format = match &run {
            Ok(r) => Some(r.format.clone()),
            Err(_) => read_json::<FormatOnly>(root, RUN_FILE).ok().map(|f| f.format),
        };
        let expected = format.is_some_and(|f| SESSION_FORMATS.contains(&f.as_str())) || any_record;
        let qualification = s.plan.qualification.as_ref().is_some_and(|q| q.required);
        let mut units = Vec::new();
        let mut read = |name: String, rel: String| {
            let r = if s.scan.files.contains_key(&rel) {
                read_json::<UnitRecord>(root, &rel)
            } else {
                Err("missing".to_string())
            };
            units.push((name, rel, r));
        };
        if qualification {
            read(QUALIFICATION.into(), QUALIFICATION_UNIT_PATH.into());
        }
        for u in &s.units {
            read(format!("b{}/{}", u.block, u.arm), format!("{}/{UNIT_FILE}", unit_path(u.block, &u.arm)));
        }
        Records { run, expected, units }
    }
}

/// `raw/b<k>/<arm>/unit.json`.
fn is_raw_record(p: &str) -> bool {
    matches!(p.split('/').collect::<Vec<_>>().as_slice(), [RAW_DIR, b, _, UNIT_FILE] if b.starts_with('b'))
}

/// Every file of `prefix` (a directory, with its trailing `/`) except the record.
fn files_under<'a>(scan: &'a Scan, prefix: &str) -> impl Iterator<Item = &'a String> {
    let record = format!("{prefix}{UNIT_FILE}");
    let listed = scan.files.range(prefix.to_string()..).map(|(p, _)| p).take_while(move |p| p.starts_with(prefix));
    let odd = scan.unreadable.iter().map(|(p, _)| p).filter(move |p| p.starts_with(prefix));
    listed.chain(odd).filter(move |p| **p != record)
}

/// One record against the files on disk; `owned` are the files the unit should list.
fn check_record(m: &mut Vec<Mismatch>, rel: &str, rec: &UnitRecord, owned: &BTreeSet<String>, scan: &Scan) {
    let mut seen = BTreeSet::new();
    let mut last: Option<&str> = None;
    for f in &rec.files {
        if last.is_some_and(|l| l >= f.path.as_str()) {
            m.push(Mismatch::new(rel, format!("files[{}]", f.path), "out of order or repeated", "sorted, unique"));
        }
        last = Some(&f.path);
        seen.insert(f.path.clone());
        if !owned.contains(&f.path) {
            m.push(Mismatch::new(rel, format!("files[{}]", f.path), "listed", "not a file of this unit on disk"));
            continue;
        }
        match scan.files.get(&f.path) {
            None => m.push(Mismatch::new(&f.path, "file (unit.json)", "listed in unit.json", "unreadable")),
            Some(d) => {
                if d.bytes != f.bytes {
                    m.push(Mismatch::new(&f.path, format!("bytes ({rel})"), f.bytes.to_string(), d.bytes.to_string()));
                }
                if d.sha256 != f.sha256 {
                    m.push(Mismatch::new(&f.path, format!("sha256 ({rel})"), &f.sha256, &d.sha256));
                }
            }
        }
    }
    for p in owned.iter().filter(|p| !seen.contains(*p)) {
        m.push(Mismatch::new(p, format!("file ({rel})"), "not listed", "a file of this unit"));
    }
}

/// Every record: present, well formed, and equal to its unit's files.
pub fn check(root: &Path, s: &Study<'_>, r: &Records) -> Check {
    let _ = root;
    if !r.expected {
        return Check::skip(
            NAME,
            "no completion records (run.json is not harness-run/2 or later): written before resume",
        );
    }
    let mut m = Vec::new();
    let mut files = 0usize;
    let archived_qualified: Option<bool> = read_json::<Value>(root, QUALIFICATION_RESULT_FILE)
        .ok()
        .and_then(|q| q.get("arms")?.as_array().map(|a| a.iter().all(|x| x["qualified"] == true)));
    for (name, rel, rec) in &r.units {
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                let what = if e == "missing" { "missing".to_string() } else { format!("malformed: {e}") };
                m.push(Mismatch::new(rel, "file", what, "a completion record"));
                continue;
            }
        };
        files += rec.files.len();
        let mut field = |f: &str, archived: String, want: String| {
            if archived != want {
                m.push(Mismatch::new(rel, f, archived, want));
            }
        };
        field("format", rec.format.clone(), UNIT_FORMAT.into());
        field("unit", rec.unit.clone(), name.clone());
        let mut owned: BTreeSet<String>;
        if name == QUALIFICATION {
            field("block", format!("{:?}", rec.block), "None".into());
            let want = match archived_qualified {
                Some(true) => RecordStatus::Qualification(QualificationVerdict::AllQualified).to_string(),
                Some(false) => RecordStatus::Qualification(QualificationVerdict::NotAllQualified).to_string(),
                None => "(no results/qualification.json)".to_string(),
            };
            field("status", rec.status.to_string(), want);
            owned = files_under(s.scan, &format!("{QUALIFICATION_DIR}/")).cloned().collect();
            owned.extend(s.scan.files.keys().filter(|p| *p == QUALIFICATION_RESULT_FILE).cloned());
        } else {
            let Some(u) = s.units.iter().find(|u| format!("b{}/{}", u.block, u.arm) == *name) else { continue };
            field("block", format!("{:?}", rec.block), format!("{:?}", Some(u.block)));
            field("status", rec.status.to_string(), u.status.to_string());
            owned = files_under(s.scan, &format!("{}/", unit_path(u.block, &u.arm))).cloned().collect();
            let cells: BTreeSet<&str> =
                s.cells.iter().filter(|c| c.block == u.block && c.arm == u.arm).map(|c| c.cell.as_str()).collect();
            for c in cells {
                let p = cell_summary_path(u.block, &u.arm, c);
                if s.scan.files.contains_key(&p) {
                    owned.insert(p);
                }
            }
        }
        check_record(&mut m, rel, rec, &owned, s.scan);
    }
    let scheduled: BTreeSet<&str> = r.units.iter().map(|(_, rel, _)| rel.as_str()).collect();
    for p in s.scan.files.keys().filter(|p| is_raw_record(p) && !scheduled.contains(p.as_str())) {
        m.push(Mismatch::new(p, "file", "a completion record", "not a unit of the plan's schedule"));
    }
    let detail = format!("{} records listing {files} files", r.units.len());
    Check::of(NAME, detail, m)
}
