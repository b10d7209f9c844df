//! Editing a copy of an evidence directory the way a tamperer would: copy it, flip
//! a byte or a digit, edit JSONL lines, and re-seal what would otherwise give the
//! change away (the manifest, a unit's completion record), so that a test can show
//! which check still catches it.

use std::path::Path;

use harness::evidence::{GitInfo, Manifest, write_manifest};

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Flips one byte of `rel`: the first byte at or after `from` that `pick` accepts
/// becomes `to(byte)`.
pub fn flip(dir: &Path, rel: &str, from: usize, pick: impl Fn(u8) -> bool, to: impl Fn(u8) -> u8) {
    let path = dir.join(rel);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = (from..bytes.len()).find(|&i| pick(bytes[i])).unwrap_or_else(|| panic!("{rel}: nothing to flip"));
    bytes[at] = to(bytes[at]);
    std::fs::write(&path, bytes).unwrap();
}

/// Changes the first digit at or after byte `from`.
pub fn flip_digit(dir: &Path, rel: &str, from: usize) {
    flip(dir, rel, from, |b| b.is_ascii_digit(), |b| if b == b'9' { b'8' } else { b + 1 });
}

/// Changes the 4th-last digit (tens of microseconds) of the first number after `key`.
pub fn bump_after(dir: &Path, rel: &str, key: &str) {
    let path = dir.join(rel);
    let mut bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let start = text.find(key).unwrap_or_else(|| panic!("{rel}: no {key}")) + key.len();
    let end = start + text[start..].find(|c: char| !c.is_ascii_digit()).unwrap();
    let at = end - 4;
    bytes[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    std::fs::write(&path, bytes).unwrap();
}

/// Rewrites the manifest over the files now on disk.
pub fn rewrite_manifest(dir: &Path) {
    let m: Manifest = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    write_manifest(dir, &m.study, &m.plan_sha256, GitInfo { revision: "synthetic".into(), dirty: None }).unwrap();
}

/// Rewrites the size and SHA-256 of every file a completion record lists.
pub fn reseal_unit(dir: &Path, record: &str) {
    let path = dir.join(record);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for f in v["files"].as_array_mut().expect("files") {
        let bytes = std::fs::read(dir.join(f["path"].as_str().unwrap())).unwrap();
        f["bytes"] = bytes.len().into();
        f["sha256"] = harness::evidence::sha256_hex(&bytes).into();
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Edits the lines of a JSONL file.
pub fn edit_lines(dir: &Path, rel: &str, f: impl FnOnce(&mut Vec<String>)) {
    let path = dir.join(rel);
    let mut lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();
    f(&mut lines);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}
