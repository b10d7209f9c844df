//! The sequential rule of a paired regression gate: after each planned look (a
//! number of completed blocks), decide for one measure whether the candidate
//! "regressed", "improved", stayed "within" the margin, or is still undecided.
//!
//! Input: the per-block paired log-ratios oriented so that positive means *worse*
//! (throughput: ln(baseline / candidate); latency: ln(candidate / baseline)). With
//! n blocks, mean x and sample SD s, and t quantiles with n - 1 degrees of freedom:
//!
//! - alarm interval  x +- t(1 - a') s / sqrt(n), with a' = alpha / (family * looks);
//! - within interval x +- t(1 - b') s / sqrt(n), with b' = beta / looks;
//! - M = ln(1 + margin):
//!   - **regressed**: the alarm interval is above 0 and x >= M / 2 (slower with
//!     confidence, and nearer a slowdown of the margin than none);
//!   - **improved**: the alarm interval is below 0 and x <= -M / 2;
//!   - **within**: the within interval lies inside (-M, +M);
//!   - otherwise **undecided** (at the last look: inconclusive).
//!
//! Error rates, by Bonferroni over looks (and, for alarms, over the measures the
//! gate decides together): with no true change, the probability that *any* measure
//! is called "regressed" at *any* look is at most alpha; with a true slowdown of
//! the margin in a measure, the probability that it is called "within" at any look
//! is at most beta. Both bounds are conservative; `tests` check them by simulation
//! with normal and heavy-tailed noise. The rule is the two-hypothesis test of
//! chess-engine SPRT (no change vs a change of the margin) made robust for a few
//! blocks by t intervals instead of a plug-in variance.
//!
//! Owns the rule, its levels and the combination of measures into one gate state.
//! Must not read evidence: callers pass log-ratios in.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::error::{Result, StatsError, check_finite};

/// The rule's parameters, shared by every measure of one gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequentialRule {
    /// Block counts at which the rule looks, strictly increasing, the first >= 3;
    /// the last is the cap.
    pub looks: Vec<u32>,
    /// Probability bound of a false "regressed" over all measures and looks.
    pub alpha: f64,
    /// Probability bound of calling a slowdown of the margin "within", per measure.
    pub beta: f64,
    /// Measures decided together (alpha is split over them).
    pub family: usize,
}

/// One measure's state at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regressed,
    Improved,
    Within,
    Undecided,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::Within => "within",
            Verdict::Undecided => "undecided",
        }
    }

    /// Decided: the measure needs no more blocks.
    pub fn decided(self) -> bool {
        self != Verdict::Undecided
    }
}

/// The gate's state after a look, over all its measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateState {
    /// Some measure regressed: stop, the gate fails.
    Regressed,
    /// Every measure is within its margin or improved: stop, the gate passes.
    Passed,
    /// Not decided yet: run the blocks up to the next look.
    Continue,
    /// The last look (or the time cap) came with measures still undecided.
    Inconclusive,
}

impl GateState {
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::Regressed => "regressed",
            GateState::Passed => "passed",
            GateState::Continue => "continue",
            GateState::Inconclusive => "inconclusive",
        }
    }
}

/// One measure at one look: the numbers behind its verdict (log scale; NaN, written
/// as JSON null, where fewer than 2 values give none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Look {
    /// Blocks with both values.
    pub n: usize,
    #[serde(with = "nan_as_null")]
    pub mean: f64,
    #[serde(with = "nan_as_null")]
    pub sd: f64,
    #[serde(with = "nan_as_null")]
    pub alarm_lower: f64,
    #[serde(with = "nan_as_null")]
    pub alarm_upper: f64,
    #[serde(with = "nan_as_null")]
    pub within_lower: f64,
    #[serde(with = "nan_as_null")]
    pub within_upper: f64,
    pub verdict: Verdict,
}

/// Serde for a float that may be NaN: JSON has no NaN, so it is written as null
/// and read back as NaN.
pub mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() { s.serialize_f64(*v) } else { s.serialize_none() }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

impl Look {
    /// No values to judge: every number NaN, undecided.
    pub fn empty(n: usize) -> Look {
        let nan = f64::NAN;
        Look {
            n,
            mean: nan,
            sd: nan,
            alarm_lower: nan,
            alarm_upper: nan,
            within_lower: nan,
            within_upper: nan,
            verdict: Verdict::Undecided,
        }
    }
}

