//! The pilot phase of `harness run` for a plan with `[pilots]`: before the
//! confirmation blocks (and their inputs), every pilot run of every pilot arm runs
//! as one server invocation of the pilot plan (`Plan::pilot_plan`: fresh server,
//! warmup, the closed-loop pilot cell, stop) into `pilots/` (the evidence layout
//! rooted there, with `unit.json` completion records), excluded from every test.
//! Each pilot's rate is computed from its raw records as written (`pilot::measure`);
//! the rates go through the `[derive]` formula and the result is recorded in
//! `pilots/derived.json` with every pilot record's SHA-256. The study then runs on
//! the frozen plan with those loads; `plan.toml` is never changed.
//!
//! A pilot whose server fails, or that has a failed request, gives no rate: the study
//! stops (`RunError::Pilot`), and `--resume` repeats that pilot. On `--resume`
//! ([`resume_check`]): a verified `pilots/derived.json` ends the phase at once; else
//! each pilot with a complete record and a clean rate is reused, and every other one
//! (partial, or failed) is moved aside to `discarded/` and repeated; each decision
//! is printed. Must not retry anything within a session and must not touch a
//! confirmation unit.

use std::path::{Path, PathBuf};

use super::{Progress, RunError, Study, unit};
use crate::analysis::pilot;
use crate::evidence::{Completion, RecordCheck, UNIT_FILE, check_record, files_under, write_record};
use crate::evidence::{DERIVED_PATH, PilotRun, PilotsRecord};
use crate::evidence::{Evidence, RecordStatus, UnitStatus, write_json};
use crate::load::StudyClock;
use crate::plan::{FrozenPlan, PILOT_CELL, ScheduledBlock};

/// What a resuming session keeps of an earlier pilot phase.
#[derive(Debug, Default)]
pub struct PilotResume {
    /// `pilots/derived.json`, verified against the pilot records.
    pub done: Option<PilotsRecord>,
    /// Pilot units to reuse: (run, arm, session that ran it).
    pub reuse: Vec<(u32, String, u32)>,
    /// Pilot units to move aside and repeat: (unit, files, reason).
    pub partial: Vec<(String, Vec<PathBuf>, String)>,
    /// `pilots/inputs/` is complete and matches its catalog.
    pub inputs_ok: bool,
}

/// `pilots/b<run>/<arm>`: how pilot units are named.
pub fn unit_name(run: u32, arm: &str) -> String {
    format!("{}/b{run}/{arm}", crate::evidence::PILOTS_DIR)
}

fn pilot_frozen(frozen: &FrozenPlan) -> Option<FrozenPlan> {
    Some(FrozenPlan { bytes: frozen.bytes.clone(), sha256: frozen.sha256.clone(), plan: frozen.plan.pilot_plan()? })
}

fn summary_paths(pev: &Evidence, block: &ScheduledBlock, arm: &str) -> Vec<PathBuf> {
    block.cells.iter().map(|c| pev.cell_summary_path(block.index, arm, c)).collect()
}

fn refuse(root: &Path, why: impl std::fmt::Display) -> RunError {
    RunError::Resume { dir: root.to_path_buf(), why: why.to_string() }
}

