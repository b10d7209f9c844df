//! Validation of the trace-file load (`load = "trace"`): its `trace` path (a
//! relative `.jsonl` Mooncake or `.csv` Azure trace), `time_scale` and
//! `trace_lengths`. Owns those keys' rules. Must not touch files: whether the file
//! exists and parses is checked by `trace::check_trace_files` (`harness plan check`,
//! `harness run`), so a plan validates the same anywhere.

use super::schema::CellFile;
use super::types::Load;
use super::validate::Checker;

/// The `Load::Trace` of cell file `f` (at key prefix `k`), or issues.
pub(super) fn trace_load(c: &mut Checker, k: &str, f: &CellFile) -> Option<Load> {
    let key = |name: &str| format!("{k}.{name}");
    let Some(path) = f.trace.clone() else {
        c.err(key("trace"), "required for a trace cell: a Mooncake .jsonl or Azure .csv trace file");
        return None;
    };
    if !(path.ends_with(".jsonl") || path.ends_with(".csv")) {
        c.err(key("trace"), format!("{path:?}: use a Mooncake trace (.jsonl) or an Azure LLM inference trace (.csv)"));
        return None;
    }
    let time_scale = c.positive(&key("time_scale"), f.time_scale.unwrap_or(1.0), false)?;
    Some(Load::Trace { path, time_scale, lengths: f.trace_lengths.unwrap_or(false) })
}
