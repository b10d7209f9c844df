//! Block-to-block noise from the in-study pilots, for the power model
//! (`analysis::power`): when one control arm ran at least 2 pilot runs (each on a fresh
//! server, the same closed-loop pilot cell), the spread of a metric across those runs
//! is the fresh-server noise of that arm at that load shape. Per metric, with the
//! runs' values v_r: the sample SD s (n - 1) of ln(v_r) and its one-sided 90% upper
//! bound (chi-square, `power::noise::spread`); a study's paired log-ratio
//! ln(candidate / control) is a difference of two such runs, so its SD is
//! sqrt(2) x s (and the bound sqrt(2) x the bound of s). With 2 runs this is one
//! degree of freedom: the estimate is loose and the upper bound large, and both are
//! shown. Each hypothesis takes the noise of its own control arm's pilots; a
//! hypothesis whose cell is not the pilot's load shape (closed loop at the pilot
//! concurrency) gets the pilot's noise as a proxy, and says so. Reads only
//! `pilots/derived.json` and the pilot records it names; must not write anything.

use std::path::Path;

use crate::plan::FrozenPlan;

use super::{NoiseEstimate, NoiseStudy, PowerError, noise::spread};
use crate::evidence::request_record::RequestRecord;
use crate::evidence::{PILOTS_DIR, PLAN_FILE, PilotRun, read_pilots_record};
use crate::plan::{Load, Metric, Plan};

/// The model's noise assumption when the noise comes from pilots (it replaces the
/// A/A one, which uses the SD as measured).
pub const PILOT_NOISE_ASSUMPTION: &str = "the noise comes from the control's repeated pilot runs: the SD of \
     ln(metric) across its fresh-server runs, times sqrt(2) because a paired log-ratio is a difference of two runs \
     (and its 90% upper bound likewise); with k runs it has k - 1 degrees of freedom, so with 2 runs it is loose, \
     hence the upper bound beside it; the pilot cell is closed loop, so for a cell of another load shape it is a \
     proxy";

/// Puts [`PILOT_NOISE_ASSUMPTION`] in place of the A/A noise assumption.
pub fn pilot_assumptions(report: &mut crate::analysis::power::PowerReport) {
    report.assumptions.retain(|a| !a.starts_with("the SD is that of the paired log-ratio"));
    report.assumptions.insert(2.min(report.assumptions.len()), PILOT_NOISE_ASSUMPTION.to_string());
}

/// Fewest pilot runs of one arm that give a noise estimate.
pub const MIN_RUNS: usize = 2;

/// Why the pilots of an evidence directory give no noise estimate, or the estimates:
/// one per hypothesis of `plan` (named after it, so `NoiseStudy::for_hypothesis`
/// takes it), from the pilots of its control arm.
/// `root` is a study's evidence directory (its `plan.toml` says how the pilots ran).
pub fn read(root: &Path, plan: &Plan) -> Result<NoiseStudy, PowerError> {
    let rec = read_pilots_record(root).map_err(PowerError::Args)?;
    let bytes = std::fs::read(root.join(PLAN_FILE))
        .map_err(|e| PowerError::Args(format!("{}: {e}", root.join(PLAN_FILE).display())))?;
    let own = crate::plan::freeze(bytes)?;
    let concurrency = own.plan.pilots.as_ref().map_or(0, |p| p.concurrency);
    let mut estimates = Vec::new();
    for h in &plan.hypotheses {
        let runs: Vec<&PilotRun> = rec.pilots.iter().filter(|p| p.arm == h.control).collect();
        if runs.len() < MIN_RUNS {
            estimates.push(Err(format!(
                "{}: the pilots ran control arm {} {} time(s); a noise estimate needs at least {MIN_RUNS} pilot runs \
                 of the same arm ([pilots] runs = {MIN_RUNS})",
                h.name,
                h.control,
                runs.len()
            )));
            continue;
        }
        let shape_matches = same_shape(plan, &h.cell, concurrency);
        estimates.push(estimate(root, plan, &h.name, h.metric, &h.control, &runs, shape_matches, concurrency));
    }
    if estimates.is_empty() {
        return Err(PowerError::NoHypotheses);
    }
    Ok(NoiseStudy { study: format!("{} (its pilots)", own.plan.study.name), plan_sha256: own.sha256, estimates })
}

