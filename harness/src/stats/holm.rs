//! Holm's step-down multiplicity correction over a whole hypothesis family.
//!
//! Owns the adjusted p-values and reject flags. With `m` hypotheses ordered by
//! raw p-value (ascending; equal p-values keep their input order, a stable
//! sort), the adjusted p-value of the `j`-th smallest (1-based) is
//! `max over i <= j of min(1, (m - i + 1) * p_(i))`, so adjusted p-values are
//! monotone in the raw ones, capped at 1, and equal raw p-values always get
//! equal adjusted p-values. A hypothesis is rejected exactly when its adjusted
//! p-value is `<= alpha`; this is Holm's step-down rule (reject `H_(j)` while
//! `p_(j) <= alpha / (m - j + 1)`, stop at the first failure) stated in the
//! form the report prints, so flags and printed numbers can never disagree.
//! Must not choose the family: the caller passes all of the plan's hypotheses.

use serde::{Deserialize, Serialize};

use super::error::{Result, StatsError, check_open_unit};

/// Holm result for one hypothesis, in the caller's input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HolmResult {
    /// The raw p-value as given.
    pub p_value: f64,
    /// Holm-adjusted p-value, in `[p_value, 1]`.
    pub adjusted_p: f64,
    /// `adjusted_p <= alpha`.
    pub reject: bool,
}

/// Holm step-down at level `alpha` (open interval (0, 1)). Results are in
/// input order. An empty family gives an empty result. Errors on a p-value
/// that is NaN or outside [0, 1].
pub fn holm(p_values: &[f64], alpha: f64) -> Result<Vec<HolmResult>> {
    check_open_unit("alpha", alpha)?;
    for &p in p_values {
        if !(0.0..=1.0).contains(&p) {
            return Err(StatsError::OutOfRange { name: "p-value", value: p, allowed: "[0, 1]" });
        }
    }
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    // Stable: ties keep input order. total_cmp is safe: NaN was rejected.
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));

    let mut adjusted = vec![0.0; m];
    let mut running_max: f64 = 0.0;
    for (rank, &idx) in order.iter().enumerate() {
        let multiplier = (m - rank) as f64;
        let candidate = (multiplier * p_values[idx]).min(1.0);
        running_max = running_max.max(candidate);
        adjusted[idx] = running_max;
    }
    Ok(p_values
        .iter()
        .zip(adjusted)
        .map(|(&p_value, adjusted_p)| HolmResult { p_value, adjusted_p, reject: adjusted_p <= alpha })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adjusted(p: &[f64], alpha: f64) -> Vec<f64> {
        holm(p, alpha).unwrap().iter().map(|r| r.adjusted_p).collect()
    }

    fn rejects(p: &[f64], alpha: f64) -> Vec<bool> {
        holm(p, alpha).unwrap().iter().map(|r| r.reject).collect()
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn textbook_four_hypotheses() {
        let p = [0.01, 0.04, 0.03, 0.005];
        assert_close(&adjusted(&p, 0.05), &[0.03, 0.06, 0.06, 0.02]);
        assert_eq!(rejects(&p, 0.05), [true, false, false, true]);
        // Step-down stops at the first failure: 0.03 > 0.05/2, so 0.04 is not
        // rejected even though 0.04 <= 0.05/1.
        assert!(!rejects(&p, 0.05)[1]);
    }

    #[test]
    fn tied_p_values_get_equal_adjusted_values_in_any_order() {
        // Sorted: 0.01 (x3 = 0.03), 0.01 (x2 = 0.02 -> running max 0.03), 0.04.
        assert_close(&adjusted(&[0.01, 0.01, 0.04], 0.05), &[0.03, 0.03, 0.04]);
        assert_close(&adjusted(&[0.04, 0.01, 0.01], 0.05), &[0.04, 0.03, 0.03]);
        assert_close(&adjusted(&[0.01, 0.04, 0.01], 0.05), &[0.03, 0.04, 0.03]);
        // All tied: every adjusted value is m * p.
        assert_close(&adjusted(&[0.02; 4], 0.05), &[0.08; 4]);
        assert_eq!(rejects(&[0.02; 4], 0.1), [true; 4]);
        assert_eq!(rejects(&[0.02; 4], 0.05), [false; 4]);
    }

    #[test]
    fn capped_at_one_and_monotone() {
        // Sorted: 0.001 (x4), 0.3 (x3 = 0.9), 0.6 (x2 = 1.2 -> 1), 0.9 (x1).
        let p = [0.6, 0.9, 0.001, 0.3];
        let a = adjusted(&p, 0.05);
        assert_close(&a, &[1.0, 1.0, 0.004, 0.9]);
        let mut pairs: Vec<(f64, f64)> = p.iter().copied().zip(a).collect();
        pairs.sort_by(|x, y| x.0.total_cmp(&y.0));
        for w in pairs.windows(2) {
            assert!(w[0].1 <= w[1].1, "not monotone: {pairs:?}");
        }
        for (raw, adj) in &pairs {
            assert!(adj >= raw && *adj <= 1.0);
        }
    }

    /// Reference: the literal step-down procedure with exact rational p-values
    /// (p = num / 1000, alpha = 50 / 1000), so no floating-point boundary case
    /// can make the two disagree by accident.
    fn step_down_reference(nums: &[u32], alpha_num: u32) -> Vec<bool> {
        let m = nums.len() as u32;
        let mut order: Vec<usize> = (0..nums.len()).collect();
        order.sort_by_key(|&i| nums[i]);
        let mut reject = vec![false; nums.len()];
        for (rank, &idx) in order.iter().enumerate() {
            // p <= alpha / (m - rank)  <=>  p * (m - rank) <= alpha
            if nums[idx] * (m - rank as u32) <= alpha_num {
                reject[idx] = true;
            } else {
                break;
            }
        }
        reject
    }

    #[test]
    fn flags_match_literal_step_down_on_a_grid() {
        // Every family of size 3 over a grid of p-values (7i + 2)/1000 that
        // never sits exactly on a boundary 50/k for k <= 3.
        let grid: Vec<u32> = (0..=20).map(|i| i * 7 + 2).collect();
        for &a in &grid {
            for &b in &grid {
                for &c in &grid {
                    let nums = [a, b, c];
                    let p: Vec<f64> = nums.iter().map(|&x| f64::from(x) / 1000.0).collect();
                    assert_eq!(rejects(&p, 0.05), step_down_reference(&nums, 50), "p = {p:?}");
                }
            }
        }
    }

    #[test]
    fn single_hypothesis_is_unadjusted() {
        assert_eq!(adjusted(&[0.0107421875], 0.05), [0.0107421875]);
        assert_eq!(rejects(&[0.05], 0.05), [true]);
        assert_eq!(rejects(&[0.0500001], 0.05), [false]);
    }

    #[test]
    fn empty_family_and_bad_input() {
        assert_eq!(holm(&[], 0.05).unwrap(), vec![]);
        assert!(matches!(holm(&[0.1, f64::NAN], 0.05), Err(StatsError::OutOfRange { .. })));
        assert!(holm(&[1.5], 0.05).is_err());
        assert!(holm(&[-0.1], 0.05).is_err());
        assert!(holm(&[0.1], 0.0).is_err());
        assert!(holm(&[0.1], 1.0).is_err());
        assert!(holm(&[0.1], f64::NAN).is_err());
    }
}
