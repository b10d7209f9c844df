//! Measures (DESIGN section 5): per-request measures and per-cell summaries, computed
//! from raw `RequestRecord`s (and, for the engine's decode measures, the server's
//! receipts), and the familiar text table.
//!
//! Owns the exact definitions below; `CellSummary` doc comments and the table restate
//! them. Must not do I/O, read clocks, compare arms or decide anything: `stats` pairs
//! cells and applies the decision rules, `report` writes files.
//!
//! Definitions (all times on the study's monotonic clock, nanoseconds):
//! - Token-bearing event: a `StreamEvent` with `tokens > 0`. Role-only, empty and
//!   usage-only events (`tokens == 0`) are "empty events"; events with `tokens > 1` are
//!   "multi-token events". Both are counted per request and per cell, never hidden.
//! - Output tokens: `usage.completion_tokens` when the record has usage, else the sum of
//!   event tokens. Which source was used is recorded, and disagreements are counted.
//! - TTFT: first token-bearing event minus HTTP send (`ttft`), and minus intended
//!   arrival (`ttft_intended`). Undefined for a request with no token-bearing event.
//! - TPOT: (last token-bearing event - first) / (output tokens - 1), per request;
//!   undefined when output tokens < 2 or there is no token-bearing event. The cell
//!   reports percentiles across requests, never percentiles of individual gaps.
//! - E2E: `[DONE]` (`done_ns`) minus HTTP send, and minus intended arrival.
//! - ITL (stream gaps): intervals between consecutive token-bearing events of one
//!   request; the cell pools every gap of every valid request.
//! - Dispatch lag: dispatch minus intended arrival, signed (an early dispatch shows as
//!   a negative lag, never clamped).
//! - Valid completed request: `RequestRecord::is_valid()` (no failure and a `[DONE]`).
//!   Every other record is a failure, counted by `Failure::class()`; a record with
//!   neither a failure nor a `[DONE]` is counted under [`INCOMPLETE_CLASS`].
//! - Percentiles: nearest rank (`stats::percentiles`) over valid completed requests
//!   only; "median" is the nearest-rank p50. Failures are counted beside them.
//! - Observation interval: from the earliest intended arrival of any record of the cell
//!   to the latest timestamp of any record of the cell (the last `[DONE]`, or the last
//!   thing seen of a failed request, a timeout at send + `after_ns`), so the drain is
//!   included. Finite throughput is
//!   valid completed requests (or their tokens) divided by this interval.
//! - Goodput (with the plan's `[slo]`): see `goodput` (vLLM bench `--goodput`).
//! - Engine TPOT (with the arm's receipts): see `engine_steps`; the only measure
//!   not from the records alone.
//! - Session cells: every turn is a request like any other in the cell summary;
//!   `turns` adds the same measures per turn index (a later turn's intended arrival
//!   is the `[DONE]` of the turn before it).

mod cell;
mod engine_steps;
mod fields;
mod goodput;
mod request;
mod table;
mod turns;

#[cfg(test)]
mod tests;

pub use cell::{
    CellSummary, PERCENTILE_METHOD, active_ns, latency_percentiles_ms, summarize_cell, summarize_cell_with_slo,
};
pub use engine_steps::{EngineDecode, EngineStep, cell_decode, parse_receipts};
pub use fields::{FIELD_NAMES, FIELDS, Getter, OTHER_FIELDS, field_kind, field_unit, getter, is_count, metric_field};
pub use goodput::{goodput, request_meets_slo};
pub use request::{OutputTokenSource, RequestMeasures, last_seen_ns, measure_request};
pub use table::{
    BlockPercentiles, LoadFacts, percentile_word, render_extras, render_line, render_table, render_vllm_block,
};
pub use turns::{TurnSummary, render_turns, summarize_turns};

use crate::stats::StatsError;

/// The failure class of a record that has neither a failure nor a `[DONE]` (the
/// recorder should have classified it; it is counted as failed, never dropped).
pub const INCOMPLETE_CLASS: &str = "incomplete_unclassified";

/// Everything that can go wrong while measuring records.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricsError {
    #[error("no request records for the cell")]
    Empty,
    #[error("records of more than one cell/block/arm in one summary: {first} and {other}")]
    MixedCell { first: String, other: String },
    #[error("trace index {index} appears twice (request {id})")]
    DuplicateIndex { index: u64, id: String },
    #[error("request {id}: not a valid completed request (failure or no [DONE])")]
    NotValid { id: String },
    #[error("request {id}: a valid completed request without {field}")]
    MissingTimestamp { id: String, field: &'static str },
    #[error("request {id}: {later} ({later_ns} ns) is before {earlier} ({earlier_ns} ns)")]
    OutOfOrder { id: String, earlier: &'static str, earlier_ns: u64, later: &'static str, later_ns: u64 },
    #[error("observation interval from {start_ns} ns to {end_ns} ns is empty")]
    EmptyInterval { start_ns: u64, end_ns: u64 },
    #[error("percentiles: {0}")]
    Stats(#[from] StatsError),
}