/// Whether cell `cell` of `plan` has the pilots' load shape (closed loop at the pilot
/// `concurrency`); otherwise the pilots' noise is a proxy for it.
pub fn same_shape(plan: &Plan, cell: &str, concurrency: u32) -> bool {
    matches!(plan.cell(cell).map(|c| &c.load), Some(Load::Closed { concurrency: c }) if *c == concurrency)
}

#[allow(clippy::too_many_arguments)]
fn estimate(
    root: &Path,
    plan: &Plan,
    name: &str,
    metric: Metric,
    arm: &str,
    runs: &[&PilotRun],
    same_shape: bool,
    concurrency: u32,
) -> Result<NoiseEstimate, String> {
    let mut logs = Vec::new();
    let mut values = Vec::new();
    let mut failed = 0;
    for p in runs {
        let text = std::fs::read_to_string(root.join(&p.records)).map_err(|e| format!("{}: {e}", p.records))?;
        let records = text
            .lines()
            .map(|l| serde_json::from_str::<RequestRecord>(l).map_err(|e| format!("{}: {e}", p.records)))
            .collect::<Result<Vec<_>, _>>()?;
        let s = crate::metrics::summarize_cell_with_slo(&records, plan.slo.as_ref())
            .map_err(|e| format!("{}: {e}", p.records))?;
        failed += s.failed;
        match s.metric(metric).filter(|v| *v > 0.0) {
            Some(v) => {
                values.push(v);
                logs.push(v.ln());
            }
            None => return Err(format!("{}: no {} value", p.records, metric.as_str())),
        }
    }
    let (mean, sd, sd_upper) = spread(&logs).ok_or_else(|| format!("{name}: no spread of {} values", logs.len()))?;
    let shape =
        if same_shape { "the same load shape as this cell" } else { "a proxy: this cell has another load shape" };
    Ok(NoiseEstimate {
        source: name.to_string(),
        cell: format!("pilot (closed-loop {concurrency}; {shape})"),
        metric,
        candidate: arm.to_string(),
        control: arm.to_string(),
        blocks: runs.iter().map(|p| p.run).collect(),
        log_ratios: logs.iter().map(|l| l - mean).collect(),
        mean: 0.0,
        sd: sd * std::f64::consts::SQRT_2,
        sd_upper: sd_upper * std::f64::consts::SQRT_2,
        failed_requests: failed,
        values,
    })
}

/// The power summary of a study with `[pilots]` (`None` without), from the noise of
/// its own pilots: what `harness run` puts at the top of `report.md`.
/// `Err` says why there is none (e.g. fewer than 2 pilot runs of an arm).
pub fn power_summary(root: &Path, frozen: &FrozenPlan) -> Option<Result<super::PowerReport, String>> {
    frozen.plan.pilots.as_ref()?;
    if frozen.plan.hypotheses.is_empty() {
        return None;
    }
    let opts = super::PowerOptions {
        plan: root.join(PLAN_FILE),
        noise: root.to_path_buf(),
        target_effect: None,
        target_power: 0.8,
        seed: None,
        draws: super::DEFAULT_DRAWS,
    };
    let noise = match read(root, &frozen.plan) {
        Ok(n) => n,
        Err(e) => return Some(Err(e.to_string())),
    };
    if let Some(Err(why)) = noise.estimates.iter().find(|e| e.is_err()) {
        return Some(Err(why.clone()));
    }
    let mut report = match super::compute(frozen, &noise, Path::new(&format!("{PILOTS_DIR}/")), &opts) {
        Ok(r) => r,
        Err(e) => return Some(Err(e.to_string())),
    };
    pilot_assumptions(&mut report);
    Some(Ok(report))
}
