//! The engine's own decode speed for one cell, from its per-step receipts
//! (`receipts.jsonl`, one line per scheduler step, written when the step's forward
//! pass and sampling are done): `engine_tpot_ms` and `engine_decode_steps` of a
//! `CellSummary`. Owns the parsing of the receipt fields it needs and the
//! definition below. Must not do I/O: the caller reads the file.
//!
//! Definition (engine TPOT):
//! - A step belongs to the cell while at least one of the cell's requests (by the
//!   response `id` each record keeps, `server_request_id`) is in flight in it: from
//!   the step that admits the request through the step that finishes it. Cells on
//!   one server never overlap, so no step belongs to two cells.
//! - A decode step of the cell is one with no prefill tokens and at least one
//!   decode token whose predecessor (`step - 1`) also belongs to the cell. Its
//!   duration is `t_ns(step) - t_ns(step - 1)`: the forward pass, sampling and the
//!   engine loop's own work since the step before. (A step after an idle engine
//!   always admits, so it has prefill tokens: an idle gap never counts.)
//! - `engine_tpot_ms` = the summed durations of the cell's decode steps divided by
//!   the decode tokens they produced, in milliseconds: time per output token as the
//!   engine spent it, beside the client's TPOT. `None` without a decode step.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

/// The fields of one receipt line this module reads (others are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EngineStep {
    pub step: u64,
    /// Monotonic nanoseconds since the server started.
    pub t_ns: u64,
    #[serde(default)]
    pub admitted: Vec<String>,
    #[serde(default)]
    pub resumed: Vec<String>,
    #[serde(default)]
    pub finished: Vec<String>,
    #[serde(default)]
    pub prefill_tokens: u64,
    #[serde(default)]
    pub decode_tokens: u64,
}

/// A cell's decode steps as the receipts show them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineDecode {
    pub steps: u64,
    pub tokens: u64,
    pub total_ns: u64,
}

impl EngineDecode {
    /// Milliseconds per decode token (`None` without a decode token).
    pub fn tpot_ms(&self) -> Option<f64> {
        (self.tokens > 0).then(|| self.total_ns as f64 / self.tokens as f64 / 1e6)
    }
}

