//! `manifest.json`: every file of an evidence directory (except the manifest itself)
//! with its size and SHA-256, the plan hash, the harness version and the git revision
//! the study ran from; and the check that a directory still matches it (the
//! opener's, `sealed`). Must not repair a directory that fails the check.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{EvidenceError, write_json};

/// The `format` value of manifests this code writes.
pub const MANIFEST_FORMAT: &str = "harness-evidence-manifest/1";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Relative to the evidence directory, `/`-separated.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The project's git state when the study started. `"unknown"` revision when git or
/// a repository is not available; `dirty` is then `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitInfo {
    pub revision: String,
    pub dirty: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub study: String,
    pub plan_sha256: String,
    pub harness_version: String,
    pub git: GitInfo,
    /// Every file, sorted by path.
    pub files: Vec<ManifestFile>,
}

/// `git rev-parse HEAD` and `git status --porcelain` in `dir`.
pub fn git_info(dir: &Path) -> GitInfo {
    let run = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    match run(&["rev-parse", "HEAD"]) {
        Some(rev) => GitInfo {
            revision: rev.trim().to_string(),
            dirty: run(&["status", "--porcelain"]).map(|s| !s.trim().is_empty()),
        },
        None => GitInfo { revision: "unknown".into(), dirty: None },
    }
}

/// Every file under `root` except `manifest.json`, hashed (in parallel, streamed),
/// sorted by path: the opener's listing (`sealed::listing`), so what is sealed is
/// exactly what every reader checks. Anything but a regular file or a directory
/// under `root` is an error: the harness writes none.
pub fn manifest_files(root: &Path) -> Result<Vec<ManifestFile>, EvidenceError> {
    let entries = super::listing(root)?;
    let mut work = Vec::with_capacity(entries.len());
    for e in &entries {
        match e.kind {
            super::EntryKind::File(n) => work.push((e.rel.as_str(), n)),
            super::EntryKind::Other(kind) => {
                let error = std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{kind}: not sealed"));
                return Err(EvidenceError::Io { path: e.path.clone(), error });
            }
        }
    }
    let mut files = Vec::with_capacity(work.len());
    for (rel, digest) in super::sealed::hash_files(root, work) {
        let d = digest.map_err(|why| EvidenceError::Io { path: root.join(&rel), error: std::io::Error::other(why) })?;
        files.push(ManifestFile { path: rel, bytes: d.bytes, sha256: d.sha256 });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Hashes every file under `root` and writes `root/manifest.json` (last, atomically).
pub fn write_manifest(root: &Path, study: &str, plan_sha256: &str, git: GitInfo) -> Result<Manifest, EvidenceError> {
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        study: study.into(),
        plan_sha256: plan_sha256.into(),
        harness_version: env!("CARGO_PKG_VERSION").into(),
        git,
        files: manifest_files(root)?,
    };
    write_json(&root.join(super::MANIFEST_FILE), &manifest)?;
    Ok(manifest)
}

/// Checks `root` against its manifest the one way every reader does
/// ([`super::Sealed::open`]: finished, every file listed with its size and
/// SHA-256, regular files only, the plan hash) and returns the manifest.
pub fn verify_manifest(root: &Path) -> Result<Manifest, EvidenceError> {
    super::Sealed::open(root).map(|s| s.manifest().clone()).map_err(EvidenceError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::sha256_hex;

    #[test]
    fn manifest_lists_every_file_and_catches_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("plan.toml"), "x").unwrap();
        std::fs::create_dir_all(root.join("raw/b0/a")).unwrap();
        std::fs::write(root.join("raw/b0/a/server.log"), "hello").unwrap();
        let git = GitInfo { revision: "unknown".into(), dirty: None };
        let m = write_manifest(root, "s", &sha256_hex(b"x"), git).unwrap();
        let paths: Vec<_> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["plan.toml", "raw/b0/a/server.log"]);
        verify_manifest(root).unwrap();
        std::fs::write(root.join("raw/b0/a/server.log"), "hellO").unwrap();
        std::fs::write(root.join("extra"), "").unwrap();
        let err = verify_manifest(root).unwrap_err().to_string();
        assert!(err.contains("raw/b0/a/server.log: sha256") && err.contains("extra: not in manifest.json"), "{err}");
    }
}