impl SequentialRule {
    /// Checks the parameters (`OutOfRange` names the bad one).
    pub fn check(&self) -> Result<()> {
        let increasing = self.looks.windows(2).all(|w| w[0] < w[1]);
        if self.looks.is_empty() || self.looks[0] < 3 || !increasing {
            return Err(StatsError::OutOfRange {
                name: "looks",
                value: f64::from(self.looks.first().copied().unwrap_or(0)),
                allowed: "strictly increasing block counts, the first at least 3",
            });
        }
        for (name, v) in [("alpha", self.alpha), ("beta", self.beta)] {
            if !(v > 0.0 && v < 0.5) {
                return Err(StatsError::OutOfRange { name, value: v, allowed: "the open interval (0, 0.5)" });
            }
        }
        if self.family == 0 {
            return Err(StatsError::OutOfRange { name: "family", value: 0.0, allowed: "at least 1 measure" });
        }
        Ok(())
    }

    /// The one-sided level of each alarm bound: alpha / (family * looks).
    pub fn alarm_level(&self) -> f64 {
        self.alpha / (self.family * self.looks.len()) as f64
    }

    /// The one-sided level of each within bound: beta / looks.
    pub fn miss_level(&self) -> f64 {
        self.beta / self.looks.len() as f64
    }

    /// One measure's verdict from its worse-is-positive log-ratios, with `margin`
    /// as a fraction (0.05: 5%). Fewer than 2 values, or values all equal with a
    /// mean inside neither rule, leave it undecided.
    pub fn look(&self, worse: &[f64], margin: f64) -> Result<Look> {
        self.check()?;
        if !(margin > 0.0 && margin < 1.0) {
            return Err(StatsError::OutOfRange { name: "margin", value: margin, allowed: "the open interval (0, 1)" });
        }
        let n = worse.len();
        if n < 2 {
            return Ok(Look { mean: worse.first().copied().unwrap_or(f64::NAN), ..Look::empty(n) });
        }
        check_finite("log-ratios", worse)?;
        let mean = worse.iter().sum::<f64>() / n as f64;
        let sd = (worse.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        let se = sd / (n as f64).sqrt();
        let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).map_err(|_| StatsError::Numerical("t distribution"))?;
        let (ta, tb) = (t.inverse_cdf(1.0 - self.alarm_level()), t.inverse_cdf(1.0 - self.miss_level()));
        let m = margin.ln_1p();
        let (alarm_lower, alarm_upper) = (mean - ta * se, mean + ta * se);
        let (within_lower, within_upper) = (mean - tb * se, mean + tb * se);
        let verdict = if alarm_lower > 0.0 && mean >= m / 2.0 {
            Verdict::Regressed
        } else if alarm_upper < 0.0 && mean <= -m / 2.0 {
            Verdict::Improved
        } else if within_lower > -m && within_upper < m {
            Verdict::Within
        } else {
            Verdict::Undecided
        };
        Ok(Look { n, mean, sd, alarm_lower, alarm_upper, within_lower, within_upper, verdict })
    }
}

/// The gate's state from its measures' verdicts at one look (`last`: the cap).
pub fn combine(verdicts: &[Verdict], last: bool) -> GateState {
    if verdicts.contains(&Verdict::Regressed) {
        GateState::Regressed
    } else if !verdicts.is_empty() && verdicts.iter().all(|v| v.decided()) {
        GateState::Passed
    } else if last {
        GateState::Inconclusive
    } else {
        GateState::Continue
    }
}

/// How a whole sequential gate ended on one simulated or recorded sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ending {
    pub state: GateState,
    /// Blocks used when it stopped.
    pub blocks: u32,
}

