//! The one door into a finished evidence directory. Every command that reads one
//! (`gate` in each mode, `export`, `noise`, `report`, `plan power --noise`,
//! `plan check --pilots-from`, and `replay`'s first pass) opens it here, and gets
//! either a [`Sealed`] directory or a [`SealError`] naming the file at fault (exit
//! 2). [`Sealed::open`] checks, before the command reads anything:
//!
//! - the path is a directory, and holds `manifest.json` (else the study never
//!   finished: killed, still running, or not an evidence directory at all), a
//!   regular file of the manifest format;
//! - every entry under it, listed without following anything, is a regular file or
//!   a real directory (a symbolic link, FIFO, socket or device is refused by its
//!   name, never opened, so never waited on), and is listed in the manifest;
//! - every file the manifest lists is there with the size and SHA-256 it was sealed
//!   with (all files are hashed once, in parallel: a few hundred MB per second per
//!   core; a file of the wrong size is not read at all), and `plan.toml` matches the
//!   manifest's plan hash;
//! - no session of `run.json` is still `running`.
//!
//! After that, [`Sealed::read`] reads a listed file through [`super::open_regular`]
//! and checks its size and hash again (the bytes a command uses are the sealed ones
//! even if the directory changes while it runs).
//!
//! Replay shares the parts of the first pass ([`read_manifest`], [`listing`],
//! [`findings`], [`running_session`]) and reports each finding as a failed check
//! instead of stopping; it hashes in its own single pass because it parses the raw
//! records while it reads them.
//!
//! Owns `SealError` and the wording of every finding. Must not write, repair or
//! delete anything, and must not interpret a file beyond the manifest, the plan
//! hash and `run.json`'s session states.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{MANIFEST_FORMAT, Manifest, RUN_FILE, hex, kind_in_words, open_regular};

/// The manifest's file name, at the evidence root.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The largest manifest read (256 MiB: millions of entries).
const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// Findings listed in an error's message (all are counted).
const SHOWN: usize = 12;

/// Why an evidence directory was refused. Every variant is bad input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("{path}: not an evidence directory: {why}")]
    NotEvidence { path: PathBuf, why: String },
    #[error(
        "{dir}: no manifest.json: the study did not finish (killed, or still running); only sealed, complete \
         evidence is read (`harness run --resume {dir}` finishes an interrupted study)"
    )]
    Unfinished { dir: PathBuf },
    #[error("{dir}: {session}: only a finished study is read")]
    Running { dir: PathBuf, session: String },
    #[error("{dir}/{file}: {why}")]
    Unreadable { dir: PathBuf, file: String, why: String },
    #[error("{dir}: {} file(s) differ from manifest.json; only sealed, unchanged evidence is read:\n  {}", .findings.len(), shown(.findings))]
    Differs { dir: PathBuf, findings: Vec<Finding> },
    #[error("{dir}/{file}: not in manifest.json: a command reads only sealed files")]
    NotListed { dir: PathBuf, file: String },
}

/// The first findings in words, one per line, and how many more there are.
fn shown(findings: &[Finding]) -> String {
    let mut text = findings.iter().take(SHOWN).map(Finding::describe).collect::<Vec<_>>().join("\n  ");
    if findings.len() > SHOWN {
        text.push_str(&format!("\n  ... and {} more", findings.len() - SHOWN));
    }
    text
}

impl crate::BadInput for SealError {
    fn is_bad_input(&self) -> bool {
        true
    }
}

/// One difference between a directory and its manifest, in replay's terms: the
/// file, the field, what the manifest says and what is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: String,
    /// `entries`, `file`, `bytes`, `sha256` or `plan_sha256`.
    pub field: &'static str,
    pub sealed: String,
    pub found: String,
}

impl Finding {
    fn new(file: &str, field: &'static str, sealed: impl Into<String>, found: impl Into<String>) -> Finding {
        Finding { file: file.to_string(), field, sealed: sealed.into(), found: found.into() }
    }

