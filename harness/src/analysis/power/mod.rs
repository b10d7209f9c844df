//! `harness plan power PLAN --noise DIR`: how small an effect the plan's study can
//! see. From the block-to-block noise of an A/A or pilot evidence directory
//! (`noise`; a study with `pilots/derived.json` gives the noise of its repeated
//! in-study pilot runs, `pilot_noise`), for every hypothesis of the plan: the power curve of its rule at the
//! plan's block count, the smallest effect supported with 80% and 95% probability, and
//! (with a target effect) the block count needed. Exact binomial arithmetic for the
//! sign test alone at the conservative level alpha / m (Bonferroni: the level Holm
//! gives the hypothesis that ranks first); a seeded simulation (`stats::simulate_rule`)
//! for the whole rule (sign test, Holm over the family at alpha, median screen), with
//! every other hypothesis of the family null. The assumptions are part of the output.
//! Owns `PowerError` and the JSON format `harness-power/1`. Must not run servers or
//! write anything but the JSON file it is asked for.

pub mod noise;
pub mod pilot_noise;
mod render;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::analysis::AnalysisError;
use crate::plan::{FrozenPlan, MetricKind, PlanError, freeze_file};
use crate::stats::{
    EffectKind, MAX_LATENCY_EFFECT, MAX_THROUGHPUT_EFFECT, NoiseDraws, SimHypothesis, StatsError, critical_wins,
    monte_carlo_se, sign_test_power, simulate_rule, smallest_effect, win_probability,
};
pub use noise::{NoiseEstimate, NoiseStudy};

/// Version of the JSON output.
pub const POWER_FORMAT: &str = "harness-power/1";
/// Effects of the printed curve (fractions), besides any target effect.
pub const EFFECT_GRID: [f64; 11] = [0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5];
/// Probabilities of a supported claim whose smallest effect is reported.
pub const DETECT_PROBABILITIES: [f64; 2] = [0.8, 0.95];
/// Most blocks the block-count search considers.
pub const MAX_BLOCKS: u32 = 200;
/// Default number of simulated studies per point.
pub const DEFAULT_DRAWS: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("noise evidence: {0}")]
    Report(#[from] AnalysisError),
    #[error("statistics: {0}")]
    Stats(#[from] StatsError),
    #[error("noise evidence {}: its plan has no hypotheses, so no pair of arms to take noise from", dir.display())]
    NoPairs { dir: PathBuf },
    #[error("noise pair {pair}: {blocks} block(s) with both values; at least 2 are needed for a spread")]
    TooFewBlocks { pair: String, blocks: usize },
    #[error(
        "hypothesis {hypothesis} ({metric} in {cell}): the noise evidence has {} pair on {metric}; its pairs: {available}",
        if *ambiguous { "more than one (and none in the same cell)" } else { "no" }
    )]
    NoMatch { hypothesis: String, metric: String, cell: String, ambiguous: bool, available: String },
    #[error("the plan has no hypotheses: there is no claim whose power to compute")]
    NoHypotheses,
    #[error("{0}")]
    Args(String),
    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: String },
    /// The noise evidence directory was refused (unfinished, changed, not regular files).
    #[error(transparent)]
    Sealed(#[from] crate::evidence::SealError),
}

impl crate::BadInput for PowerError {
    fn is_bad_input(&self) -> bool {
        match self {
            PowerError::Plan(p) => crate::BadInput::is_bad_input(p),
            PowerError::Write { .. } | PowerError::Stats(_) => false,
            _ => true,
        }
    }
}

/// What `harness plan power` was asked.
#[derive(Debug, Clone)]
pub struct PowerOptions {
    pub plan: PathBuf,
    pub noise: PathBuf,
    /// A true effect (fraction) whose needed block count is reported.
    pub target_effect: Option<f64>,
    /// The probability a needed block count must reach (0.8).
    pub target_power: f64,
    /// Simulation seed (default: the plan's `study.seed`).
    pub seed: Option<u64>,
    pub draws: usize,
}

/// One point of a power curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    pub effect: f64,
    /// P(one block is a win).
    pub p_win: f64,
    /// Exact power of the sign test alone at alpha / m.
    pub sign_test_exact: f64,
    /// Simulated probability that the whole rule supports the claim.
    pub rule_simulated: f64,
    /// Its Monte-Carlo standard error.
    pub rule_se: f64,
}

