//! The measurement floor (`run.json` `sessions[].measurement_floor`): present in
//! every session that ran a unit once any session of the study measured one (a
//! study written before sessions measured it has none and is skipped, saying so),
//! each internally consistent (`MeasurementFloor::problems`: finite, ordered
//! percentiles, counts that add up), measured at the plan's highest planned
//! open-loop rate (recomputed here: one over an isolated cell's spacing counts; 100
//! req/s when the plan has none), and stated in `results/report.md` as the report's
//! sentence with the highest p99 of the sessions. `None` for evidence without
//! `run.json`.

use std::path::Path;

use super::read::{read_doc, read_json};
use super::{Check, Mismatch};
use crate::evidence::{RUN_FILE, RunRecord};
use crate::plan::{Plan, ResolvedLoad};

pub const NAME: &str = "measurement floor: present, consistent, stated in the report";

const DEFAULT_RATE: f64 = 100.0;
const REPORT: &str = crate::evidence::REPORT_MD_FILE;

fn planned_rate(plan: &Plan) -> Option<f64> {
    let cells = plan.resolved_cells().ok()?;
    let mut best: Option<f64> = None;
    for c in &cells {
        let r = match c.load {
            ResolvedLoad::Open { rate_rps, .. } => rate_rps,
            ResolvedLoad::Isolated { spacing_ns } if spacing_ns > 0 => 1e9 / spacing_ns as f64,
            _ => continue,
        };
        if r.is_finite() && r > 0.0 {
            best = Some(best.map_or(r, |b: f64| b.max(r)));
        }
    }
    Some(best.unwrap_or(DEFAULT_RATE))
}

pub fn check(root: &Path, plan: &Plan) -> Option<Check> {
    let run = read_json::<RunRecord>(root, RUN_FILE).ok()?;
    let measured = run.sessions.iter().filter(|s| s.measurement_floor.is_some()).count();
    if measured == 0 {
        return Some(Check::skip(NAME, "no session measured a floor (evidence from before sessions measured it)"));
    }
    let mut m = Vec::new();
    let want_rate = planned_rate(plan);
    let mut worst: Option<f64> = None;
    for (i, s) in run.sessions.iter().enumerate() {
        let field = format!("sessions[{i}].measurement_floor");
        let Some(f) = &s.measurement_floor else {
            if !s.units_run.is_empty() || s.qualification_run {
                m.push(Mismatch::new(RUN_FILE, field, "absent", "a floor (another session of the study measured one)"));
            }
            continue;
        };
        for p in f.problems() {
            m.push(Mismatch::new(RUN_FILE, field.clone(), p, "a consistent floor"));
        }
        if let Some(rate) = want_rate
            && f.rate_rps != rate
        {
            m.push(Mismatch::new(RUN_FILE, format!("{field}.rate_rps"), f.rate_rps.to_string(), rate.to_string()));
        }
        worst = Some(worst.map_or(f.p99_us(), |w: f64| w.max(f.p99_us())));
    }
    if let Some(w) = worst {
        let sentence = format!("This client's measurement floor here: p99 {w:.0} us.");
        match read_doc(root, REPORT) {
            Ok(bytes) if String::from_utf8_lossy(&bytes).contains(&sentence) => {}
            Ok(_) => m.push(Mismatch::new(REPORT, "measurement floor", "not stated", sentence)),
            Err(e) => m.push(Mismatch::new(REPORT, "measurement floor", e, sentence)),
        }
    }
    let detail = format!("{measured} of {} sessions measured a floor", run.sessions.len());
    Some(Check::of(NAME, detail, m))
}