    /// The finding in words, naming the file first.
    pub fn describe(&self) -> String {
        match self.field {
            "file" if self.sealed == NOT_LISTED => format!("{}: not in manifest.json ({})", self.file, self.found),
            "file" => format!("{}: listed in manifest.json, {}", self.file, self.found),
            "entries" => format!("{}: {} in manifest.json", self.file, self.found),
            "bytes" => format!("{}: {} bytes, sealed with {}", self.file, self.found, self.sealed),
            "sha256" => format!("{}: sha256 {}, sealed with {}", self.file, self.found, self.sealed),
            _ => format!("{}: {} {}, manifest.json says {}", self.file, self.field, self.found, self.sealed),
        }
    }
}

const NOT_LISTED: &str = "not in manifest.json";

/// What an entry under the directory is (never followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file of this many bytes.
    File(u64),
    /// Anything else but a directory: why it is not read, in words.
    Other(&'static str),
}

/// One entry under an evidence directory, `manifest.json` excepted.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Relative, `/`-separated.
    pub rel: String,
    pub path: PathBuf,
    pub kind: EntryKind,
}

/// Size and SHA-256 of a file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest256 {
    pub bytes: u64,
    pub sha256: String,
}

fn unreadable(dir: &Path, file: &str, why: impl ToString) -> SealError {
    SealError::Unreadable { dir: dir.to_path_buf(), file: file.to_string(), why: why.to_string() }
}

/// Checks that `root` is a directory (a link to one is followed: the user named it).
fn check_root(root: &Path) -> Result<(), SealError> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(m) => Err(SealError::NotEvidence {
            path: root.to_path_buf(),
            why: format!("{}; give the directory `harness run` wrote", kind_in_words(&m.file_type())),
        }),
        Err(e) => Err(SealError::NotEvidence { path: root.to_path_buf(), why: e.to_string() }),
    }
}

/// Reads `root/manifest.json`: a regular file in the manifest format. Its absence
/// in a directory that holds a plan or a run record is an unfinished study.
pub fn read_manifest(root: &Path) -> Result<Manifest, SealError> {
    check_root(root)?;
    if root.join(MANIFEST_FILE).symlink_metadata().is_err() {
        let started =
            [super::PLAN_FILE, RUN_FILE, super::RAW_DIR].iter().any(|f| root.join(f).symlink_metadata().is_ok());
        return Err(if started {
            SealError::Unfinished { dir: root.to_path_buf() }
        } else {
            SealError::NotEvidence {
                path: root.to_path_buf(),
                why: "no manifest.json, plan.toml or run.json (give the directory `harness run` wrote)".into(),
            }
        });
    }
    let file = open_regular(root, Path::new(MANIFEST_FILE)).map_err(|e| unreadable(root, MANIFEST_FILE, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut bytes).map_err(|e| unreadable(root, MANIFEST_FILE, e))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(unreadable(root, MANIFEST_FILE, format!("larger than {MAX_MANIFEST_BYTES} bytes")));
    }
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| unreadable(root, MANIFEST_FILE, e))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(unreadable(
            root,
            MANIFEST_FILE,
            format!("format {:?}, expected {MANIFEST_FORMAT:?}", manifest.format),
        ));
    }
    Ok(manifest)
}

fn walk_into(root: &Path, dir: &Path, out: &mut Vec<Entry>) -> Result<(), SealError> {
    let rel_of = |p: &Path| {
        let r = p.strip_prefix(root).unwrap_or(p);
        r.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
    };
    let fail = |e: std::io::Error| unreadable(root, &rel_of(dir), e);
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(fail)?.collect::<Result<_, _>>().map_err(fail)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = rel_of(&path);
        // DirEntry::metadata does not follow a symbolic link.
        let meta = e.metadata().map_err(|err| unreadable(root, &rel, err))?;
        let t = meta.file_type();
        if t.is_dir() {
            walk_into(root, &path, out)?;
        } else if rel != MANIFEST_FILE {
            let kind = if t.is_file() { EntryKind::File(meta.len()) } else { EntryKind::Other(kind_in_words(&t)) };
            out.push(Entry { rel, path, kind });
        }
    }
    Ok(())
}

