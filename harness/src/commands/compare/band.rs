//! The numbers of a comparison, from per-server and per-cell observations only: the
//! noise band and the candidate/reference ratios beside it. Pure: no I/O, no clocks.
//!
//! Definitions (restated in `compare.md`):
//! - Noise ratio: for a noise arm X, noise round r, cell c and measure m,
//!   value(X measured second, "X.b") / value(X measured first, "X.a"), both on fresh
//!   servers. Noise band of (c, m): the largest |noise ratio - 1| over the noise arms
//!   and rounds (failure-free pairs only); `None` without such a pair.
//! - Round ratio: in comparison round (block) b, value(candidate) / value(reference).
//!   The reported ratio is the ordinary sample median of the round ratios (mean of
//!   the two middle values for an even count); min and max are shown beside it. Arm
//!   values are medians over rounds the same way.
//! - Verdict: "blocked" if any request of the cell failed on either arm in any round;
//!   else "within noise" when |median ratio - 1| <= the noise band; else "candidate
//!   better" or "candidate worse" by the measure's direction (higher is better for
//!   tokens/s, lower for latencies, cold start and RSS) only when every round
//!   ratio lies outside the band on the same side; otherwise "inconclusive".

use crate::evidence::ServerRecord;
use crate::metrics::CellSummary;
use crate::plan::compare::CompareSpec;

pub use crate::evidence::{Measure, NoiseRatio, Obs, Phase, RoundRatio, Row};

/// A cell measure's value in a cell's summary (`None` for the server measures).
pub fn cell_value(m: Measure, s: &CellSummary) -> Option<f64> {
    match m {
        Measure::TotalTokensPerS => Some(s.total_token_throughput_tps),
        Measure::OutputTokensPerS => Some(s.output_token_throughput_tps),
        Measure::TtftP50Ms => s.ttft_p50_ms,
        Measure::TtftP99Ms => s.ttft_p99_ms,
        Measure::ItlP50Ms => s.itl_p50_ms,
        Measure::ItlP99Ms => s.itl_p99_ms,
        Measure::ColdStartS | Measure::PeakRssMib => None,
    }
}

/// A server measure's value in a server's record (`None` for the cell measures).
pub fn unit_value(m: Measure, u: &ServerRecord) -> Option<f64> {
    match m {
        Measure::ColdStartS => u.startup_s,
        Measure::PeakRssMib => u.peak_rss_bytes.map(|b| b as f64 / (1024.0 * 1024.0)),
        _ => None,
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() { None } else { crate::stats::median(v).ok() }
}

fn find<'a>(
    obs: &'a [Obs],
    phase: Phase,
    round: u32,
    second: bool,
    arm: &str,
    key: &str,
    m: Measure,
) -> Option<&'a Obs> {
    obs.iter().find(|o| {
        o.phase == phase && o.round == round && o.second == second && o.arm == arm && o.key == key && o.measure == m
    })
}

fn ratio(num: &Obs, den: &Obs) -> Option<(f64, f64, f64)> {
    let (a, b) = (den.value?, num.value?);
    (num.failed == 0 && den.failed == 0 && a > 0.0 && a.is_finite() && b.is_finite()).then(|| (a, b, b / a))
}

/// The row of (key, measure): noise band and round ratios.
pub fn row(obs: &[Obs], spec: &CompareSpec, key: &str, concurrency: Option<u32>, m: Measure) -> Row {
    let mine = |o: &&Obs| o.key == key && o.measure == m;
    let mut noise_ratios = Vec::new();
    for arm in spec.noise_arm_names() {
        for r in 0..spec.noise_rounds {
            let a = find(obs, Phase::Noise, r, false, arm, key, m);
            let b = find(obs, Phase::Noise, r, true, arm, key, m);
            if let Some((first, second, ratio)) = a.zip(b).and_then(|(a, b)| ratio(b, a)) {
                noise_ratios.push(NoiseRatio { arm: arm.to_string(), round: r, first, second, ratio });
            }
        }
    }
    let noise_band = noise_ratios.iter().map(|n| (n.ratio - 1.0).abs()).reduce(f64::max);
    let mut blocks: Vec<u32> = obs.iter().filter(mine).filter(|o| o.phase == Phase::Round).map(|o| o.round).collect();
    blocks.sort_unstable();
    blocks.dedup();
    let (mut refs, mut cands, mut rounds, mut failed) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for &b in &blocks {
        let r = find(obs, Phase::Round, b, false, &spec.reference, key, m);
        let c = find(obs, Phase::Round, b, false, &spec.candidate, key, m);
        failed += r.map_or(0, |o| o.failed) + c.map_or(0, |o| o.failed);
        refs.extend(r.and_then(|o| o.value));
        cands.extend(c.and_then(|o| o.value));
        if let Some((reference, candidate, ratio)) = r.zip(c).and_then(|(r, c)| ratio(c, r)) {
            rounds.push(RoundRatio { round: b, reference, candidate, ratio });
        }
    }
    let ratios: Vec<f64> = rounds.iter().map(|r| r.ratio).collect();
    let ratio_median = median(&ratios);
    let ratio_min = ratios.iter().copied().reduce(f64::min);
    let ratio_max = ratios.iter().copied().reduce(f64::max);
    let verdict = verdict(m, failed, ratio_median, noise_band, ratio_min.zip(ratio_max));
    Row {
        key: key.to_string(),
        concurrency,
        measure: m,
        reference_median: median(&refs),
        candidate_median: median(&cands),
        ratio_median,
        ratio_min,
        ratio_max,
        rounds,
        noise_ratios,
        noise_band,
        failed,
        verdict,
    }
}