/// Runs the rule over per-block worse-is-positive log-ratios of every measure
/// (`blocks[i][h]`: block i, measure h), looking at `rule.looks`, stopping at the
/// first decided look. `margins[h]`: each measure's margin.
pub fn run(rule: &SequentialRule, margins: &[f64], blocks: &[Vec<f64>]) -> Result<Ending> {
    let cap = *rule.looks.last().unwrap_or(&0);
    for (i, &at) in rule.looks.iter().enumerate() {
        let used = &blocks[..(at as usize).min(blocks.len())];
        let mut verdicts = Vec::with_capacity(margins.len());
        for (h, &m) in margins.iter().enumerate() {
            let xs: Vec<f64> = used.iter().map(|b| b[h]).collect();
            verdicts.push(rule.look(&xs, m)?.verdict);
        }
        let state = combine(&verdicts, i + 1 == rule.looks.len() || used.len() < at as usize);
        if state != GateState::Continue {
            return Ok(Ending { state, blocks: used.len() as u32 });
        }
    }
    Ok(Ending { state: GateState::Inconclusive, blocks: cap })
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand_distr::{Distribution, Normal, StudentT};

    use super::*;

    fn rule(family: usize) -> SequentialRule {
        SequentialRule { looks: vec![4, 6, 8, 12], alpha: 0.05, beta: 0.1, family }
    }

    /// Fraction of `draws` simulated gates ending in each state, one measure with a
    /// true worse-is-positive shift `delta` and noise from `noise`.
    fn rates(r: &SequentialRule, delta: f64, mut noise: impl FnMut(&mut Xoshiro256PlusPlus) -> f64) -> [f64; 3] {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(20261205);
        let draws = 4000;
        let mut counts = [0usize; 3];
        for _ in 0..draws {
            let blocks: Vec<Vec<f64>> = (0..12).map(|_| vec![delta + noise(&mut rng)]).collect();
            let end = run(r, &[0.05], &blocks).unwrap();
            counts[match end.state {
                GateState::Regressed => 0,
                GateState::Passed => 1,
                _ => 2,
            }] += 1;
        }
        counts.map(|c| c as f64 / draws as f64)
    }

    #[test]
    fn levels_split_alpha_over_measures_and_looks_and_beta_over_looks() {
        let r = rule(3);
        assert!((r.alarm_level() - 0.05 / 12.0).abs() < 1e-15);
        assert!((r.miss_level() - 0.1 / 4.0).abs() < 1e-15);
    }

    #[test]
    fn the_verdict_follows_the_intervals_and_the_midpoint() {
        let r = rule(1);
        let m = 0.05f64.ln_1p();
        // Tight around +4%: slower with confidence and past the midpoint.
        let up: Vec<f64> = [0.039, 0.041, 0.040, 0.0395, 0.0405].to_vec();
        assert_eq!(r.look(&up, 0.05).unwrap().verdict, Verdict::Regressed);
        // Tight around +1%: significantly slower, but nearer none than the margin.
        let small: Vec<f64> = [0.009, 0.011, 0.010, 0.0095, 0.0105].to_vec();
        let l = r.look(&small, 0.05).unwrap();
        assert!(l.alarm_lower > 0.0 && l.within_upper < m, "{l:?}");
        assert_eq!(l.verdict, Verdict::Within);
        // Tight around -4%: improved.
        let down: Vec<f64> = up.iter().map(|x| -x).collect();
        assert_eq!(r.look(&down, 0.05).unwrap().verdict, Verdict::Improved);
        // Wide: undecided.
        let wide = [0.1, -0.1, 0.05, -0.02];
        assert_eq!(r.look(&wide, 0.05).unwrap().verdict, Verdict::Undecided);
        // One value: undecided, never an error.
        assert_eq!(r.look(&[0.3], 0.05).unwrap().verdict, Verdict::Undecided);
        // The numbers: mean, SD and the alarm interval by hand (t quantile of df 3).
        let xs = [0.01, 0.03, 0.02, 0.04];
        let l = r.look(&xs, 0.05).unwrap();
        let t = StudentsT::new(0.0, 1.0, 3.0).unwrap().inverse_cdf(1.0 - 0.05 / 4.0);
        let sd = (0.0005f64 / 3.0).sqrt();
        assert!((l.mean - 0.025).abs() < 1e-12 && (l.sd - sd).abs() < 1e-12);
        assert!((l.alarm_lower - (0.025 - t * sd / 2.0)).abs() < 1e-12);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut r = rule(1);
        r.looks = vec![2, 4];
        assert!(r.look(&[0.0, 0.1, 0.2], 0.05).is_err());
        r.looks = vec![4, 4];
        assert!(r.check().is_err());
        let r = rule(1);
        assert!(r.look(&[0.0, 0.1, 0.2], 0.0).is_err());
        assert!(r.look(&[0.0, f64::NAN, 0.2], 0.05).is_err());
        assert!(SequentialRule { alpha: 0.5, ..rule(1) }.check().is_err());
        assert!(SequentialRule { family: 0, ..rule(1) }.check().is_err());
    }

    #[test]
    fn combine_fails_on_any_regression_and_passes_only_when_all_are_decided() {
        use Verdict::*;
        assert_eq!(combine(&[Within, Regressed, Undecided], false), GateState::Regressed);
        assert_eq!(combine(&[Within, Improved], false), GateState::Passed);
        assert_eq!(combine(&[Within, Undecided], false), GateState::Continue);
        assert_eq!(combine(&[Within, Undecided], true), GateState::Inconclusive);
        assert_eq!(combine(&[], false), GateState::Continue);
    }

    /// The error rates the module promises, by simulation (4000 gates each; the
    /// Monte Carlo SE of a rate near 5% is 0.35 points).
    #[test]
    fn error_rates_hold_by_simulation_with_normal_noise() {
        let m = 0.05f64.ln_1p();
        for sd in [0.01, 0.02, 0.04] {
            let n = Normal::new(0.0, sd).unwrap();
            let [alarm, _, _] = rates(&rule(1), 0.0, |g| n.sample(g));
            assert!(alarm <= 0.05, "sd {sd}: false alarms {alarm}");
            // A true slowdown of the margin is called "within" at most beta of the time.
            let [_, missed, _] = rates(&rule(1), m, |g| n.sample(g));
            assert!(missed <= 0.1, "sd {sd}: passed a slowdown of the margin {missed}");
        }
        // Detection where the CI gate runs (paired SD about 0.01-0.02 here).
        let n = Normal::new(0.0, 0.02).unwrap();
        let [hit5, _, _] = rates(&rule(1), m, |g| n.sample(g));
        assert!(hit5 >= 0.8, "5% slowdown detected {hit5}");
        let [hit10, _, _] = rates(&rule(1), 0.10f64.ln_1p(), |g| n.sample(g));
        assert!(hit10 >= 0.99, "10% slowdown detected {hit10}");
        // An A/A at that noise mostly passes within the cap.
        let [_, passed, _] = rates(&rule(1), 0.0, |g| n.sample(g));
        assert!(passed >= 0.9, "A/A passed {passed}");
    }

    #[test]
    fn false_alarms_stay_bounded_with_heavy_tailed_noise() {
        // Student t with 3 df, scaled to SD 0.02: outlying blocks, as a machine hiccup makes.
        let t3 = StudentT::new(3.0).unwrap();
        let scale = 0.02 / 3f64.sqrt();
        let [alarm, _, _] = rates(&rule(1), 0.0, |g| scale * t3.sample(g));
        assert!(alarm <= 0.05, "false alarms {alarm}");
    }

    #[test]
    fn a_family_of_measures_keeps_the_alarm_bound_over_all_of_them() {
        let r = rule(3);
        let n = Normal::new(0.0, 0.02).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let draws = 3000;
        let mut alarms = 0;
        for _ in 0..draws {
            let blocks: Vec<Vec<f64>> = (0..12).map(|_| (0..3).map(|_| n.sample(&mut rng)).collect()).collect();
            alarms += usize::from(run(&r, &[0.05, 0.05, 0.10], &blocks).unwrap().state == GateState::Regressed);
        }
        assert!((alarms as f64 / draws as f64) <= 0.05, "{alarms} of {draws}");
    }

    #[test]
    fn run_stops_at_the_first_decided_look() {
        let r = rule(1);
        // A clear 20% slowdown is decided at the first look.
        let blocks: Vec<Vec<f64>> = (0..12).map(|i| vec![0.18 + 0.001 * f64::from(i % 3)]).collect();
        assert_eq!(run(&r, &[0.05], &blocks).unwrap(), Ending { state: GateState::Regressed, blocks: 4 });
        // Too few blocks recorded for the next look: the state is final there.
        let noisy: Vec<Vec<f64>> = [0.3, -0.3, 0.2, -0.25, 0.1].iter().map(|&x| vec![x]).collect();
        assert_eq!(run(&r, &[0.05], &noisy).unwrap(), Ending { state: GateState::Inconclusive, blocks: 5 });
    }
}