/// Every entry under `root` except `manifest.json`, sorted, listed without
/// following or opening anything.
pub fn listing(root: &Path) -> Result<Vec<Entry>, SealError> {
    let mut out = Vec::new();
    walk_into(root, root, &mut out)?;
    Ok(out)
}

/// Hashes the regular file `rel` under `root` in 1 MiB chunks, reading at most
/// `limit` bytes (one more than that is reported as its size).
pub fn hash_regular(root: &Path, rel: &str, limit: u64) -> std::io::Result<Digest256> {
    hash_with(root, rel, limit, &mut vec![0u8; 1 << 20])
}

/// [`hash_regular`] with the caller's buffer.
fn hash_with(root: &Path, rel: &str, limit: u64, buf: &mut [u8]) -> std::io::Result<Digest256> {
    let file = open_regular(root, Path::new(rel))?;
    let mut reader = file.take(limit.saturating_add(1));
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    loop {
        let n = reader.read(buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok(Digest256 { bytes: total, sha256: hex(&hasher.finalize()) })
}

/// Every difference between `manifest` and what was read: `digests` (files read,
/// by relative path) and `unread` (entries not read, with why). Listed files
/// first (in manifest order), then entries the manifest does not list.
pub fn findings(
    manifest: &Manifest,
    digests: &BTreeMap<String, Digest256>,
    unread: &[(String, String)],
) -> (Vec<Finding>, Vec<Finding>) {
    let mut listed = Vec::new();
    let mut times: HashMap<&str, usize> = HashMap::new();
    for f in &manifest.files {
        *times.entry(f.path.as_str()).or_default() += 1;
    }
    let mut repeated: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    repeated.sort();
    for (path, n) in repeated {
        listed.push(Finding::new(path, "entries", "listed once in manifest.json", format!("listed {n} times")));
    }
    for f in &manifest.files {
        match digests.get(&f.path) {
            None => {
                // Unread itself, or under a directory that is a link or special file.
                let why = unread
                    .iter()
                    .find(|(p, _)| p == &f.path || f.path.strip_prefix(p.as_str()).is_some_and(|r| r.starts_with('/')))
                    .map_or("missing".to_string(), |(p, w)| if p == &f.path { w.clone() } else { format!("{p}: {w}") });
                listed.push(Finding::new(&f.path, "file", "listed in manifest.json", why));
            }
            Some(d) => {
                if d.bytes != f.bytes {
                    listed.push(Finding::new(&f.path, "bytes", f.bytes.to_string(), d.bytes.to_string()));
                }
                if d.sha256 != f.sha256 {
                    listed.push(Finding::new(&f.path, "sha256", &f.sha256, &d.sha256));
                }
            }
        }
    }
    let names: std::collections::HashSet<&str> = times.keys().copied().collect();
    let mut unlisted = Vec::new();
    for path in digests.keys().filter(|p| !names.contains(p.as_str())) {
        unlisted.push(Finding::new(path, "file", NOT_LISTED, "present on disk"));
    }
    for (path, why) in unread.iter().filter(|(p, _)| !names.contains(p.as_str())) {
        unlisted.push(Finding::new(path, "file", NOT_LISTED, format!("present on disk: {why}")));
    }
    (listed, unlisted)
}

#[derive(Deserialize)]
struct SessionsOnly {
    #[serde(default)]
    sessions: Vec<SessionEntry>,
}

#[derive(Deserialize)]
struct SessionEntry {
    session: u32,
    state: super::SessionState,
    #[serde(default)]
    pid: Option<u32>,
}

/// The first session `run.json` (these bytes) still calls `running`, in words;
/// `None` when there is none or the record has no sessions.
pub fn running_session(run_json: &[u8]) -> Option<String> {
    let rec: SessionsOnly = serde_json::from_slice(run_json).ok()?;
    rec.sessions.iter().find(|s| s.state == super::SessionState::Running).map(|s| {
        let pid = s.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
        format!("{RUN_FILE}: session {} is still running{pid} (or was killed and never resumed)", s.session)
    })
}

/// Hashes each `(rel, size)` of `work` in parallel (largest first), reading each at
/// most to its size (one byte more shows it grew): (rel, digest or why not).
pub(crate) fn hash_files(root: &Path, mut work: Vec<(&str, u64)>) -> Vec<(String, Result<Digest256, String>)> {
    work.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(work.len()));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8).min(work.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(rel, size)) = work.get(i) else { break };
                    let r = hash_with(root, rel, size, &mut buf).map_err(|e| e.to_string());
                    if let Ok(mut v) = results.lock() {
                        v.push((rel.to_string(), r));
                    }
                }
            });
        }
    });
    results.into_inner().unwrap_or_default()
}

