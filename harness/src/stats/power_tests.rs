//! Tests of `power`: the exact sign-test power against brute-force enumeration of
//! every 2^n win/loss pattern, monotonicity, and the seeded simulation of the whole
//! rule against the exact part where the two must agree (median threshold 0).

use super::effects::EffectKind;
use super::power::*;

/// Brute force: every pattern of n blocks, each a win with probability p. Returns
/// (k_crit, power): k_crit from counting patterns (P(Bin(n, 1/2) >= k) <= level),
/// power as the total probability of the patterns with at least k_crit wins.
fn enumerate(n: u32, level: f64, p: f64) -> (Option<u64>, f64) {
    let mut at_least = vec![0u64; n as usize + 2];
    for pattern in 0u32..(1u32 << n) {
        for k in 0..=pattern.count_ones() {
            at_least[k as usize] += 1;
        }
    }
    let k_crit = (0..=n).find(|&k| at_least[k as usize] as f64 / f64::from(1u32 << n) <= level);
    let Some(k) = k_crit else { return (None, 0.0) };
    let mut power = 0.0;
    for pattern in 0u32..(1u32 << n) {
        let w = pattern.count_ones();
        if w >= k {
            power += p.powi(w as i32) * (1.0 - p).powi((n - w) as i32);
        }
    }
    (Some(u64::from(k)), power)
}

#[test]
fn exact_power_equals_enumeration_for_small_n() {
    for n in 1u32..=12 {
        for level in [0.05, 0.025, 0.01, 0.05 / 3.0] {
            for p in [0.0, 0.3, 0.5, 0.62, 0.8, 0.97, 1.0] {
                let (k_want, power_want) = enumerate(n, level, p);
                assert_eq!(critical_wins(u64::from(n), level).unwrap(), k_want, "n={n} level={level}");
                let got = sign_test_power(u64::from(n), level, p).unwrap();
                assert!((got - power_want).abs() < 1e-12, "n={n} level={level} p={p}: {got} vs {power_want}");
            }
        }
    }
}

#[test]
fn critical_wins_known_values() {
    // Ten blocks: p(9 wins) = 11/1024 = 0.0107, p(8) = 56/1024 = 0.0547.
    assert_eq!(critical_wins(10, 0.05).unwrap(), Some(9));
    assert_eq!(critical_wins(10, 0.025).unwrap(), Some(9));
    assert_eq!(critical_wins(10, 0.01).unwrap(), Some(10));
    // Four blocks can never reach 0.05 (2^-4 = 0.0625).
    assert_eq!(critical_wins(4, 0.05).unwrap(), None);
    assert_eq!(sign_test_power(4, 0.05, 1.0).unwrap(), 0.0);
}

#[test]
fn win_probability_and_log_shift() {
    for kind in [EffectKind::Throughput, EffectKind::Latency] {
        assert_eq!(win_probability(kind, 0.0, 0.03).unwrap(), 0.5);
        for effect in [-0.2, 0.0, 0.01, 0.05, 0.3] {
            let back = effect_of_log(kind, log_shift(kind, effect).unwrap());
            assert!((back - effect).abs() < 1e-12, "{kind:?} {effect}: {back}");
        }
    }
    // A 5% throughput gain with sd 0.05: Phi(ln(1.05) / 0.05) = Phi(0.9758) = 0.8354.
    let p = win_probability(EffectKind::Throughput, 0.05, 0.05).unwrap();
    assert!((p - 0.835_42).abs() < 1e-4, "{p}");
    // A 5% latency reduction is a larger log shift: -ln(0.95) = 0.0513 > ln(1.05).
    assert!(win_probability(EffectKind::Latency, 0.05, 0.05).unwrap() > p);
    assert!(win_probability(EffectKind::Latency, 1.0, 0.05).is_err());
    assert!(win_probability(EffectKind::Throughput, 0.05, 0.0).is_err());
}

#[test]
fn exact_power_is_monotone_in_effect_blocks_and_noise() {
    let power = |effect: f64, n: u64, sd: f64| {
        sign_test_power(n, 0.025, win_probability(EffectKind::Throughput, effect, sd).unwrap()).unwrap()
    };
    let grid: Vec<f64> = (0..=60).map(|i| f64::from(i) * 0.005).collect();
    for w in grid.windows(2) {
        assert!(power(w[0], 10, 0.04) <= power(w[1], 10, 0.04), "effect {w:?}");
    }
    // Less noise, more power; more blocks, more power (n = 6 needs 6 wins, n = 12 needs 10).
    assert!(power(0.03, 10, 0.02) > power(0.03, 10, 0.04));
    assert!(power(0.03, 6, 0.04) < power(0.03, 12, 0.04));
    assert!(power(0.0, 10, 0.04) <= 0.025, "size under the null must not exceed the level");
}

