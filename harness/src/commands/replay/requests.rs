//! `results/requests.csv`, the per-request table, against replay's own per-request
//! recomputation (`measures::one`, the definitions of DESIGN section 5): one row
//! per record of every scheduled cell, keyed by (block, arm, cell, index); text and
//! integers exactly, floats within `close`; the wall-time columns from the unit's
//! session (`arm_outcome.json`) and that session's `started_unix_ms` (`run.json`).
//! A changed value is named by its row and column. Tables written before the stamps
//! (23 columns) or before the wall times (30) are checked on their columns. Owns
//! the table's expected columns. Must not call the report's writer.

use std::collections::HashMap;
use std::path::Path;

use super::complete::Study;
use super::measures::{one, rank};
use super::read::read_doc;
use super::records::Rec;
use super::tables::parse_csv;
use super::{Check, Mismatch, close, num};
use crate::evidence::{RUN_FILE, RunRecord};

/// (block, arm, cell, trace index) of a row, as the CSV spells them.
type RowKey = (String, String, String, String);

pub const NAME: &str = "per-request table: results/requests.csv";
const FILE: &str = crate::evidence::REQUESTS_CSV_FILE;

/// The columns the report writes, in order.
const COLUMNS: [&str; 35] = [
    "study",
    "plan_sha256",
    "block",
    "arm",
    "cell",
    "index",
    "id",
    "status",
    "failure_class",
    "http_status",
    "input_tokens_intended",
    "output_tokens_intended",
    "input_tokens",
    "output_tokens",
    "ttft_ms",
    "ttft_from_intended_ms",
    "tpot_ms",
    "e2e_ms",
    "e2e_from_intended_ms",
    "itl_samples",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_max_ms",
    "round",
    "intended_ns",
    "dispatch_ns",
    "send_ns",
    "first_token_ns",
    "done_ns",
    "finish_reason",
    "session",
    "intended_unix_ms",
    "send_unix_ms",
    "first_token_unix_ms",
    "done_unix_ms",
];

/// The columns of a table written before the stamps were added.
const BEFORE_STAMPS: usize = 23;
/// The columns of a table written before the wall times were added.
const BEFORE_WALL: usize = 30;

/// One expected cell of the table.
enum Want {
    Text(Option<String>),
    Int(Option<u64>),
    Float(Option<f64>),
    /// Ms since the Unix epoch: `close`'s relative tolerance would be seconds at
    /// 1.8e12, so within a microsecond.
    Wall(Option<f64>),
}

fn ms(ns: u64) -> Option<f64> {
    Some(ns as f64 / 1e6)
}