/// A finished evidence directory that matched its manifest when opened.
#[derive(Debug, Clone)]
pub struct Sealed {
    root: PathBuf,
    manifest: Manifest,
    index: HashMap<String, usize>,
}

impl Sealed {
    /// Opens `dir` and checks it whole (see the module doc). `Err` names the file(s).
    pub fn open(dir: &Path) -> Result<Sealed, SealError> {
        let manifest = read_manifest(dir)?;
        let entries = listing(dir)?;
        let sizes: HashMap<&str, u64> = manifest.files.iter().map(|f| (f.path.as_str(), f.bytes)).collect();
        let mut unread = Vec::new();
        let mut digests = BTreeMap::new();
        let mut work = Vec::new();
        for e in &entries {
            match (&e.kind, sizes.get(e.rel.as_str())) {
                (EntryKind::Other(kind), _) => unread.push((e.rel.clone(), format!("{kind}, not a regular file"))),
                // Unlisted: named by the findings without being read.
                (EntryKind::File(n), None) => {
                    digests.insert(e.rel.clone(), Digest256 { bytes: *n, sha256: String::new() });
                }
                // The wrong size: a finding without reading a byte.
                (EntryKind::File(n), Some(want)) if n != want => {
                    digests.insert(e.rel.clone(), Digest256 { bytes: *n, sha256: "(not read)".into() });
                }
                (EntryKind::File(n), Some(_)) => work.push((e.rel.as_str(), *n)),
            }
        }
        for (rel, r) in hash_files(dir, work) {
            match r {
                Ok(d) => {
                    digests.insert(rel, d);
                }
                Err(why) => unread.push((rel, why)),
            }
        }
        let (mut listed, unlisted) = findings(&manifest, &digests, &unread);
        listed.retain(|f| !(f.field == "sha256" && f.found == "(not read)"));
        if let Some(plan) = digests.get(super::PLAN_FILE)
            && plan.sha256 != manifest.plan_sha256
            && plan.sha256 != "(not read)"
            && sizes.contains_key(super::PLAN_FILE)
        {
            listed.push(Finding::new(super::PLAN_FILE, "plan_sha256", &manifest.plan_sha256, &plan.sha256));
        }
        listed.extend(unlisted);
        if !listed.is_empty() {
            return Err(SealError::Differs { dir: dir.to_path_buf(), findings: listed });
        }
        let index = manifest.files.iter().enumerate().map(|(i, f)| (f.path.clone(), i)).collect();
        let sealed = Sealed { root: dir.to_path_buf(), manifest, index };
        if let Some(bytes) = sealed.read_opt(RUN_FILE)?
            && let Some(session) = running_session(&bytes)
        {
            return Err(SealError::Running { dir: dir.to_path_buf(), session });
        }
        Ok(sealed)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Whether the manifest lists `rel` (relative, `/`-separated).
    pub fn has(&self, rel: &str) -> bool {
        self.index.contains_key(rel)
    }

    /// The bytes of the listed file `rel`, checked again against its size and SHA-256.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>, SealError> {
        let Some(&i) = self.index.get(rel) else {
            return Err(SealError::NotListed { dir: self.root.clone(), file: rel.to_string() });
        };
        let want = &self.manifest.files[i];
        let file = open_regular(&self.root, Path::new(rel)).map_err(|e| unreadable(&self.root, rel, e))?;
        let mut bytes = Vec::with_capacity(usize::try_from(want.bytes).unwrap_or(0).min(1 << 30));
        file.take(want.bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| unreadable(&self.root, rel, e))?;
        let got = Digest256 { bytes: bytes.len() as u64, sha256: super::sha256_hex(&bytes) };
        if got.bytes != want.bytes || got.sha256 != want.sha256 {
            let mut findings = Vec::new();
            if got.bytes != want.bytes {
                findings.push(Finding::new(rel, "bytes", want.bytes.to_string(), got.bytes.to_string()));
            }
            if got.sha256 != want.sha256 {
                findings.push(Finding::new(rel, "sha256", &want.sha256, &got.sha256));
            }
            return Err(SealError::Differs { dir: self.root.clone(), findings });
        }
        Ok(bytes)
    }

