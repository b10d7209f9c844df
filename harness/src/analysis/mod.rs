//! The analysis layer, below the report, `plan power` and the runner's pilots: what a
//! finished study's evidence says, as data, with no rendering.
//! - `study`: the study reader (the frozen plan, every unit's outcome and startup
//!   record, the raw records recomputed into per-cell summaries through `metrics`,
//!   the sessions, the stored summaries compared), with `memory` and
//!   `server_metrics` (the peaks and per-cell server counters of a unit's samples)
//!   and `spread` (a cell's latency spread);
//! - `claims`: from per-cell summaries to per-block effects and claims (`stats`);
//! - `power`: the power of a plan's claims from a noise study's spread;
//! - `pilot`: the pilots' derived loads (`pilots/derived.json`) and the noise they
//!   measured, feeding `power`;
//! - `noise`: a finished study's variance split into blocks, servers and repeats;
//! - `sequential`: the looks of a `[sequential]` study, their verdicts and the stop.
//!
//! Owns `AnalysisError`. Must not write files into an evidence directory (the report
//! does) or render text for a reader (the report and `plan power` do), except
//! `power`'s own command output.

pub mod claims;
pub mod memory;
pub mod noise;
pub mod pilot;
pub mod power;
pub mod sequential;
pub mod server_metrics;
pub mod spread;
pub mod study;

use std::path::PathBuf;

pub use claims::{
    Analysis, AnalysisInput, BlockEffect, CellMedians, Claim, FailedRequest, HypothesisReport, UnitRow, analyse,
};
pub use study::{Loaded, load};

use crate::evidence::EvidenceError;
use crate::plan::PlanError;
use crate::stats::StatsError;

/// Everything that stops reading or analysing a study's evidence.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {message}")]
    Json { path: PathBuf, message: String },
    #[error("plan.toml of the evidence: {0}")]
    Plan(#[from] PlanError),
    #[error("statistics: {0}")]
    Stats(#[from] StatsError),
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
}
