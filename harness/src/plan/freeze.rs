//! Freezing: the plan file's exact bytes, their SHA-256, and the plan parsed from
//! those same bytes. Later layers write `bytes` into the evidence directory first and
//! read every setting from `plan`; nothing reads settings from anywhere else. Also
//! owns the SHA-256 hex helper and the atomic file write the plan layer uses. Must
//! not normalise, re-serialise or otherwise change the bytes.

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::error::PlanError;
use super::types::Plan;

/// A plan fixed by its bytes.
#[derive(Debug, Clone)]
pub struct FrozenPlan {
    /// The plan file exactly as read.
    pub bytes: Vec<u8>,
    /// Lower-case hex SHA-256 of `bytes`.
    pub sha256: String,
    /// The plan parsed and validated from `bytes`.
    pub plan: Plan,
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Freezes plan bytes: validates them and returns them unchanged with their hash.
pub fn freeze(bytes: Vec<u8>) -> Result<FrozenPlan, PlanError> {
    let text = std::str::from_utf8(&bytes)?;
    let plan = super::parse(text)?;
    let sha256 = sha256_hex(&bytes);
    Ok(FrozenPlan { bytes, sha256, plan })
}

/// Reads and freezes a plan file.
pub fn freeze_file(path: &Path) -> Result<FrozenPlan, PlanError> {
    let bytes = std::fs::read(path).map_err(|error| PlanError::Read { path: path.to_path_buf(), error })?;
    freeze(bytes)
}

/// Writes `bytes` to `path` through a temporary file in the same directory, flushed
/// and renamed, so a crash never leaves a half-written file under the final name.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other("path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_matches_known_vectors() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
