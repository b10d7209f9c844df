//! Claims per hypothesis, from the frozen decision rules of DESIGN section 6.
//!
//! Owns `Decision`, `Rule` and the family-level procedure `decide_family`:
//! for each hypothesis, the exact sign test on its block effects, Holm's
//! step-down across the whole family at the plan's alpha, the median screen
//! against the hypothesis's threshold, and the order-statistic interval that
//! the report prints beside it. A claim is exactly one of
//! - `Supported`: no failed request in any cell, Holm-adjusted p <= alpha, and
//!   median effect >= threshold;
//! - `Blocked { failed_requests }`: any failed request in any of the
//!   hypothesis's cells, whatever the numbers say (they are still computed and
//!   kept beside the claim when effects exist);
//! - `NotSupported { failed_rules }`: otherwise, naming every rule that failed.
//!
//! There is no "equivalent" claim: a failed rule means only "not supported".
//! The family is the caller's whole list; blocked hypotheses stay in it (a
//! blocked hypothesis with no effects at all enters Holm with p = 1), so the
//! correction never shrinks because something failed. Must not read the plan
//! or compute effects from raw records.

use serde::{Deserialize, Serialize};

use super::error::{Result, StatsError, check_open_unit};
use super::holm::{HolmResult, holm};
use super::median_interval::{MedianInterval, MedianScreen, median_interval, median_screen};
use super::sign_test::{SignTest, sign_test};

/// A decision rule that a hypothesis must pass to be supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Holm-adjusted one-sided exact sign test p-value <= alpha.
    HolmSignTest,
    /// Median block effect >= the hypothesis's threshold.
    MedianThreshold,
}

impl Rule {
    /// The rule as the report states it.
    pub fn statement(self) -> &'static str {
        match self {
            Rule::HolmSignTest => "Holm-adjusted one-sided exact sign test p <= alpha",
            Rule::MedianThreshold => "median block effect >= threshold",
        }
    }

    /// What it means when the rule fails.
    pub fn failure(self) -> &'static str {
        match self {
            Rule::HolmSignTest => "Holm-adjusted sign test not significant",
            Rule::MedianThreshold => "median block effect below threshold",
        }
    }
}

/// The claim for one hypothesis. Serialized with a `claim` tag, e.g.
/// `{"claim":"not_supported","failed_rules":["holm_sign_test"]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "claim", rename_all = "snake_case")]
pub enum Decision {
    Supported,
    NotSupported { failed_rules: Vec<Rule> },
    Blocked { failed_requests: u64 },
}

/// The decision rule itself: failures block; otherwise every failed rule is
/// named (in the order `HolmSignTest`, `MedianThreshold`).
pub fn decide(holm_reject: bool, median_passed: bool, failed_requests: u64) -> Decision {
    if failed_requests > 0 {
        return Decision::Blocked { failed_requests };
    }
    let mut failed_rules = Vec::new();
    if !holm_reject {
        failed_rules.push(Rule::HolmSignTest);
    }
    if !median_passed {
        failed_rules.push(Rule::MedianThreshold);
    }
    if failed_rules.is_empty() { Decision::Supported } else { Decision::NotSupported { failed_rules } }
}

/// One hypothesis of the family, as the caller hands it in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HypothesisInput<'a> {
    /// The plan's id for the hypothesis (carried into the outcome).
    pub id: &'a str,
    /// Paired block effects (positive = candidate better), one per block.
    /// May be empty only when `failed_requests > 0`.
    pub effects: &'a [f64],
    /// Median screen threshold (e.g. 0.01 for throughput, 0.05 for latency).
    pub threshold: f64,
    /// Failed requests over all cells of the hypothesis, both arms.
    pub failed_requests: u64,
}

/// Everything computed for one hypothesis, for the report and evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HypothesisOutcome {
    pub id: String,
    pub alpha: f64,
    pub threshold: f64,
    pub failed_requests: u64,
    /// `None` only for a blocked hypothesis with no effects.
    pub sign_test: Option<SignTest>,
    /// `None` only for a blocked hypothesis with no effects.
    pub median: Option<MedianScreen>,
    /// `None` only for a blocked hypothesis with no effects.
    pub interval: Option<MedianInterval>,
    /// Holm result in this family (raw p = 1 when there were no effects).
    pub holm: HolmResult,
    pub decision: Decision,
}

struct Partial {
    sign_test: Option<SignTest>,
    median: Option<MedianScreen>,
    interval: Option<MedianInterval>,
}

fn analyse(h: &HypothesisInput<'_>, interval_target: f64) -> Result<Partial> {
    if h.effects.is_empty() && h.failed_requests > 0 {
        return Ok(Partial { sign_test: None, median: None, interval: None });
    }
    Ok(Partial {
        sign_test: Some(sign_test(h.effects)?),
        median: Some(median_screen(h.effects, h.threshold)?),
        interval: Some(median_interval(h.effects, interval_target)?),
    })
}

