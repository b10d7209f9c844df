//! Block-to-block noise from an A/A or pilot evidence directory: for each hypothesis
//! of that study (two arms measured in the same fresh-server blocks; in an A/A study
//! the same configuration twice), the per-block paired log-ratio
//! ln(candidate / control) of its metric, its mean, its sample SD (n - 1) and a
//! one-sided 90% upper confidence bound of the SD (chi-square, normal model). The SD
//! is taken about the mean, so a constant difference between the two arms does not
//! count as noise. Reads the evidence only through `report::load` and
//! `report::analyse` (the same recomputation from raw records that `harness report`
//! does). Must not write anything.

use std::path::Path;

use serde::Serialize;
use statrs::distribution::{ChiSquared, ContinuousCDF};

use super::PowerError;
use crate::analysis::{HypothesisReport, load};
use crate::plan::{Hypothesis, Metric};

/// Confidence of the SD's upper bound.
pub const SD_UPPER_CONFIDENCE: f64 = 0.9;

/// The noise of one pair of arms on one metric in one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoiseEstimate {
    /// The evidence's hypothesis the pairs come from.
    pub source: String,
    pub cell: String,
    pub metric: Metric,
    pub candidate: String,
    pub control: String,
    /// Confirmation blocks with both values.
    pub blocks: Vec<u32>,
    /// ln(candidate / control) per block, in block order.
    pub log_ratios: Vec<f64>,
    pub mean: f64,
    /// Sample SD (n - 1) of the log-ratios about their mean.
    pub sd: f64,
    /// One-sided `SD_UPPER_CONFIDENCE` upper bound: sd * sqrt((n - 1) / chi2_{1-c}(n - 1)).
    pub sd_upper: f64,
    /// Failed requests in that cell in the noise study (either arm).
    pub failed_requests: u64,
    /// In-study pilot noise only (`pilot_noise`): the metric's value in each pilot
    /// run of the control, in the order of `blocks`; empty for A/A pairs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<f64>,
}

/// Mean, sample SD and the upper bound of the SD of `x` (at least 2 values).
pub fn spread(x: &[f64]) -> Option<(f64, f64, f64)> {
    if x.len() < 2 || x.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let chi = ChiSquared::new(n - 1.0).ok()?.inverse_cdf(1.0 - SD_UPPER_CONFIDENCE);
    Some((mean, sd, sd * ((n - 1.0) / chi).sqrt()))
}

fn estimate(h: &HypothesisReport) -> Result<NoiseEstimate, PowerError> {
    let mut blocks = Vec::new();
    let mut log_ratios = Vec::new();
    for b in &h.blocks {
        if let (Some(control), Some(candidate)) = (b.control, b.candidate)
            && control > 0.0
            && candidate > 0.0
        {
            blocks.push(b.block);
            log_ratios.push((candidate / control).ln());
        }
    }
    let Some((mean, sd, sd_upper)) = spread(&log_ratios) else {
        return Err(PowerError::TooFewBlocks { pair: h.name.clone(), blocks: log_ratios.len() });
    };
    Ok(NoiseEstimate {
        source: h.name.clone(),
        cell: h.cell.clone(),
        metric: h.metric,
        candidate: h.candidate.clone(),
        control: h.control.clone(),
        blocks,
        log_ratios,
        mean,
        sd,
        sd_upper,
        failed_requests: h.failed_requests,
        values: Vec::new(),
    })
}

/// The noise study: its name and every hypothesis's noise estimate (or why none).
pub struct NoiseStudy {
    pub study: String,
    pub plan_sha256: String,
    pub estimates: Vec<Result<NoiseEstimate, String>>,
}

/// Reads the noise evidence directory `dir`.
pub fn read(dir: &Path) -> Result<NoiseStudy, PowerError> {
    let l = load(dir)?;
    let a = l.analyse(&[])?;
    if a.hypotheses.is_empty() {
        return Err(PowerError::NoPairs { dir: dir.to_path_buf() });
    }
    Ok(NoiseStudy {
        study: l.frozen.plan.study.name.clone(),
        plan_sha256: l.frozen.sha256.clone(),
        estimates: a.hypotheses.iter().map(|h| estimate(h).map_err(|e| e.to_string())).collect(),
    })
}

impl NoiseStudy {
    /// The estimate for a plan hypothesis: the noise pair of the same name and metric,
    /// else the first on the same metric in the same cell, else the only pair on the
    /// same metric. Errors name what exists.
    pub fn for_hypothesis(&self, h: &Hypothesis) -> Result<&NoiseEstimate, PowerError> {
        let ok: Vec<&NoiseEstimate> = self.estimates.iter().filter_map(|e| e.as_ref().ok()).collect();
        if let Some(e) = ok.iter().find(|e| e.metric == h.metric && e.source == h.name) {
            return Ok(e);
        }
        if let Some(e) = ok.iter().find(|e| e.metric == h.metric && e.cell == h.cell) {
            return Ok(e);
        }
        let same_metric: Vec<&&NoiseEstimate> = ok.iter().filter(|e| e.metric == h.metric).collect();
        if let [one] = same_metric.as_slice() {
            return Ok(one);
        }
        let available = self
            .estimates
            .iter()
            .map(|e| match e {
                Ok(e) => format!("{} ({} in {})", e.source, e.metric.as_str(), e.cell),
                Err(why) => format!("unusable: {why}"),
            })
            .collect::<Vec<_>>()
            .join("; ");
        Err(PowerError::NoMatch {
            hypothesis: h.name.clone(),
            metric: h.metric.as_str().to_string(),
            cell: h.cell.clone(),
            ambiguous: same_metric.len() > 1,
            available,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_hand_computation() {
        // Values 0.01, -0.01, 0.03: mean 0.01, deviations 0, -0.02, 0.02, SD 0.02.
        let (mean, sd, upper) = spread(&[0.01, -0.01, 0.03]).unwrap();
        assert!((mean - 0.01).abs() < 1e-15 && (sd - 0.02).abs() < 1e-15, "{mean} {sd}");
        // chi2_0.10(2) = -2 ln(0.9) = 0.210721: upper = 0.02 * sqrt(2 / 0.210721).
        let want = 0.02 * (2.0 / (-2.0 * 0.9f64.ln())).sqrt();
        assert!((upper - want).abs() < 1e-9, "{upper} vs {want}");
        assert!(spread(&[0.1]).is_none());
        assert!(spread(&[0.1, f64::NAN]).is_none());
    }
}
