//! The file layer of replay: its first pass is the evidence opener's
//! (`evidence::Sealed`'s parts: the manifest, the listing, the findings and the
//! running-session rule), then it lists the evidence directory (never following links),
//! reads every file exactly once in parallel (hashing it; request records and
//! receipts are parsed in the same pass), and checks the result against
//! `manifest.json`: every listed file with its size and SHA-256, no unlisted file,
//! and every raw file parseable. Owns `Scan`. Must not write or execute anything.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::read::{FileDigest, hash_file, stream_lines};
use super::records::{Rec, Receipt};
use super::{Check, Mismatch, ReplayError};
use crate::evidence::{
    Digest256, EntryKind, Finding, Manifest, RAW_DIR, RECEIPTS_FILE, REQUESTS_SUFFIX, SealError, findings,
    kind_in_words,
};

/// Per request id of one server invocation: times admitted fresh, resumed, preempted.
#[derive(Debug, Clone, Default)]
pub struct ReceiptIndex {
    pub steps: u64,
    pub by_id: HashMap<String, [u32; 3]>,
    /// Every step in file order, for the engine's decode measures (`engine_decode`).
    pub timeline: Vec<super::engine_decode::Step>,
}

/// Everything read from the directory.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every plain file (except `manifest.json`), relative `/`-separated path.
    pub files: BTreeMap<String, FileDigest>,
    /// Entries that are not plain files or directories (links, devices), and files
    /// that could not be read, with why.
    pub unreadable: Vec<(String, String)>,
    /// Parsed `raw/b<block>/<arm>/<cell>.requests.jsonl`, by path.
    pub requests: HashMap<String, Vec<Rec>>,
    /// Parsed `raw/b<block>/<arm>/receipts.jsonl`, by the unit directory `raw/b<block>/<arm>`.
    pub receipts: HashMap<String, ReceiptIndex>,
    /// Raw files that did not parse: path, `line N: why`.
    pub parse_errors: Vec<(String, String)>,
}

/// Reads `manifest.json` (the one file replay cannot do without) through the
/// evidence opener's first pass (`evidence::read_manifest`): a directory, a
/// finished study, a regular manifest file in the manifest format.
pub fn read_manifest(root: &Path) -> Result<Manifest, ReplayError> {
    crate::evidence::read_manifest(root).map_err(|e| match e {
        SealError::Unreadable { file, why, .. } => ReplayError::Malformed { path: root.join(file), message: why },
        other => ReplayError::Unreadable { path: root.to_path_buf(), message: other.to_string() },
    })
}

/// Every entry under `root` except `manifest.json` (`evidence::listing`, never
/// following anything): (relative path, path, is a plain file).
pub fn walk(root: &Path) -> Result<Vec<(String, PathBuf, bool)>, ReplayError> {
    let entries = crate::evidence::listing(root)
        .map_err(|e| ReplayError::Unreadable { path: root.to_path_buf(), message: e.to_string() })?;
    Ok(entries.into_iter().map(|e| (e.rel, e.path, matches!(e.kind, EntryKind::File(_)))).collect())
}

/// `run.json` must not say a session is still running (the opener's rule).
pub fn running_check(scan: &Scan, root: &Path) -> Option<Check> {
    scan.files.get(crate::evidence::RUN_FILE)?;
    let bytes = super::read::read_doc(root, crate::evidence::RUN_FILE).ok()?;
    let m = match crate::evidence::running_session(&bytes) {
        Some(why) => vec![Mismatch::new(crate::evidence::RUN_FILE, "sessions", why, "every session finished")],
        None => Vec::new(),
    };
    Some(Check::of(RUNNING_NAME, "every session of run.json has ended".into(), m))
}

/// The check of [`running_check`].
pub const RUNNING_NAME: &str = "sessions: none still running";

enum Kind {
    Requests,
    Receipts(String),
    Other,
}

fn kind_of(rel: &str) -> Kind {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        [RAW_DIR, b, _, name] if b.starts_with('b') && name.ends_with(REQUESTS_SUFFIX) => Kind::Requests,
        [RAW_DIR, b, arm, RECEIPTS_FILE] if b.starts_with('b') => Kind::Receipts(format!("{RAW_DIR}/{b}/{arm}")),
        _ => Kind::Other,
    }
}

