//! Replay's own statistics, from the definitions of DESIGN section 6, written
//! without calling `stats`: paired effects (throughput candidate / control - 1,
//! latency 1 - candidate / control), the exact one-sided sign test P(Bin(n, 1/2) >=
//! wins) with ties as non-wins, Holm's step-down adjusted p-values (running maximum
//! of min(1, (m - i + 1) p_(i)), stable order), the sample median (mean of the two
//! middle values for even n), and the order-statistic median interval [x_(k),
//! x_(n-k+1)] with the largest k whose exact coverage 1 - 2 P(Bin(n, 1/2) <= k - 1)
//! reaches the target (k = 1 with `target_reached = false` when none does). Binomial
//! sums are exact integers up to n = 120 blocks and rounded once; beyond that they
//! are summed in floating point (compared within tolerance). Must not read files.

/// Paired effect of one block; `Err` when the control has no ratio.
pub fn effect(throughput: bool, control: f64, candidate: f64) -> Result<f64, String> {
    if !(control.is_finite() && control > 0.0) {
        return Err(format!("control value {control} has no ratio"));
    }
    if !(candidate.is_finite() && candidate >= 0.0) {
        return Err(format!("candidate value {candidate} is not a measure"));
    }
    Ok(if throughput { candidate / control - 1.0 } else { 1.0 - candidate / control })
}

const EXACT_N: u64 = 120;

fn choose_row(n: u64) -> Vec<u128> {
    let mut row = vec![1u128; n as usize + 1];
    for k in 1..=n as usize {
        row[k] = row[k - 1] * (n as u128 - k as u128 + 1) / k as u128;
    }
    row
}

/// `sum_{k in ks} C(n, k) / 2^n`, exact for n <= 120 (rounded once).
pub fn binom_half_sum(n: u64, ks: std::ops::RangeInclusive<u64>) -> f64 {
    if ks.is_empty() {
        return 0.0;
    }
    if n <= EXACT_N {
        let row = choose_row(n);
        let total: u128 = ks.map(|k| row[k as usize]).sum();
        return total as f64 / 2f64.powi(n as i32);
    }
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_c = 0.0; // ln C(n, 0)
    let mut sum = 0.0;
    for k in 0..=n {
        if k > 0 {
            ln_c += ((n - k + 1) as f64).ln() - (k as f64).ln();
        }
        if ks.contains(&k) {
            sum += (ln_c + ln_half_n).exp();
        }
    }
    sum.min(1.0)
}

/// One-sided sign test: (n, wins, ties, losses, p).
pub fn sign_test(effects: &[f64]) -> (u64, u64, u64, u64, f64) {
    let n = effects.len() as u64;
    let wins = effects.iter().filter(|&&e| e > 0.0).count() as u64;
    let ties = effects.iter().filter(|&&e| e == 0.0).count() as u64;
    (n, wins, ties, n - wins - ties, binom_half_sum(n, wins..=n))
}

/// Holm-adjusted p-values and reject flags, in input order.
pub fn holm(p: &[f64], alpha: f64) -> Vec<(f64, bool)> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![(1.0, false); m];
    let mut running: f64 = 0.0;
    for (i, &idx) in order.iter().enumerate() {
        running = running.max(((m - i) as f64 * p[idx]).min(1.0));
        out[idx] = (running, running <= alpha);
    }
    out
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// Sample median (`None` for no values).
pub fn median(values: &[f64]) -> Option<f64> {
    let s = sorted(values);
    let n = s.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(s[n / 2]),
        n => Some(s[n / 2 - 1] / 2.0 + s[n / 2] / 2.0),
    }
}

/// The median interval of `effects` at `target` coverage.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub n: u64,
    pub lower_rank: u64,
    pub upper_rank: u64,
    pub lower: f64,
    pub upper: f64,
    pub coverage: f64,
    pub target_reached: bool,
}

/// `None` for no effects.
pub fn interval(effects: &[f64], target: f64) -> Option<Interval> {
    let n = effects.len() as u64;
    if n == 0 {
        return None;
    }
    let coverage = |k: u64| 1.0 - 2.0 * binom_half_sum(n, 0..=k - 1);
    let (mut k, mut cov) = (1, coverage(1));
    let reached = cov >= target;
    if reached {
        let mut next = 2;
        while next <= n - next + 1 {
            let c = coverage(next);
            if c < target {
                break;
            }
            (k, cov) = (next, c);
            next += 1;
        }
    }
    let s = sorted(effects);
    let upper_rank = n - k + 1;
    Some(Interval {
        n,
        lower_rank: k,
        upper_rank,
        lower: s[k as usize - 1],
        upper: s[upper_rank as usize - 1],
        coverage: cov,
        target_reached: reached,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_values() {
        // DESIGN 6: with 10 blocks the 2nd and 9th ordered effects, 1 - 2 * 11/1024.
        let e: Vec<f64> = (1..=10).map(f64::from).collect();
        let iv = interval(&e, 0.95).unwrap();
        assert_eq!((iv.lower_rank, iv.upper_rank, iv.lower, iv.upper), (2, 9, 2.0, 9.0));
        assert_eq!(iv.coverage, 1.0 - 2.0 * 11.0 / 1024.0);
        assert_eq!(sign_test(&e).4, 1.0 / 1024.0);
        let nine = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, -0.1];
        assert_eq!(sign_test(&nine).4, 11.0 / 1024.0);
        // Ties are non-wins that stay in n.
        assert_eq!(sign_test(&[0.0, 0.1]), (2, 1, 1, 0, 0.75));
        let small = interval(&[1.0, 2.0, 3.0], 0.95).unwrap();
        assert_eq!((small.coverage, small.target_reached), (0.75, false));
    }

    #[test]
    fn holm_by_hand() {
        let h = holm(&[0.01, 0.04, 0.03], 0.05);
        assert_eq!(h[0], (0.03, true));
        assert!((h[2].0 - 0.06).abs() < 1e-15 && !h[2].1);
        assert!((h[1].0 - 0.06).abs() < 1e-15);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), Some(2.5));
    }

    #[test]
    fn exact_and_float_binomials_agree() {
        let a = binom_half_sum(120, 70..=120);
        let mut ln_c = 0.0;
        let mut sum = 0.0;
        for k in 0..=120u64 {
            if k > 0 {
                ln_c += ((120 - k + 1) as f64).ln() - (k as f64).ln();
            }
            if k >= 70 {
                sum += (ln_c - 120.0 * std::f64::consts::LN_2).exp();
            }
        }
        assert!((a - sum).abs() < 1e-12 * a.max(1e-300) + 1e-15, "{a} {sum}");
    }
}