/// The smallest effect supported with a probability (`None`: not within the search).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detectable {
    pub probability: f64,
    pub sd: f64,
    pub sign_test_exact: Option<f64>,
    pub rule_simulated: Option<f64>,
}

/// The block count needed for a target effect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetBlocks {
    pub effect: f64,
    pub probability: f64,
    /// Smallest n whose exact sign-test power at alpha / m reaches the probability.
    pub sign_test_exact: Option<u32>,
    /// Smallest n (searched from near the exact answer) at which the simulated rule reaches it.
    pub rule_simulated: Option<u32>,
    /// Why the rule can never reach it, when that is known.
    pub note: Option<String>,
}

/// The realised SD counts as far above the assumed one beyond this factor: the
/// power statement made from the assumption was optimistic.
pub const OPTIMISM_FACTOR: f64 = 2.0;
/// The probability at which the realised noise's detectable effect is stated.
pub const REALISED_PROBABILITY: f64 = 0.8;

/// The noise a study's confirmation blocks showed, set beside the noise its power
/// statement assumed (after the study: `PowerReport::add_realised`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Realised {
    /// Sample SD (n - 1) of the blocks' paired log-ratios ln(candidate / control).
    pub sd: f64,
    /// Its degrees of freedom: blocks with both values - 1.
    pub df: usize,
    /// The smallest true effect the whole rule supports with `REALISED_PROBABILITY`
    /// at this SD and the study's block count (`None`: none within the search).
    pub detectable: Option<f64>,
    /// `sd` > `OPTIMISM_FACTOR` x the assumed SD.
    pub optimistic: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HypothesisPower {
    pub name: String,
    pub metric: crate::plan::Metric,
    pub cell: String,
    pub threshold: f64,
    pub noise: NoiseEstimate,
    /// alpha / m, the level of the exact part.
    pub level: f64,
    /// Wins of n the exact part needs (`None`: unreachable at this n).
    pub critical_wins: Option<u64>,
    pub curve: Vec<CurvePoint>,
    /// At the estimated SD, then at its upper bound.
    pub detectable: Vec<Detectable>,
    pub target: Option<TargetBlocks>,
    /// After a study: the noise its confirmation blocks showed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realised: Option<Realised>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PowerReport {
    pub format: &'static str,
    pub study: String,
    pub plan_sha256: String,
    pub noise_dir: String,
    pub noise_study: String,
    pub noise_plan_sha256: String,
    pub alpha: f64,
    pub blocks: u32,
    pub family: usize,
    pub seed: u64,
    pub draws: usize,
    /// True effect of the other hypotheses of the family in the simulation.
    pub others_effect: f64,
    pub assumptions: Vec<String>,
    pub hypotheses: Vec<HypothesisPower>,
}

fn kind_of(kind: MetricKind) -> EffectKind {
    match kind {
        MetricKind::Throughput => EffectKind::Throughput,
        MetricKind::Latency => EffectKind::Latency,
    }
}

fn max_effect(kind: EffectKind) -> f64 {
    match kind {
        EffectKind::Throughput => MAX_THROUGHPUT_EFFECT,
        EffectKind::Latency => MAX_LATENCY_EFFECT,
    }
}

/// The model's assumptions, as printed and written.
pub fn assumptions(seed: u64, draws: usize) -> Vec<String> {
    vec![
        "blocks are independent; in each block the paired log-ratio (throughput: ln(candidate/control); latency: \
         ln(control/candidate)) is ln-shift + noise, the noise i.i.d. normal with the SD estimated from the noise \
         evidence"
            .into(),
        "the effect is additive on the log scale: throughput shift ln(1 + effect), latency shift -ln(1 - effect), so \
         the median block effect equals the effect"
            .into(),
        "the SD is that of the paired log-ratio (a difference of two arms in one block, as an A/A study measures it), \
         not of one arm; it is used as it is, never scaled by sqrt(2)"
            .into(),
        "exact part: the one-sided sign test alone at the conservative level alpha / m (what Holm gives the \
         hypothesis that ranks first); P(win) = Phi(shift / SD), power = P(Binomial(n, P(win)) >= k_crit)"
            .into(),
        format!(
            "full rule: sign test, Holm over the whole family at alpha and the median screen, simulated with seed \
             {seed} and {draws} draws per point (common random numbers across effects), every other hypothesis of \
             the family null"
        ),
        "no failed requests, no arm faults (either blocks a claim)".into(),
    ]
}