#[test]
fn binomial_tail_edges() {
    assert_eq!(binomial_upper_tail(5, 0, 0.3).unwrap(), 1.0);
    assert_eq!(binomial_upper_tail(5, 6, 0.3).unwrap(), 0.0);
    assert_eq!(binomial_upper_tail(5, 1, 0.0).unwrap(), 0.0);
    assert_eq!(binomial_upper_tail(5, 5, 1.0).unwrap(), 1.0);
    assert!((binomial_upper_tail(5, 5, 0.5).unwrap() - 1.0 / 32.0).abs() < 1e-15);
    assert!(binomial_upper_tail(5, 1, 1.5).is_err());
}

fn family(m: usize, threshold: f64) -> Vec<SimHypothesis> {
    (0..m).map(|_| SimHypothesis { kind: EffectKind::Throughput, sd: 0.04, threshold }).collect()
}

#[test]
fn simulation_agrees_with_exact_power_when_the_median_threshold_is_zero() {
    // One hypothesis, threshold 0: the rule is the sign test at alpha (k_crit wins of
    // n > n/2 imply a positive median), so the simulation estimates the exact power.
    // Tolerance: 4 Monte-Carlo standard errors (seed fixed, so the test is deterministic).
    let (n, draws, alpha) = (10usize, 4000usize, 0.05);
    let noise = NoiseDraws::new(17, draws, 1, n);
    for effect in [0.0, 0.01, 0.03, 0.05, 0.08] {
        let sim = simulate_rule(&family(1, 0.0), 0, effect, 0.0, alpha, &noise).unwrap();
        let exact =
            sign_test_power(n as u64, alpha, win_probability(EffectKind::Throughput, effect, 0.04).unwrap()).unwrap();
        let tol = 4.0 * monte_carlo_se(exact, draws) + 1e-9;
        assert!((sim - exact).abs() <= tol, "effect {effect}: simulated {sim}, exact {exact}, tolerance {tol}");
    }
    // Two hypotheses, the other null: Holm gives the target between alpha/2 (when it
    // ranks first) and alpha (when the other is rejected first), so the simulation lies
    // between the two exact powers.
    let noise = NoiseDraws::new(18, draws, 2, n);
    for effect in [0.02, 0.05] {
        let sim = simulate_rule(&family(2, 0.0), 0, effect, 0.0, alpha, &noise).unwrap();
        let p = win_probability(EffectKind::Throughput, effect, 0.04).unwrap();
        let (lo, hi) =
            (sign_test_power(n as u64, alpha / 2.0, p).unwrap(), sign_test_power(n as u64, alpha, p).unwrap());
        let tol = 4.0 * monte_carlo_se(hi, draws) + 1e-9;
        assert!(sim >= lo - tol && sim <= hi + tol, "effect {effect}: {lo} <= {sim} <= {hi}");
    }
}

#[test]
fn simulation_is_seeded_monotone_and_the_median_screen_costs_power() {
    let noise = NoiseDraws::new(5, 2000, 2, 10);
    let curve = |threshold: f64| -> Vec<f64> {
        [0.0, 0.02, 0.04, 0.06, 0.1, 0.2]
            .iter()
            .map(|&e| simulate_rule(&family(2, threshold), 1, e, 0.0, 0.05, &noise).unwrap())
            .collect()
    };
    let screened = curve(0.05);
    for w in screened.windows(2) {
        assert!(w[0] <= w[1], "not monotone: {screened:?}");
    }
    let unscreened = curve(0.0);
    assert!(screened.iter().zip(&unscreened).all(|(s, u)| s <= u));
    // At an effect equal to the threshold, the median passes about half the time.
    assert!(screened[3] < unscreened[3], "{screened:?} vs {unscreened:?}");
    // Same seed, same answer; a different seed, a different sample.
    let again = NoiseDraws::new(5, 2000, 2, 10);
    assert_eq!(simulate_rule(&family(2, 0.05), 1, 0.06, 0.0, 0.05, &again).unwrap(), screened[3]);
    let other = NoiseDraws::new(6, 2000, 2, 10);
    assert_ne!(simulate_rule(&family(2, 0.05), 1, 0.04, 0.0, 0.05, &other).unwrap(), screened[2]);
    assert!(simulate_rule(&family(2, 0.05), 2, 0.04, 0.0, 0.05, &noise).is_err());
}

#[test]
fn smallest_effect_finds_the_crossing() {
    let power = |e: f64| sign_test_power(10, 0.025, win_probability(EffectKind::Throughput, e, 0.04).unwrap());
    let e80 = smallest_effect(power, 0.8, MAX_THROUGHPUT_EFFECT, 1e-6).unwrap().unwrap();
    assert!(power(e80).unwrap() >= 0.8);
    assert!(power(e80 - 2e-6).unwrap() < 0.8, "{e80}");
    let e95 = smallest_effect(power, 0.95, MAX_THROUGHPUT_EFFECT, 1e-6).unwrap().unwrap();
    assert!(e95 > e80);
    // Four blocks cannot reach 0.025 at any effect.
    let never = |e: f64| sign_test_power(4, 0.025, win_probability(EffectKind::Throughput, e, 0.04).unwrap());
    assert_eq!(smallest_effect(never, 0.8, MAX_THROUGHPUT_EFFECT, 1e-6).unwrap(), None);
}
