//! The one percentile method used everywhere in the harness: nearest rank.
//!
//! Owns `percentile` and its rank rule. For `n` values and a level `p` in
//! percent (`0 <= p <= 100`), the `p`-th percentile is the `r`-th smallest
//! value (1-based) with `r = ceil(p / 100 * n)`, and `r = 1` when that is 0
//! (so `p = 0` gives the minimum and `p = 100` the maximum). The result is
//! always one of the observed values; nothing is interpolated. Because levels
//! such as 95 or 99.9 are not exact in binary, a product `p / 100 * n` within
//! `max(1e-9, 1e-15 * product)` of an integer is taken as that integer: the 95th percentile
//! of 20 values is the 19th smallest, not the 20th. Callers pass only valid
//! completed requests and count failures beside the result; this module never
//! drops or filters anything itself, and rejects NaN or infinite values.
//!
//! The block-effect median used by the decision rules is the ordinary sample
//! median (`median_interval::median`), not this function.

use super::error::{Result, StatsError, check_finite};

fn check_level(p: f64) -> Result<()> {
    if (0.0..=100.0).contains(&p) {
        Ok(())
    } else {
        Err(StatsError::OutOfRange { name: "percentile level", value: p, allowed: "[0, 100]" })
    }
}

/// The 1-based nearest rank `ceil(p / 100 * n)` (at least 1) for `n >= 1`
/// values and level `p` in `[0, 100]`.
pub fn nearest_rank(n: usize, p: f64) -> Result<usize> {
    check_level(p)?;
    if n == 0 {
        return Err(StatsError::Empty { what: "percentile values" });
    }
    let exact = p / 100.0 * n as f64;
    let nearest = exact.round();
    let tolerance = 1e-9_f64.max(exact * 1e-15);
    let rank = if (exact - nearest).abs() <= tolerance { nearest } else { exact.ceil() };
    // rank is in [0, n] by construction; clamp guards the float edge anyway.
    Ok((rank as usize).clamp(1, n))
}

/// Nearest-rank `p`-th percentile (`p` in percent) of `values`, which need not
/// be sorted. Errors on an empty slice, a non-finite value or a level outside
/// `[0, 100]`.
pub fn percentile(values: &[f64], p: f64) -> Result<f64> {
    Ok(percentiles(values, &[p])?[0])
}

/// Several nearest-rank percentiles of the same values (sorted once), in the
/// order of `levels`.
pub fn percentiles(values: &[f64], levels: &[f64]) -> Result<Vec<f64>> {
    check_finite("percentile values", values)?;
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    levels.iter().map(|&p| nearest_rank(sorted.len(), p).map(|r| sorted[r - 1])).collect()
}

/// Nearest-rank percentile of integer values (for example nanosecond
/// latencies), same rule as `percentile`.
pub fn percentile_u64(values: &[u64], p: f64) -> Result<u64> {
    let rank = nearest_rank(values.len(), p)?;
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    Ok(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_matches_integer_arithmetic_for_integer_levels() {
        // ceil(p * n / 100) in exact integers, for every integer level.
        for n in 1usize..=300 {
            for p in 0usize..=100 {
                let want = (p * n).div_ceil(100).max(1);
                assert_eq!(nearest_rank(n, p as f64).unwrap(), want, "n={n} p={p}");
            }
        }
    }

    #[test]
    fn nearest_rank_for_decimal_levels() {
        // 99.9% of 1000 is exactly 999; 99.9% of 1001 is 999.999 -> 1000.
        assert_eq!(nearest_rank(1000, 99.9).unwrap(), 999);
        assert_eq!(nearest_rank(1001, 99.9).unwrap(), 1000);
        assert_eq!(nearest_rank(10, 99.9).unwrap(), 10);
        assert_eq!(nearest_rank(200, 97.5).unwrap(), 195);
        assert_eq!(nearest_rank(20, 95.0).unwrap(), 19);
        assert_eq!(nearest_rank(21, 95.0).unwrap(), 20); // 19.95 -> 20
    }

    #[test]
    fn percentile_values() {
        let v = [15.0, 20.0, 35.0, 40.0, 50.0];
        // The classic nearest-rank example (Wikipedia): 5th, 30th, 40th, 50th,
        // 100th percentiles of {15, 20, 35, 40, 50}.
        assert_eq!(percentile(&v, 5.0).unwrap(), 15.0);
        assert_eq!(percentile(&v, 30.0).unwrap(), 20.0);
        assert_eq!(percentile(&v, 40.0).unwrap(), 20.0);
        assert_eq!(percentile(&v, 50.0).unwrap(), 35.0);
        assert_eq!(percentile(&v, 100.0).unwrap(), 50.0);
        assert_eq!(percentile(&v, 0.0).unwrap(), 15.0);
        // Unsorted input, and p95 of 1..=20 is 19.
        let w: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(percentile(&w, 95.0).unwrap(), 19.0);
        assert_eq!(percentile(&w, 50.0).unwrap(), 10.0);
        assert_eq!(percentiles(&w, &[50.0, 95.0, 99.0]).unwrap(), [10.0, 19.0, 20.0]);
        let ns: Vec<u64> = (1..=20).rev().map(|x| x * 1000).collect();
        assert_eq!(percentile_u64(&ns, 95.0).unwrap(), 19_000);
    }

    #[test]
    fn percentile_rejects_bad_input() {
        assert!(matches!(percentile(&[], 50.0), Err(StatsError::Empty { .. })));
        assert!(matches!(percentile_u64(&[], 50.0), Err(StatsError::Empty { .. })));
        assert!(matches!(percentile(&[1.0, f64::NAN], 50.0), Err(StatsError::NonFinite { index: 1, .. })));
        for bad in [-1.0, 100.5, f64::NAN] {
            assert!(matches!(percentile(&[1.0], bad), Err(StatsError::OutOfRange { .. })));
        }
    }
}