enum Parsed {
    Requests(Vec<Rec>),
    Receipts(String, ReceiptIndex),
    None,
}

fn parse_line<T: serde::de::DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    serde_json::from_slice(line).map_err(|e| e.to_string())
}

fn read_one(root: &Path, rel: &str) -> (Result<FileDigest, String>, Parsed, Option<String>) {
    match kind_of(rel) {
        Kind::Requests => {
            let mut recs = Vec::new();
            match stream_lines(root, rel, |_, l| parse_line::<Rec>(l).map(|r| recs.push(r))) {
                Ok((d, err)) => (Ok(d), Parsed::Requests(recs), err),
                Err(e) => (Err(e.to_string()), Parsed::None, None),
            }
        }
        Kind::Receipts(unit) => {
            let mut idx = ReceiptIndex::default();
            let res = stream_lines(root, rel, |_, l| {
                let r: Receipt = parse_line(l)?;
                idx.steps += 1;
                idx.timeline.push(super::engine_decode::Step::of(&r));
                for (slot, ids) in [(0, r.admitted), (1, r.resumed), (2, r.preempted)] {
                    for id in ids {
                        idx.by_id.entry(id).or_default()[slot] += 1;
                    }
                }
                Ok(())
            });
            match res {
                Ok((d, err)) => (Ok(d), Parsed::Receipts(unit, idx), err),
                Err(e) => (Err(e.to_string()), Parsed::None, None),
            }
        }
        Kind::Other => (hash_file(root, rel).map_err(|e| e.to_string()), Parsed::None, None),
    }
}

/// How far a file may outgrow the size the manifest lists for it (or, unlisted,
/// how large it may be) and still be read: 64 MiB. A file that differs by less is
/// read, so that content checks can name what changed in it.
pub const UNREAD_EXCESS: u64 = 64 << 20;

/// Reads every listed entry once, in parallel (largest files first). A file more
/// than [`UNREAD_EXCESS`] larger than the size `manifest` lists for it (or an
/// unlisted file larger than that) is not read at all: it is unreadable, with both
/// sizes, so a sparse 100 GB file put in place of a records file is refused at once
/// instead of after minutes of hashing.
pub fn scan(root: &Path, listing: &[(String, PathBuf, bool)], manifest: &Manifest) -> Scan {
    let listed: HashMap<&str, u64> = manifest.files.iter().map(|f| (f.path.as_str(), f.bytes)).collect();
    let mut out = Scan::default();
    let mut work: Vec<(u64, &String, &PathBuf)> = Vec::new();
    for (rel, path, plain) in listing {
        if *plain {
            let size = path.symlink_metadata().map(|m| m.len()).unwrap_or(0);
            let want = listed.get(rel.as_str()).copied();
            if size > want.unwrap_or(0).saturating_add(UNREAD_EXCESS) {
                let listed = want.map_or("not in manifest.json".to_string(), |w| format!("{w} in manifest.json"));
                out.unreadable.push((rel.clone(), format!("{size} bytes on disk, {listed}: not read")));
                continue;
            }
            work.push((size, rel, path));
        } else {
            let kind = path.symlink_metadata().map_or("not a regular file", |m| kind_in_words(&m.file_type()));
            out.unreadable.push((rel.clone(), format!("{kind}, not a regular file: not read")));
        }
    }
    work.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(work.len()));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((_, rel, _)) = work.get(i) else { break };
                    let r = read_one(root, rel);
                    if let Ok(mut v) = results.lock() {
                        v.push(((*rel).clone(), r));
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    for (rel, (digest, parsed, err)) in results {
        match digest {
            Ok(d) => {
                out.files.insert(rel.clone(), d);
            }
            Err(e) => out.unreadable.push((rel.clone(), e)),
        }
        if let Some(e) = err {
            out.parse_errors.push((rel.clone(), e));
        }
        match parsed {
            Parsed::Requests(recs) => {
                out.requests.insert(rel, recs);
            }
            Parsed::Receipts(unit, idx) => {
                out.receipts.insert(unit, idx);
            }
            Parsed::None => {}
        }
    }
    out.parse_errors.sort();
    out.unreadable.sort();
    out
}

