//! Replay's own recomputation of a session cell's per-turn-index rows (the `turns`
//! array of its summary, written from the definition in docs/plan.md "Multi-turn
//! sessions" without calling `metrics`): for each turn index k from 0 to the
//! largest recorded, the turn-k records, how many are valid and how many are not,
//! and over the valid ones (each measured by `measures::one`) the nearest-rank
//! TTFT (from send) p50/p95/p99, TPOT p50, E2E (from send) p50/p95 in ms, and the
//! input (`usage.prompt_tokens`, else the intended length) and output token p50.
//! Also compares a stored `turns` value with the recomputation, row by row and field
//! by field. Must not read files.

use serde_json::Value;

use super::measures::{one, rank};
use super::records::Rec;
use super::{Mismatch, close, num};

/// The row fields, in the order they are compared (`turn` is the row's key).
pub const TURN_FIELDS: [&str; 12] = [
    "turn",
    "requests",
    "completed",
    "failed",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "e2e_p50_ms",
    "e2e_p95_ms",
    "input_tokens_p50",
    "output_tokens_p50",
];

/// One recomputed row: counts, then values that may have no sample, in `TURN_FIELDS` order.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRow {
    pub counts: [u64; 4],
    pub values: [Option<f64>; 8],
}

/// Nearest-rank p50, p95, p99 of `v` times `scale` (`None`s when empty).
fn pcts(v: &[f64], scale: f64) -> [Option<f64>; 3] {
    if v.is_empty() {
        return [None; 3];
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    [50.0, 95.0, 99.0].map(|p| Some(s[rank(s.len(), p) - 1] * scale))
}

/// One row per turn index up to the largest recorded; empty when no record is a turn.
pub fn rows(records: &[Rec]) -> Result<Vec<TurnRow>, String> {
    let Some(last) = records.iter().filter_map(|r| r.turn.as_ref().map(|t| t.turn)).max() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for k in 0..=last {
        let of_turn: Vec<&Rec> = records.iter().filter(|r| r.turn.as_ref().is_some_and(|t| t.turn == k)).collect();
        let valid = of_turn.iter().filter(|r| r.valid()).map(|r| one(r)).collect::<Result<Vec<_>, _>>()?;
        let ms = 1e-6;
        let ttft = pcts(&valid.iter().filter_map(|o| o.ttft.map(|t| t.0 as f64)).collect::<Vec<_>>(), ms);
        let tpot = pcts(&valid.iter().filter_map(|o| o.tpot).collect::<Vec<_>>(), ms);
        let e2e = pcts(&valid.iter().map(|o| o.e2e.0 as f64).collect::<Vec<_>>(), ms);
        let input = pcts(&valid.iter().map(|o| o.prompt as f64).collect::<Vec<_>>(), 1.0);
        let output = pcts(&valid.iter().map(|o| o.output as f64).collect::<Vec<_>>(), 1.0);
        let n = of_turn.len() as u64;
        out.push(TurnRow {
            counts: [u64::from(k), n, valid.len() as u64, n - valid.len() as u64],
            values: [ttft[0], ttft[1], ttft[2], tpot[0], e2e[0], e2e[1], input[0], output[0]],
        });
    }
    Ok(out)
}

/// Compares a summary's stored `turns` (absent or null: no rows) with `mine`, naming
/// each differing field as `<label> turns[<i>] <field>`.
pub fn compare(m: &mut Vec<Mismatch>, file: &str, label: &str, stored: Option<&Value>, mine: &[TurnRow]) {
    let empty = Vec::new();
    let rows = match stored {
        None | Some(Value::Null) => &empty,
        Some(Value::Array(a)) => a,
        Some(v) => return m.push(Mismatch::new(file, format!("{label} turns"), v.to_string(), "an array of rows")),
    };
    if rows.len() != mine.len() {
        m.push(Mismatch::new(
            file,
            format!("{label} turns"),
            format!("{} rows", rows.len()),
            format!("{} rows (one per turn index)", mine.len()),
        ));
    }
    for (i, (row, want)) in rows.iter().zip(mine).enumerate() {
        let Some(obj) = row.as_object() else {
            m.push(Mismatch::new(file, format!("{label} turns[{i}]"), row.to_string(), "a per-turn row"));
            continue;
        };
        for (j, name) in TURN_FIELDS.iter().enumerate() {
            let got = obj.get(*name).filter(|v| !v.is_null());
            let ok = match (j < 4, got) {
                (true, Some(v)) => v.as_u64() == Some(want.counts[j]),
                (false, Some(v)) => v.as_f64().zip(want.values[j - 4]).is_some_and(|(a, b)| close(a, b)),
                (false, None) => want.values[j - 4].is_none(),
                (true, None) => false,
            };
            if !ok {
                let archived = got.map_or("null".to_string(), Value::to_string);
                let recomputed = if j < 4 { want.counts[j].to_string() } else { num(want.values[j - 4]) };
                m.push(Mismatch::new(file, format!("{label} turns[{i}] {name}"), archived, recomputed));
            }
        }
        for k in obj.keys().filter(|k| !TURN_FIELDS.contains(&k.as_str())) {
            m.push(Mismatch::new(file, format!("{label} turns[{i}] {k}"), "present", "not a recomputed field"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::request_record::RequestRecord;
    use crate::metrics::summarize_turns;

    /// Session `s`, turn `k`: sent at `send` ms, token events at `events` ms, done at
    /// `done` ms (`None`: failed before headers).
    fn record(index: u64, s: u64, k: u32, send: u64, events: &[u64], done: Option<u64>) -> String {
        let ms = 1_000_000u64;
        let evs: Vec<String> = events.iter().map(|t| format!(r#"{{"t_ns":{},"tokens":1}}"#, t * ms)).collect();
        let (done, failure, usage) = match done {
            Some(d) => (
                (d * ms).to_string(),
                "null".to_string(),
                format!(r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":0}}"#, 10 + 7 * k, events.len()),
            ),
            None => ("null".into(), r#"{"class":"before_headers","detail":"refused"}"#.into(), "null".into()),
        };
        format!(
            r#"{{"id":"r{index}","cell":"c","block":0,"arm":"a","index":{index},"prompt":{s},"prompt_tokens_intended":10,
            "output_tokens_intended":4,"intended_ns":{send_ns},"dispatch_ns":{send_ns},"admitted_ns":null,
            "send_ns":{send_ns},"headers_ns":null,"events":[{}],"done_ns":{done},"failure":{failure},"usage":{usage},
            "server_request_id":null,"turn":{{"session":{s},"turn":{k}}}}}"#,
            evs.join(","),
            send_ns = send * ms,
        )
        .replace('\n', "")
    }

    fn sample() -> Vec<String> {
        vec![
            record(0, 0, 0, 0, &[5, 7, 9], Some(10)),
            record(1, 0, 1, 10, &[14, 15], Some(16)),
            record(2, 1, 0, 2, &[10, 11, 12, 13], Some(14)),
            record(3, 1, 1, 14, &[], None),
        ]
    }

    #[test]
    fn rows_recount_each_turn_index_as_the_summary_does() {
        let lines = sample();
        let recs: Vec<Rec> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        let mine = rows(&recs).unwrap();
        assert_eq!(mine.len(), 2);
        assert_eq!(mine[0].counts, [0, 2, 2, 0]);
        assert_eq!(mine[1].counts, [1, 2, 1, 1]);
        // Turn 0: TTFT 5 and 8 ms (p50 nearest rank = 5), E2E 10 and 12 ms.
        assert_eq!(mine[0].values[0], Some(5.0));
        assert_eq!(mine[0].values[5], Some(12.0));
        // Turn 1: one valid request, TTFT 4 ms, TPOT (15 - 14) / 1 = 1 ms, 17 prompt tokens.
        assert_eq!(
            mine[1].values,
            [Some(4.0), Some(4.0), Some(4.0), Some(1.0), Some(6.0), Some(6.0), Some(17.0), Some(2.0)]
        );
        // The analysis path's rows (what `harness run` stores) compare clean.
        let full: Vec<RequestRecord> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        let stored = serde_json::to_value(summarize_turns(&full).unwrap()).unwrap();
        let mut m = Vec::new();
        compare(&mut m, "f", "summary", Some(&stored), &mine);
        assert!(m.is_empty(), "{m:?}");
        // No sessions: no rows, and an absent `turns` is clean.
        let plain: Vec<Rec> = lines
            .iter()
            .map(|l| serde_json::from_str(&l.replace(r#","turn":{"session":0,"turn":0}"#, "")).unwrap())
            .collect();
        assert!(rows(&plain[..1]).unwrap().is_empty());
        compare(&mut m, "f", "summary", None, &[]);
        assert!(m.is_empty(), "{m:?}");
    }

    #[test]
    fn a_changed_stored_row_is_named() {
        let recs: Vec<Rec> = sample().iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        let mine = rows(&recs).unwrap();
        let full: Vec<RequestRecord> = sample().iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        let good = serde_json::to_value(summarize_turns(&full).unwrap()).unwrap();

        let mut bad = good.clone();
        bad[1]["ttft_p50_ms"] = 4.5.into();
        bad[0]["failed"] = 1.into();
        let mut m = Vec::new();
        compare(&mut m, "f", "summary", Some(&bad), &mine);
        let fields: Vec<&str> = m.iter().map(|x| x.field.as_str()).collect();
        assert_eq!(fields, ["summary turns[0] failed", "summary turns[1] ttft_p50_ms"], "{m:?}");

        let mut fewer = good.clone();
        fewer.as_array_mut().unwrap().pop();
        let mut m = Vec::new();
        compare(&mut m, "f", "summary", Some(&fewer), &mine);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].field.as_str(), m[0].archived.as_str()), ("summary turns", "1 rows"));

        let mut m = Vec::new();
        compare(&mut m, "f", "summary", None, &mine);
        assert_eq!(m.len(), 1, "rows removed from a session cell's summary are named");

        let mut extra = good;
        extra[0]["made_up"] = 1.into();
        let mut m = Vec::new();
        compare(&mut m, "f", "summary", Some(&extra), &mine);
        assert_eq!(m[0].field, "summary turns[0] made_up");
    }
}