/// Decides what of an earlier pilot phase stands (changes nothing).
pub fn resume_check(ev: &Evidence, frozen: &FrozenPlan) -> Result<PilotResume, RunError> {
    let mut out = PilotResume::default();
    let Some(pf) = pilot_frozen(frozen) else { return Ok(out) };
    let root = ev.root();
    let pev = pilot::pilots_evidence(root);
    if pev.root().join(crate::evidence::CATALOG_PATH).is_file() {
        crate::trace::verify_catalog(&pev.inputs_dir())
            .map_err(|e| refuse(root, format!("pilots/inputs/ differ from their catalog: {e}")))?;
        out.inputs_ok = true;
    } else if pev.inputs_dir().exists() {
        let files = files_under(&pev.inputs_dir())?;
        out.partial.push((
            format!("{}/{}", crate::evidence::PILOTS_DIR, crate::evidence::INPUTS_DIR),
            files,
            "incomplete pilot inputs (no catalog.json)".into(),
        ));
    }
    for block in &pf.plan.schedule().blocks {
        for arm in &block.arms {
            let name = unit_name(block.index, arm);
            let dir = pev.unit_dir(block.index, arm);
            let extra = summary_paths(&pev, block, arm);
            match check_record(root, &dir, &extra) {
                RecordCheck::Changed(problems) => {
                    return Err(refuse(
                        root,
                        format!("completed pilot {name} differs from its {UNIT_FILE}:\n  {}", problems.join("\n  ")),
                    ));
                }
                RecordCheck::Complete(rec) => {
                    let clean = pilot::measure(
                        root,
                        &pev.requests_path(block.index, arm, PILOT_CELL),
                        block.index,
                        arm,
                        rec.session,
                        &pf.plan,
                    )
                    .ok()
                    .filter(|p| rec.status.is_completed() && p.failed == 0 && p.rate_rps > 0.0);
                    if clean.is_some() {
                        out.reuse.push((block.index, arm.clone(), rec.session));
                    } else {
                        let mut files = files_under(&dir)?;
                        files.push(dir.join(UNIT_FILE));
                        files.extend(extra.iter().filter(|p| p.is_file()).cloned());
                        let why = format!("its run (status {}) gave no rate: repeated", rec.status);
                        out.partial.push((name, files, why));
                    }
                }
                RecordCheck::Partial => {
                    let mut files = if dir.exists() { files_under(&dir)? } else { Vec::new() };
                    files.extend(extra.iter().filter(|p| p.is_file()).cloned());
                    if !files.is_empty() {
                        out.partial.push((name, files, "partial pilot (no unit.json): interrupted; repeated".into()));
                    }
                }
            }
        }
    }
    if root.join(DERIVED_PATH).is_file() {
        let rec = crate::evidence::read_pilots_record(root).map_err(|e| refuse(root, e))?;
        let mut problems = Vec::new();
        for p in &rec.pilots {
            let reused = out.reuse.iter().any(|(r, a, _)| *r == p.run && *a == p.arm);
            let bytes = std::fs::read(root.join(&p.records)).ok();
            if !reused || bytes.as_deref().map(crate::evidence::sha256_hex).as_deref() != Some(p.sha256.as_str()) {
                problems.push(format!("{}: not the pilot record {DERIVED_PATH} names", p.records));
            }
        }
        if !problems.is_empty() {
            return Err(refuse(
                root,
                format!("{DERIVED_PATH} does not match the pilots:\n  {}", problems.join("\n  ")),
            ));
        }
        out.done = Some(rec);
    }
    Ok(out)
}

/// What the pilot phase needs from the session.
pub struct PhaseCtx<'a> {
    pub ev: &'a Evidence,
    pub clock: StudyClock,
    pub session: u32,
    pub base_dir: &'a Path,
    pub quiet: bool,
    pub nvidia_smi: Option<PathBuf>,
    /// What the pilots' files are scrubbed of before their records.
    pub secrets: &'a crate::evidence::Secrets,
}

