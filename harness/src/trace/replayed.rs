//! Trace-file cells (`load = "trace"`): reading a cell's arrival file, the check
//! `harness plan check` and `harness run` apply to it, and the cell's trace built
//! from its rows. Owns the rules that turn file rows into trace entries. Must not
//! parse the file formats (`arrival_file`) or write anything (`catalog` copies the
//! file into `inputs/arrivals/` and hashes it).
//!
//! - Request i (i < `count`) is row i of the file: the first `count` rows are used,
//!   and a file with fewer rows is an error.
//! - Offset i = the row's offset from the first row (exact nanoseconds) times
//!   `time_scale`: with 1 (the default) exactly the file's offset, otherwise
//!   round(offset * time_scale) computed in f64 (0.5 replays twice as fast).
//! - Prompts: without `trace_lengths`, as for any cell (the cell's `input_tokens`,
//!   documents in turn). With `trace_lengths = true`, request i sends document
//!   i mod N of the panel length nearest to the row's input length (a tie goes to
//!   the shorter length), and its entry records the row's `input_length` and
//!   `output_length`; `output_length` is that request's `max_tokens` (and
//!   `min_tokens` when the plan forces output lengths).

use std::path::Path;

use super::TraceError;
use super::arrival_file::{ArrivalFormat, ArrivalRow, parse_arrivals};
use super::arrivals::{Trace, TraceEntry};
use crate::plan::{Issue, Load, Plan, PlanError, ResolvedCell};

/// Relative path (under `inputs/`) of the copy of a cell's trace file.
pub fn arrival_copy_path(cell: &str, source: &str) -> String {
    let ext = if source.ends_with(".csv") { "csv" } else { "jsonl" };
    crate::evidence::arrivals_file(cell, ext)
}

/// The bytes and parsed rows of the trace file at `base/path`.
pub fn read_arrival_file(base: &Path, path: &str) -> Result<(Vec<u8>, Vec<ArrivalRow>), TraceError> {
    let format = ArrivalFormat::of_path(path).ok_or_else(|| TraceError::Malformed {
        what: format!("trace file {path}"),
        message: "not a .jsonl (Mooncake) or .csv (Azure) trace".into(),
    })?;
    let full = base.join(path);
    let bytes = crate::evidence::read_input(&full).map_err(|error| TraceError::Io { path: full.clone(), error })?;
    let text = std::str::from_utf8(&bytes).map_err(|e| TraceError::Malformed {
        what: format!("trace file {path}"),
        message: format!("not UTF-8 text: {e}"),
    })?;
    let rows = parse_arrivals(path, text, format)?;
    Ok((bytes, rows))
}

/// Reads and checks every trace cell's file under `base`: it must parse and hold at
/// least `count` rows. Problems are plan issues keyed `cells.<name>.trace` (so a bad
/// file is bad input, exit 2). With `missing_ok`, a file that does not exist is
/// skipped (`harness plan check` warns about it separately).
pub fn check_trace_files(plan: &Plan, base: &Path, missing_ok: bool) -> Result<(), PlanError> {
    let mut issues = Vec::new();
    for cell in &plan.cells {
        let Load::Trace { path, .. } = &cell.load else { continue };
        let key = format!("cells.{}.trace", cell.name);
        if missing_ok && !base.join(path).exists() {
            continue;
        }
        match read_arrival_file(base, path) {
            Err(e) => issues.push(Issue::new(key, e.to_string())),
            Ok((_, rows)) => {
                if let Some(count) = plan.count_of(cell.count)
                    && (rows.len() as u64) < count
                {
                    issues.push(Issue::new(
                        key,
                        format!("{path} has {} requests, fewer than the cell's count {count}", rows.len()),
                    ));
                }
            }
        }
    }
    if issues.is_empty() { Ok(()) } else { Err(PlanError::Invalid(issues)) }
}

/// The panel length nearest to `want` (a tie goes to the shorter one).
pub fn nearest_length(lengths: &[u32], want: u32) -> Option<u32> {
    lengths.iter().copied().min_by_key(|&l| (l.abs_diff(want), l))
}

/// The trace of a trace-file cell from its file's `rows`.
pub(super) fn trace_cell(
    plan: &Plan,
    cell: &ResolvedCell,
    rows: Option<&[ArrivalRow]>,
    time_scale: f64,
    lengths: bool,
) -> Result<Trace, TraceError> {
    let malformed = |message: String| TraceError::Malformed { what: format!("trace of cell {:?}", cell.name), message };
    let rows = rows.ok_or_else(|| malformed("the cell replays a trace file, and its rows were not read".into()))?;
    let count = usize::try_from(cell.count).unwrap_or(usize::MAX);
    if rows.len() < count {
        return Err(malformed(format!("the trace file has {} requests, fewer than count {count}", rows.len())));
    }
    let mut entries = Vec::with_capacity(count);
    for (i, row) in rows[..count].iter().enumerate() {
        let index = i as u64;
        let offset_ns =
            if time_scale == 1.0 { row.offset_ns } else { (row.offset_ns as f64 * time_scale).round() as u64 };
        let length = if lengths { nearest_length(&plan.prompts.lengths, row.input_length) } else { cell.input_tokens };
        let prompt = plan
            .prompts
            .prompt_index(length, index)
            .ok_or_else(|| malformed(format!("request {i}: no panel prompt of length {length:?}")))?;
        let (input_length, output_length) =
            if lengths { (Some(row.input_length), Some(row.output_length)) } else { (None, None) };
        entries.push(TraceEntry { index, offset_ns, prompt, input_length, output_length });
    }
    Ok(Trace { cell: cell.name.clone(), entries })
}