struct Family {
    sims: Vec<SimHypothesis>,
    alpha: f64,
    seed: u64,
    draws: usize,
}

impl Family {
    fn exact(&self, i: usize, n: u32, sd: f64, effect: f64) -> Result<f64, StatsError> {
        let level = self.alpha / self.sims.len() as f64;
        sign_test_power(u64::from(n), level, win_probability(self.sims[i].kind, effect, sd)?)
    }

    fn simulated(&self, i: usize, sd: f64, effect: f64, noise: &NoiseDraws) -> Result<f64, StatsError> {
        let mut sims = self.sims.clone();
        sims[i].sd = sd;
        simulate_rule(&sims, i, effect, 0.0, self.alpha, noise)
    }

    fn detectable(&self, i: usize, n: u32, sd: f64, p: f64, noise: &NoiseDraws) -> Result<Detectable, StatsError> {
        let max = max_effect(self.sims[i].kind);
        Ok(Detectable {
            probability: p,
            sd,
            sign_test_exact: smallest_effect(|e| self.exact(i, n, sd, e), p, max, 1e-5)?,
            rule_simulated: smallest_effect(|e| self.simulated(i, sd, e, noise), p, max, 1e-4)?,
        })
    }

    fn target(&self, i: usize, effect: f64, p: f64) -> Result<TargetBlocks, StatsError> {
        let sd = self.sims[i].sd;
        let exact = (1..=MAX_BLOCKS).find(|&n| self.exact(i, n, sd, effect).is_ok_and(|x| x >= p));
        let threshold = self.sims[i].threshold;
        let mut out = TargetBlocks { effect, probability: p, sign_test_exact: exact, rule_simulated: None, note: None };
        if threshold >= effect {
            out.note = Some(format!(
                "the median screen's threshold {threshold} is not below the effect: the median reaches it at most \
                 about half the time however many blocks run"
            ));
            return Ok(out);
        }
        let Some(start) = exact else { return Ok(out) };
        let family = self.sims.len();
        for n in start.saturating_sub(2).max(1)..=MAX_BLOCKS.min(start + 60) {
            let noise = NoiseDraws::new(self.seed, self.draws, family, n as usize);
            if self.simulated(i, sd, effect, &noise)? >= p {
                out.rule_simulated = Some(n);
                break;
            }
        }
        if out.rule_simulated.is_none() {
            out.note = Some(format!("the simulated rule did not reach {p} within {} blocks", start + 60));
        }
        Ok(out)
    }
}

impl PowerReport {
    /// Sets beside hypothesis `name`'s assumed noise the SD of its confirmation
    /// blocks' paired log-ratios `log_ratios` and what the rule could detect at it
    /// (the same simulation as the assumed figures: seed, draws, the family's other
    /// hypotheses at their assumed SDs and null). Fewer than 2 ratios, or no spread,
    /// leave it unset.
    pub fn add_realised(&mut self, name: &str, log_ratios: &[f64]) -> Result<(), StatsError> {
        let Some(i) = self.hypotheses.iter().position(|h| h.name == name) else { return Ok(()) };
        let n = log_ratios.len();
        let Some((_, sd, _)) = noise::spread(log_ratios).filter(|&(_, sd, _)| sd.is_finite() && sd > 0.0) else {
            return Ok(());
        };
        let sims = self
            .hypotheses
            .iter()
            .map(|h| SimHypothesis { kind: kind_of(h.metric.kind()), sd: h.noise.sd, threshold: h.threshold })
            .collect();
        let family = Family { sims, alpha: self.alpha, seed: self.seed, draws: self.draws };
        let draws = NoiseDraws::new(self.seed, self.draws, self.hypotheses.len(), self.blocks as usize);
        let detectable = family.detectable(i, self.blocks, sd, REALISED_PROBABILITY, &draws)?.rule_simulated;
        let h = &mut self.hypotheses[i];
        h.realised = Some(Realised { sd, df: n - 1, detectable, optimistic: sd > OPTIMISM_FACTOR * h.noise.sd });
        Ok(())
    }
}