/// Parses receipt lines. A last line without its newline (the server may be
/// writing it while the file is read) is left out; any other line that does not
/// parse is an error naming its line number.
pub fn parse_receipts(text: &str) -> Result<Vec<EngineStep>, String> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The decode steps of the cell whose requests have the response ids `ids`.
pub fn cell_decode(steps: &[EngineStep], ids: &HashSet<&str>) -> EngineDecode {
    let mut in_flight: HashSet<&str> = HashSet::new();
    let mut inside: HashMap<u64, u64> = HashMap::new(); // step -> t_ns
    let mut candidates: Vec<&EngineStep> = Vec::new();
    for s in steps {
        for id in s.admitted.iter().chain(&s.resumed) {
            if ids.contains(id.as_str()) {
                in_flight.insert(id.as_str());
            }
        }
        if in_flight.is_empty() {
            continue;
        }
        inside.insert(s.step, s.t_ns);
        if s.prefill_tokens == 0 && s.decode_tokens > 0 {
            candidates.push(s);
        }
        for id in &s.finished {
            in_flight.remove(id.as_str());
        }
    }
    let mut out = EngineDecode { steps: 0, tokens: 0, total_ns: 0 };
    for s in candidates {
        let Some(&before) = s.step.checked_sub(1).and_then(|p| inside.get(&p)) else { continue };
        out.steps += 1;
        out.tokens += s.decode_tokens;
        out.total_ns += s.t_ns.saturating_sub(before);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: u64, t_ms: u64, admitted: &[&str], finished: &[&str], prefill: u64, decode: u64) -> EngineStep {
        EngineStep {
            step,
            t_ns: t_ms * 1_000_000,
            admitted: admitted.iter().map(|s| s.to_string()).collect(),
            resumed: vec![],
            finished: finished.iter().map(|s| s.to_string()).collect(),
            prefill_tokens: prefill,
            decode_tokens: decode,
        }
    }

    #[test]
    fn decode_steps_of_a_cell_are_timed_from_the_step_before() {
        // Step 0 admits a and b (prefill), 1-2 decode both, 3 finishes a, 4 finishes b.
        // Then an idle gap, and another cell's request c.
        let steps = vec![
            step(0, 100, &["a", "b"], &[], 256, 0),
            step(1, 110, &[], &[], 0, 2),
            step(2, 122, &[], &[], 0, 2),
            step(3, 130, &[], &["a"], 0, 2),
            step(4, 134, &[], &["b"], 0, 1),
            step(5, 900, &["c"], &[], 128, 0),
            step(6, 905, &[], &["c"], 0, 1),
        ];
        let ids: HashSet<&str> = ["a", "b"].into();
        let d = cell_decode(&steps, &ids);
        // Durations 10 + 12 + 8 + 4 = 34 ms over 2 + 2 + 2 + 1 = 7 tokens.
        assert_eq!(d, EngineDecode { steps: 4, tokens: 7, total_ns: 34_000_000 });
        assert!((d.tpot_ms().unwrap() - 34.0 / 7.0).abs() < 1e-12);
        let other: HashSet<&str> = ["c"].into();
        assert_eq!(cell_decode(&steps, &other), EngineDecode { steps: 1, tokens: 1, total_ns: 5_000_000 });
    }

    #[test]
    fn mixed_steps_and_a_first_step_without_predecessor_do_not_count() {
        let steps = vec![
            step(7, 50, &["a"], &[], 64, 0),
            step(8, 60, &["b"], &[], 64, 1), // prefill beside decode: not a decode step
            step(9, 66, &[], &["a", "b"], 0, 2),
        ];
        let ids: HashSet<&str> = ["a", "b"].into();
        assert_eq!(cell_decode(&steps, &ids), EngineDecode { steps: 1, tokens: 2, total_ns: 6_000_000 });
        // The cell's first step cannot be a decode step (it has no cell step before it).
        let late = vec![step(3, 10, &["x"], &[], 0, 1), step(4, 14, &[], &["x"], 0, 1)];
        let x: HashSet<&str> = ["x"].into();
        assert_eq!(cell_decode(&late, &x), EngineDecode { steps: 1, tokens: 1, total_ns: 4_000_000 });
        assert_eq!(cell_decode(&[], &x).tpot_ms(), None);
        // Two rounds of one cell with another cell's steps between: the first decode
        // step after the gap has no cell step before it (as in replay's own test).
        let rounds = vec![
            step(0, 0, &["a"], &[], 16, 0),
            step(1, 5, &[], &["a"], 0, 1),
            step(2, 50, &["x"], &[], 16, 0),
            step(3, 55, &[], &["x"], 0, 1),
            step(4, 60, &["b"], &[], 0, 1),
            step(5, 70, &[], &["b"], 0, 1),
        ];
        let ab: HashSet<&str> = ["a", "b"].into();
        assert_eq!(cell_decode(&rounds, &ab), EngineDecode { steps: 2, tokens: 2, total_ns: 15_000_000 });
    }

    #[test]
    fn a_torn_last_line_is_left_out_and_a_bad_line_is_named() {
        let good = r#"{"step":0,"t_ns":5,"admitted":["a"],"resumed":[],"preempted":[],"finished":[],"prefill_tokens":3,"decode_tokens":0,"scheduled":1}"#;
        let text = format!("{good}\n{{\"step\":1,\"t_");
        assert_eq!(parse_receipts(&text).unwrap().len(), 1);
        assert!(parse_receipts(&format!("{good}\nnot json\n")).unwrap_err().starts_with("line 2:"));
        assert!(parse_receipts("").unwrap().is_empty());
    }
}
