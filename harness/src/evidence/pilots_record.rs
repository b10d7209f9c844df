//! `pilots/derived.json`, the record of a study's in-study pilots: every pilot's
//! raw record file with its SHA-256 and rate, the pilot rates, the formula's
//! constants and the derived loads. One definition for the runner that writes it
//! (`run::pilots`, through `analysis::pilot`'s constructor) and every reader
//! (`analysis::pilot`, replay). Owns the file's name, format and fields. Must not
//! compute a rate or a load (`analysis::pilot` and `plan::derive` do).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The `format` of `pilots/derived.json`.
pub const PILOTS_FORMAT: &str = "harness-pilots/1";
/// The pilots' directory, relative to the evidence root.
pub const PILOTS_DIR: &str = "pilots";
/// `pilots/derived.json`, relative to the evidence root.
pub const DERIVED_PATH: &str = "pilots/derived.json";
/// How a pilot's rate is computed (restated in `derived.json`).
pub const RATE_RULE: &str = "valid completed requests / observation interval (first intended arrival to last \
                             completion) of the closed-loop pilot cell: its request_throughput_rps";

/// One pilot run of one arm, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PilotRun {
    /// Pilot run index (the block index under `pilots/raw/`).
    pub run: u32,
    pub arm: String,
    /// The session that ran it (`run.json` `sessions`).
    pub session: u32,
    /// The raw records, relative to the evidence root.
    pub records: String,
    pub bytes: u64,
    pub sha256: String,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    /// Completed requests per second (see [`RATE_RULE`]).
    pub rate_rps: f64,
}

/// `pilots/derived.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PilotsRecord {
    pub format: String,
    pub plan_sha256: String,
    pub rate_rule: String,
    /// Every pilot, in run order (run, then arm in plan order).
    pub pilots: Vec<PilotRun>,
    /// The formula's input: every pilot's rate, in the order of `pilots`.
    pub pilot_rates: Vec<f64>,
    pub formula: String,
    pub near_fraction: f64,
    pub fractions: BTreeMap<String, f64>,
    pub count_rule: Option<CountRuleRecord>,
    /// The derived loads in integer tenths of a request per second (exact).
    pub rates_tenths: BTreeMap<String, u64>,
    /// The same loads as decimal text, e.g. `"2.2"`.
    pub rates_rps: BTreeMap<String, String>,
    pub count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountRuleRecord {
    pub floor: u64,
    pub duration_s: f64,
    pub multiple: u64,
}

/// Reads `pilots/derived.json`.
pub fn read_pilots_record(root: &Path) -> Result<PilotsRecord, String> {
    let path = root.join(DERIVED_PATH);
    let bytes = std::fs::read(&path).map_err(|e| format!("{DERIVED_PATH}: {e}"))?;
    let rec: PilotsRecord = serde_json::from_slice(&bytes).map_err(|e| format!("{DERIVED_PATH}: {e}"))?;
    if rec.format != PILOTS_FORMAT {
        return Err(format!("{DERIVED_PATH}: format {:?}, expected {PILOTS_FORMAT:?}", rec.format));
    }
    Ok(rec)
}
