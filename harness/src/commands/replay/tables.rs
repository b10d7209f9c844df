//! Field-by-field comparison of the recomputed per-cell measures with what the
//! study archived: `results/summaries.json` and `results/cells/*.summary.json`
//! (written by `harness run`) and `results/matrix.csv` (written by the report:
//! also its study, plan hash, arm settings and spread columns, `spread`), integers
//! exactly, floats within `close`; an empty or `NaN` CSV cell is no value. Owns a small RFC 4180 CSV reader (quoted
//! fields, doubled quotes). Must not recompute anything itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::Value;

use super::complete::{CellRun, Study};
use super::measures::{CellMeasures, Val};
use super::read::{read_doc, read_json};
use super::spread::{SPREAD_NAMES, spread};
use super::{Check, Mismatch, close, num};
use crate::evidence::{RowStatus, UnitState};
use crate::metrics::FIELD_NAMES;
use crate::plan::{Arrival, ResolvedCell, ResolvedLoad, Server};

pub const SUMMARIES_NAME: &str = "cell measures: summaries.json and results/cells/*.summary.json";
pub const MATRIX_NAME: &str = "cell measures: matrix.csv";

const KEY_FIELDS: [&str; 5] = ["cell", "block", "arm", "percentile_method", "failed_by_class"];

/// Compares an archived value (text of a number, or empty/null) with a recomputed one.
fn compare(m: &mut Vec<Mismatch>, file: &str, field: String, archived: Option<&str>, mine: Val) {
    let archived = archived.map(str::trim).filter(|s| !s.is_empty() && *s != "null" && *s != "NaN");
    let ok = match (mine, archived) {
        (Val::Int(n), Some(a)) => a.parse::<u64>().ok() == Some(n),
        (Val::Float(Some(x)), Some(a)) => a.parse::<f64>().is_ok_and(|a| close(a, x)),
        (Val::Float(None), None) => true,
        _ => false,
    };
    if !ok {
        let mine = match mine {
            Val::Int(n) => n.to_string(),
            Val::Float(v) => num(v),
        };
        m.push(Mismatch::new(file, field, archived.unwrap_or("null"), mine));
    }
}

fn json_text(v: Option<&Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(format!("\"{s}\"")),
        Some(v) => Some(v.to_string()),
    }
}

/// One stored summary object against its recomputation.
pub(super) fn compare_summary(m: &mut Vec<Mismatch>, file: &str, label: &str, obj: &Value, c: &CellMeasures) {
    let Some(map) = obj.as_object() else {
        m.push(Mismatch::new(file, label, "not an object", "a cell summary"));
        return;
    };
    let values = match (&c.values, map.get("error")) {
        (Ok(v), None) => v,
        (Err(_), Some(_)) => return,
        (Ok(_), Some(e)) => return m.push(Mismatch::new(file, format!("{label} error"), e.to_string(), "a summary")),
        (Err(e), None) => return m.push(Mismatch::new(file, label, "a summary", format!("no summary: {e}"))),
    };
    for (name, v) in FIELD_NAMES.iter().zip(values) {
        compare(m, file, format!("{label} {name}"), json_text(map.get(*name)).as_deref(), *v);
    }
    if map.get("percentile_method").and_then(Value::as_str) != Some("nearest_rank") {
        let got = json_text(map.get("percentile_method")).unwrap_or_default();
        m.push(Mismatch::new(file, format!("{label} percentile_method"), got, "\"nearest_rank\""));
    }
    let stored: BTreeMap<String, u64> =
        map.get("failed_by_class").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default();
    if stored != c.failed_by_class {
        m.push(Mismatch::new(
            file,
            format!("{label} failed_by_class"),
            format!("{stored:?}"),
            format!("{:?}", c.failed_by_class),
        ));
    }
    // A session cell's per-turn-index rows (`turn_rows`).
    match &c.turns {
        Ok(rows) => super::turn_rows::compare(m, file, label, map.get("turns"), rows),
        Err(e) => m.push(Mismatch::new(file, format!("{label} turns"), "archived", format!("no rows: {e}"))),
    }
    let known = |k: &str| FIELD_NAMES.contains(&k) || KEY_FIELDS.contains(&k) || k == "turns";
    for k in map.keys().filter(|k| !known(k.as_str())) {
        m.push(Mismatch::new(file, format!("{label} {k}"), "present", "not a recomputed field"));
    }
}

fn key_of(v: &Value) -> Option<(u32, String, String)> {
    let b = u32::try_from(v.get("block")?.as_u64()?).ok()?;
    Some((b, v.get("arm")?.as_str()?.to_string(), v.get("cell")?.as_str()?.to_string()))
}

