//! Replay's own power model, written without calling `stats` or `power` (the
//! model of docs/plan.md, "Power"): per block the oriented log-ratio is
//! shift + sd * z with z standard normal, shift = ln(1 + effect) for throughput and
//! -ln(1 - effect) for latency; P(win) = Phi(shift / sd); the exact part is the
//! one-sided sign test alone at alpha / m, power = P(Bin(n, P(win)) >= k_crit);
//! the simulated part draws `draws x family x blocks` standard normals from
//! Xoshiro256++ seeded with the seed (in that order), applies the sign test to every
//! member, Holm over the family at alpha (the others null) and the median screen to
//! the target; the smallest effect reaching a probability is found by bisection on
//! [0, max] (tolerance 1e-5 exact, 1e-4 simulated; the bracket's upper end).
//! Must not read files.

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, StandardNormal};
use statrs::distribution::{ContinuousCDF, Normal};

use super::decide::{binom_half_sum, holm, median};

/// Largest throughput effect searched (+1000%) and largest latency effect (99.9%).
const MAX_THROUGHPUT: f64 = 10.0;
const MAX_LATENCY: f64 = 0.999;
const EXACT_TOLERANCE: f64 = 1e-5;
const SIMULATED_TOLERANCE: f64 = 1e-4;

/// One member of the family.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    pub throughput: bool,
    pub sd: f64,
    pub threshold: f64,
}

fn shift(throughput: bool, effect: f64) -> f64 {
    if throughput { effect.ln_1p() } else { -(-effect).ln_1p() }
}

fn effect_of(throughput: bool, r: f64) -> f64 {
    if throughput { r.exp_m1() } else { -(-r).exp_m1() }
}

fn max_effect(throughput: bool) -> f64 {
    if throughput { MAX_THROUGHPUT } else { MAX_LATENCY }
}

/// The fewest wins of `n` with P(Bin(n, 1/2) >= k) <= `level`.
pub fn critical_wins(n: u64, level: f64) -> Option<u64> {
    (0..=n).find(|&k| binom_half_sum(n, k..=n) <= level)
}

/// P(Bin(n, p) >= k), term by term from the binomial coefficients.
fn upper_tail(n: u64, k: u64, p: f64) -> f64 {
    let mut c = 1.0f64; // C(n, 0)
    let mut sum = 0.0;
    for j in 0..=n {
        if j > 0 {
            c = c * (n - j + 1) as f64 / j as f64;
        }
        if j >= k {
            sum += c * p.powi(j as i32) * (1.0 - p).powi((n - j) as i32);
        }
    }
    sum.min(1.0)
}

fn exact_power(m: &Member, n: u64, level: f64, effect: f64) -> f64 {
    let p_win = Normal::standard().cdf(shift(m.throughput, effect) / m.sd);
    critical_wins(n, level).map_or(0.0, |k| upper_tail(n, k, p_win))
}

/// The simulation's standard normals, `draws x family x blocks`.
pub struct Draws {
    draws: usize,
    family: usize,
    blocks: usize,
    z: Vec<f64>,
}

impl Draws {
    pub fn new(seed: u64, draws: usize, family: usize, blocks: usize) -> Draws {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let z = (0..draws * family * blocks).map(|_| StandardNormal.sample(&mut rng)).collect();
        Draws { draws, family, blocks, z }
    }

    fn row(&self, draw: usize, member: usize) -> &[f64] {
        let start = (draw * self.family + member) * self.blocks;
        &self.z[start..start + self.blocks]
    }
}

/// Simulated P(the target is supported) at `effect`, the others null.
fn simulated_power(family: &[Member], target: usize, effect: f64, alpha: f64, d: &Draws) -> f64 {
    let n = d.blocks as u64;
    let p_of: Vec<f64> = (0..=n).map(|k| binom_half_sum(n, k..=n)).collect();
    let shifts: Vec<f64> =
        family.iter().enumerate().map(|(i, m)| shift(m.throughput, if i == target { effect } else { 0.0 })).collect();
    let t = family[target];
    let mut supported = 0usize;
    for draw in 0..d.draws {
        let p: Vec<f64> = family
            .iter()
            .enumerate()
            .map(|(i, m)| p_of[d.row(draw, i).iter().filter(|&&z| shifts[i] + m.sd * z > 0.0).count()])
            .collect();
        if !holm(&p, alpha)[target].1 {
            continue;
        }
        let effects: Vec<f64> =
            d.row(draw, target).iter().map(|z| effect_of(t.throughput, shifts[target] + t.sd * z)).collect();
        if median(&effects).is_some_and(|m| m >= t.threshold) {
            supported += 1;
        }
    }
    supported as f64 / d.draws as f64
}

fn smallest(power: impl Fn(f64) -> f64, p: f64, max: f64, tolerance: f64) -> Option<f64> {
    if power(max) < p {
        return None;
    }
    if power(0.0) >= p {
        return Some(0.0);
    }
    let (mut lo, mut hi) = (0.0, max);
    while hi - lo > tolerance {
        let mid = lo + (hi - lo) / 2.0;
        if power(mid) >= p {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// The smallest effect of member `target` supported with probability `p` when its SD
/// is `sd`: (sign test alone at alpha / m, exact; the whole rule, simulated).
pub fn detectable(
    family: &[Member],
    target: usize,
    sd: f64,
    p: f64,
    alpha: f64,
    d: &Draws,
) -> (Option<f64>, Option<f64>) {
    let mut members = family.to_vec();
    members[target].sd = sd;
    let m = members[target];
    let (n, level) = (d.blocks as u64, alpha / family.len() as f64);
    let max = max_effect(m.throughput);
    let exact = smallest(|e| exact_power(&m, n, level, e), p, max, EXACT_TOLERANCE);
    let simulated = smallest(|e| simulated_power(&members, target, e, alpha, d), p, max, SIMULATED_TOLERANCE);
    (exact, simulated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{EffectKind, NoiseDraws, SimHypothesis, sign_test_power, simulate_rule, win_probability};

    /// Replay's model agrees with the analysis path's (`stats::power`) on the same
    /// inputs: exact power within rounding, the simulated probability exactly.
    #[test]
    fn replay_model_matches_the_analysis_path() {
        let family = [
            Member { throughput: true, sd: 0.03, threshold: 0.01 },
            Member { throughput: false, sd: 0.05, threshold: 0.05 },
        ];
        let sims: Vec<SimHypothesis> = family
            .iter()
            .map(|m| SimHypothesis {
                kind: if m.throughput { EffectKind::Throughput } else { EffectKind::Latency },
                sd: m.sd,
                threshold: m.threshold,
            })
            .collect();
        let d = Draws::new(7, 2000, 2, 9);
        let noise = NoiseDraws::new(7, 2000, 2, 9);
        for (i, m) in family.iter().enumerate() {
            for effect in [0.0, 0.02, 0.05, 0.1] {
                let kind = sims[i].kind;
                let theirs = sign_test_power(9, 0.025, win_probability(kind, effect, m.sd).unwrap()).unwrap();
                let mine = exact_power(m, 9, 0.025, effect);
                assert!((theirs - mine).abs() < 1e-12, "{i} {effect}: {theirs} vs {mine}");
                let theirs = simulate_rule(&sims, i, effect, 0.0, 0.05, &noise).unwrap();
                assert_eq!(theirs, simulated_power(&family, i, effect, 0.05, &d), "{i} {effect}");
            }
        }
        assert_eq!(critical_wins(9, 0.025), crate::stats::critical_wins(9, 0.025).unwrap());
        assert_eq!(critical_wins(4, 0.05), None);
    }
}
