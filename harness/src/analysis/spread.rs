//! The matrix's spread columns of one cell, over its valid completed requests: mean
//! input and output tokens, and for TTFT (from HTTP send), TPOT, ITL (pooled gaps
//! between token-bearing events) and E2E (from HTTP send) the nearest-rank p90, the
//! population standard deviation (divided by n, as numpy's default and vLLM's "Std"
//! lines), the minimum and the maximum, in milliseconds. Owns those column names and
//! values. Must not add them to `CellSummary` (the summary's fields are its own; this
//! is read from the same per-request measures) and must not compute a per-request
//! measure (`metrics::measure_request` does).

use crate::metrics::RequestMeasures;
use crate::stats::percentiles;

/// Column names, in value order (`Spread::values`).
pub const SPREAD_COLUMNS: [&str; 18] = [
    "input_tokens_mean",
    "output_tokens_mean",
    "ttft_p90_ms",
    "ttft_sd_ms",
    "ttft_min_ms",
    "ttft_max_ms",
    "tpot_p90_ms",
    "tpot_sd_ms",
    "tpot_min_ms",
    "tpot_max_ms",
    "itl_p90_ms",
    "itl_sd_ms",
    "itl_min_ms",
    "itl_max_ms",
    "e2e_p90_ms",
    "e2e_sd_ms",
    "e2e_min_ms",
    "e2e_max_ms",
];

/// The spread of one cell (`None`: no sample).
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    values: Vec<Option<f64>>,
}

impl Spread {
    /// Values in `SPREAD_COLUMNS` order.
    pub fn values(&self) -> &[Option<f64>] {
        &self.values
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// p90, population sd, min and max of nanosecond values, in ms.
fn dist_ms(ns: &[f64]) -> [Option<f64>; 4] {
    let Some(m) = mean(ns) else { return [None; 4] };
    let var = ns.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / ns.len() as f64;
    let p90 = percentiles(ns, &[90.0]).ok().and_then(|p| p.first().copied());
    let min = ns.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [p90.map(|v| v / 1e6), Some(var.sqrt() / 1e6), Some(min / 1e6), Some(max / 1e6)]
}

/// The spread of the valid requests' measures.
pub fn spread(valid: &[RequestMeasures]) -> Spread {
    let col = |f: &dyn Fn(&RequestMeasures) -> Option<f64>| valid.iter().filter_map(f).collect::<Vec<f64>>();
    let gaps: Vec<f64> = valid.iter().flat_map(|m| m.gaps_ns.iter().map(|&g| g as f64)).collect();
    let mut values = vec![mean(&col(&|m| Some(m.prompt_tokens as f64))), mean(&col(&|m| Some(m.output_tokens as f64)))];
    for d in [col(&|m| m.ttft_ns.map(|v| v as f64)), col(&|m| m.tpot_ns), gaps, col(&|m| Some(m.e2e_ns as f64))] {
        values.extend(dist_ms(&d));
    }
    debug_assert_eq!(values.len(), SPREAD_COLUMNS.len());
    Spread { values }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::OutputTokenSource;

    fn measures(prompt: u64, output: u64, ttft_ms: u64, e2e_ms: u64, gaps_ms: &[u64]) -> RequestMeasures {
        RequestMeasures {
            index: 0,
            prompt_tokens: prompt,
            output_tokens: output,
            output_tokens_source: OutputTokenSource::Usage,
            event_tokens: output,
            ttft_ns: Some(ttft_ms * 1_000_000),
            ttft_intended_ns: Some(ttft_ms * 1_000_000),
            tpot_ns: (output >= 2).then(|| (e2e_ms - ttft_ms) as f64 * 1e6 / (output - 1) as f64),
            e2e_ns: e2e_ms * 1_000_000,
            e2e_intended_ns: e2e_ms * 1_000_000,
            gaps_ns: gaps_ms.iter().map(|g| g * 1_000_000).collect(),
            events: output,
            empty_events: 0,
            multi_token_events: 0,
            dispatch_lag_ns: 0,
            light: false,
            ttfc_ns: None,
            reasoning_tokens: 0,
        }
    }

    #[test]
    fn spread_is_nearest_rank_p90_population_sd_min_and_max() {
        let valid = [measures(10, 3, 2, 10, &[4, 4]), measures(20, 3, 4, 14, &[5, 5]), measures(30, 1, 6, 6, &[])];
        let s = spread(&valid);
        let get = |name: &str| s.values()[SPREAD_COLUMNS.iter().position(|c| *c == name).unwrap()];
        assert_eq!(get("input_tokens_mean"), Some(20.0));
        assert_eq!(get("output_tokens_mean"), Some(7.0 / 3.0));
        // TTFT 2, 4, 6 ms: mean 4, population variance 8/3.
        assert_eq!(get("ttft_p90_ms"), Some(6.0));
        assert!((get("ttft_sd_ms").unwrap() - (8.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((get("ttft_min_ms"), get("ttft_max_ms")), (Some(2.0), Some(6.0)));
        // TPOT of the two requests with 3 outputs: 4 and 5 ms; the 1-token one has none.
        assert_eq!((get("tpot_min_ms"), get("tpot_max_ms"), get("tpot_sd_ms")), (Some(4.0), Some(5.0), Some(0.5)));
        assert_eq!((get("itl_p90_ms"), get("itl_min_ms")), (Some(5.0), Some(4.0)));
        assert_eq!(get("e2e_max_ms"), Some(14.0));
        assert!(spread(&[]).values().iter().all(Option::is_none));
        assert_eq!(spread(&[]).values().len(), SPREAD_COLUMNS.len());
    }
}
