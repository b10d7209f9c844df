//! The block-effect median, the median screen, and the distribution-free
//! order-statistic interval for the median.
//!
//! Owns:
//! - `median`: the ordinary sample median (the middle value for odd `n`, the
//!   mean of the two middle values for even `n`). This is deliberately not the
//!   nearest-rank percentile used for request measures: it is the point
//!   estimate that the median screen compares with the plan's threshold.
//! - `median_screen`: passes when `median >= threshold`.
//! - `median_interval`: for `n` effects sorted as `x_(1) <= ... <= x_(n)`, the
//!   interval `[x_(k), x_(n-k+1)]` covers the population median with exact
//!   probability `1 - 2 P(Binomial(n, 1/2) <= k - 1)` for any continuous
//!   distribution. The largest `k` (narrowest interval) whose coverage is
//!   `>= target` is chosen. When even `k = 1` (the `[min, max]` interval, with
//!   coverage `1 - 2^(1-n)`) misses the target (for target 0.95: `n <= 5`),
//!   the result is `[min, max]` with its true coverage and
//!   `target_reached = false`; it never pretends to the target.
//!
//! Coverage is formed exactly over `2^n` and rounded once to `f64`; the
//! comparison with the target is made on that correctly rounded value.
//! Must not decide claims: `decision` does.

use serde::{Deserialize, Serialize};

use super::error::{Result, check_finite, check_open_unit};
use super::exact::{CoverageWalk, check_exact_n};

/// Coverage target used when the plan does not set one.
pub const DEFAULT_INTERVAL_COVERAGE: f64 = 0.95;

/// An order-statistic interval for the median of the block effects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MedianInterval {
    /// Number of effects.
    pub n: u64,
    /// 1-based rank of the lower end, `k`.
    pub lower_rank: u64,
    /// 1-based rank of the upper end, `n - k + 1`.
    pub upper_rank: u64,
    /// `x_(k)`.
    pub lower: f64,
    /// `x_(n-k+1)`.
    pub upper: f64,
    /// Exact coverage `1 - 2 P(Binomial(n, 1/2) <= k - 1)`, rounded once.
    pub coverage: f64,
    /// The requested coverage.
    pub target: f64,
    /// False when no interval reaches the target and `[min, max]` is returned.
    pub target_reached: bool,
}

/// The median screen: the sample median of the block effects against the
/// plan's threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MedianScreen {
    pub median: f64,
    pub threshold: f64,
    /// `median >= threshold`.
    pub passed: bool,
}