/// The row `COLUMNS` expects for record `r`, run by session `session` that started
/// at `started` (ms since the Unix epoch).
fn expected(study: &str, plan_sha256: &str, r: &Rec, session: Option<u32>, started: Option<u64>) -> Vec<Want> {
    use Want::{Float, Int, Text};
    let measured = if r.valid() { one(r).ok() } else { None };
    let status = match (r.valid(), &measured) {
        (false, _) => "failed",
        (true, Some(_)) => "ok",
        (true, None) => "unmeasurable",
    };
    let class = (!r.valid()).then(|| r.failure_class().to_string());
    let m = measured.as_ref();
    let gaps = m.map(|o| o.gaps.clone()).unwrap_or_default();
    let (itl_mean, itl_p50, itl_max) = if gaps.is_empty() {
        (None, None, None)
    } else {
        let mut sorted = gaps.clone();
        sorted.sort_unstable();
        let mean = gaps.iter().map(|&g| g as f64).sum::<f64>() / gaps.len() as f64 / 1e6;
        (Some(mean), ms(sorted[rank(sorted.len(), 50.0) - 1]), sorted.last().and_then(|&g| ms(g)))
    };
    vec![
        Text(Some(study.to_string())),
        Text(Some(plan_sha256.to_string())),
        Int(Some(r.block.into())),
        Text(Some(r.arm.clone())),
        Text(Some(r.cell.clone())),
        Int(Some(r.index)),
        Text(Some(r.id.clone())),
        Text(Some(status.to_string())),
        Text(class),
        Int(r.status.map(u64::from)),
        Int(Some(r.prompt_tokens_intended.into())),
        Int(Some(r.output_tokens_intended.into())),
        Int(m.map(|o| o.prompt)),
        Int(m.map(|o| o.output)),
        Float(m.and_then(|o| o.ttft).and_then(|t| ms(t.0))),
        Float(m.and_then(|o| o.ttft).and_then(|t| ms(t.1))),
        Float(m.and_then(|o| o.tpot).map(|t| t / 1e6)),
        Float(m.and_then(|o| ms(o.e2e.0))),
        Float(m.and_then(|o| ms(o.e2e.1))),
        Int(m.map(|_| gaps.len() as u64)),
        Float(itl_mean),
        Float(itl_p50),
        Float(itl_max),
        Int(Some(u64::from(r.round.unwrap_or(0)))),
        Int(Some(r.intended_ns)),
        Int(r.dispatch_ns),
        Int(r.send_ns),
        Int(r.events.iter().find(|e| e.tokens > 0).map(|e| e.t_ns)),
        Int(r.done_ns),
        Text(r.finish_reason.clone()),
        Int(session.map(u64::from)),
        Want::Wall(wall(started, Some(r.intended_ns))),
        Want::Wall(wall(started, r.send_ns)),
        Want::Wall(wall(started, r.events.iter().find(|e| e.tokens > 0).map(|e| e.t_ns))),
        Want::Wall(wall(started, r.done_ns)),
    ]
}

/// A session-clock stamp as ms since the Unix epoch.
fn wall(started: Option<u64>, ns: Option<u64>) -> Option<f64> {
    Some(started? as f64 + ns? as f64 / 1e6)
}

/// Whether the archived text of one cell matches what replay expects.
fn matches(archived: &str, want: &Want) -> (bool, String) {
    let got = Some(archived).filter(|s| !s.is_empty());
    match want {
        Want::Text(w) => (got == w.as_deref(), w.clone().unwrap_or_default()),
        Want::Int(w) => {
            (got.map(|g| g.parse::<u64>().ok()) == w.map(Some), w.map(|n| n.to_string()).unwrap_or_default())
        }
        Want::Float(w) => {
            // A float column with no value in any row is written as NaN in every
            // cell (`report::matrix::csv_bytes`): NaN is no value, as in `tables`.
            let got = got.filter(|g| *g != "NaN");
            let ok = match (got, w) {
                (None, None) => true,
                (Some(g), Some(x)) => g.parse::<f64>().is_ok_and(|g| close(g, *x)),
                _ => false,
            };
            (ok, num(*w))
        }
        Want::Wall(w) => {
            let got = got.filter(|g| *g != "NaN");
            let ok = match (got, w) {
                (None, None) => true,
                (Some(g), Some(x)) => g.parse::<f64>().is_ok_and(|g| (g - x).abs() <= 1e-3),
                _ => false,
            };
            (ok, num(*w))
        }
    }
}

