//! Per-turn-index summaries of a session cell (`record::TurnRecord`): for each turn
//! index k, how many turn-k requests there were, how many completed and failed
//! (a never-sent turn counts as failed), and nearest-rank TTFT, TPOT and E2E of the
//! valid ones, with the prompt tokens they sent (`usage.prompt_tokens`, which grows
//! with the history). Same definitions as the cell summary, restricted to one turn
//! index. Must not do I/O; records without a turn give no rows.

use serde::{Deserialize, Serialize};

use super::MetricsError;
use super::request::measure_request;
use crate::evidence::request_record::RequestRecord;
use crate::stats::percentiles;

/// One turn index of a session cell. Latencies in milliseconds; `None`: no sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// 0 for sessions' first requests.
    pub turn: u32,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p95_ms: Option<f64>,
    pub input_tokens_p50: Option<f64>,
    pub output_tokens_p50: Option<f64>,
}

/// Nearest-rank p50, p95, p99 of `values` scaled by `scale` (`None`s when empty).
fn pcts(values: &[f64], scale: f64) -> Result<[Option<f64>; 3], MetricsError> {
    if values.is_empty() {
        return Ok([None; 3]);
    }
    let p = percentiles(values, &[50.0, 95.0, 99.0])?;
    Ok([Some(p[0] * scale), Some(p[1] * scale), Some(p[2] * scale)])
}

/// One row per turn index present, in order (empty for a cell without sessions).
pub fn summarize_turns(records: &[RequestRecord]) -> Result<Vec<TurnSummary>, MetricsError> {
    let Some(last) = records.iter().filter_map(|r| r.turn.as_ref().map(|t| t.turn)).max() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for k in 0..=last {
        let of_turn: Vec<&RequestRecord> =
            records.iter().filter(|r| r.turn.as_ref().is_some_and(|t| t.turn == k)).collect();
        let mut valid = Vec::new();
        for r in of_turn.iter().filter(|r| r.is_valid()) {
            valid.push(measure_request(r)?);
        }
        let ms = 1e-6;
        let ttft = pcts(&valid.iter().filter_map(|m| m.ttft_ns.map(|v| v as f64)).collect::<Vec<_>>(), ms)?;
        let tpot = pcts(&valid.iter().filter_map(|m| m.tpot_ns).collect::<Vec<_>>(), ms)?;
        let e2e = pcts(&valid.iter().map(|m| m.e2e_ns as f64).collect::<Vec<_>>(), ms)?;
        let input = pcts(&valid.iter().map(|m| m.prompt_tokens as f64).collect::<Vec<_>>(), 1.0)?;
        let output = pcts(&valid.iter().map(|m| m.output_tokens as f64).collect::<Vec<_>>(), 1.0)?;
        out.push(TurnSummary {
            turn: k,
            requests: of_turn.len() as u64,
            completed: valid.len() as u64,
            failed: (of_turn.len() - valid.len()) as u64,
            ttft_p50_ms: ttft[0],
            ttft_p95_ms: ttft[1],
            ttft_p99_ms: ttft[2],
            tpot_p50_ms: tpot[0],
            e2e_p50_ms: e2e[0],
            e2e_p95_ms: e2e[1],
            input_tokens_p50: input[0],
            output_tokens_p50: output[0],
        });
    }
    Ok(out)
}

/// The per-turn lines printed under a session cell's table.
pub fn render_turns(rows: &[TurnSummary]) -> String {
    let f = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.2}"));
    let mut s = String::from(
        "per turn: turn requests completed failed | TTFT ms p50 p95 p99 | TPOT p50 | E2E p50 p95 | in p50 out p50\n",
    );
    for r in rows {
        s.push_str(&format!(
            "  {} {} {} {} | {} {} {} | {} | {} {} | {} {}\n",
            r.turn,
            r.requests,
            r.completed,
            r.failed,
            f(r.ttft_p50_ms),
            f(r.ttft_p95_ms),
            f(r.ttft_p99_ms),
            f(r.tpot_p50_ms),
            f(r.e2e_p50_ms),
            f(r.e2e_p95_ms),
            f(r.input_tokens_p50),
            f(r.output_tokens_p50),
        ));
    }
    s
}
