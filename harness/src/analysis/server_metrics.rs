//! What a server's own `/metrics` said during each cell, from the unit's
//! `scrapes.jsonl` (one scrape a second, each tagged with its phase): per cell
//! (`cell:<name>` phases), the increase of the preemption counter and the maxima of
//! the KV-cache usage, running and waiting gauges. Names fall back across vLLM
//! versions (`vllm:kv_cache_usage_perc`, formerly `vllm:gpu_cache_usage_perc`;
//! `vllm:num_preemptions_total`, formerly `vllm:num_preemptions`); this engine
//! exposes the same names, so engine and vLLM arms are read alike. Owns those
//! name lists and the delta and maximum rules. Must not read anything but the
//! scrape lines it is given, and must not affect any decision: it is a receipt
//! beside the client's measures.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::protocol::prom::{Sample, parse, total};

/// Counter names of preemptions, newest first.
const PREEMPTIONS: [&str; 2] = ["vllm:num_preemptions_total", "vllm:num_preemptions"];
/// Gauge names of the KV-cache usage (a fraction, 0..1), newest first.
const KV_USAGE: [&str; 2] = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"];
const RUNNING: &str = "vllm:num_requests_running";
const WAITING: &str = "vllm:num_requests_waiting";

/// One cell's server metrics (each `None` when no scrape of the cell had it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellServerMetrics {
    pub cell: String,
    /// Scrapes taken during the cell that parsed.
    pub scrapes: u32,
    /// Preemption counter, last scrape minus first scrape of the cell.
    pub preemptions: Option<f64>,
    /// Highest KV-cache usage seen, as a fraction.
    pub kv_usage_max: Option<f64>,
    pub running_max: Option<f64>,
    pub waiting_max: Option<f64>,
}

#[derive(Deserialize)]
struct ScrapeLine {
    phase: String,
    status: Option<u16>,
    text: Option<String>,
}

/// The first of `names` that the samples have, summed over its label sets.
fn first_of(samples: &[Sample], names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| total(samples, n))
}

fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// Summarizes the `scrapes.jsonl` text of one unit, per cell in order of first
/// appearance. Lines that do not parse, failed scrapes and other phases are skipped.
pub fn per_cell(jsonl: &str) -> Vec<CellServerMetrics> {
    let mut order: Vec<String> = Vec::new();
    let mut by_cell: BTreeMap<String, (CellServerMetrics, Option<f64>, Option<f64>)> = BTreeMap::new();
    for line in jsonl.lines() {
        let Ok(l) = serde_json::from_str::<ScrapeLine>(line) else { continue };
        let Some(cell) = l.phase.strip_prefix("cell:") else { continue };
        let Some(samples) = l.text.filter(|_| l.status == Some(200)).and_then(|t| parse(&t).ok()) else { continue };
        if !by_cell.contains_key(cell) {
            order.push(cell.to_string());
        }
        let (m, first, last) = by_cell.entry(cell.to_string()).or_default();
        m.scrapes += 1;
        let preempted = first_of(&samples, &PREEMPTIONS);
        if first.is_none() {
            *first = preempted;
        }
        if preempted.is_some() {
            *last = preempted;
        }
        m.kv_usage_max = max(m.kv_usage_max, first_of(&samples, &KV_USAGE));
        m.running_max = max(m.running_max, total(&samples, RUNNING));
        m.waiting_max = max(m.waiting_max, total(&samples, WAITING));
    }
    order
        .into_iter()
        .filter_map(|cell| {
            let (mut m, first, last) = by_cell.remove(&cell)?;
            m.cell = cell;
            m.preemptions = first.zip(last).map(|(a, b)| (b - a).max(0.0));
            Some(m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(phase: &str, text: &str) -> String {
        serde_json::json!({"t_ns": 1, "phase": phase, "end_ns": 2, "status": 200, "text": text, "error": null})
            .to_string()
    }

    #[test]
    fn deltas_of_counters_and_maxima_of_gauges_per_cell_with_name_fallbacks() {
        // An engine-style cell (current names, two model labels) and a cell of an
        // older vLLM (gpu_cache_usage_perc, num_preemptions without _total).
        let lines = [
            scrape("warmup", "vllm:num_preemptions_total 5\n"),
            scrape(
                "cell:closed-8",
                "vllm:num_preemptions_total{model_name=\"a\"} 5\nvllm:kv_cache_usage_perc 0.25\n\
                 vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n",
            ),
            scrape(
                "cell:closed-8",
                "vllm:num_preemptions_total{model_name=\"a\"} 9\nvllm:kv_cache_usage_perc 0.75\n\
                 vllm:num_requests_running 8\nvllm:num_requests_waiting 4\n",
            ),
            "not json".to_string(),
            serde_json::json!({"t_ns": 3, "phase": "cell:closed-8", "end_ns": 4, "status": null, "text": null,
                "error": "timed out"})
            .to_string(),
            scrape("settle:open", "vllm:num_preemptions 1\n"),
            scrape("cell:open", "# TYPE x counter\nvllm:num_preemptions 1\nvllm:gpu_cache_usage_perc 0.5\n"),
            scrape("cell:open", "vllm:num_preemptions 3\nvllm:gpu_cache_usage_perc 0.125\n"),
            scrape("cell:plain", "other_metric 1\n"),
        ];
        let got = per_cell(&lines.join("\n"));
        let cells: Vec<&str> = got.iter().map(|m| m.cell.as_str()).collect();
        assert_eq!(cells, ["closed-8", "open", "plain"]);
        assert_eq!(
            got[0],
            CellServerMetrics {
                cell: "closed-8".into(),
                scrapes: 2,
                preemptions: Some(4.0),
                kv_usage_max: Some(0.75),
                running_max: Some(8.0),
                waiting_max: Some(4.0),
            }
        );
        assert_eq!((got[1].preemptions, got[1].kv_usage_max, got[1].running_max), (Some(2.0), Some(0.5), None));
        assert_eq!((got[2].scrapes, got[2].preemptions, got[2].kv_usage_max), (1, None, None));
        // A counter reset (a restarted server) is never a negative count.
        let reset =
            [scrape("cell:c", "vllm:num_preemptions_total 7\n"), scrape("cell:c", "vllm:num_preemptions_total 2\n")];
        assert_eq!(per_cell(&reset.join("\n"))[0].preemptions, Some(0.0));
    }
}
