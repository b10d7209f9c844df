//! Quality gates, run before any timing (DESIGN section 7): GSM8K strict match (or
//! the offline GSM-style set, always labelled so), NLL over a fixed document panel,
//! passkey retrieval, and serial parity against an arm's in-process reference.
//! Owns the gates, their items, the paired rules and the qualification evidence
//! (`driver` has the layout). Must not time requests for a study and must not touch
//! the engine except over loopback HTTP and through an arm's declared commands.
//!
//! Entry points: [`qualify_plan`] (all arms; `harness qualify PLAN` is
//! `commands::qualify`, and `harness run` calls it too) or [`qualify_arm`] (one arm's runs)
//! with [`verdict::verdict`]. An arm whose [`ArmQualification::qualified`] is false
//! is not qualified and its timing claims are blocked.

mod client;
mod common;
mod driver;
pub mod extract;
mod gsm;
mod nll;
mod outcome;
pub mod paired;
mod parity;
mod retrieval;
mod verdict;

use std::path::{Path, PathBuf};

pub use client::Completion;
pub use driver::{ArmRun, GateRun, Progress, QualityInputs, build_inputs, qualify_arm, write_inputs};
pub use gsm::{GsmItem, GsmSet};
pub use nll::{NllDoc, token_logprobs};
pub use outcome::{ArmQualification, Comparison, QUALIFICATION_FORMAT, QualifyOutcome};
pub use parity::{Mismatch, ParityPrompt, ParityResult, SerialOutput, first_difference};
pub use retrieval::{PasskeyItem, first_digits};
pub use verdict::verdict;

use crate::evidence::{EvidenceError, write_json};
use crate::plan::{Plan, PlanError};

/// Everything that can go wrong while qualifying (a gate that fails is not an
/// error: it is a verdict in `QualifyOutcome`).
#[derive(Debug, thiserror::Error)]
pub enum QualityError {
    #[error("the plan has no [qualification] table: nothing to qualify")]
    NotConfigured,
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {message}")]
    Input { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Tokenize(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("{0} is not a plain-HTTP loopback URL: the gates talk to local servers only")]
    NotLoopback(String),
    #[error("{0}")]
    Mismatch(String),
    #[error("statistics: {0}")]
    Stats(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    #[error(transparent)]
    Arm(#[from] crate::arm::ArmError),
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

impl crate::BadInput for QualityError {
    fn is_bad_input(&self) -> bool {
        match self {
            QualityError::Plan(p) => crate::BadInput::is_bad_input(p),
            QualityError::NotConfigured | QualityError::Arm(crate::arm::ArmError::MissingApiKey { .. }) => true,
            _ => false,
        }
    }
}

/// Runs every gate of `plan` on every arm (plan order, a fresh server each) and
/// writes the evidence under `dir` (a study's `qualification/` directory).
/// Relative paths of the plan are resolved under `base` (the working directory).
pub async fn qualify_plan(
    plan: &Plan,
    base: &Path,
    dir: &Path,
    progress: Progress,
) -> Result<QualifyOutcome, QualityError> {
    let q = plan.qualification.as_ref().ok_or(QualityError::NotConfigured)?;
    // A missing key is bad input: refused before anything is written or started.
    crate::arm::check_api_keys(plan, |v| std::env::var(v).ok())?;
    progress.line("building the gate items");
    let inputs = build_inputs(q, base)?;
    if let Some((_, set)) = &inputs.gsm {
        progress.line(&format!("GSM gate: {} ({} of {} items)", set.label, set.used, set.lines));
    }
    write_inputs(&inputs, dir)?;
    let mut runs = Vec::with_capacity(plan.arms.len());
    for arm in &plan.arms {
        runs.push(qualify_arm(plan, arm, &inputs, dir, progress).await?);
    }
    let outcome = verdict(plan, q, &runs, inputs.gsm.as_ref().map(|(_, s)| s.clone()));
    write_json(&dir.join(crate::evidence::QUALIFICATION_FILE), &outcome)?;
    Ok(outcome)
}
