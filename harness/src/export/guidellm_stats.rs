//! guidellm's distribution summaries (`guidellm/schemas/base/statistics.py`,
//! guidellm 0.8.1: `DistributionSummary.from_values`, `rate_distribution_from_timings`,
//! `concurrency_distribution_from_timings` and the status breakdown), ported so that
//! `harness export --format guidellm` writes the numbers guidellm would compute from
//! the same per-request timings. Owns these formulas for the guidellm export only.
//! Must not be used for the harness's own measures (nearest-rank, `stats`).
//!
//! - `from_values`: weighted values (weight 1 unless given); duplicates merged, zero
//!   weights dropped; mean, population variance and percentiles from the normalised
//!   weights; a percentile is the first value whose cumulative probability reaches it
//!   (`np.searchsorted(cdf, p, side="left")`); the mode is the value of largest
//!   probability (the smallest such); `count` defaults to the rounded weight sum.
//! - `rate`: events (time, weight) in a window; times within 0.1 ms merged (runs
//!   grouped from their first time); each event's rate is its weight over its local
//!   duration (half-way to each neighbour; the last at least 1e-6 s), weighted by
//!   that duration.
//! - `concurrency`: intervals (start, end) add one at start, remove one at end; the
//!   concurrency level between consecutive change times, weighted by its duration.

use serde_json::{Value, json};

const EPSILON: f64 = 1e-6;
const MERGE_THRESHOLD_S: f64 = 1e-4;
const PERCENTILES: [(&str, f64); 11] = [
    ("p001", 0.001),
    ("p01", 0.01),
    ("p05", 0.05),
    ("p10", 0.1),
    ("p25", 0.25),
    ("p50", 0.5),
    ("p75", 0.75),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p999", 0.999),
];

/// A `DistributionSummary` with no observations (`count` given).
fn empty(count: u64) -> Value {
    let p: serde_json::Map<String, Value> = PERCENTILES.iter().map(|(k, _)| ((*k).to_string(), json!(0.0))).collect();
    json!({
        "mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0,
        "min": 0.0, "max": 0.0, "count": count, "total_sum": 0.0,
        "percentiles": p, "pdf": null, "mean_ci": null, "percentile_cis": null,
    })
}

/// `DistributionSummary.from_values` of (value, weight) pairs.
pub fn from_values(values: &[(f64, f64)], count: Option<u64>) -> Value {
    if values.is_empty() {
        return empty(0);
    }
    let count = count.unwrap_or_else(|| values.iter().map(|v| v.1).sum::<f64>().round() as u64);
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(sorted.len());
    for (v, w) in sorted {
        match merged.last_mut() {
            Some(last) if last.0 == v => last.1 += w,
            _ => merged.push((v, w)),
        }
    }
    merged.retain(|m| m.1 > 0.0);
    let total: f64 = merged.iter().map(|m| m.1).sum();
    if merged.is_empty() {
        return empty(count);
    }
    if total <= EPSILON {
        merged.iter_mut().for_each(|m| m.1 = 1.0);
    }
    let total: f64 = merged.iter().map(|m| m.1).sum();
    let pdf: Vec<(f64, f64)> = merged.iter().map(|&(v, w)| (v, w / total)).collect();
    let mut cdf = Vec::with_capacity(pdf.len());
    let mut acc = 0.0;
    for p in &pdf {
        acc += p.1;
        cdf.push(acc);
    }
    let at = |q: f64| {
        let i = cdf.partition_point(|&c| c < q).min(pdf.len() - 1);
        pdf[i].0
    };
    let percentiles: serde_json::Map<String, Value> =
        PERCENTILES.iter().map(|&(k, q)| (k.to_string(), json!(at(q)))).collect();
    let mean: f64 = pdf.iter().map(|(v, p)| v * p).sum();
    let mode = pdf.iter().fold((f64::NEG_INFINITY, 0.0), |best, &(v, p)| if p > best.0 { (p, v) } else { best }).1;
    let variance: f64 = pdf.iter().map(|(v, p)| (v - mean) * (v - mean) * p).sum();
    json!({
        "mean": mean, "median": at(0.5), "mode": mode, "variance": variance,
        "std_dev": variance.sqrt(), "min": pdf[0].0, "max": pdf[pdf.len() - 1].0,
        "count": count, "total_sum": mean * count as f64,
        "percentiles": percentiles, "pdf": null, "mean_ci": null, "percentile_cis": null,
    })
}

