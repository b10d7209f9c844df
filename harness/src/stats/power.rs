//! Power of the plan's decision rule: how likely a true effect is to be supported.
//!
//! Model (stated in every output by the caller): in each block the oriented log-ratio
//! `r` (throughput: ln(candidate / control); latency: ln(control / candidate), so
//! positive is better) is `mu + noise`, the noise i.i.d. normal across blocks with
//! standard deviation `sd`, and the true effect is additive on the log scale:
//! throughput `mu = ln(1 + effect)`, latency `mu = -ln(1 - effect)`, so the median
//! block effect (`e = exp(r) - 1`, resp. `e = 1 - exp(-r)`) is `effect`. `sd` is the
//! spread of the paired log-ratio itself, i.e. of the difference of two arms in one
//! block (what an A/A study measures), not of one arm: it is never scaled by sqrt(2).
//!
//! Owns:
//! - [`win_probability`]: P(e > 0) = Phi(mu / sd);
//! - [`critical_wins`] and [`sign_test_power`]: the exact one-sided sign test at one
//!   level, P(Binomial(n, p) >= k_crit) where k_crit is the fewest wins whose exact
//!   p-value P(Binomial(n, 1/2) >= k) is `<= level`;
//! - [`simulate_rule`]: the whole rule (sign test, Holm over the family at alpha,
//!   median screen) by seeded simulation, with common random numbers across effects
//!   so the simulated curve is monotone in the effect;
//! - [`smallest_effect`] (bisection on a monotone power function).
//!
//! Must not read files or the plan: callers pass the family's noise and thresholds.

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, StandardNormal};
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::factorial::ln_binomial;

use super::effects::EffectKind;
use super::error::{Result, StatsError};
use super::exact::check_exact_n;
use super::holm::holm;
use super::median_interval::median;
use super::sign_test::sign_test_p_value;

/// The largest effect [`smallest_effect`] searches for throughput (+1000%).
pub const MAX_THROUGHPUT_EFFECT: f64 = 10.0;
/// The largest latency effect searched (a 99.9% reduction).
pub const MAX_LATENCY_EFFECT: f64 = 0.999;

/// The log-scale shift `mu` of a true effect (see the module doc).
pub fn log_shift(kind: EffectKind, effect: f64) -> Result<f64> {
    let ok = match kind {
        EffectKind::Throughput => effect > -1.0 && effect.is_finite(),
        EffectKind::Latency => effect < 1.0 && effect.is_finite(),
    };
    if !ok {
        return Err(StatsError::OutOfRange {
            name: "effect",
            value: effect,
            allowed: "(-1, inf) for throughput, (-inf, 1) for latency",
        });
    }
    Ok(match kind {
        EffectKind::Throughput => effect.ln_1p(),
        EffectKind::Latency => -(-effect).ln_1p(),
    })
}

/// The block effect of an oriented log-ratio `r`.
pub fn effect_of_log(kind: EffectKind, r: f64) -> f64 {
    match kind {
        EffectKind::Throughput => r.exp_m1(),
        EffectKind::Latency => -(-r).exp_m1(),
    }
}

fn check_sd(sd: f64) -> Result<()> {
    if sd.is_finite() && sd > 0.0 {
        Ok(())
    } else {
        Err(StatsError::OutOfRange { name: "noise sd", value: sd, allowed: "(0, inf)" })
    }
}

/// P(a block is a win) = Phi(mu / sd) for a true `effect`.
pub fn win_probability(kind: EffectKind, effect: f64, sd: f64) -> Result<f64> {
    check_sd(sd)?;
    Ok(Normal::standard().cdf(log_shift(kind, effect)? / sd))
}