/// Computes the power report of `frozen` from the noise study (see the module doc).
pub fn compute(
    frozen: &FrozenPlan,
    noise: &NoiseStudy,
    noise_dir: &Path,
    opts: &PowerOptions,
) -> Result<PowerReport, PowerError> {
    let plan = &frozen.plan;
    let (Some(alpha), false) = (plan.alpha, plan.hypotheses.is_empty()) else {
        return Err(PowerError::NoHypotheses);
    };
    if !(opts.target_power > 0.0 && opts.target_power < 1.0) || opts.draws == 0 {
        return Err(PowerError::Args("--target-power must be in (0, 1) and --draws at least 1".into()));
    }
    let estimates = plan.hypotheses.iter().map(|h| noise.for_hypothesis(h).cloned()).collect::<Result<Vec<_>, _>>()?;
    let sims: Vec<SimHypothesis> = plan
        .hypotheses
        .iter()
        .zip(&estimates)
        .map(|(h, e)| SimHypothesis { kind: kind_of(h.metric.kind()), sd: e.sd, threshold: h.threshold })
        .collect();
    let seed = opts.seed.unwrap_or(plan.study.seed);
    let family = Family { sims, alpha, seed, draws: opts.draws };
    let n = plan.blocks.count;
    let m = plan.hypotheses.len();
    let draws = NoiseDraws::new(seed, opts.draws, m, n as usize);
    let mut grid: Vec<f64> = EFFECT_GRID.to_vec();
    if let Some(t) = opts.target_effect {
        grid.push(t);
        grid.sort_by(f64::total_cmp);
        grid.dedup();
    }
    let level = alpha / m as f64;
    let mut hypotheses = Vec::with_capacity(m);
    for (i, (h, est)) in plan.hypotheses.iter().zip(estimates).enumerate() {
        let kind = family.sims[i].kind;
        let mut curve = Vec::new();
        for &effect in grid.iter().filter(|&&e| e < max_effect(kind)) {
            let rule = family.simulated(i, est.sd, effect, &draws)?;
            curve.push(CurvePoint {
                effect,
                p_win: win_probability(kind, effect, est.sd)?,
                sign_test_exact: family.exact(i, n, est.sd, effect)?,
                rule_simulated: rule,
                rule_se: monte_carlo_se(rule, opts.draws),
            });
        }
        let mut detectable = Vec::new();
        for sd in [est.sd, est.sd_upper] {
            for p in DETECT_PROBABILITIES {
                detectable.push(family.detectable(i, n, sd, p, &draws)?);
            }
        }
        let target = match opts.target_effect {
            Some(effect) => Some(family.target(i, effect, opts.target_power)?),
            None => None,
        };
        hypotheses.push(HypothesisPower {
            name: h.name.clone(),
            metric: h.metric,
            cell: h.cell.clone(),
            threshold: h.threshold,
            noise: est,
            level,
            critical_wins: critical_wins(u64::from(n), level)?,
            curve,
            detectable,
            target,
            realised: None,
        });
    }
    Ok(PowerReport {
        format: POWER_FORMAT,
        study: plan.study.name.clone(),
        plan_sha256: frozen.sha256.clone(),
        noise_dir: noise_dir.display().to_string(),
        noise_study: noise.study.clone(),
        noise_plan_sha256: noise.plan_sha256.clone(),
        alpha,
        blocks: n,
        family: m,
        seed,
        draws: opts.draws,
        others_effect: 0.0,
        assumptions: assumptions(seed, opts.draws),
        hypotheses,
    })
}