    /// [`Sealed::read`], `None` when the manifest does not list `rel`.
    pub fn read_opt(&self, rel: &str) -> Result<Option<Vec<u8>>, SealError> {
        if self.has(rel) { self.read(rel).map(Some) } else { Ok(None) }
    }

    /// The listed file `rel` parsed as JSON (`None`: not listed); a parse error names it.
    pub fn read_json<T: serde::de::DeserializeOwned>(&self, rel: &str) -> Result<Option<T>, SealError> {
        let Some(bytes) = self.read_opt(rel)? else { return Ok(None) };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| unreadable(&self.root, rel, e))
    }

    /// Listed files under the directory `prefix` (relative, without a trailing `/`).
    pub fn files_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.manifest
            .files
            .iter()
            .map(|f| f.path.as_str())
            .filter(move |p| p.strip_prefix(prefix).is_some_and(|r| r.starts_with('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{GitInfo, write_manifest};

    fn fifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// A sealed directory: plan.toml, run.json with a finished session, raw/b0/a/x.jsonl.
    fn sealed(root: &Path) {
        std::fs::create_dir_all(root.join("raw/b0/a")).unwrap();
        std::fs::write(root.join("plan.toml"), "x = 1\n").unwrap();
        std::fs::write(root.join("run.json"), r#"{"sessions": [{"session": 0, "state": "finished"}]}"#).unwrap();
        std::fs::write(root.join("raw/b0/a/x.jsonl"), "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
        let git = GitInfo { revision: "unknown".into(), dirty: None };
        write_manifest(root, "s", &crate::evidence::sha256_hex(b"x = 1\n"), git).unwrap();
    }

    fn refused(root: &Path) -> String {
        Sealed::open(root).unwrap_err().to_string()
    }

    #[test]
    fn a_sealed_directory_opens_and_reads_its_files() {
        let tmp = tempfile::tempdir().unwrap();
        sealed(tmp.path());
        let s = Sealed::open(tmp.path()).unwrap();
        assert_eq!(s.read("plan.toml").unwrap(), b"x = 1\n");
        assert!(s.read_opt("results/matrix.csv").unwrap().is_none());
        assert_eq!(s.files_under("raw/b0").collect::<Vec<_>>(), ["raw/b0/a/x.jsonl"]);
        let err = s.read("nope.json").unwrap_err().to_string();
        assert!(err.contains("nope.json: not in manifest.json"), "{err}");
        // Changed after the open: read checks again.
        std::fs::write(tmp.path().join("plan.toml"), "x = 2\n").unwrap();
        let err = s.read("plan.toml").unwrap_err().to_string();
        assert!(err.contains("plan.toml: sha256"), "{err}");
    }

    #[test]
    fn each_kind_of_damage_is_refused_naming_the_file() {
        type Damage = fn(&Path);
        let cases: [(&str, Damage, &str); 9] = [
            (
                "changed byte",
                |r| std::fs::write(r.join("raw/b0/a/x.jsonl"), "{\"a\": 1}\n{\"a\": 3}\n").unwrap(),
                "raw/b0/a/x.jsonl: sha256",
            ),
            (
                "truncated",
                |r| std::fs::write(r.join("raw/b0/a/x.jsonl"), "{\"a\": 1}\n").unwrap(),
                "raw/b0/a/x.jsonl: 9 bytes, sealed with 18",
            ),
            (
                "deleted",
                |r| std::fs::remove_file(r.join("raw/b0/a/x.jsonl")).unwrap(),
                "raw/b0/a/x.jsonl: listed in manifest.json, missing",
            ),
            (
                "FIFO",
                |r| {
                    std::fs::remove_file(r.join("raw/b0/a/x.jsonl")).unwrap();
                    fifo(&r.join("raw/b0/a/x.jsonl"));
                },
                "raw/b0/a/x.jsonl: listed in manifest.json, a FIFO (named pipe), not a regular file",
            ),
            (
                "symlink",
                |r| {
                    std::fs::remove_file(r.join("plan.toml")).unwrap();
                    std::os::unix::fs::symlink("/etc/hostname", r.join("plan.toml")).unwrap();
                },
                "plan.toml: listed in manifest.json, a symbolic link",
            ),
            (
                "linked directory",
                |r| {
                    std::fs::rename(r.join("raw/b0"), r.join("b0-elsewhere")).unwrap();
                    std::os::unix::fs::symlink(r.join("b0-elsewhere"), r.join("raw/b0")).unwrap();
                },
                "raw/b0/a/x.jsonl: listed in manifest.json, raw/b0: a symbolic link",
            ),
            (
                "extra file",
                |r| std::fs::write(r.join("raw/b0/a/extra.json"), "{}").unwrap(),
                "raw/b0/a/extra.json: not in manifest.json",
            ),
            (
                "missing manifest",
                |r| std::fs::remove_file(r.join("manifest.json")).unwrap(),
                "no manifest.json: the study did not finish",
            ),
            (
                "running session",
                |r| {
                    std::fs::write(
                        r.join("run.json"),
                        r#"{"sessions": [{"session": 0, "state": "running", "pid": 7}]}"#,
                    )
                    .unwrap();
                    let git = GitInfo { revision: "unknown".into(), dirty: None };
                    write_manifest(r, "s", &crate::evidence::sha256_hex(b"x = 1\n"), git).unwrap();
                },
                "run.json: session 0 is still running, pid 7",
            ),
        ];
        for (name, damage, want) in cases {
            let tmp = tempfile::tempdir().unwrap();
            sealed(tmp.path());
            damage(tmp.path());
            let err = refused(tmp.path());
            assert!(err.contains(want), "{name}: {err}");
        }
    }

    #[test]
    fn a_file_or_a_missing_path_is_not_an_evidence_directory_and_a_plan_change_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("plan.toml"), "x = 1\n").unwrap();
        let err = refused(&tmp.path().join("plan.toml"));
        assert!(err.contains("plan.toml: not an evidence directory: a regular file"), "{err}");
        assert!(refused(&tmp.path().join("nope")).contains("not an evidence directory"));
        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(refused(&empty).contains("not an evidence directory: no manifest.json"), "{}", refused(&empty));
        let root = tmp.path().join("ev");
        sealed(&root);
        // The plan rewritten and the manifest resealed by hand, its plan hash left.
        std::fs::write(root.join("plan.toml"), "x = 2\n").unwrap();
        let git = GitInfo { revision: "unknown".into(), dirty: None };
        write_manifest(&root, "s", &crate::evidence::sha256_hex(b"x = 1\n"), git).unwrap();
        assert!(refused(&root).contains("plan.toml: plan_sha256"), "{}", refused(&root));
    }
}