fn verdict(m: Measure, failed: u64, ratio: Option<f64>, band: Option<f64>, range: Option<(f64, f64)>) -> String {
    if failed > 0 {
        return format!("blocked: {failed} failed requests");
    }
    let Some(r) = ratio else { return "no ratio".into() };
    let Some(band) = band else { return "no noise band".into() };
    if (r - 1.0).abs() <= band {
        return "within noise".into();
    }
    // A claim needs every round outside the band, on the same side.
    let Some((lo, hi)) = range else { return "no ratio".into() };
    let side = if lo > 1.0 + band {
        1.0
    } else if hi < 1.0 - band {
        -1.0
    } else {
        return "inconclusive: not every round is outside the band".into();
    };
    let better = if m.higher_is_better() { side > 0.0 } else { side < 0.0 };
    if better { "candidate better" } else { "candidate worse" }.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec() -> CompareSpec {
        CompareSpec {
            reference: "ref".into(),
            candidate: "cand".into(),
            noise_arms: crate::plan::compare::NoiseArms::Reference,
            noise_rounds: 1,
            parity_prompts: 1,
            parity_input_tokens: 1,
            parity_output_tokens: 1,
            parity_prefix_tokens: None,
            dialects: BTreeMap::new(),
        }
    }

    fn o(phase: Phase, round: u32, second: bool, arm: &str, m: Measure, v: f64) -> Obs {
        Obs { phase, round, second, arm: arm.into(), key: "c1".into(), measure: m, value: Some(v), failed: 0 }
    }

    #[test]
    fn band_ratios_and_verdicts() {
        let t = Measure::TotalTokensPerS;
        let mut obs = vec![
            o(Phase::Noise, 0, false, "ref", t, 100.0),
            o(Phase::Noise, 0, true, "ref", t, 102.0),
            o(Phase::Round, 0, false, "ref", t, 100.0),
            o(Phase::Round, 0, false, "cand", t, 101.0),
            o(Phase::Round, 1, false, "cand", t, 100.0),
            o(Phase::Round, 1, false, "ref", t, 98.0),
        ];
        let r = row(&obs, &spec(), "c1", Some(1), t);
        assert!((r.noise_band.unwrap() - 0.02).abs() < 1e-12);
        assert_eq!(r.rounds.len(), 2);
        let want = (1.01 + 100.0 / 98.0) / 2.0;
        assert!((r.ratio_median.unwrap() - want).abs() < 1e-12);
        assert_eq!(r.verdict, "within noise");
        assert_eq!(r.reference_median, Some(99.0));
        // Outside the band, in the measure's direction.
        obs[1].value = Some(100.5);
        assert_eq!(row(&obs, &spec(), "c1", Some(1), t).verdict, "candidate better");
        let l = Measure::TtftP50Ms;
        let lat: Vec<Obs> = obs.iter().map(|x| Obs { measure: l, ..x.clone() }).collect();
        assert_eq!(row(&lat, &spec(), "c1", Some(1), l).verdict, "candidate worse");
        obs[4].value = Some(80.0);
        assert_eq!(row(&obs, &spec(), "c1", Some(1), t).verdict, "inconclusive: not every round is outside the band");
        obs[4].value = Some(100.0);
        // A failure blocks the row.
        obs[3].failed = 2;
        let b = row(&obs, &spec(), "c1", Some(1), t);
        assert_eq!((b.verdict.as_str(), b.rounds.len()), ("blocked: 2 failed requests", 1));
    }
}