/// Decides every hypothesis of the family at level `alpha` (open (0, 1)),
/// with median intervals at `interval_target` coverage (see
/// `DEFAULT_INTERVAL_COVERAGE`). Outcomes are in input order. Errors name the
/// offending hypothesis.
pub fn decide_family(
    hypotheses: &[HypothesisInput<'_>],
    alpha: f64,
    interval_target: f64,
) -> Result<Vec<HypothesisOutcome>> {
    check_open_unit("alpha", alpha)?;
    check_open_unit("interval coverage target", interval_target)?;
    let partials = hypotheses
        .iter()
        .map(|h| {
            analyse(h, interval_target)
                .map_err(|e| StatsError::Hypothesis { id: h.id.to_string(), source: Box::new(e) })
        })
        .collect::<Result<Vec<_>>>()?;
    let p_values: Vec<f64> = partials.iter().map(|p| p.sign_test.as_ref().map_or(1.0, |t| t.p_value)).collect();
    let holm_results = holm(&p_values, alpha)?;
    Ok(hypotheses
        .iter()
        .zip(partials)
        .zip(holm_results)
        .map(|((h, p), holm)| {
            let median_passed = p.median.as_ref().is_some_and(|m| m.passed);
            HypothesisOutcome {
                id: h.id.to_string(),
                alpha,
                threshold: h.threshold,
                failed_requests: h.failed_requests,
                decision: decide(holm.reject, median_passed, h.failed_requests),
                sign_test: p.sign_test,
                median: p.median,
                interval: p.interval,
                holm,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::DEFAULT_INTERVAL_COVERAGE;

    const ALPHA: f64 = 0.05;

    fn hyp<'a>(id: &'a str, effects: &'a [f64], threshold: f64) -> HypothesisInput<'a> {
        HypothesisInput { id, effects, threshold, failed_requests: 0 }
    }

    fn family(hs: &[HypothesisInput<'_>]) -> Vec<HypothesisOutcome> {
        decide_family(hs, ALPHA, DEFAULT_INTERVAL_COVERAGE).unwrap()
    }

    fn one(h: HypothesisInput<'_>) -> HypothesisOutcome {
        family(&[h]).remove(0)
    }

    fn not_supported(rules: &[Rule]) -> Decision {
        Decision::NotSupported { failed_rules: rules.to_vec() }
    }

    // Ten blocks, every effect positive, median 0.055.
    const ALL_WINS: [f64; 10] = [0.02, 0.03, 0.04, 0.05, 0.05, 0.06, 0.06, 0.07, 0.08, 0.09];
    // Nine wins and one loss, median 0.05.
    const NINE_OF_TEN: [f64; 10] = [0.02, 0.03, 0.04, 0.05, 0.05, 0.05, 0.06, 0.07, 0.08, -0.01];

    #[test]
    fn all_wins_is_supported() {
        let o = one(hyp("tput", &ALL_WINS, 0.01));
        assert_eq!(o.decision, Decision::Supported);
        let t = o.sign_test.unwrap();
        assert_eq!((t.wins, t.p_value), (10, 1.0 / 1024.0));
        assert_eq!(o.holm.adjusted_p, 1.0 / 1024.0);
        let iv = o.interval.unwrap();
        assert_eq!((iv.lower, iv.upper), (0.03, 0.08));
    }

    #[test]
    fn nine_of_ten_is_supported_alone_but_not_in_a_family_of_five() {
        let o = one(hyp("tput", &NINE_OF_TEN, 0.01));
        assert_eq!(o.decision, Decision::Supported);
        assert_eq!(o.sign_test.unwrap().p_value, 11.0 / 1024.0);

        let hs: Vec<_> = ["a", "b", "c", "d", "e"].iter().map(|id| hyp(id, &NINE_OF_TEN, 0.01)).collect();
        for o in family(&hs) {
            // 5 * 11/1024 = 0.0537 > 0.05.
            assert_eq!(o.holm.adjusted_p, 55.0 / 1024.0);
            assert_eq!(o.decision, not_supported(&[Rule::HolmSignTest]));
        }
    }

    #[test]
    fn a_failed_request_blocks_even_a_clear_win() {
        let mut h = hyp("tput", &ALL_WINS, 0.01);
        h.failed_requests = 1;
        let o = one(h);
        assert_eq!(o.decision, Decision::Blocked { failed_requests: 1 });
        // The numbers are still kept beside the claim.
        assert_eq!(o.sign_test.unwrap().p_value, 1.0 / 1024.0);
        assert!(o.holm.reject);
    }

    #[test]
    fn blocked_without_effects_stays_in_the_family_with_p_one() {
        let blocked = HypothesisInput { id: "lat", effects: &[], threshold: 0.05, failed_requests: 7 };
        // Four hypotheses at 11/1024 plus the blocked one: m = 5, so
        // 5 * 11/1024 > 0.05; without it 4 * 11/1024 = 0.043 would pass.
        let mut hs: Vec<_> = ["a", "b", "c", "d"].iter().map(|id| hyp(id, &NINE_OF_TEN, 0.01)).collect();
        hs.push(blocked);
        let out = family(&hs);
        assert_eq!(out[4].decision, Decision::Blocked { failed_requests: 7 });
        assert_eq!((out[4].holm.p_value, out[4].holm.adjusted_p), (1.0, 1.0));
        assert!(out[4].sign_test.is_none() && out[4].interval.is_none());
        for o in &out[..4] {
            assert_eq!(o.decision, not_supported(&[Rule::HolmSignTest]));
        }
        let out = family(&hs[..4]);
        for o in &out {
            assert_eq!(o.decision, Decision::Supported);
        }
    }

    #[test]
    fn a_tie_counts_as_a_non_win() {
        // 9 wins + 1 tie: p = 11/1024, still supported alone.
        let mut e = ALL_WINS;
        e[0] = 0.0;
        let o = one(hyp("t", &e, 0.01));
        let t = o.sign_test.unwrap();
        assert_eq!((t.wins, t.ties, t.p_value), (9, 1, 11.0 / 1024.0));
        assert_eq!(o.decision, Decision::Supported);
        // 8 wins + 2 ties: p = 56/1024 > 0.05. Dropping ties (n = 8, p =
        // 1/256) would have wrongly supported it.
        e[1] = 0.0;
        let o = one(hyp("t", &e, 0.01));
        assert_eq!(o.sign_test.unwrap().p_value, 56.0 / 1024.0);
        assert_eq!(o.decision, not_supported(&[Rule::HolmSignTest]));
    }

    #[test]
    fn median_below_threshold_is_named() {
        let small = [0.001; 10];
        let o = one(hyp("tput", &small, 0.01));
        assert!(o.holm.reject);
        assert_eq!(o.decision, not_supported(&[Rule::MedianThreshold]));
        // Reaching the threshold exactly passes.
        let o = one(hyp("tput", &[0.01; 10], 0.01));
        assert_eq!(o.decision, Decision::Supported);
    }

    #[test]
    fn both_rules_can_fail_together() {
        let e = [0.001, -0.01, 0.002, -0.02, 0.0, 0.003, -0.001, 0.001, -0.003, 0.0];
        let o = one(hyp("lat", &e, 0.05));
        assert_eq!(o.decision, not_supported(&[Rule::HolmSignTest, Rule::MedianThreshold]));
    }

    #[test]
    fn decide_rule_table() {
        assert_eq!(decide(true, true, 0), Decision::Supported);
        assert_eq!(decide(false, true, 0), not_supported(&[Rule::HolmSignTest]));
        assert_eq!(decide(true, false, 0), not_supported(&[Rule::MedianThreshold]));
        assert_eq!(decide(false, false, 0), not_supported(&[Rule::HolmSignTest, Rule::MedianThreshold]));
        for (r, m) in [(true, true), (false, false)] {
            assert_eq!(decide(r, m, 3), Decision::Blocked { failed_requests: 3 });
        }
    }

    #[test]
    fn serde_is_snake_case_and_never_says_equivalent() {
        let cases = [
            (Decision::Supported, r#"{"claim":"supported"}"#),
            (
                not_supported(&[Rule::HolmSignTest, Rule::MedianThreshold]),
                r#"{"claim":"not_supported","failed_rules":["holm_sign_test","median_threshold"]}"#,
            ),
            (Decision::Blocked { failed_requests: 2 }, r#"{"claim":"blocked","failed_requests":2}"#),
        ];
        for (d, json) in cases {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(s, json);
            assert!(!s.to_lowercase().contains("equivalen"));
            assert_eq!(serde_json::from_str::<Decision>(&s).unwrap(), d);
        }
        let o = one(hyp("tput", &ALL_WINS, 0.01));
        let s = serde_json::to_string(&o).unwrap();
        let back: HypothesisOutcome = serde_json::from_str(&s).unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn errors_name_the_hypothesis() {
        let r = decide_family(&[hyp("tput", &[], 0.01)], ALPHA, 0.95);
        assert_eq!(
            r,
            Err(StatsError::Hypothesis {
                id: "tput".into(),
                source: Box::new(StatsError::Empty { what: "block effects" })
            })
        );
        let r = decide_family(&[hyp("lat", &[0.1, f64::NAN], 0.05)], ALPHA, 0.95);
        assert!(matches!(r, Err(StatsError::Hypothesis { ref id, .. }) if id == "lat"));
        assert!(decide_family(&[hyp("t", &ALL_WINS, 0.01)], 0.0, 0.95).is_err());
        assert!(decide_family(&[hyp("t", &ALL_WINS, 0.01)], ALPHA, 1.0).is_err());
        assert_eq!(decide_family(&[], ALPHA, 0.95).unwrap(), vec![]);
    }
}
