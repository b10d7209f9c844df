//! In-study pilots in the evidence: the layout of `pilots/` (a sub-study in the
//! evidence layout: `pilots/inputs/`, `pilots/raw/b<run>/<arm>/`,
//! `pilots/results/cells/`), the record `pilots/derived.json` (every pilot's raw
//! record file with its SHA-256 and rate, the pilot rates, the formula's constants
//! and the derived loads), how a pilot's rate is computed from its raw records, and
//! the plan every reader of the evidence uses: the frozen plan with the loads of
//! `pilots/derived.json` ([`evidence_plan`]; the record's type is
//! `evidence::PilotsRecord`). Must not run
//! servers (the pilot phase is `run::pilots`) and must not write `plan.toml`.
//!
//! A pilot's rate is its cell's `request_throughput_rps`: valid completed requests
//! divided by the observation interval (first intended arrival to last completion),
//! the closed-loop pilot's completed requests per second.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::evidence::request_record::RequestRecord;
use crate::evidence::{
    CountRuleRecord, DERIVED_PATH, Evidence, PILOTS_DIR, PILOTS_FORMAT, PilotRun, PilotsRecord, RATE_RULE,
    read_pilots_record, sha256_hex,
};
use crate::plan::{CountRule, DerivedLoads, FrozenPlan, PILOT_CELL, Plan, tenths_str};

/// The pilots' evidence layout (`<root>/pilots`).
pub fn pilots_evidence(root: &Path) -> Evidence {
    Evidence::open(&root.join(PILOTS_DIR))
}

impl PilotsRecord {
    /// The record of `pilots` whose rates gave `loads` under `plan`'s formula.
    pub fn new(plan: &Plan, plan_sha256: &str, pilots: Vec<PilotRun>, loads: &DerivedLoads) -> PilotsRecord {
        let spec = plan.derive.as_ref();
        PilotsRecord {
            format: PILOTS_FORMAT.into(),
            plan_sha256: plan_sha256.into(),
            rate_rule: RATE_RULE.into(),
            pilot_rates: pilots.iter().map(|p| p.rate_rps).collect(),
            pilots,
            formula: "near = floor(10 * near_fraction * min(pilot_rates)) / 10; each fraction f: floor(10 * f * \
                      near) / 10; count = max(floor, ceil(duration_s * max(pilot_rates))) rounded up to a \
                      multiple (exact decimal arithmetic, plan::derive)"
                .into(),
            near_fraction: spec.map_or(0.0, |s| s.near_fraction),
            fractions: spec.map(|s| s.fractions.clone()).unwrap_or_default(),
            count_rule: spec.and_then(|s| s.count.as_ref()).map(|c: &CountRule| CountRuleRecord {
                floor: c.floor,
                duration_s: c.duration_s,
                multiple: c.multiple,
            }),
            rates_tenths: loads.rates_tenths.clone(),
            rates_rps: loads.rates_tenths.iter().map(|(k, &t)| (k.clone(), tenths_str(t))).collect(),
            count: loads.count,
        }
    }

    /// The derived loads as recorded.
    pub fn loads(&self) -> DerivedLoads {
        DerivedLoads { rates_tenths: self.rates_tenths.clone(), count: self.count }
    }

    /// One line per pilot and the derived loads, for progress and the report.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .pilots
            .iter()
            .map(|p| {
                format!(
                    "pilot run {} arm {}: {} requests, {} completed, {} failed, {:.4} req/s",
                    p.run, p.arm, p.requests, p.completed, p.failed, p.rate_rps
                )
            })
            .collect();
        let loads: Vec<String> = self.rates_rps.iter().map(|(k, v)| format!("{k} {v} req/s")).collect();
        let count = self.count.map(|c| format!(", count {c}")).unwrap_or_default();
        out.push(format!("derived from the pilots: {}{count}", loads.join(", ")));
        out
    }
}

/// A pilot's raw records and their hash and rate (`path` is read once).
pub fn measure(root: &Path, path: &Path, run: u32, arm: &str, session: u32, plan: &Plan) -> Result<PilotRun, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let records = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str::<RequestRecord>(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let summary = crate::metrics::summarize_cell_with_slo(&records, plan.slo.as_ref())
        .map_err(|e| format!("{}: no summary: {e}", path.display()))?;
    let rel = path.strip_prefix(root).unwrap_or(path);
    let rel = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
    Ok(PilotRun {
        run,
        arm: arm.into(),
        session,
        records: rel,
        bytes: bytes.len() as u64,
        sha256: sha256_hex(&bytes),
        requests: summary.requests,
        completed: summary.completed,
        failed: summary.failed,
        rate_rps: summary.request_throughput_rps,
    })
}

/// `pilots/raw/b<run>/<arm>/pilot.requests.jsonl` under `root`.
pub fn records_path(root: &Path, run: u32, arm: &str) -> PathBuf {
    pilots_evidence(root).requests_path(run, arm, PILOT_CELL)
}

/// The frozen plan as the study ran it: with the loads its pilots derived (by the
/// formula, from the rates recorded in `pilots/derived.json`) and, for a sequential
/// study that stopped early, the blocks it ran (`sequential.json`, see
/// [`crate::analysis::sequential::apply`]); the plan unchanged without either. Every reader
/// of an evidence directory takes the plan from here. Fails when a record is
/// missing, unreadable, or its loads are not the formula's output for its rates.
pub fn evidence_plan(root: &Path, frozen: FrozenPlan) -> Result<FrozenPlan, String> {
    let frozen = pilot_loads(root, frozen)?;
    let plan = crate::analysis::sequential::apply(root, frozen.plan)?;
    Ok(FrozenPlan { plan, ..frozen })
}

fn pilot_loads(root: &Path, frozen: FrozenPlan) -> Result<FrozenPlan, String> {
    if frozen.plan.pilots.is_none() {
        return Ok(frozen);
    }
    let rec = read_pilots_record(root)?;
    let (plan, loads) = frozen.plan.with_pilot_rates(&rec.pilot_rates).map_err(|e| format!("{DERIVED_PATH}: {e}"))?;
    if loads != rec.loads() {
        return Err(format!(
            "{DERIVED_PATH}: the recorded loads {:?} (count {:?}) are not the formula's output {:?} (count {:?}) \
             for its pilot rates",
            rec.rates_rps,
            rec.count,
            loads.rates_tenths.iter().map(|(k, &t)| (k.clone(), tenths_str(t))).collect::<BTreeMap<_, _>>(),
            loads.count
        ));
    }
    Ok(FrozenPlan { plan, ..frozen })
}