/// Exact duplicates summed, then runs of times within the threshold merged into
/// their groups' first times (`_merge_sorted_times_with_weights`).
fn merge_times(mut times: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut unique: Vec<(f64, f64)> = Vec::with_capacity(times.len());
    for (t, w) in times {
        match unique.last_mut() {
            Some(last) if last.0 == t => last.1 += w,
            _ => unique.push((t, w)),
        }
    }
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(unique.len());
    let mut i = 0;
    while i < unique.len() {
        // A run: consecutive times whose gaps are all within the threshold.
        let mut run_end = i + 1;
        while run_end < unique.len() && unique[run_end].0 - unique[run_end - 1].0 <= MERGE_THRESHOLD_S {
            run_end += 1;
        }
        let mut g = i;
        while g < run_end {
            // A group: every time of the run within the threshold of its first.
            let limit = unique[g].0 + MERGE_THRESHOLD_S;
            let mut end = g + 1;
            while end < run_end && unique[end].0 <= limit {
                end += 1;
            }
            out.push((unique[g].0, unique[g..end].iter().map(|u| u.1).sum()));
            g = end;
        }
        i = run_end;
    }
    out
}

/// `DistributionSummary.rate_distribution_from_timings` over [start, end].
pub fn rate(events: &[(f64, f64)], start: f64, end: f64) -> Value {
    let mut times: Vec<(f64, f64)> = vec![(start, 0.0)];
    times.extend(events.iter().copied().filter(|e| e.0 >= start && e.0 <= end));
    times.push((end, 0.0));
    let times = merge_times(times);
    if times.len() <= 1 {
        return from_values(&[], Some(times.len() as u64));
    }
    let n = times.len();
    let mid: Vec<f64> = times.windows(2).map(|w| (w[0].0 + w[1].0) / 2.0).collect();
    let mut durations = vec![0.0; n];
    durations[0] = mid[0] - times[0].0;
    for i in 1..n - 1 {
        durations[i] = mid[i] - mid[i - 1];
    }
    durations[n - 1] = (times[n - 1].0 - mid[n - 2]).max(EPSILON);
    let count = times.iter().map(|t| t.1).sum::<f64>().round() as u64;
    let rates: Vec<(f64, f64)> = times.iter().zip(&durations).map(|(t, &d)| (t.1 / d, d)).collect();
    from_values(&rates, Some(count))
}

/// `DistributionSummary.concurrency_distribution_from_timings` over [start, end].
pub fn concurrency(intervals: &[(f64, f64)], start: f64, end: f64) -> Value {
    let kept: Vec<(f64, f64)> = intervals.iter().copied().filter(|i| i.1 >= start && i.0 <= end).collect();
    let count = kept.len() as u64;
    let mut changes: Vec<(f64, f64)> = kept.iter().map(|i| (i.0, 1.0)).collect();
    changes.extend(kept.iter().map(|i| (i.1, -1.0)));
    let mut times = merge_times(changes);
    if !times.is_empty() {
        let first_at = times.partition_point(|t| t.0 < start);
        let prior: f64 = times[..first_at].iter().map(|t| t.1).sum();
        times.drain(..first_at);
        times.insert(0, (start, prior));
        let last_at = times.partition_point(|t| t.0 <= end);
        times.truncate(last_at);
        times.push((end, 0.0));
    }
    let mut acc = 0.0;
    let levels: Vec<f64> = times
        .iter()
        .map(|t| {
            acc += t.1;
            acc.max(0.0)
        })
        .collect();
    if levels.len() <= 1 {
        let values: Vec<(f64, f64)> = levels.iter().take(usize::from(count > 0)).map(|&l| (l, 1.0)).collect();
        return from_values(&values, None);
    }
    let durations: Vec<f64> = times.windows(2).map(|w| (w[1].0 - w[0].0).max(0.0)).collect();
    if !durations.iter().any(|&d| d > 0.0) {
        return from_values(&[], Some(count));
    }
    let values: Vec<(f64, f64)> = levels.iter().zip(&durations).map(|(&l, &d)| (l, d)).collect();
    from_values(&values, Some(count))
}

