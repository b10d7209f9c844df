//! `harness profile --input-file F --custom-dataset-type mooncake_trace`: AIPerf
//! 0.13 reads each row (`timestamp` ms, `input_length`, `output_length`,
//! `hash_ids`) and, since the first row has a timestamp, turns on its fixed
//! schedule (each request sent at its row's timestamp less the first one's; the
//! request count defaults to the file's rows). Owns that translation onto one
//! trace cell (`BenchArgs::trace_replay`: the file is the plan's `trace`, copied
//! into the evidence's inputs, rows' lengths by `trace_lengths`) and the refusals
//! of the row shapes and loads the trace cell does not carry. Must not parse the
//! trace format itself (`trace::arrival_file`) or run anything.

use std::collections::BTreeMap;

use super::{ProfileArgs, bad};
use crate::commands::bench::{BenchArgs, BenchError, Dataset, TraceReplay};
use crate::trace::{ArrivalFormat, ArrivalRow, parse_arrivals};

/// Largest panel (distinct lengths x documents) written for a trace cell.
const MAX_PANEL: u64 = 1 << 20;

/// Row keys of AIPerf's Mooncake model that the trace cell cannot replay, each
/// with the reason.
const UNBUILT_KEYS: [(&str, &str); 6] = [
    ("text_input", "a row's literal prompt (the trace cell sends panel prompts of the row's length)"),
    ("messages", "a row's chat messages (the trace cell sends panel prompts of the row's length)"),
    ("tools", "a row's tool definitions (only with messages)"),
    ("payload", "a row's verbatim request body"),
    ("session_id", "multi-turn sessions of trace rows"),
    ("delay", "multi-turn sessions' inter-turn delays"),
];

/// Sets `b` to replay `a.input_file` as AIPerf's fixed schedule; `tokenizer`:
/// whether one resolves (natural text prompts cut from `--texts`, else random
/// token IDs).
pub(super) fn translate(a: &ProfileArgs, b: &mut BenchArgs, chat: bool, tokenizer: bool) -> Result<(), BenchError> {
    let path = a.input_file.as_deref().unwrap_or_else(|| std::path::Path::new(""));
    let name = path.display().to_string();
    if chat {
        return Err(bad(
            "--custom-dataset-type mooncake_trace with --endpoint-type chat: refused: the trace cell sends panel \
             prompts of each row's input length as token IDs, which a chat message cannot carry; give \
             --endpoint-type completions",
        ));
    }
    if !a.request_rate.is_empty() {
        return Err(bad(
            "--request-rate with --custom-dataset-type mooncake_trace: refused: the trace's timestamps are the \
             schedule (AIPerf refuses the combination too, short of --no-fixed-schedule, which is not built)",
        ));
    }
    if !name.ends_with(".jsonl") {
        return Err(bad(format!("--input-file {name}: a Mooncake trace here is a .jsonl file")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("--input-file {name}: {e}")))?;
    unbuilt_keys(&name, &text)?;
    let rows = parse_arrivals(&name, &text, ArrivalFormat::Mooncake).map_err(|e| bad(format!("--input-file: {e}")))?;
    let count = a.request_count.or(a.conversation_num).unwrap_or(rows.len() as u64);
    if count > rows.len() as u64 {
        return Err(bad(format!(
            "--request-count {count}: {name} has {} rows; the trace cell sends each row at most once",
            rows.len()
        )));
    }
    b.max_concurrency = match a.concurrency.as_slice() {
        [] => None,
        [c] => Some(*c),
        _ => return Err(bad("--concurrency: one in-flight cap beside a trace")),
    };
    b.concurrency.clear();
    b.num_prompts = count;
    b.trace_replay = Some(replay(&name, &rows[..count as usize])?);
    if tokenizer {
        b.dataset = Dataset::Synthetic;
        b.dataset_path = Some(a.texts.display().to_string());
    } else {
        b.dataset = Dataset::RandomIds;
        b.dataset_path = None;
    }
    Ok(())
}

/// A row key AIPerf reads that the trace cell does not replay, or a first row
/// without a timestamp (AIPerf then sends rows as its load allows: not built).
fn unbuilt_keys(name: &str, text: &str) -> Result<(), BenchError> {
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let Ok(serde_json::Value::Object(row)) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // the trace parser names a malformed line
        };
        if let Some((k, why)) = UNBUILT_KEYS.iter().find(|(k, _)| row.contains_key(*k)) {
            return Err(bad(format!("--input-file {name}, line {}: `{k}` refused: {why} is not built", n + 1)));
        }
        if row.get("timestamp").is_none_or(serde_json::Value::is_null) {
            return Err(bad(format!(
                "--input-file {name}, line {}: no `timestamp`: refused: rows without timestamps are sent by \
                 AIPerf's load, not a fixed schedule, which is not built for Mooncake rows",
                n + 1
            )));
        }
    }
    Ok(())
}

/// The trace cell's file and panel for `rows` (the ones sent).
fn replay(name: &str, rows: &[ArrivalRow]) -> Result<TraceReplay, BenchError> {
    let mut per_length: BTreeMap<u32, u64> = BTreeMap::new();
    for r in rows {
        *per_length.entry(r.input_length).or_default() += 1;
    }
    if per_length.contains_key(&0) {
        return Err(bad(format!("--input-file {name}: an input_length of 0 (every prompt has at least 1 token)")));
    }
    // Each row of a length its own document where the panel allows.
    let documents = per_length.values().copied().max().unwrap_or(1);
    if per_length.len() as u64 * documents > MAX_PANEL {
        return Err(bad(format!(
            "--input-file {name}: {} distinct input lengths x {documents} documents is over the panel limit of \
             {MAX_PANEL} prompts; give a smaller --request-count",
            per_length.len()
        )));
    }
    let max_output = rows.iter().map(|r| r.output_length).max().unwrap_or(1).max(1);
    Ok(TraceReplay { path: name.to_string(), lengths: per_length.into_keys().collect(), documents, max_output })
}
