//! Qualification inside `harness run`: when the frozen plan's `[qualification]` says
//! `required = true`, every arm passes through the quality gates (`crate::quality`,
//! a fresh server each, plan order) before any timing. The gates' evidence goes to
//! `<evidence>/qualification/` (layout: `quality::driver`), the outcome to
//! `results/qualification.json` (what the report reads: an arm with
//! `qualified: false` has its timing claims blocked), and the completion record
//! `qualification/unit.json` is written last. The timing cells of every arm still
//! run, qualified or not, so the evidence is complete. Must not change a gate's
//! verdict and must not skip an arm.

use std::path::Path;

use super::RunError;
use crate::evidence::{Completion, QUALIFICATION_UNIT, QualificationVerdict, RecordStatus, write_record};
use crate::evidence::{Evidence, write_json};
use crate::plan::FrozenPlan;
use crate::quality::{self, QualifyOutcome};

/// `qualification/` of the evidence directory.
pub fn qualification_dir(ev: &Evidence) -> std::path::PathBuf {
    ev.root().join(crate::evidence::QUALIFICATION_DIR)
}

/// `results/qualification.json` of the evidence directory.
pub fn outcome_path(ev: &Evidence) -> std::path::PathBuf {
    ev.root().join(crate::evidence::QUALIFICATION_RESULT_FILE)
}

/// Whether the plan asks `harness run` to qualify its arms first.
pub fn required(frozen: &FrozenPlan) -> bool {
    frozen.plan.qualification.as_ref().is_some_and(|q| q.required)
}

/// Runs every gate on every arm and writes the outcome and the completion record.
/// Progress: `qualify: ...` lines on stderr (unless `quiet`) and one verdict line per
/// arm on stdout.
pub async fn run(
    frozen: &FrozenPlan,
    ev: &Evidence,
    base_dir: &Path,
    session: u32,
    quiet: bool,
    secrets: &crate::evidence::Secrets,
) -> Result<QualifyOutcome, RunError> {
    let plan = &frozen.plan;
    println!(
        "qualification: {} arm(s), a fresh server each, before any timing (required by the plan)",
        plan.arms.len()
    );
    let dir = qualification_dir(ev);
    let outcome = quality::qualify_plan(plan, base_dir, &dir, quality::Progress { quiet }).await?;
    write_json(&outcome_path(ev), &outcome)?;
    for a in &outcome.arms {
        let verdict = if a.qualified { "qualified" } else { "NOT qualified: its timing claims will be blocked" };
        println!("qualification: arm {} ({}): {verdict}", a.arm, a.role);
        for r in &a.reasons {
            println!("qualification:   - {r}");
        }
    }
    let extra = [outcome_path(ev)];
    let status = RecordStatus::Qualification(if outcome.all_qualified() {
        QualificationVerdict::AllQualified
    } else {
        QualificationVerdict::NotAllQualified
    });
    write_record(
        ev.root(),
        &dir,
        &extra,
        Completion { unit: QUALIFICATION_UNIT, block: None, session, status },
        secrets,
    )?;
    Ok(outcome)
}
