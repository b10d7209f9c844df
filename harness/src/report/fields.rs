//! Every numeric field of a `CellSummary`, by its serialized name and in struct order:
//! the columns of `matrix.csv` / `matrix.parquet` and the measures whose medians
//! across blocks the report prints. Owns that list (a test checks that it covers the
//! summary, so a field added to `CellSummary` cannot silently miss the matrix). Must
//! not compute measures: `metrics` does.

use crate::metrics::CellSummary;

/// How a field is read: a count, a value, or a value that may have no sample.
#[derive(Clone, Copy)]
pub enum Getter {
    Count(fn(&CellSummary) -> u64),
    Value(fn(&CellSummary) -> f64),
    Maybe(fn(&CellSummary) -> Option<f64>),
    /// A count that may be absent (goodput without `[slo]`).
    MaybeCount(fn(&CellSummary) -> Option<u64>),
}

impl Getter {
    /// The field as a float (`None`: no sample).
    pub fn get(self, s: &CellSummary) -> Option<f64> {
        match self {
            Getter::Count(f) => Some(f(s) as f64),
            Getter::Value(f) => Some(f(s)),
            Getter::Maybe(f) => f(s),
            Getter::MaybeCount(f) => f(s).map(|n| n as f64),
        }
    }
}

macro_rules! fields {
    ($($kind:ident $name:ident),* $(,)?) => {
        /// `(serialized name, getter)` for every numeric field, in struct order.
        pub const FIELDS: &[(&str, Getter)] = &[$((stringify!($name), Getter::$kind(|s| s.$name))),*];
    };
}

fields!(
    Count requests,
    Count completed,
    Count failed,
    Count observation_start_ns,
    Count observation_end_ns,
    Value duration_s,
    Count total_input_tokens,
    Count total_output_tokens,
    Value request_throughput_rps,
    Value output_token_throughput_tps,
    Value total_token_throughput_tps,
    Count peak_concurrent_requests,
    Count ttft_samples,
    Maybe ttft_mean_ms,
    Maybe ttft_p50_ms,
    Maybe ttft_p95_ms,
    Maybe ttft_p99_ms,
    Maybe ttft_from_intended_mean_ms,
    Maybe ttft_from_intended_p50_ms,
    Maybe ttft_from_intended_p95_ms,
    Maybe ttft_from_intended_p99_ms,
    Count tpot_samples,
    Maybe tpot_mean_ms,
    Maybe tpot_p50_ms,
    Maybe tpot_p95_ms,
    Maybe tpot_p99_ms,
    Count itl_samples,
    Maybe itl_mean_ms,
    Maybe itl_p50_ms,
    Maybe itl_p95_ms,
    Maybe itl_p99_ms,
    Count e2e_samples,
    Maybe e2e_mean_ms,
    Maybe e2e_p50_ms,
    Maybe e2e_p95_ms,
    Maybe e2e_p99_ms,
    Maybe e2e_from_intended_mean_ms,
    Maybe e2e_from_intended_p50_ms,
    Maybe e2e_from_intended_p95_ms,
    Maybe e2e_from_intended_p99_ms,
    Count dispatch_lag_samples,
    Maybe dispatch_lag_p50_ms,
    Maybe dispatch_lag_p99_ms,
    Maybe dispatch_lag_max_ms,
    Count stream_events,
    Count empty_events,
    Count multi_token_events,
    Count requests_without_token_events,
    Count output_tokens_from_usage_requests,
    Count output_tokens_from_events_requests,
    Count usage_event_token_mismatch_requests,
    Maybe input_tokens_min,
    Maybe input_tokens_p50,
    Maybe input_tokens_p90,
    Maybe input_tokens_max,
    Maybe output_tokens_min,
    Maybe output_tokens_p50,
    Maybe output_tokens_p90,
    Maybe output_tokens_max,
    MaybeCount slo_met_requests,
    Maybe slo_attainment,
    Maybe goodput_rps,
    MaybeCount engine_decode_steps,
    Maybe engine_tpot_ms,
);

/// Non-numeric fields of `CellSummary`, carried separately (keys and failure classes).
pub const OTHER_FIELDS: [&str; 5] = ["cell", "block", "arm", "percentile_method", "failed_by_class"];
