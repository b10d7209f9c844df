//! The tuning section of a report (plans with `[tuning]`, see `plan::tuning`): one
//! line per (rate, configuration) in the form users of configuration-tuning reports
//! expect ("Rate 4: baseline 2.33 s -> candidate 1.90 s (1.23x faster) [interval],
//! decision"), the recommended configuration and how the configurations were
//! chosen. Pure presentation of the analysis: every value comes from the tuning
//! hypotheses (`HypothesisReport`), which are ordinary members of the Holm family;
//! this module adds only the recommendation rule:
//! - a configuration is *supported* when its primary-metric claim is supported at
//!   every cell of the rate profile;
//! - its score is its smallest median block effect over the profile (its worst
//!   rate); the recommendation is the supported configuration with the highest
//!   score (the first in plan order on a tie), or none.
//!
//! Must not compute effects, tests or intervals (the analysis does).

use std::fmt::Write;

use serde::Serialize;

use super::text::short_decision;
use crate::analysis::claims::{Analysis, Claim, HypothesisReport};
use crate::plan::{Metric, MetricKind, Plan, ResolvedCell, ResolvedLoad, Tuning};
use crate::stats::median;

/// The recommendation rule as the report states it.
pub const RULE: &str = "a configuration is supported when its primary-metric claim is supported at every rate \
     of the profile; the recommendation is the supported configuration whose smallest median block effect over \
     the profile (its worst rate) is largest (the first in plan order on a tie); none when no configuration is \
     supported";

/// What the report and evidence.json say about a tuning study.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuningSummary {
    pub baseline: String,
    pub candidates: Vec<String>,
    pub cells: Vec<String>,
    pub primary_metric: Metric,
    pub selection: String,
    pub rule: &'static str,
    /// Per candidate, in plan order.
    pub configurations: Vec<ConfigurationScore>,
    /// The recommended candidate, `None`: none supported.
    pub recommended: Option<String>,
}

/// One candidate configuration on the primary metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigurationScore {
    pub candidate: String,
    /// Supported at every cell of the profile.
    pub supported: bool,
    /// Smallest median block effect over the profile (`None`: a cell without one).
    pub worst_median_effect: Option<f64>,
}

fn find<'a>(a: &'a Analysis, metric: Metric, cell: &str, cand: &str) -> Option<&'a HypothesisReport> {
    let name = Tuning::hypothesis_name(metric, cell, cand);
    a.hypotheses.iter().find(|h| h.name == name)
}

/// The summary of a plan with `[tuning]` (`None` without).
pub fn summarize(plan: &Plan, a: &Analysis) -> Option<TuningSummary> {
    let t = plan.tuning.as_ref()?;
    let primary = t.primary();
    let configurations: Vec<ConfigurationScore> = t
        .candidates
        .iter()
        .map(|cand| {
            let hs: Vec<Option<&HypothesisReport>> = t.cells.iter().map(|c| find(a, primary, c, cand)).collect();
            let supported = hs.iter().all(|h| h.is_some_and(|h| h.claim == Claim::Supported));
            let medians: Option<Vec<f64>> =
                hs.iter().map(|h| h.and_then(|h| h.median.as_ref()).map(|m| m.median)).collect();
            let worst = medians.and_then(|m| m.into_iter().reduce(f64::min));
            ConfigurationScore { candidate: cand.clone(), supported, worst_median_effect: worst }
        })
        .collect();
    let mut recommended: Option<&ConfigurationScore> = None;
    for c in configurations.iter().filter(|c| c.supported) {
        let better = match (recommended.and_then(|r| r.worst_median_effect), c.worst_median_effect) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(best), Some(x)) => x > best,
        };
        if recommended.is_none() || better {
            recommended = Some(c);
        }
    }
    Some(TuningSummary {
        baseline: t.baseline.clone(),
        candidates: t.candidates.clone(),
        cells: t.cells.clone(),
        primary_metric: primary,
        selection: t.selection.clone(),
        rule: RULE,
        recommended: recommended.map(|c| c.candidate.clone()),
        configurations,
    })
}

/// The line `harness run` and `harness report` print after the claims (empty
/// without `[tuning]`).
pub fn terminal_line(plan: &Plan, a: &Analysis) -> String {
    match summarize(plan, a) {
        Some(s) => format!(
            "tuning: recommended configuration: {} (against {}, on {}; see report.md)\n",
            s.recommended.as_deref().unwrap_or("none supported"),
            s.baseline,
            s.primary_metric.as_str()
        ),
        None => String::new(),
    }
}