fn sorted_copy(values: &[f64]) -> Vec<f64> {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// Sample median: middle value (odd `n`) or mean of the two middle values
/// (even `n`). Errors on an empty slice or a non-finite value.
pub fn median(values: &[f64]) -> Result<f64> {
    check_finite("median values", values)?;
    let s = sorted_copy(values);
    let n = s.len();
    Ok(if n % 2 == 1 {
        s[n / 2]
    } else {
        // Halve first: no overflow for huge finite values.
        s[n / 2 - 1] / 2.0 + s[n / 2] / 2.0
    })
}

/// Median screen: passes when the median block effect is `>= threshold`
/// (reaching the threshold exactly passes). The threshold must be finite.
pub fn median_screen(effects: &[f64], threshold: f64) -> Result<MedianScreen> {
    if !threshold.is_finite() {
        return Err(super::StatsError::OutOfRange {
            name: "median threshold",
            value: threshold,
            allowed: "finite values",
        });
    }
    let median = median(effects)?;
    Ok(MedianScreen { median, threshold, passed: median >= threshold })
}

/// Ranks for the order-statistic median interval with `n >= 1` effects:
/// returns `(k, coverage, target_reached)` where `k` is the largest rank with
/// coverage `>= target`, or `k = 1` with `target_reached = false` when none
/// reaches it. `target` must be in the open interval (0, 1).
pub fn median_interval_rank(n: u64, target: f64) -> Result<(u64, f64, bool)> {
    check_open_unit("interval coverage target", target)?;
    if n == 0 {
        return Err(super::StatsError::Empty { what: "median interval" });
    }
    check_exact_n(n)?;
    // Coverage falls as k grows; the walk stops at the middle rank.
    let mut walk = CoverageWalk::new(n);
    let Some((_, first)) = walk.next() else {
        return Err(super::StatsError::Numerical("median interval ranks"));
    };
    if first < target {
        return Ok((1, first, false));
    }
    let (mut k, mut coverage) = (1, first);
    for (next_k, next) in walk {
        if next < target {
            break;
        }
        (k, coverage) = (next_k, next);
    }
    Ok((k, coverage, true))
}

/// Distribution-free interval for the median effect at the given coverage
/// target (use `DEFAULT_INTERVAL_COVERAGE` for 0.95).
pub fn median_interval(effects: &[f64], target: f64) -> Result<MedianInterval> {
    check_finite("block effects", effects)?;
    let n = effects.len() as u64;
    let (k, coverage, target_reached) = median_interval_rank(n, target)?;
    let s = sorted_copy(effects);
    let upper_rank = n - k + 1;
    Ok(MedianInterval {
        n,
        lower_rank: k,
        upper_rank,
        lower: s[(k - 1) as usize],
        upper: s[(upper_rank - 1) as usize],
        coverage,
        target,
        target_reached,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::StatsError;

    #[test]
    fn ten_blocks_use_ranks_2_and_9_with_exact_coverage() {
        let effects = [0.09, -0.01, 0.05, 0.03, 0.07, 0.02, 0.04, 0.06, 0.08, 0.01];
        let iv = median_interval(&effects, DEFAULT_INTERVAL_COVERAGE).unwrap();
        assert_eq!((iv.lower_rank, iv.upper_rank), (2, 9));
        assert_eq!(iv.coverage, 0.978515625);
        assert_eq!(iv.coverage, 1.0 - 2.0 * 11.0 / 1024.0);
        assert_eq!((iv.lower, iv.upper), (0.01, 0.08));
        assert!(iv.target_reached);
        // A target equal to the coverage is reached (>=), not missed.
        assert_eq!(median_interval_rank(10, 0.978515625).unwrap(), (2, 0.978515625, true));
        assert_eq!(median_interval_rank(10, 0.9785157).unwrap().0, 1);
    }

    /// Independent reference: enumerate all 2^n equally likely patterns of
    /// "below / above the median" once, counting patterns by how many fall
    /// below. The interval [x_(k), x_(n-k+1)] covers the median exactly when
    /// at least k observations fall below it and at least k above.
    fn enumerated_by_below(n: u32) -> Vec<u64> {
        let mut by_below = vec![0u64; n as usize + 1];
        for pattern in 0u32..(1u32 << n) {
            by_below[pattern.count_ones() as usize] += 1;
        }
        by_below
    }

    fn enumerated_coverage(by_below: &[u64], k: u32) -> f64 {
        let n = (by_below.len() - 1) as u32;
        let covered: u64 =
            (0..=n).filter(|&below| below >= k && n - below >= k).map(|below| by_below[below as usize]).sum();
        covered as f64 / (1u64 << n) as f64
    }

    #[test]
    fn rank_choice_matches_enumeration_for_n_up_to_20() {
        for n in 1u32..=20 {
            let by_below = enumerated_by_below(n);
            for target in [0.8, 0.9, 0.95, 0.99] {
                let (k, coverage, reached) = median_interval_rank(n.into(), target).unwrap();
                assert_eq!(coverage, enumerated_coverage(&by_below, k as u32), "n={n} k={k}");
                // Largest k with coverage >= target, scanning the enumeration.
                let best = (1..=n.div_ceil(2)).filter(|&k| enumerated_coverage(&by_below, k) >= target).max();
                match best {
                    Some(b) => assert_eq!((k as u32, reached), (b, true), "n={n} t={target}"),
                    None => assert_eq!((k, reached), (1, false), "n={n} t={target}"),
                }
            }
        }
    }

    #[test]
    fn large_n_agrees_with_the_sign_test_tail() {
        // coverage(k) = 1 - 2 P(X <= k - 1) = 2 P(X >= k) - 1, the latter from
        // the sign test's tail code path.
        let n = 1000;
        let (k, coverage, reached) = median_interval_rank(n, 0.95).unwrap();
        assert!(reached && coverage >= 0.95);
        let tail = |k| crate::stats::sign_test_p_value(n, k).unwrap();
        assert!((coverage - (2.0 * tail(k) - 1.0)).abs() < 1e-14);
        assert!(2.0 * tail(k + 1) - 1.0 < 0.95, "k = {k} is not the largest");
        // Normal approximation: k near 500 - 1.96 * sqrt(1000) / 2 = 469.
        assert!((465..=472).contains(&k), "k = {k}");
    }

    #[test]
    fn small_n_returns_min_max_and_says_target_missed() {
        // n = 5: [min, max] covers 1 - 2/32 = 0.9375 < 0.95.
        let iv = median_interval(&[3.0, 1.0, 2.0, 5.0, 4.0], 0.95).unwrap();
        assert_eq!((iv.lower_rank, iv.upper_rank), (1, 5));
        assert_eq!((iv.lower, iv.upper), (1.0, 5.0));
        assert_eq!(iv.coverage, 0.9375);
        assert!(!iv.target_reached);
        // n = 6 reaches it with [min, max]: 1 - 2/64 = 0.96875.
        let iv = median_interval(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.95).unwrap();
        assert_eq!((iv.lower_rank, iv.coverage, iv.target_reached), (1, 0.96875, true));
        assert_eq!(median_interval_rank(6, 0.96875).unwrap(), (1, 0.96875, true));
        // n = 1: a single point, coverage 0.
        let iv = median_interval(&[0.5], 0.95).unwrap();
        assert_eq!((iv.lower, iv.upper, iv.coverage), (0.5, 0.5, 0.0));
        assert!(!iv.target_reached);
    }

    #[test]
    fn middle_order_statistic_is_never_chosen() {
        // The middle order statistic alone (k = (n + 1) / 2) has coverage 0,
        // so a positive target never selects it. n = 3: k = 1 covers 0.75,
        // k = 2 covers 0.
        assert_eq!(median_interval_rank(3, 0.7).unwrap(), (1, 0.75, true));
        assert_eq!(median_interval_rank(3, 0.8).unwrap(), (1, 0.75, false));
        // n = 7: k = 2 covers 1 - 16/128, k = 3 covers 1 - 58/128, k = 4 is 0.
        assert_eq!(median_interval_rank(7, 0.5).unwrap(), (3, 0.546875, true));
        assert_eq!(median_interval_rank(7, 0.01).unwrap(), (3, 0.546875, true));
        assert_eq!(median_interval_rank(7, 0.8).unwrap(), (2, 0.875, true));
    }

    #[test]
    fn median_and_screen() {
        assert_eq!(median(&[3.0, 1.0, 2.0]).unwrap(), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]).unwrap(), 2.5);
        assert_eq!(median(&[f64::MAX, f64::MAX]).unwrap(), f64::MAX);
        let s = median_screen(&[0.01; 10], 0.01).unwrap();
        assert!(s.passed, "reaching the threshold exactly passes");
        let s = median_screen(&[0.0, 0.0, 0.02, 0.02], 0.01).unwrap();
        assert_eq!(s.median, 0.01);
        assert!(s.passed);
        let s = median_screen(&[0.0, 0.0, 0.0199, 0.02], 0.01).unwrap();
        assert!(!s.passed, "median {} < 0.01", s.median);
        assert!(matches!(median(&[]), Err(StatsError::Empty { .. })));
        assert!(median_screen(&[0.1], f64::NAN).is_err());
    }

    #[test]
    fn interval_rejects_bad_input() {
        assert!(matches!(median_interval(&[], 0.95), Err(StatsError::Empty { .. })));
        assert!(median_interval(&[1.0, f64::NAN], 0.95).is_err());
        for bad in [0.0, 1.0, -0.5, f64::NAN] {
            assert!(median_interval(&[1.0, 2.0], bad).is_err());
        }
        assert!(matches!(median_interval_rank(100_001, 0.95), Err(StatsError::OutOfRange { .. })));
    }
}
