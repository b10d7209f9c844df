//! Freezing: the plan file's exact bytes, their SHA-256, and the plan parsed from
//! those same bytes. Later layers write `bytes` into the evidence directory first and
//! read every setting from `plan`; nothing reads settings from anywhere else. Must
//! not normalise, re-serialise or otherwise change the bytes.

use std::path::Path;

use super::error::PlanError;
use super::types::Plan;
use crate::evidence::sha256_hex;

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

/// Freezes plan bytes: validates them and returns them unchanged with their hash.
pub fn freeze(bytes: Vec<u8>) -> Result<FrozenPlan, PlanError> {
    let text = std::str::from_utf8(&bytes)?;
    let plan = super::parse(text)?;
    let sha256 = sha256_hex(&bytes);
    Ok(FrozenPlan { bytes, sha256, plan })
}

/// Reads and freezes a plan file.
pub fn freeze_file(path: &Path) -> Result<FrozenPlan, PlanError> {
    let bytes =
        crate::evidence::read_input(path).map_err(|error| PlanError::Read { path: path.to_path_buf(), error })?;
    freeze(bytes)
}