/// Runs (or, resuming, completes) the pilot phase; returns the frozen plan with the
/// derived loads and the record. `frozen` must have `[pilots]`.
pub async fn run_phase(
    frozen: &FrozenPlan,
    resume: &PilotResume,
    cx: &PhaseCtx<'_>,
) -> Result<(FrozenPlan, PilotsRecord), RunError> {
    let root = cx.ev.root();
    let effective = |rec: &PilotsRecord| -> Result<FrozenPlan, RunError> {
        let (plan, _) = frozen.plan.with_pilot_rates(&rec.pilot_rates)?;
        Ok(FrozenPlan { bytes: frozen.bytes.clone(), sha256: frozen.sha256.clone(), plan })
    };
    if let Some(rec) = &resume.done {
        println!("resume: pilots verified ({DERIVED_PATH}: {} pilot run(s) reused)", rec.pilots.len());
        return Ok((effective(rec)?, rec.clone()));
    }
    let Some(pf) = pilot_frozen(frozen) else {
        return Err(RunError::Plan(crate::plan::PlanError::invalid("pilots", "the plan has no [pilots]")));
    };
    let pev = pilot::pilots_evidence(root);
    pev.ensure_dir(pev.root())?;
    let pinputs = if resume.inputs_ok {
        crate::inputs::load(&pf.plan, &pev.inputs_dir())?
    } else {
        crate::inputs::prepare(&pf.plan, &pf.sha256, cx.base_dir, &pev.inputs_dir())?
    };
    let resolved = pf.plan.resolved_cells()?;
    let schedule = pf.plan.schedule();
    let per_unit = resolved.iter().map(|c| c.count).sum::<u64>();
    let total = per_unit * schedule.blocks.iter().map(|b| b.arms.len() as u64).sum::<u64>();
    println!(
        "pilots: {} run(s) of {} control arm(s), closed-loop pilot cell, {per_unit} requests each, fresh servers, \
         excluded from every test",
        schedule.blocks.len(),
        pf.plan.arms.len()
    );
    let progress = Progress::new(cx.quiet, total, None);
    let study = Study {
        frozen: &pf,
        resolved: &resolved,
        ev: &pev,
        clock: cx.clock,
        session: cx.session,
        inputs: &pinputs,
        progress: &progress,
        base_dir: cx.base_dir,
        nvidia_smi: cx.nvidia_smi.clone(),
    };
    let mut done = 0u64;
    let mut pilots: Vec<PilotRun> = Vec::new();
    for block in &schedule.blocks {
        for arm_name in &block.arms {
            let Some(arm) = pf.plan.arm(arm_name) else { continue };
            let name = unit_name(block.index, arm_name);
            let records = pev.requests_path(block.index, arm_name, PILOT_CELL);
            let reused = resume.reuse.iter().find(|(r, a, _)| *r == block.index && a == arm_name);
            let (session, status) = match reused {
                Some((_, _, session)) => {
                    progress.println(&format!("resume: pilot {name} reused (unit.json verified, session {session})"));
                    done += per_unit;
                    progress.set_done(done);
                    (*session, UnitStatus::Completed)
                }
                None => {
                    if !resume.reuse.is_empty() || !resume.partial.is_empty() {
                        progress.println(&format!("resume: pilot {name} runs now"));
                    }
                    let (outcome, _) = unit::run_unit(&study, block, arm, &mut done).await?;
                    let dir = pev.unit_dir(block.index, arm_name);
                    let extra = summary_paths(&pev, block, arm_name);
                    write_record(
                        root,
                        &dir,
                        &extra,
                        Completion {
                            unit: &name,
                            block: Some(block.index),
                            session: cx.session,
                            status: RecordStatus::Server(outcome.status),
                        },
                        cx.secrets,
                    )?;
                    let detail = outcome.detail.clone().unwrap_or_default();
                    if outcome.status != UnitStatus::Completed {
                        progress.finish();
                        return Err(pilot_failed(root, &name, format!("{}: {detail}", outcome.status)));
                    }
                    (cx.session, outcome.status)
                }
            };
            let run = pilot::measure(root, &records, block.index, arm_name, session, &pf.plan)
                .map_err(|why| pilot_failed(root, &name, why))?;
            if status != UnitStatus::Completed
                || run.failed > 0
                || run.rate_rps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            {
                progress.finish();
                let why = format!("{} of {} requests failed", run.failed, run.requests);
                return Err(pilot_failed(root, &name, why));
            }
            pilots.push(run);
        }
    }
    progress.finish();
    let rates: Vec<f64> = pilots.iter().map(|p| p.rate_rps).collect();
    let (plan, loads) = frozen.plan.with_pilot_rates(&rates)?;
    let rec = PilotsRecord::new(&plan, &frozen.sha256, pilots, &loads);
    write_json(&root.join(DERIVED_PATH), &rec)?;
    for line in rec.summary_lines() {
        println!("pilots: {line}");
    }
    Ok((FrozenPlan { bytes: frozen.bytes.clone(), sha256: frozen.sha256.clone(), plan }, rec))
}

fn pilot_failed(root: &Path, unit: &str, why: String) -> RunError {
    RunError::Pilot { unit: unit.to_string(), why, dir: root.to_path_buf() }
}