/// `harness plan power`: reads the plan and the noise evidence and computes the report.
pub fn run(opts: &PowerOptions) -> Result<PowerReport, PowerError> {
    let frozen = freeze_file(&opts.plan)?;
    // A finished study only, as sealed (refused otherwise, naming the file).
    crate::evidence::Sealed::open(&opts.noise)?;
    // A study with in-study pilots: the noise of its control's repeated pilot runs.
    if opts.noise.join(crate::evidence::DERIVED_PATH).is_file() {
        let noise = pilot_noise::read(&opts.noise, &frozen.plan)?;
        let mut report = compute(&frozen, &noise, &opts.noise, opts)?;
        pilot_noise::pilot_assumptions(&mut report);
        return Ok(report);
    }
    let noise = noise::read(&opts.noise)?;
    compute(&frozen, &noise, &opts.noise, opts)
}

impl PowerReport {
    /// The report as pretty JSON (ends with a newline).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }

    /// Writes the JSON to `path` atomically.
    pub fn write_json(&self, path: &Path) -> Result<(), PowerError> {
        crate::evidence::write_atomic(path, self.to_json().as_bytes())
            .map_err(|e| PowerError::Write { path: path.to_path_buf(), error: e.to_string() })
    }
}

pub use render::percent;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Metric;

    /// A report of one throughput hypothesis at `blocks` blocks with assumed SD `sd`.
    fn report(sd: f64, blocks: u32) -> PowerReport {
        let noise = NoiseEstimate {
            source: "h".into(),
            cell: "c".into(),
            metric: Metric::ThroughputRps,
            candidate: "b".into(),
            control: "a".into(),
            blocks: vec![0, 1],
            log_ratios: vec![sd / 2.0, -sd / 2.0],
            mean: 0.0,
            sd,
            sd_upper: sd * 3.0,
            failed_requests: 0,
            values: Vec::new(),
        };
        let h = HypothesisPower {
            name: "h".into(),
            metric: Metric::ThroughputRps,
            cell: "c".into(),
            threshold: 0.01,
            noise,
            level: 0.05,
            critical_wins: None,
            curve: Vec::new(),
            detectable: Vec::new(),
            target: None,
            realised: None,
        };
        PowerReport {
            format: POWER_FORMAT,
            study: "s".into(),
            plan_sha256: String::new(),
            noise_dir: String::new(),
            noise_study: String::new(),
            noise_plan_sha256: String::new(),
            alpha: 0.05,
            blocks,
            family: 1,
            seed: 7,
            draws: 2_000,
            others_effect: 0.0,
            assumptions: Vec::new(),
            hypotheses: vec![h],
        }
    }

    #[test]
    fn the_realised_noise_is_set_beside_the_assumed_one_and_flags_an_optimistic_assumption() {
        let ratios = [0.1, -0.1, 0.1, -0.1, 0.0, 0.0];
        let mean = 0.0;
        let sd = (ratios.iter().map(|x: &f64| (x - mean).powi(2)).sum::<f64>() / 5.0).sqrt();
        let mut r = report(0.02, 6);
        r.add_realised("h", &ratios).unwrap();
        let real = r.hypotheses[0].realised.clone().expect("set");
        assert!((real.sd - sd).abs() < 1e-15 && real.df == 5);
        assert!(real.optimistic, "{} > 2 x 0.02", real.sd);
        // The same noise as assumed: not optimistic, and a larger SD needs a larger effect.
        let mut calm = report(sd, 6);
        calm.add_realised("h", &ratios).unwrap();
        let calm_real = calm.hypotheses[0].realised.clone().unwrap();
        assert!(!calm_real.optimistic);
        assert_eq!(calm_real.detectable, real.detectable, "the detectable effect depends on the realised SD only");
        let mut noisier = report(0.02, 6);
        noisier.add_realised("h", &ratios.map(|x| x * 2.0)).unwrap();
        let (lo, hi) = (real.detectable.unwrap(), noisier.hypotheses[0].realised.clone().unwrap().detectable);
        assert!(hi.is_none_or(|hi| hi > lo), "{lo} vs {hi:?}");
        // Too few blocks, no spread, or an unknown name: nothing set.
        for (name, ratios) in [("h", &[0.1][..]), ("h", &[0.05, 0.05][..]), ("other", &ratios[..])] {
            let mut r = report(0.02, 6);
            r.add_realised(name, ratios).unwrap();
            assert!(r.hypotheses[0].realised.is_none(), "{name} {ratios:?}");
        }
    }
}