/// The fewest wins of `n` whose exact sign-test p-value is `<= level`; `None` when
/// even `n` wins (p = 2^-n) do not reach it.
pub fn critical_wins(n: u64, level: f64) -> Result<Option<u64>> {
    check_exact_n(n)?;
    for k in 0..=n {
        if sign_test_p_value(n, k)? <= level {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// P(Binomial(n, p) >= k), summed in log space term by term.
pub fn binomial_upper_tail(n: u64, k: u64, p: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&p) {
        return Err(StatsError::OutOfRange { name: "win probability", value: p, allowed: "[0, 1]" });
    }
    if k == 0 {
        return Ok(1.0);
    }
    if k > n || p == 0.0 {
        return Ok(0.0);
    }
    if p == 1.0 {
        return Ok(1.0);
    }
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    let sum: f64 = (k..=n).map(|j| (ln_binomial(n, j) + j as f64 * lp + (n - j) as f64 * lq).exp()).sum();
    Ok(sum.min(1.0))
}

/// Exact power of the one-sided sign test at `level` with `n` blocks and win
/// probability `p_win`: P(Binomial(n, p_win) >= k_crit); 0 when no k_crit exists.
pub fn sign_test_power(n: u64, level: f64, p_win: f64) -> Result<f64> {
    match critical_wins(n, level)? {
        Some(k) => binomial_upper_tail(n, k, p_win),
        None => Ok(0.0),
    }
}

/// One hypothesis of the family as the simulation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimHypothesis {
    pub kind: EffectKind,
    /// SD of the oriented per-block log-ratio.
    pub sd: f64,
    /// Median screen threshold (fraction).
    pub threshold: f64,
}

/// Standard normal draws for a simulation: `draws x family x blocks`, fixed by `seed`
/// (Xoshiro256++ seeded with `seed`, rand_distr's `StandardNormal`), so every effect
/// of a curve is evaluated on the same noise (common random numbers).
pub struct NoiseDraws {
    pub seed: u64,
    pub draws: usize,
    family: usize,
    blocks: usize,
    z: Vec<f64>,
}

impl NoiseDraws {
    pub fn new(seed: u64, draws: usize, family: usize, blocks: usize) -> NoiseDraws {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let z = (0..draws * family * blocks).map(|_| StandardNormal.sample(&mut rng)).collect();
        NoiseDraws { seed, draws, family, blocks, z }
    }

    fn block_noise(&self, draw: usize, hypothesis: usize) -> &[f64] {
        let start = (draw * self.family + hypothesis) * self.blocks;
        &self.z[start..start + self.blocks]
    }
}

/// The simulated probability that hypothesis `target` of `family` is supported by the
/// whole rule (exact sign test, Holm over the family at `alpha`, median screen) when
/// its true effect is `effect` and `others` is the true effect of every other member
/// (0: they are null). Blocks: `noise.blocks`. Ties have probability zero here.
pub fn simulate_rule(
    family: &[SimHypothesis],
    target: usize,
    effect: f64,
    others: f64,
    alpha: f64,
    noise: &NoiseDraws,
) -> Result<f64> {
    if family.len() != noise.family || target >= family.len() || noise.draws == 0 || noise.blocks == 0 {
        return Err(StatsError::OutOfRange {
            name: "simulation shape",
            value: family.len() as f64,
            allowed: "the draws' family size, with a target inside it",
        });
    }
    let n = noise.blocks as u64;
    let p_of_wins: Vec<f64> = (0..=n).map(|k| sign_test_p_value(n, k)).collect::<Result<_>>()?;
    let mut shifts = Vec::with_capacity(family.len());
    for (i, h) in family.iter().enumerate() {
        check_sd(h.sd)?;
        shifts.push(log_shift(h.kind, if i == target { effect } else { others })?);
    }
    let t = &family[target];
    let mut supported = 0usize;
    let mut p_values = vec![0.0; family.len()];
    let mut effects = vec![0.0; noise.blocks];
    for d in 0..noise.draws {
        for (i, h) in family.iter().enumerate() {
            let wins = noise.block_noise(d, i).iter().filter(|&&z| shifts[i] + h.sd * z > 0.0).count();
            p_values[i] = p_of_wins[wins];
        }
        if !holm(&p_values, alpha)?[target].reject {
            continue;
        }
        for (e, z) in effects.iter_mut().zip(noise.block_noise(d, target)) {
            *e = effect_of_log(t.kind, shifts[target] + t.sd * z);
        }
        if median(&effects)? >= t.threshold {
            supported += 1;
        }
    }
    Ok(supported as f64 / noise.draws as f64)
}

/// The smallest effect in `[0, max]` whose `power` reaches `probability`, by bisection
/// to within `tolerance`, for a `power` that is non-decreasing in the effect. `None`
/// when even `max` does not reach it. Returns the upper end of the final bracket (an
/// effect that does reach it).
pub fn smallest_effect(
    mut power: impl FnMut(f64) -> Result<f64>,
    probability: f64,
    max: f64,
    tolerance: f64,
) -> Result<Option<f64>> {
    if power(max)? < probability {
        return Ok(None);
    }
    if power(0.0)? >= probability {
        return Ok(Some(0.0));
    }
    let (mut lo, mut hi) = (0.0, max);
    while hi - lo > tolerance {
        let mid = lo + (hi - lo) / 2.0;
        if power(mid)? >= probability {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

/// Monte-Carlo standard error of a simulated probability `p` from `draws` draws.
pub fn monte_carlo_se(p: f64, draws: usize) -> f64 {
    (p * (1.0 - p) / draws.max(1) as f64).sqrt()
}
