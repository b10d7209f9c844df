//! `manifest.json`: every file of an evidence directory (except the manifest itself)
//! with its size and SHA-256, the plan hash, the harness version and the git revision
//! the study ran from; and the check that a directory still matches it. Must not
//! repair a directory that fails the check.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::sha256_hex;
use super::{EvidenceError, io_err, write_json};

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

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), EvidenceError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io_err(&path))?;
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if path != root.join("manifest.json") {
            out.push(path);
        }
    }
    Ok(())
}

fn rel(root: &Path, path: &Path) -> String {
    let r = path.strip_prefix(root).unwrap_or(path);
    r.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Every file under `root` except `manifest.json`, hashed, sorted by path.
pub fn manifest_files(root: &Path) -> Result<Vec<ManifestFile>, EvidenceError> {
    let mut paths = Vec::new();
    walk(root, root, &mut paths)?;
    let mut files = paths
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).map_err(io_err(p))?;
            Ok(ManifestFile { path: rel(root, p), bytes: bytes.len() as u64, sha256: sha256_hex(&bytes) })
        })
        .collect::<Result<Vec<_>, EvidenceError>>()?;
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
    write_json(&root.join("manifest.json"), &manifest)?;
    Ok(manifest)
}

/// Re-reads `root/manifest.json` and rehashes the directory: names every missing,
/// changed or unlisted file. Returns the manifest when all match.
pub fn verify_manifest(root: &Path) -> Result<Manifest, EvidenceError> {
    let path = root.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| EvidenceError::Json { what: path.display().to_string(), message: e.to_string() })?;
    let actual = manifest_files(root)?;
    let mut problems = Vec::new();
    for want in &manifest.files {
        match actual.iter().find(|f| f.path == want.path) {
            None => problems.push(format!("{}: missing", want.path)),
            Some(got) if got != want => problems.push(format!(
                "{}: changed ({} bytes, sha256 {}; manifest {} bytes, sha256 {})",
                want.path, got.bytes, got.sha256, want.bytes, want.sha256
            )),
            Some(_) => {}
        }
    }
    for got in &actual {
        if !manifest.files.iter().any(|f| f.path == got.path) {
            problems.push(format!("{}: not in the manifest", got.path));
        }
    }
    let plan = root.join("plan.toml");
    if let Ok(bytes) = std::fs::read(&plan)
        && sha256_hex(&bytes) != manifest.plan_sha256
    {
        problems.push(format!("plan.toml: sha256 differs from the manifest's plan_sha256 {}", manifest.plan_sha256));
    }
    if problems.is_empty() { Ok(manifest) } else { Err(EvidenceError::Manifest(problems.len(), problems.join("\n  "))) }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(err.contains("server.log: changed") && err.contains("extra: not in the manifest"), "{err}");
    }
}