/// `results/summaries.json` and each `results/cells/b<block>-<arm>-<cell>.summary.json`.
pub fn summaries_check(root: &Path, s: &Study<'_>, cells: &[CellMeasures]) -> Check {
    let mut m = Vec::new();
    let file = crate::evidence::SUMMARIES_FILE;
    let path = root.join(file);
    let mut compared = 0usize;
    if path.symlink_metadata().is_err() {
        return Check::skip(SUMMARIES_NAME, "no results/summaries.json (not written by `harness run`)");
    }
    match read_json::<Vec<Value>>(root, file) {
        Err(e) => m.push(Mismatch::new(file, "parse", "malformed", e)),
        Ok(items) => {
            let mut by_key: HashMap<(u32, String, String), &Value> = HashMap::new();
            for (i, v) in items.iter().enumerate() {
                match key_of(v) {
                    Some(k) if by_key.insert(k.clone(), v).is_some() => {
                        m.push(Mismatch::new(file, format!("[{i}]"), "a second entry for this cell", "one entry"))
                    }
                    Some(_) => {}
                    None => m.push(Mismatch::new(file, format!("[{i}]"), "no block/arm/cell", "a cell summary")),
                }
            }
            for c in cells {
                let label = format!("b{}/{}/{}", c.block, c.arm, c.cell);
                match by_key.remove(&(c.block, c.arm.clone(), c.cell.clone())) {
                    None => m.push(Mismatch::new(file, label, "absent", "recomputed from raw records")),
                    Some(v) => {
                        compared += 1;
                        compare_summary(&mut m, file, &label, v, c);
                    }
                }
            }
            let mut extra: Vec<_> = by_key.keys().collect();
            extra.sort();
            for (b, a, c) in extra {
                m.push(Mismatch::new(file, format!("b{b}/{a}/{c}"), "present", "no raw records for this cell"));
            }
        }
    }
    for c in cells {
        let rel = crate::evidence::cell_summary_path(c.block, &c.arm, &c.cell);
        if root.join(&rel).symlink_metadata().is_err() {
            m.push(Mismatch::new(&rel, "file", "missing", "a stored summary"));
            continue;
        }
        match read_json::<Value>(root, &rel) {
            Ok(v) => compare_summary(&mut m, &rel, "summary", &v, c),
            Err(e) => m.push(Mismatch::new(&rel, "parse", "malformed", e)),
        }
    }
    let _ = s;
    Check::of(
        SUMMARIES_NAME,
        format!("{compared} cells x {} fields, and {} per-cell files", FIELD_NAMES.len(), cells.len()),
        m,
    )
}