/// Values of one status group (guidellm's successful, incomplete, errored).
#[derive(Debug, Clone, Default)]
pub struct ByStatus<T> {
    pub successful: Vec<T>,
    pub incomplete: Vec<T>,
    pub errored: Vec<T>,
}

impl<T: Clone> ByStatus<T> {
    fn total(&self) -> Vec<T> {
        [&self.successful[..], &self.incomplete[..], &self.errored[..]].concat()
    }

    /// A `StatusDistributionSummary`: `f` applied to each group and to their union.
    pub fn summary(&self, f: impl Fn(&[T]) -> Value) -> Value {
        json!({
            "successful": f(&self.successful),
            "errored": f(&self.errored),
            "incomplete": f(&self.incomplete),
            "total": f(&self.total()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_values_match_guidellm_by_hand() {
        // Values 1, 2, 2, 4: pdf (1, .25), (2, .5), (4, .25); cdf .25 .75 1.
        let d = from_values(&[(2.0, 1.0), (1.0, 1.0), (4.0, 1.0), (2.0, 1.0)], None);
        assert_eq!(d["mean"], 2.25);
        assert_eq!(d["median"], 2.0);
        assert_eq!(d["mode"], 2.0);
        assert_eq!(d["percentiles"]["p25"], 1.0); // cdf reaches .25 at the first value
        assert_eq!(d["percentiles"]["p90"], 4.0);
        assert_eq!(d["count"], 4);
        assert!((d["variance"].as_f64().unwrap() - 1.1875).abs() < 1e-12);
        assert_eq!(from_values(&[(5.0, 0.0)], None)["count"], 0);
        assert_eq!(from_values(&[], None)["percentiles"]["p99"], 0.0);
    }

    #[test]
    fn close_times_merge_into_their_groups_first_time() {
        let m = merge_times(vec![(1.0, 1.0), (1.00005, 1.0), (1.00012, 1.0), (2.0, 1.0), (2.0, 1.0)]);
        // 1.0 and 1.00005 are within 0.1 ms of 1.0; 1.00012 starts a new group.
        assert_eq!(m, vec![(1.0, 2.0), (1.00012, 1.0), (2.0, 2.0)]);
    }

    #[test]
    fn rate_and_concurrency_by_hand() {
        // Window [0, 4], one event at 2: times 0, 2, 4; midpoints 1, 3; durations
        // 1, 2, 1; rates 0, 0.5, 0 weighted 1, 2, 1 -> mean 0.25.
        let r = rate(&[(2.0, 1.0)], 0.0, 4.0);
        assert!((r["mean"].as_f64().unwrap() - 0.25).abs() < 1e-12, "{r}");
        assert_eq!(r["count"], 1);
        // Two requests [0, 2] and [1, 3] in [0, 4]: levels 1 (1 s), 2 (1 s), 1 (1 s), 0 (1 s).
        let c = concurrency(&[(0.0, 2.0), (1.0, 3.0)], 0.0, 4.0);
        assert_eq!(c["mean"], 1.0);
        assert_eq!(c["max"], 2.0);
        assert_eq!(c["count"], 2);
    }
}