/// The check. `listed`: whether the manifest lists the table (then it must be there).
pub fn check(root: &Path, s: &Study<'_>, plan_sha256: &str, listed: bool) -> Check {
    let mut m = Vec::new();
    if root.join(FILE).symlink_metadata().is_err() {
        if listed {
            return Check::of(NAME, "no table".into(), vec![Mismatch::new(FILE, "file", "listed", "missing")]);
        }
        return Check::skip(NAME, "no results/requests.csv, none in the manifest (no report, or an older one)");
    }
    let rows = match read_doc(root, FILE).and_then(|b| String::from_utf8(b).map_err(|e| e.to_string())) {
        Ok(text) => match parse_csv(&text) {
            Ok(r) if !r.is_empty() => r,
            Ok(_) => vec![Vec::new()],
            Err(e) => return Check::of(NAME, "unparseable".into(), vec![Mismatch::new(FILE, "parse", "malformed", e)]),
        },
        Err(e) => return Check::of(NAME, "unreadable".into(), vec![Mismatch::new(FILE, "file", "unreadable", e)]),
    };
    // Tables written before the study-clock stamps and finish reason were added
    // hold the first `BEFORE_STAMPS` columns: those are checked.
    let columns: &[&str] = match rows[0].len() {
        BEFORE_STAMPS if rows[0] == COLUMNS[..BEFORE_STAMPS] => &COLUMNS[..BEFORE_STAMPS],
        BEFORE_WALL if rows[0] == COLUMNS[..BEFORE_WALL] => &COLUMNS[..BEFORE_WALL],
        _ => &COLUMNS,
    };
    let started_of: Vec<Option<u64>> = super::read::read_json::<RunRecord>(root, RUN_FILE)
        .map(|r| r.sessions.iter().map(|s| s.started_unix_ms).collect())
        .unwrap_or_default();
    if rows[0] != columns {
        let got = rows[0].join(",");
        return Check::of(NAME, "other columns".into(), vec![Mismatch::new(FILE, "header", got, COLUMNS.join(","))]);
    }
    let mut by_key: HashMap<RowKey, (usize, &Vec<String>)> = HashMap::new();
    for (i, r) in rows.iter().enumerate().skip(1) {
        let at = |k: usize| r.get(k).cloned().unwrap_or_default();
        let key = (at(2), at(3), at(4), at(5));
        if r.len() != columns.len() || by_key.insert(key, (i + 1, r)).is_some() {
            m.push(Mismatch::new(FILE, format!("line {}", i + 1), "a malformed or repeated row", "one row a request"));
        }
    }
    let mut compared = 0;
    for c in &s.cells {
        let Some(records) = c.records else { continue };
        for r in records {
            let label = format!("row b{}/{}/{}/#{}", r.block, r.arm, r.cell, r.index);
            let key = (r.block.to_string(), r.arm.clone(), r.cell.clone(), r.index.to_string());
            let Some((_, row)) = by_key.remove(&key) else {
                m.push(Mismatch::new(FILE, label, "absent", "a row for this request"));
                continue;
            };
            compared += 1;
            let session = s.units.iter().find(|u| u.block == r.block && u.arm == r.arm).and_then(|u| u.session);
            let started = session.and_then(|i| started_of.get(i as usize).copied().flatten());
            let want = expected(&s.plan.study.name, plan_sha256, r, session, started);
            for ((name, got), want) in columns.iter().zip(row.iter()).zip(want) {
                let (ok, mine) = matches(got, &want);
                if !ok {
                    m.push(Mismatch::new(FILE, format!("{label} {name}"), got, mine));
                }
            }
        }
    }
    let mut extra: Vec<_> = by_key.into_values().map(|(line, _)| line).collect();
    extra.sort_unstable();
    for line in extra {
        m.push(Mismatch::new(FILE, format!("line {line}"), "present", "no such request record"));
    }
    Check::of(NAME, format!("{compared} requests x {} columns", columns.len()), m)
}

#[cfg(test)]
mod tests {
    use super::{Want, matches};

    #[test]
    fn an_empty_float_column_written_as_nan_is_no_value() {
        // Every request of a cell failed: no TTFT anywhere, the writer fills NaN.
        assert!(matches("NaN", &Want::Float(None)).0);
        assert!(matches("", &Want::Float(None)).0);
        assert!(!matches("NaN", &Want::Float(Some(1.5))).0, "a value replay computed is not NaN");
        assert!(matches("1.5", &Want::Float(Some(1.5))).0);
        assert!(!matches("1.5", &Want::Float(None)).0);
    }
}
