//! Units in `evidence.json`, as parallel maps beside the values (the values keep
//! their places, names and JSON types, so every reader of the file keeps working):
//! - `median_units` (top level): the unit of every key of the cells' `medians`
//!   (every summary field but the `observation_*` clock readings)
//!   (`ms`, `ns`, `s`, `req/s`, `tok/s`, `tokens`, `fraction`, `count`);
//! - `block_units` in each hypothesis: the units of its per-block `control` and
//!   `candidate` values (the metric's) and of `effect` (`fraction`, positive: the
//!   candidate is better).
//!
//! Counts stay integers: a count field's median that is a whole number is written as
//! an integer (an even number of blocks whose middle two differ gives a .5, kept).
//! Owns the serialized shape of a hypothesis and a cell there (the units are the
//! field catalogue's, `metrics::field_unit`). Must not change a value.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::analysis::claims::{CellMedians, HypothesisReport};
use crate::metrics::{FIELDS, field_unit, is_count, metric_field};
use crate::plan::{CellKind, Metric};

/// The unit of a hypothesis metric's per-block values: its field's.
pub fn metric_unit(metric: Metric) -> &'static str {
    field_unit(metric_field(metric))
}

/// `median_units`: every key of a cell's `medians` with its unit.
pub fn median_units() -> BTreeMap<&'static str, &'static str> {
    FIELDS.iter().filter(|(n, _)| !n.starts_with("observation_")).map(|(n, _)| (*n, field_unit(n))).collect()
}

#[derive(Debug, Serialize)]
pub struct BlockUnits {
    control: &'static str,
    candidate: &'static str,
    effect: &'static str,
}

/// A hypothesis as `evidence.json` writes it: every field of the report, then
/// `block_units`.
#[derive(Debug, Serialize)]
pub struct HypothesisOut<'a> {
    #[serde(flatten)]
    report: &'a HypothesisReport,
    block_units: BlockUnits,
}

pub fn hypothesis(report: &HypothesisReport) -> HypothesisOut<'_> {
    let unit = metric_unit(report.metric);
    HypothesisOut { report, block_units: BlockUnits { control: unit, candidate: unit, effect: "fraction" } }
}

/// A cell's medians as `evidence.json` writes them: the fields of `CellMedians` in
/// order (a test checks that none is missing), whole count medians as integers.
#[derive(Debug, Serialize)]
pub struct CellOut<'a> {
    cell: &'a str,
    kind: CellKind,
    arm: &'a str,
    blocks: &'a [u32],
    requests: u64,
    failed: u64,
    medians: BTreeMap<&'a str, Value>,
}

fn median_value(name: &str, v: Option<f64>) -> Value {
    match v {
        Some(x) if is_count(name) && x.fract() == 0.0 && (0.0..9.0e15).contains(&x) => Value::from(x as u64),
        Some(x) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
        None => Value::Null,
    }
}

pub fn cell(c: &CellMedians) -> CellOut<'_> {
    CellOut {
        cell: &c.cell,
        kind: c.kind,
        arm: &c.arm,
        blocks: &c.blocks,
        requests: c.requests,
        failed: c.failed,
        medians: c.medians.iter().map(|(k, v)| (k.as_str(), median_value(k, *v))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_every_field_and_whole_count_medians_become_integers() {
        let medians: BTreeMap<String, Option<f64>> =
            [("requests", Some(20.0)), ("completed", Some(19.5)), ("ttft_p50_ms", Some(3.0)), ("goodput_rps", None)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        let c = CellMedians {
            cell: "c".into(),
            kind: CellKind::Descriptive,
            arm: "a".into(),
            blocks: vec![0, 1],
            requests: 40,
            failed: 0,
            medians,
        };
        let plain = serde_json::to_value(&c).unwrap();
        let out = serde_json::to_value(cell(&c)).unwrap();
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&plain), keys(&out), "a field of CellMedians is missing from evidence.json");
        let m = &out["medians"];
        assert!(m["requests"].is_u64() && m["requests"] == 20, "{m}");
        assert_eq!(
            (m["completed"].as_f64(), m["ttft_p50_ms"].is_f64(), m["goodput_rps"].is_null()),
            (Some(19.5), true, true)
        );
        assert_eq!(plain["medians"]["requests"], 20.0, "the analysis itself keeps floats");
        assert_eq!(median_units().get("ttft_p50_ms"), Some(&"ms"));
        assert_eq!(median_units().len(), FIELDS.len() - 2, "no observation_*");
    }
}
