//! Exact one-sided sign test over paired block effects.
//!
//! Owns the win/tie/loss count and the p-value `P(Binomial(n, 1/2) >= wins)`,
//! where `n` counts every block and a win is a block whose effect is strictly
//! positive. Ties (an effect of exactly zero) are non-wins and stay in `n`: they
//! are never dropped. The p-value is computed exactly (see `exact`), never by a
//! normal approximation. Must not decide anything: `decision` does.

use serde::{Deserialize, Serialize};

use super::error::{Result, StatsError, check_finite};
use super::exact::{check_exact_n, upper_tail_half};

/// Outcome of the sign test on one hypothesis's block effects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignTest {
    /// Number of blocks (all of them, ties included).
    pub n: u64,
    /// Blocks with effect > 0.
    pub wins: u64,
    /// Blocks with effect == 0 (counted as non-wins).
    pub ties: u64,
    /// Blocks with effect < 0.
    pub losses: u64,
    /// One-sided exact p-value, `P(Binomial(n, 1/2) >= wins)`.
    pub p_value: f64,
}

/// Exact one-sided p-value `P(Binomial(n, 1/2) >= wins)`.
///
/// `n = 0, wins = 0` gives 1. Errors when `wins > n` or `n > MAX_EXACT_N`.
pub fn sign_test_p_value(n: u64, wins: u64) -> Result<f64> {
    check_exact_n(n)?;
    if wins > n {
        return Err(StatsError::CountExceedsTrials { count: wins, trials: n });
    }
    Ok(upper_tail_half(n, wins))
}

/// Counts wins (> 0), ties (== 0) and losses (< 0) among the block effects and
/// computes the exact one-sided p-value. Errors on an empty slice or any
/// non-finite effect.
pub fn sign_test(effects: &[f64]) -> Result<SignTest> {
    check_finite("block effects", effects)?;
    let wins = effects.iter().filter(|&&e| e > 0.0).count() as u64;
    let ties = effects.iter().filter(|&&e| e == 0.0).count() as u64;
    let n = effects.len() as u64;
    let losses = n - wins - ties;
    Ok(SignTest { n, wins, ties, losses, p_value: sign_test_p_value(n, wins)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force: enumerate all 2^n equally likely sign patterns and count
    /// those with at least `w` positive signs. Independent of `exact`.
    fn enumerated_counts(n: u32) -> Vec<u64> {
        let mut by_wins = vec![0u64; n as usize + 1];
        for pattern in 0u32..(1u32 << n) {
            by_wins[pattern.count_ones() as usize] += 1;
        }
        by_wins
    }

    #[test]
    fn p_values_equal_enumerated_tails_for_every_n_up_to_20() {
        for n in 0u32..=20 {
            let by_wins = enumerated_counts(n);
            for w in 0..=n {
                let at_least: u64 = by_wins[w as usize..].iter().sum();
                // Both numerator (< 2^21) and the power-of-two division are
                // exact in f64, so equality must be exact.
                let want = at_least as f64 / (1u64 << n) as f64;
                let got = sign_test_p_value(u64::from(n), u64::from(w)).unwrap();
                assert_eq!(got, want, "n={n} wins={w}");
            }
        }
    }

    #[test]
    fn sign_test_on_effects_matches_enumeration() {
        // Build effect vectors with every (wins, ties, losses) split for n <= 12.
        for n in 1u32..=12 {
            let by_wins = enumerated_counts(n);
            for wins in 0..=n {
                for ties in 0..=(n - wins) {
                    let losses = n - wins - ties;
                    let mut e = vec![0.03; wins as usize];
                    e.extend(std::iter::repeat_n(0.0, ties as usize));
                    e.extend(std::iter::repeat_n(-0.02, losses as usize));
                    let t = sign_test(&e).unwrap();
                    let at_least: u64 = by_wins[wins as usize..].iter().sum();
                    assert_eq!((t.n, t.wins, t.ties, t.losses), (n.into(), wins.into(), ties.into(), losses.into()));
                    assert_eq!(t.p_value, at_least as f64 / (1u64 << n) as f64);
                }
            }
        }
    }

    #[test]
    fn known_values_for_ten_blocks() {
        assert_eq!(sign_test_p_value(10, 10).unwrap(), 1.0 / 1024.0);
        assert_eq!(sign_test_p_value(10, 9).unwrap(), 11.0 / 1024.0);
        assert_eq!(sign_test_p_value(10, 8).unwrap(), 56.0 / 1024.0);
        assert_eq!(sign_test_p_value(10, 0).unwrap(), 1.0);
    }

    #[test]
    fn ties_are_non_wins_and_stay_in_n() {
        let mut e = vec![0.05; 9];
        e.push(0.0);
        let t = sign_test(&e).unwrap();
        assert_eq!((t.n, t.wins, t.ties, t.losses), (10, 9, 1, 0));
        assert_eq!(t.p_value, 11.0 / 1024.0);
        // Negative zero is a tie too.
        let t = sign_test(&[0.1, -0.0]).unwrap();
        assert_eq!((t.wins, t.ties, t.losses), (1, 1, 0));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(sign_test(&[]), Err(StatsError::Empty { what: "block effects" }));
        assert!(matches!(sign_test(&[0.1, f64::NAN]), Err(StatsError::NonFinite { index: 1, .. })));
        assert!(matches!(sign_test(&[f64::INFINITY]), Err(StatsError::NonFinite { index: 0, .. })));
        assert!(matches!(sign_test_p_value(100_001, 1), Err(StatsError::OutOfRange { .. })));
        assert_eq!(sign_test_p_value(100_000, 0).unwrap(), 1.0);
        assert_eq!(sign_test_p_value(3, 4), Err(StatsError::CountExceedsTrials { count: 4, trials: 3 }));
    }
}
