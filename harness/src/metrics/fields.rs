//! The field catalogue: every numeric field of a `CellSummary`, by its serialized
//! name and in struct order, with its unit and kind (throughput: higher is better;
//! latency: lower is better; else neither), and which field each hypothesis
//! `plan::Metric` compares. The columns of `matrix.csv` / `matrix.parquet`, the
//! measures whose medians the report prints, the units of `evidence.json`, the
//! gate's rule metrics and replay's recomputed fields all take their names from
//! here. Owns those names, units and kinds (a test checks that the list covers the
//! summary, so a field added to `CellSummary` cannot silently miss the matrix).
//! Must not compute measures: `cell` does (and replay on its own).

use super::CellSummary;
use crate::plan::{Metric, MetricKind};

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
    MaybeCount reasoning_requests,
    MaybeCount total_reasoning_tokens,
    MaybeCount total_content_tokens,
    MaybeCount ttfc_samples,
    Maybe ttfc_mean_ms,
    Maybe ttfc_p50_ms,
    Maybe ttfc_p95_ms,
    Maybe ttfc_p99_ms,
);

/// Every name of `FIELDS`, in its order.
pub const FIELD_NAMES: [&str; FIELDS.len()] = {
    let mut names = [""; FIELDS.len()];
    let mut i = 0;
    while i < FIELDS.len() {
        names[i] = FIELDS[i].0;
        i += 1;
    }
    names
};

/// The getter of the field named `name`, if the summary has one.
pub fn getter(name: &str) -> Option<Getter> {
    FIELDS.iter().find(|(n, _)| *n == name).map(|(_, g)| *g)
}

/// The summary field a hypothesis on `metric` compares.
pub const fn metric_field(metric: Metric) -> &'static str {
    match metric {
        Metric::ThroughputRps => "request_throughput_rps",
        Metric::OutputTokensPerS => "output_token_throughput_tps",
        Metric::TtftP95 => "ttft_p95_ms",
        Metric::TpotP95 => "tpot_p95_ms",
        Metric::E2eP95 => "e2e_p95_ms",
        Metric::E2eP95Intended => "e2e_from_intended_p95_ms",
        Metric::GoodputRps => "goodput_rps",
        Metric::E2eMean => "e2e_mean_ms",
        Metric::TtftMean => "ttft_mean_ms",
        Metric::TtftP50 => "ttft_p50_ms",
        Metric::EngineTpot => "engine_tpot_ms",
    }
}

/// The unit of a summary field, by the summary's naming rule (units in the names):
/// `ms`, `ns`, `s`, `req/s`, `tok/s`, `tokens` (prompt and output lengths),
/// `fraction` (`slo_attainment`) or `count`.
pub fn field_unit(name: &str) -> &'static str {
    let tokens = name.starts_with("total_input_tokens")
        || name.starts_with("total_output_tokens")
        || ((name.starts_with("input_tokens_") || name.starts_with("output_tokens_")) && !name.ends_with("_requests"));
    match name {
        _ if name.ends_with("_ms") => "ms",
        _ if name.ends_with("_ns") => "ns",
        _ if name.ends_with("_rps") => "req/s",
        _ if name.ends_with("_tps") => "tok/s",
        _ if name.ends_with("_s") => "s",
        "slo_attainment" => "fraction",
        _ if tokens => "tokens",
        _ => "count",
    }
}

/// Whether higher (throughput: `req/s`, `tok/s`, and the SLO attainment) or lower
/// (latency: `ms`) is better; `None` for the rest (counts, lengths, clock readings).
pub fn field_kind(name: &str) -> Option<MetricKind> {
    match field_unit(name) {
        "req/s" | "tok/s" | "fraction" => Some(MetricKind::Throughput),
        "ms" => Some(MetricKind::Latency),
        _ => None,
    }
}

/// Whether the field is a count (an integer in the summary).
pub fn is_count(name: &str) -> bool {
    matches!(getter(name), Some(Getter::Count(_) | Getter::MaybeCount(_)))
}

/// Non-numeric fields of `CellSummary`, carried separately (keys and failure classes).
pub const OTHER_FIELDS: [&str; 5] = ["cell", "block", "arm", "percentile_method", "failed_by_class"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_names_a_field_of_its_kind_and_unit() {
        for m in Metric::ALL {
            let f = metric_field(m);
            assert!(getter(f).is_some(), "{} names no summary field ({f})", m.as_str());
            assert_eq!(field_kind(f), Some(m.kind()), "{}: {f}", m.as_str());
        }
        assert_eq!(FIELD_NAMES.len(), FIELDS.len());
        let kind = |k| FIELD_NAMES.iter().filter(|n| field_kind(n) == Some(k)).count();
        assert_eq!(kind(MetricKind::Throughput), 5, "req/s, tok/s and the SLO attainment");
        assert_eq!(field_kind("dispatch_lag_max_ms"), Some(MetricKind::Latency));
        assert_eq!([field_kind("requests"), field_kind("input_tokens_p50"), field_kind("duration_s")], [None; 3]);
        assert!(FIELD_NAMES.iter().zip(FIELDS).all(|(n, (f, _))| n == f));
    }

    #[test]
    fn every_summary_field_has_the_unit_its_name_says() {
        let unit = field_unit;
        assert_eq!(
            [unit("ttft_p95_ms"), unit("observation_start_ns"), unit("duration_s"), unit("goodput_rps")],
            ["ms", "ns", "s", "req/s"]
        );
        assert_eq!([unit("output_token_throughput_tps"), unit("total_input_tokens")], ["tok/s", "tokens"]);
        assert_eq!(
            [unit("input_tokens_p90"), unit("output_tokens_max"), unit("slo_attainment")],
            ["tokens", "tokens", "fraction"]
        );
        assert_eq!(
            [unit("output_tokens_from_usage_requests"), unit("ttft_samples"), unit("requests")],
            ["count", "count", "count"]
        );
        // A `count` is always an integer field of the summary.
        for (name, _) in FIELDS {
            if field_unit(name) == "count" {
                assert!(is_count(name), "{name} is not a count");
            }
        }
    }
}
