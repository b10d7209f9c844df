//! Paired comparisons of one candidate against one control on the same items:
//! loss/gain counts with the one-sided Clopper-Pearson gate (GSM, retrieval), and
//! the one-sided Student-t upper bound of a mean paired difference (NLL). Owns the
//! gate arithmetic. Must not read files or send requests: callers pass outcomes in.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::QualityError;
use crate::stats::clopper_pearson_upper;

/// Losses and gains of a candidate against a control over items scored right/wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedCounts {
    pub n: u64,
    /// Control right, candidate wrong.
    pub losses: u64,
    /// Control wrong, candidate right.
    pub gains: u64,
    pub both_right: u64,
    pub both_wrong: u64,
    pub candidate_right: u64,
    pub control_right: u64,
    /// Item indices of the losses (for the report).
    pub loss_items: Vec<u64>,
}

/// Counts per item; `candidate[i]` and `control[i]` are the same item.
pub fn paired_counts(candidate: &[bool], control: &[bool]) -> Result<PairedCounts, QualityError> {
    if candidate.len() != control.len() {
        return Err(QualityError::Mismatch(format!(
            "paired scores cover different items: {} candidate vs {} control",
            candidate.len(),
            control.len()
        )));
    }
    let mut c = PairedCounts {
        n: candidate.len() as u64,
        losses: 0,
        gains: 0,
        both_right: 0,
        both_wrong: 0,
        candidate_right: 0,
        control_right: 0,
        loss_items: Vec::new(),
    };
    for (i, (&cand, &ctrl)) in candidate.iter().zip(control).enumerate() {
        c.candidate_right += u64::from(cand);
        c.control_right += u64::from(ctrl);
        match (cand, ctrl) {
            (true, true) => c.both_right += 1,
            (false, false) => c.both_wrong += 1,
            (false, true) => {
                c.losses += 1;
                c.loss_items.push(i as u64);
            }
            (true, false) => c.gains += 1,
        }
    }
    Ok(c)
}

/// The loss-rate gate: one-sided Clopper-Pearson upper bound of losses / n.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossGate {
    pub counts: PairedCounts,
    pub confidence: f64,
    /// Upper bound on the probability of a loss transition (not net accuracy change).
    pub loss_upper: f64,
    pub limit: f64,
    /// `loss_upper < limit`.
    pub pass: bool,
    pub rule: String,
}

pub fn loss_gate(counts: PairedCounts, confidence: f64, limit: f64) -> Result<LossGate, QualityError> {
    let loss_upper = clopper_pearson_upper(counts.losses, counts.n, confidence)
        .map_err(|e| QualityError::Stats(format!("Clopper-Pearson bound: {e}")))?;
    let rule = format!(
        "one-sided {:.0}% Clopper-Pearson upper bound of losses/N ({}/{}) = {:.3}% must be below {:.3}%",
        confidence * 100.0,
        counts.losses,
        counts.n,
        loss_upper * 100.0,
        limit * 100.0
    );
    Ok(LossGate { pass: loss_upper < limit, counts, confidence, loss_upper, limit, rule })
}

/// The NLL gate: one-sided Student-t upper bound of the mean paired difference
/// (candidate - control, nats per token) over documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeanGate {
    pub n: u64,
    pub mean: f64,
    /// Sample standard deviation (n - 1 denominator).
    pub sd: f64,
    pub confidence: f64,
    /// t quantile at `confidence` with n - 1 degrees of freedom.
    pub t_quantile: f64,
    pub upper: f64,
    pub limit: f64,
    /// `upper < limit`.
    pub pass: bool,
    /// The interval, in words: `(-inf, upper]`, how it was computed.
    pub interval: String,
}

pub fn mean_gate(diffs: &[f64], confidence: f64, limit: f64) -> Result<MeanGate, QualityError> {
    let n = diffs.len();
    if n < 2 {
        return Err(QualityError::Stats(format!("the NLL gate needs at least 2 documents, got {n}")));
    }
    if diffs.iter().any(|d| !d.is_finite()) {
        return Err(QualityError::Stats("a paired NLL difference is not finite".into()));
    }
    let mean = diffs.iter().sum::<f64>() / n as f64;
    let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let sd = var.sqrt();
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
        .map_err(|e| QualityError::Stats(format!("Student t: {e}")))?
        .inverse_cdf(confidence);
    let upper = mean + t * sd / (n as f64).sqrt();
    let interval = format!(
        "one-sided {:.0}% Student-t interval for the mean paired NLL difference (candidate - control) over {n} \
         documents: (-inf, {upper:+.6}] = mean {mean:+.6} + t({confidence}, {}) {t:.4} * sd {sd:.6} / sqrt({n}); \
         must be below {limit:.6}",
        confidence * 100.0,
        n - 1
    );
    Ok(MeanGate { n: n as u64, mean, sd, confidence, t_quantile: t, upper, limit, pass: upper < limit, interval })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_hand() {
        let cand = [true, false, true, false, true, false];
        let ctrl = [true, true, false, false, true, true];
        let c = paired_counts(&cand, &ctrl).unwrap();
        assert_eq!((c.n, c.losses, c.gains, c.both_right, c.both_wrong), (6, 2, 1, 2, 1));
        assert_eq!((c.candidate_right, c.control_right, c.loss_items.clone()), (3, 4, vec![1, 5]));
        assert!(paired_counts(&cand, &ctrl[..5]).is_err());
    }

    #[test]
    fn loss_gate_reference_figures() {
        // DESIGN section 7: 12, 11 and 8 losses of 1,319 give 1.470%, 1.377%, 1.092%.
        for (losses, percent) in [(12u64, 1.470), (11, 1.377), (8, 1.092)] {
            let mut cand = vec![true; 1319];
            for v in cand.iter_mut().take(losses as usize) {
                *v = false;
            }
            let counts = paired_counts(&cand, &[true; 1319]).unwrap();
            let g = loss_gate(counts, 0.95, 0.02).unwrap();
            assert!((g.loss_upper * 100.0 - percent).abs() < 0.0005, "{losses}: {}", g.loss_upper);
            assert!(g.pass);
        }
        // 0 losses of 50: 1 - 0.05^(1/50) = 5.816% > 2%: a small N cannot pass a 2% limit.
        let g = loss_gate(paired_counts(&[true; 50], &[true; 50]).unwrap(), 0.95, 0.02).unwrap();
        assert!((g.loss_upper - 0.058155).abs() < 1e-5 && !g.pass, "{}", g.loss_upper);
    }

    #[test]
    fn mean_gate_by_hand() {
        // diffs 0.001, 0.002, 0.003: mean 0.002, sd 0.001, t(0.95, 2) = 2.919986.
        let g = mean_gate(&[0.001, 0.002, 0.003], 0.95, 1.01f64.ln()).unwrap();
        assert!((g.t_quantile - 2.919986).abs() < 1e-5, "{}", g.t_quantile);
        assert!((g.upper - (0.002 + 2.919986 * 0.001 / 3f64.sqrt())).abs() < 1e-8);
        assert!(g.pass);
        let same = mean_gate(&[0.0; 4], 0.95, 1.01f64.ln()).unwrap();
        assert_eq!((same.upper, same.pass), (0.0, true));
        assert!(!mean_gate(&[0.02, 0.03, 0.025], 0.95, 1.01f64.ln()).unwrap().pass);
        assert!(mean_gate(&[0.1], 0.95, 0.01).is_err());
    }
}
