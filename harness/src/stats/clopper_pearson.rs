//! One-sided Clopper-Pearson (exact binomial) upper confidence bound.
//!
//! Owns `clopper_pearson_upper`: for `x` events in `n` trials and confidence
//! `c`, the upper bound is the `c` quantile of Beta(x + 1, n - x), i.e. the
//! `u` with `P(Binomial(n, u) <= x) = 1 - c`; `x = n` gives 1. The quality
//! gates use it on losses / N (GSM8K: 12 losses of 1,319 give 1.470%).
//!
//! statrs's `Beta::inverse_cdf` gives the starting value; the result is then
//! polished by bisection on the regularized incomplete beta function
//! `I_u(x + 1, n - x)` (statrs `checked_beta_reg`) until the bracket is a few
//! ulps wide, so the bound does not depend on the accuracy of statrs's
//! Newton iteration; what remains is the accuracy of `beta_reg` itself (about
//! 1e-12 relative for n in the thousands, far below the 1e-7 the gates need).
//! Must not apply a gate limit: `quality` compares.

use statrs::distribution::{Beta, ContinuousCDF};
use statrs::function::beta::checked_beta_reg;

use super::error::{Result, StatsError, check_open_unit};

/// One-sided upper Clopper-Pearson bound on the event probability, at the
/// given confidence (open interval (0, 1), usually 0.95). Errors when
/// `n == 0` or `x > n`.
pub fn clopper_pearson_upper(x: u64, n: u64, confidence: f64) -> Result<f64> {
    check_open_unit("confidence", confidence)?;
    if n == 0 {
        return Err(StatsError::Empty { what: "Clopper-Pearson trials" });
    }
    if x > n {
        return Err(StatsError::CountExceedsTrials { count: x, trials: n });
    }
    if x == n {
        return Ok(1.0);
    }
    let (a, b) = ((x + 1) as f64, (n - x) as f64);
    let cdf = |u: f64| checked_beta_reg(a, b, u).map_err(|_| StatsError::Numerical("regularized incomplete beta"));

    // Starting value from statrs (never trusted blindly).
    let start = Beta::new(a, b)
        .ok()
        .and_then(|d| d.try_inverse_cdf(confidence).ok())
        .filter(|u| u.is_finite() && *u > 0.0 && *u < 1.0);

    // Bracket [lo, hi] with cdf(lo) < confidence <= cdf(hi); I_u is
    // increasing in u. Try a tight bracket around the start, else [0, 1].
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    if let Some(u) = start {
        let width = u * 1e-6;
        let (l, h) = ((u - width).max(0.0), (u + width).min(1.0));
        if cdf(l)? < confidence && cdf(h)? >= confidence {
            (lo, hi) = (l, h);
        }
    }
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if cdf(mid)? >= confidence {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // hi is the smallest representable u found with I_u >= confidence.
    if hi > 0.0 && hi <= 1.0 { Ok(hi) } else { Err(StatsError::Numerical("Clopper-Pearson bisection")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Independent check: P(Binomial(n, u) <= x) by direct summation in log
    /// space (no incomplete beta involved).
    fn binomial_cdf(x: u64, n: u64, u: f64) -> f64 {
        let mut ln_c = 0.0; // ln C(n, 0)
        let mut total = 0.0;
        for k in 0..=x {
            if k > 0 {
                ln_c += ((n - k + 1) as f64).ln() - (k as f64).ln();
            }
            total += (ln_c + k as f64 * u.ln() + (n - k) as f64 * (1.0 - u).ln()).exp();
        }
        total
    }

    #[test]
    fn gsm8k_reference_figures() {
        // DESIGN section 7, to 0.001 percentage points.
        for (losses, percent) in [(12, 1.470), (11, 1.377), (8, 1.092)] {
            let u = clopper_pearson_upper(losses, 1319, 0.95).unwrap();
            assert!((u * 100.0 - percent).abs() < 0.0005, "{losses}/1319: {}%", u * 100.0);
        }
    }

    #[test]
    fn matches_high_precision_reference() {
        // Solved offline by bisection on the exact binomial CDF in 60-digit
        // decimal arithmetic (Python `decimal` + `math.comb`). Agreement is
        // limited by statrs's incomplete beta (ln-gamma prefactor), about
        // 1e-12 relative here; the gate needs 1e-7 absolute.
        let reference = [(12, 0.01469879111861963), (11, 0.013766310977101441), (8, 0.010916944524914812)];
        for (x, want) in reference {
            let u = clopper_pearson_upper(x, 1319, 0.95).unwrap();
            assert!((u - want).abs() < 1e-11 * want, "x={x}: {u:e} vs {want:e}");
        }
    }

    #[test]
    fn bound_solves_the_binomial_tail_equation() {
        for &(x, n) in &[(0, 1), (0, 10), (3, 10), (12, 1319), (50, 100), (99, 100), (1, 5000)] {
            for conf in [0.9, 0.95, 0.99] {
                let u = clopper_pearson_upper(x, n, conf).unwrap();
                let tail = binomial_cdf(x, n, u);
                assert!((tail - (1.0 - conf)).abs() < 1e-10, "x={x} n={n} conf={conf}: P(X<=x | u={u}) = {tail}");
            }
        }
    }

    #[test]
    fn zero_events_has_closed_form() {
        // P(X <= 0) = (1 - u)^n = 1 - c  =>  u = 1 - (1 - c)^(1/n).
        for n in [1u64, 2, 10, 100, 1319] {
            let u = clopper_pearson_upper(0, n, 0.95).unwrap();
            let want = -(0.05f64.ln() / n as f64).exp_m1();
            assert!((u - want).abs() < 1e-12 * want, "n={n}: {u} vs {want}");
        }
    }

    #[test]
    fn edge_cases_and_monotonicity() {
        assert_eq!(clopper_pearson_upper(5, 5, 0.95).unwrap(), 1.0);
        let mut prev = 0.0;
        for x in 0..=20 {
            let u = clopper_pearson_upper(x, 1319, 0.95).unwrap();
            assert!(u > prev && u > x as f64 / 1319.0, "x={x}");
            prev = u;
        }
        assert!(clopper_pearson_upper(12, 1319, 0.99).unwrap() > clopper_pearson_upper(12, 1319, 0.95).unwrap());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(clopper_pearson_upper(0, 0, 0.95), Err(StatsError::Empty { .. })));
        assert_eq!(clopper_pearson_upper(6, 5, 0.95), Err(StatsError::CountExceedsTrials { count: 6, trials: 5 }));
        for bad in [0.0, 1.0, 1.5, f64::NAN] {
            assert!(matches!(clopper_pearson_upper(1, 5, bad), Err(StatsError::OutOfRange { .. })));
        }
    }
}