/// A metric value with its unit: latencies in ms (seconds from 1 s up).
fn value(metric: Metric, v: Option<f64>) -> String {
    let Some(v) = v else { return "n/a".into() };
    match metric {
        Metric::ThroughputRps | Metric::GoodputRps => format!("{v:.3} req/s"),
        Metric::OutputTokensPerS => format!("{v:.1} tok/s"),
        _ if v >= 1000.0 => format!("{:.3} s", v / 1000.0),
        _ => format!("{v:.1} ms"),
    }
}

/// The factor of a paired effect: control / candidate for latency (1 / (1 - e)),
/// candidate / control for throughput (1 + e). `None` when it has no finite value.
pub fn factor(kind: MetricKind, e: f64) -> Option<f64> {
    let f = match kind {
        MetricKind::Latency => 1.0 / (1.0 - e),
        MetricKind::Throughput => 1.0 + e,
    };
    (f.is_finite() && f > 0.0).then_some(f)
}

fn factor_text(kind: MetricKind, e: Option<f64>) -> String {
    let (up, down) = match kind {
        MetricKind::Latency => ("faster", "slower"),
        MetricKind::Throughput => ("higher", "lower"),
    };
    match e.and_then(|e| factor(kind, e)) {
        Some(f) if f >= 1.0 => format!("{f:.2}x {up}"),
        Some(f) => format!("{:.2}x {down}", 1.0 / f),
        None => "n/a".into(),
    }
}

/// The median interval `[lower, upper]` of the effects as factors in the median's
/// direction: "1.20x-1.31x faster", or for a slower median "1.05x-1.12x slower".
fn interval_text(kind: MetricKind, median: Option<f64>, lower: f64, upper: f64) -> String {
    let (lo, hi) = (factor(kind, lower), factor(kind, upper));
    let slower = median.and_then(|m| factor(kind, m)).is_some_and(|f| f < 1.0);
    let word = match (kind, slower) {
        (MetricKind::Latency, false) => "faster",
        (MetricKind::Latency, true) => "slower",
        (MetricKind::Throughput, false) => "higher",
        (MetricKind::Throughput, true) => "lower",
    };
    let x = |f: Option<f64>| f.map_or("n/a".into(), |f| format!("{f:.2}x"));
    if slower {
        // Inverted, so the smaller slowdown comes first.
        format!("{}-{} {word}", x(hi.map(|f| 1.0 / f)), x(lo.map(|f| 1.0 / f)))
    } else {
        format!("{}-{} {word}", x(lo), x(hi))
    }
}

fn rate_label(cell: &str, resolved: &[ResolvedCell]) -> String {
    match resolved.iter().find(|c| c.name == cell).map(|c| c.load) {
        Some(ResolvedLoad::Open { rate_rps, .. }) => format!("Rate {rate_rps} req/s ({cell})"),
        Some(ResolvedLoad::Closed { concurrency }) => format!("Concurrency {concurrency} ({cell})"),
        _ => format!("Cell {cell}"),
    }
}

fn block_median(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.flatten().collect();
    median(&v).ok()
}

/// One line per (cell, configuration) of `metric`.
fn lines(o: &mut String, t: &Tuning, a: &Analysis, metric: Metric, resolved: &[ResolvedCell]) {
    let kind = metric.kind();
    for cell in &t.cells {
        for cand in &t.candidates {
            let Some(h) = find(a, metric, cell, cand) else { continue };
            let base = block_median(h.blocks.iter().map(|b| b.control));
            let cv = block_median(h.blocks.iter().map(|b| b.candidate));
            let iv = h.interval.as_ref().map_or(String::new(), |i| {
                let median = h.median.as_ref().map(|m| m.median);
                format!(" [{}; {:.1}% interval]", interval_text(kind, median, i.lower, i.upper), i.coverage * 100.0)
            });
            let _ = writeln!(
                o,
                "- {}: {} {} -> {} {} ({}){iv}, {}",
                rate_label(cell, resolved),
                t.baseline,
                value(metric, base),
                cand,
                value(metric, cv),
                factor_text(kind, h.median.as_ref().map(|m| m.median)),
                short_decision(h)
            );
        }
    }
}