/// Splits CSV text into rows of fields (RFC 4180 quoting).
pub fn parse_csv(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut line = 1;
    while let Some(ch) = chars.next() {
        match (quoted, ch) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => {
                line += usize::from(c == '\n');
                field.push(c);
            }
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                line += 1;
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err(format!("line {line}: unterminated quoted field"));
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    Ok(rows)
}

/// The matrix's load label, offered rate and in-flight cap of a cell, stated here
/// again: a closed loop's concurrency, or an open cell's `max_concurrency`.
fn load_text(rc: &ResolvedCell) -> (String, Option<f64>, Option<u32>) {
    let cap = rc.max_concurrency.map_or(String::new(), |c| format!(", at most {c} in flight"));
    match rc.load {
        ResolvedLoad::Closed { concurrency } => {
            (format!("closed-loop concurrency {concurrency}"), None, Some(concurrency))
        }
        ResolvedLoad::Open { rate_rps, arrival } => {
            let a = match arrival {
                Arrival::Poisson => "poisson".to_string(),
                Arrival::Constant => "constant".to_string(),
                Arrival::Gamma { burstiness } => format!("gamma burstiness {burstiness}"),
            };
            (format!("open-loop {rate_rps} req/s {a}{cap}"), Some(rate_rps), rc.max_concurrency)
        }
        ResolvedLoad::Isolated { spacing_ns } => (format!("isolated every {} s", spacing_ns as f64 / 1e9), None, None),
        ResolvedLoad::Trace { time_scale, .. } => {
            (format!("trace file, time scale {time_scale}{cap}"), None, rc.max_concurrency)
        }
    }
}

/// `results/matrix.csv`: one row per scheduled (block, arm, cell), every column.
/// `listed`: whether the manifest lists the matrix (then it must be there).
pub fn matrix_check(root: &Path, s: &Study<'_>, cells: &[CellMeasures], plan_sha256: &str, listed: bool) -> Check {
    let file = crate::evidence::MATRIX_CSV_FILE;
    let rows = match read_matrix_rows(root, listed) {
        Ok(rows) => rows,
        Err(check) => return check,
    };
    let mut m = Vec::new();
    let header = &rows[0];
    let col = |name: &str| header.iter().position(|h| h == name);
    let classes: BTreeSet<&String> =
        cells.iter().filter(|c| c.values.is_ok()).flat_map(|c| c.failed_by_class.keys()).collect();
    check_columns(&mut m, header, s, &classes);
    let (Some(bc), Some(ac), Some(cc)) = (col("block"), col("arm"), col("cell")) else {
        return Check::of(MATRIX_NAME, "no key columns".into(), m);
    };
    let mut by_key: HashMap<(String, String, String), &Vec<String>> = HashMap::new();
    for (i, r) in rows.iter().enumerate().skip(1) {
        let get = |c: usize| r.get(c).cloned().unwrap_or_default();
        if by_key.insert((get(bc), get(ac), get(cc)), r).is_some() {
            m.push(Mismatch::new(file, format!("line {}", i + 1), "a second row for this cell", "one row"));
        }
    }
    let mut compared = 0;
    for c in &s.cells {
        let label = format!("row b{}/{}/{}", c.block, c.arm, c.cell);
        let Some(row) = by_key.remove(&(c.block.to_string(), c.arm.clone(), c.cell.clone())) else {
            m.push(Mismatch::new(file, label, "absent", "a scheduled cell"));
            continue;
        };
        if c.broken.is_some() {
            continue;
        }
        compared += 1;
        let at = RowAt { label: &label, row, header, classes: &classes };
        check_row(&mut m, &at, s, c, cells, plan_sha256);
    }
    let mut extra: Vec<_> = by_key.keys().collect();
    extra.sort();
    for (b, a, c) in extra {
        m.push(Mismatch::new(file, format!("row b{b}/{a}/{c}"), "present", "not in the plan's schedule"));
    }
    Check::of(MATRIX_NAME, format!("{compared} rows x {} columns", header.len()), m)
}

/// The columns every row has, before the measures.
const MATRIX_FIXED_COLUMNS: [&str; 13] = [
    "study",
    "plan_sha256",
    "block",
    "arm",
    "role",
    "arm_settings",
    "cell",
    "kind",
    "load",
    "offered_rate_rps",
    "concurrency",
    "unit_status",
    "status",
];

/// matrix.csv's rows, header first (a file with no rows: one empty header); the
/// check to return instead when the file is missing, unreadable or malformed.
fn read_matrix_rows(root: &Path, listed: bool) -> Result<Vec<Vec<String>>, Check> {
    let file = crate::evidence::MATRIX_CSV_FILE;
    if root.join(file).symlink_metadata().is_err() {
        if listed {
            let m = vec![Mismatch::new(file, "file", "listed in manifest.json", "missing")];
            return Err(Check::of(MATRIX_NAME, "no matrix".into(), m));
        }
        // Never written (no report): no claim to check.
        return Err(Check::skip(MATRIX_NAME, "no results/matrix.csv, none in the manifest (no report was built)"));
    }
    let text = read_doc(root, file)
        .and_then(|b| String::from_utf8(b).map_err(|e| e.to_string()))
        .map_err(|e| Check::of(MATRIX_NAME, "no matrix".into(), vec![Mismatch::new(file, "file", "unreadable", e)]))?;
    match parse_csv(&text) {
        Ok(r) if !r.is_empty() => Ok(r),
        Ok(_) => Ok(vec![Vec::new()]),
        Err(e) => {
            Err(Check::of(MATRIX_NAME, "unparseable matrix".into(), vec![Mismatch::new(file, "parse", "malformed", e)]))
        }
    }
}

/// Every column is one replay recomputes, and every one it recomputes is there.
fn check_columns(m: &mut Vec<Mismatch>, header: &[String], s: &Study<'_>, classes: &BTreeSet<&String>) {
    let file = crate::evidence::MATRIX_CSV_FILE;
    let col = |name: &str| header.iter().position(|h| h == name);
    let known = |h: &str| {
        MATRIX_FIXED_COLUMNS.contains(&h)
            || FIELD_NAMES.contains(&h)
            || SPREAD_NAMES.contains(&h)
            || ["summary_error", "percentile_method"].contains(&h)
            || h.strip_prefix("failed_").is_some_and(|c| classes.iter().any(|k| k.as_str() == c))
    };
    for h in header.iter().filter(|h| !known(h)) {
        m.push(Mismatch::new(file, format!("column {h}"), "present", "not a recomputed column"));
    }
    let fields = FIELD_NAMES.iter().filter(|n| super::measures::expected(s, n));
    for want in MATRIX_FIXED_COLUMNS.iter().chain(fields).chain(SPREAD_NAMES.iter()) {
        if col(want).is_none() {
            m.push(Mismatch::new(file, format!("column {want}"), "absent", "present"));
        }
    }
    for class in classes {
        if col(&format!("failed_{class}")).is_none() {
            m.push(Mismatch::new(file, format!("column failed_{class}"), "absent", "present"));
        }
    }
}

/// One archived row and how to read it.
struct RowAt<'a> {
    label: &'a str,
    row: &'a [String],
    header: &'a [String],
    classes: &'a BTreeSet<&'a String>,
}