/// The digests read, in the opener's terms.
fn digests(scan: &Scan) -> BTreeMap<String, Digest256> {
    scan.files.iter().map(|(p, d)| (p.clone(), Digest256 { bytes: d.bytes, sha256: d.sha256.clone() })).collect()
}

fn mismatch(f: Finding) -> Mismatch {
    Mismatch::new(f.file, f.field, f.sealed, f.found)
}

/// Every manifest entry is listed once and is on disk with its size and SHA-256
/// (the opener's findings, `evidence::findings`).
pub fn manifest_check(manifest: &Manifest, scan: &Scan) -> Check {
    let (listed, _) = findings(manifest, &digests(scan), &scan.unreadable);
    let detail = format!(
        "{} files listed, {} bytes on disk",
        manifest.files.len(),
        scan.files.values().map(|d| d.bytes).sum::<u64>()
    );
    Check::of("manifest: size and SHA-256 of every file", detail, listed.into_iter().map(mismatch).collect())
}

/// Files (or links) on disk that the manifest does not list.
pub fn unlisted_check(manifest: &Manifest, scan: &Scan) -> Check {
    let (_, unlisted) = findings(manifest, &digests(scan), &scan.unreadable);
    let detail = format!("{} entries on disk", scan.files.len() + scan.unreadable.len());
    Check::of("manifest: no unlisted files", detail, unlisted.into_iter().map(mismatch).collect())
}

/// Every raw request record and receipt line parses.
pub fn parse_check(scan: &Scan) -> Check {
    let m = scan.parse_errors.iter().map(|(p, e)| Mismatch::new(p, "parse", "malformed", e.clone())).collect();
    let records: usize = scan.requests.values().map(Vec::len).sum();
    let detail = format!(
        "{records} request records in {} files, receipts of {} server invocations",
        scan.requests.len(),
        scan.receipts.len()
    );
    Check::of("raw records parse", detail, m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{GitInfo, ManifestFile};

    #[test]
    fn a_file_far_larger_than_the_manifest_says_is_refused_without_being_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("raw/b0/a")).unwrap();
        std::fs::write(root.join("plan.toml"), "x = 1\n").unwrap();
        // A sparse file far larger than the records file the manifest names.
        let fake = std::fs::File::create(root.join("raw/b0/a/c.requests.jsonl")).unwrap();
        fake.set_len(4 << 30).unwrap();
        // Unlisted and as large: not read either. Slightly larger than listed: read.
        std::fs::File::create(root.join("raw/b0/a/extra.bin")).unwrap().set_len(4 << 30).unwrap();
        std::fs::write(root.join("raw/b0/a/grown.json"), "{\"a\": 12}").unwrap();
        let entry = |path: &str, bytes: u64| ManifestFile { path: path.into(), bytes, sha256: "0".repeat(64) };
        let manifest = Manifest {
            format: String::new(),
            study: String::new(),
            plan_sha256: String::new(),
            harness_version: String::new(),
            git: GitInfo { revision: "unknown".into(), dirty: None },
            files: vec![
                entry("plan.toml", 6),
                entry("raw/b0/a/c.requests.jsonl", 120),
                entry("raw/b0/a/grown.json", 8),
            ],
        };
        let s = scan(root, &walk(root).unwrap(), &manifest);
        assert!(s.files.contains_key("plan.toml"), "a file of the listed size is read");
        assert_eq!(s.files["raw/b0/a/grown.json"].bytes, 9, "a file a little larger is read (content checks see it)");
        assert!(!s.files.contains_key("raw/b0/a/c.requests.jsonl") && s.requests.is_empty(), "never read");
        assert_eq!(
            s.unreadable,
            [
                (
                    "raw/b0/a/c.requests.jsonl".to_string(),
                    "4294967296 bytes on disk, 120 in manifest.json: not read".into()
                ),
                ("raw/b0/a/extra.bin".to_string(), "4294967296 bytes on disk, not in manifest.json: not read".into()),
            ]
        );
        let check = manifest_check(&manifest, &s);
        let text = format!("{:?}", check);
        assert!(text.contains("4294967296 bytes on disk, 120 in manifest.json"), "{text}");
    }
}