/// The section, at the top of report.md for a tuning study (after the power summary
/// when the plan has pilots).
pub fn markdown(o: &mut String, plan: &Plan, a: &Analysis, resolved: &[ResolvedCell]) {
    let (Some(t), Some(s)) = (plan.tuning.as_ref(), summarize(plan, a)) else { return };
    let _ = writeln!(o, "## Tuning: recommended configuration\n");
    match &s.recommended {
        Some(r) => {
            let _ = writeln!(o, "**Recommended configuration: {r}** (against the baseline arm `{}`).\n", t.baseline);
        }
        None => {
            let _ = writeln!(
                o,
                "**Recommended configuration: none supported**: no candidate beat baseline {} at every rate.\n",
                t.baseline
            );
        }
    }
    let _ = writeln!(
        o,
        "How the configurations were chosen (`tuning.selection`): {}\n\nOnly these {} configurations were \
         measured: a recommendation among them is the best of what was tried, not a search of the whole \
         configuration space (choosing configurations by pruning finds a local optimum at best).\n",
        t.selection,
        t.candidates.len()
    );
    let primary = s.primary_metric;
    let _ = writeln!(
        o,
        "Primary metric `{}`: per rate, baseline -> candidate as medians across the {} confirmation blocks, the \
         factor from the median paired block effect ({}), its distribution-free median interval, and the claim \
         (exact sign test, Holm over the whole family of {} hypotheses at alpha {}, median >= {:.2}%).\n",
        primary.as_str(),
        a.confirmation_blocks,
        match primary.kind() {
            MetricKind::Latency => "control / candidate = 1 / (1 - e)",
            MetricKind::Throughput => "candidate / control = 1 + e",
        },
        a.hypotheses.len(),
        a.alpha.map_or("n/a".into(), |x| x.to_string()),
        t.threshold * 100.0
    );
    lines(o, t, a, primary, resolved);
    for &m in t.metrics.iter().skip(1) {
        let _ = writeln!(o, "\nAlso tested, `{}`:\n", m.as_str());
        lines(o, t, a, m, resolved);
    }
    let _ = writeln!(o, "\nRecommendation rule: {}.\n", s.rule);
    for c in &s.configurations {
        let worst = c.worst_median_effect.map_or("n/a".into(), |e| factor_text(primary.kind(), Some(e)));
        let _ = writeln!(
            o,
            "- {}: {} (worst rate: {worst})",
            c.candidate,
            if c.supported { "supported at every rate" } else { "not supported at every rate" }
        );
        if let Some(why) = t.rationale.get(&c.candidate) {
            let _ = writeln!(o, "  - rationale stated in the plan before the run (`tuning.rationale`): {why}");
        }
    }
    o.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_follow_the_metric_kind() {
        // 1 - 1.65 / 2.09 = 0.2105...: 2.09 / 1.65 = 1.27x faster.
        let e = 1.0 - 1.65 / 2.09;
        assert!((factor(MetricKind::Latency, e).unwrap() - 2.09 / 1.65).abs() < 1e-12);
        assert_eq!(factor_text(MetricKind::Latency, Some(e)), "1.27x faster");
        // A slower candidate: 2.69 s against 2.62 s is 1.03x slower.
        assert_eq!(factor_text(MetricKind::Latency, Some(1.0 - 2.69 / 2.62)), "1.03x slower");
        assert_eq!(factor_text(MetricKind::Throughput, Some(0.25)), "1.25x higher");
        assert_eq!(factor(MetricKind::Latency, 1.0), None);
        // Intervals read in the median's direction.
        let (lo, hi) = (1.0 - 1.0 / 1.20, 1.0 - 1.0 / 1.31);
        assert_eq!(interval_text(MetricKind::Latency, Some(1.0 - 1.0 / 1.26), lo, hi), "1.20x-1.31x faster");
        let (lo, hi) = (1.0 - 1.12, 1.0 - 1.05);
        assert_eq!(interval_text(MetricKind::Latency, Some(1.0 - 1.08), lo, hi), "1.05x-1.12x slower");
        assert_eq!(value(Metric::E2eMean, Some(2090.0)), "2.090 s");
        assert_eq!(value(Metric::TtftMean, Some(41.12)), "41.1 ms");
    }
}