/// One scheduled cell's row against replay's own values: its facts, its status,
/// its load, every measure, its spread and its failures by class.
fn check_row(
    m: &mut Vec<Mismatch>,
    at: &RowAt<'_>,
    s: &Study<'_>,
    c: &CellRun<'_>,
    cells: &[CellMeasures],
    plan_sha256: &str,
) {
    let file = crate::evidence::MATRIX_CSV_FILE;
    let RowAt { label, row, header, classes } = *at;
    let col = |name: &str| header.iter().position(|h| h == name);
    let cell_of = |name: &str| col(name).and_then(|i| row.get(i)).map(String::as_str);
    let text = |m: &mut Vec<Mismatch>, name: &str, want: &str| {
        let got = cell_of(name).unwrap_or("");
        if got != want {
            m.push(Mismatch::new(file, format!("{label} {name}"), got, want));
        }
    };
    let measured = cells.iter().find(|x| x.block == c.block && x.arm == c.arm && x.cell == c.cell);
    let status = match measured.map(|x| &x.values) {
        None => RowStatus::NotRun,
        Some(Ok(_)) => RowStatus::Measured,
        Some(Err(_)) => RowStatus::NoSummary,
    };
    let role = s.plan.arm(&c.arm).map_or("", |a| a.role.as_str());
    let unit = s.unit(c.block, &c.arm).map_or(UnitState::Missing, |u| u.status);
    let settings = s.plan.arm(&c.arm).map_or(String::new(), |a| match &a.server {
        Server::Spawn { argv, .. } => format!("argv: {}", argv.join(" ")),
        Server::External { url } => format!("url: {url}"),
    });
    text(m, "study", &s.plan.study.name);
    text(m, "plan_sha256", plan_sha256);
    text(m, "arm_settings", &settings);
    text(m, "role", role);
    text(m, "kind", c.kind.as_str());
    text(m, "unit_status", unit.as_str());
    text(m, "status", status.as_str());
    if let Some(rc) = s.resolved.iter().find(|r| r.name == c.cell) {
        let (load, rate, conc) = load_text(rc);
        text(m, "load", &load);
        compare(m, file, format!("{label} offered_rate_rps"), cell_of("offered_rate_rps"), Val::Float(rate));
        match conc {
            Some(n) => compare(m, file, format!("{label} concurrency"), cell_of("concurrency"), Val::Int(n.into())),
            None => compare(m, file, format!("{label} concurrency"), cell_of("concurrency"), Val::Float(None)),
        }
    }
    let ok = measured.and_then(|x| x.values.as_ref().ok().map(|v| (x, v)));
    text(m, "percentile_method", if ok.is_some() { "nearest_rank" } else { "" });
    for (i, name) in FIELD_NAMES.iter().enumerate().filter(|(_, n)| super::measures::expected(s, n)) {
        let mine = ok.map_or(Val::Float(None), |(_, v)| v[i]);
        compare(m, file, format!("{label} {name}"), cell_of(name), mine);
    }
    let spread = match (ok, c.records) {
        (Some(_), Some(records)) => spread(records),
        _ => Ok(vec![None; SPREAD_NAMES.len()]),
    };
    match spread {
        Ok(values) => {
            for (name, v) in SPREAD_NAMES.iter().zip(values) {
                compare(m, file, format!("{label} {name}"), cell_of(name), Val::Float(v));
            }
        }
        Err(e) => m.push(Mismatch::new(file, format!("{label} spread"), "archived", e)),
    }
    for class in classes {
        let mine = ok.map_or(Val::Float(None), |(x, _)| Val::Int(x.failed_by_class.get(*class).copied().unwrap_or(0)));
        let name = format!("failed_{class}");
        compare(m, file, format!("{label} {name}"), cell_of(&name), mine);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_and_doubled_quotes() {
        let rows = parse_csv("a,b,c\n1,\"x, \"\"y\"\"\",\n").unwrap();
        assert_eq!(rows, vec![vec!["a", "b", "c"], vec!["1", "x, \"y\"", ""]]);
        assert!(parse_csv("a,\"b\n").is_err());
    }
}
