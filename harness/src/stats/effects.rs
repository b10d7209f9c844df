//! Paired per-block effects, oriented so that positive always means "candidate
//! is better".
//!
//! Owns the two effect formulas of DESIGN section 6:
//! - throughput (higher is better): `e = candidate / control - 1`;
//! - latency (lower is better, applied to each arm's p95 in the block):
//!   `e = 1 - candidate_p95 / control_p95`.
//!
//! A control value that is zero, negative or non-finite has no ratio and is an
//! error (never NaN or infinity); so is a negative or non-finite candidate.
//! Must not aggregate across blocks or compute the p95 itself (`metrics` does,
//! with `stats::percentile`).

use serde::{Deserialize, Serialize};

use super::error::{Result, StatsError};

/// Which way "better" points for the measure being compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// Higher is better (throughput, goodput): `candidate / control - 1`.
    Throughput,
    /// Lower is better (a latency p95): `1 - candidate / control`.
    Latency,
}

/// One block's paired values: the control arm's and the candidate arm's
/// measure for the same cell in the same block.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BlockPair {
    pub control: f64,
    pub candidate: f64,
}

fn check_pair(control: f64, candidate: f64) -> Result<()> {
    if !(control.is_finite() && control > 0.0) {
        return Err(StatsError::InvalidControl { value: control });
    }
    if !(candidate.is_finite() && candidate >= 0.0) {
        return Err(StatsError::InvalidCandidate { value: candidate });
    }
    Ok(())
}

/// Throughput effect `candidate / control - 1` (positive: candidate faster).
pub fn throughput_effect(control: f64, candidate: f64) -> Result<f64> {
    check_pair(control, candidate)?;
    Ok(candidate / control - 1.0)
}

/// Latency effect `1 - candidate_p95 / control_p95` (positive: candidate's p95
/// is lower).
pub fn latency_effect(control_p95: f64, candidate_p95: f64) -> Result<f64> {
    check_pair(control_p95, candidate_p95)?;
    Ok(1.0 - candidate_p95 / control_p95)
}

/// The effect of one block for the given kind.
pub fn effect(kind: EffectKind, pair: BlockPair) -> Result<f64> {
    match kind {
        EffectKind::Throughput => throughput_effect(pair.control, pair.candidate),
        EffectKind::Latency => latency_effect(pair.control, pair.candidate),
    }
}

/// Effects for every block, in input order. An invalid block is reported as
/// `StatsError::Block` with its 0-based index. Errors on an empty slice.
pub fn block_effects(kind: EffectKind, pairs: &[BlockPair]) -> Result<Vec<f64>> {
    if pairs.is_empty() {
        return Err(StatsError::Empty { what: "block pairs" });
    }
    pairs
        .iter()
        .enumerate()
        .map(|(block, &pair)| effect(kind, pair).map_err(|e| StatsError::Block { block, source: Box::new(e) }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(control: f64, candidate: f64) -> BlockPair {
        BlockPair { control, candidate }
    }

    #[test]
    fn formulas_and_orientation() {
        // Exact binary fractions so equality is exact.
        assert_eq!(throughput_effect(16.0, 18.0).unwrap(), 0.125);
        assert_eq!(throughput_effect(16.0, 12.0).unwrap(), -0.25);
        assert_eq!(latency_effect(16.0, 12.0).unwrap(), 0.25); // faster p95: positive
        assert_eq!(latency_effect(16.0, 18.0).unwrap(), -0.125);
        assert_eq!(throughput_effect(5.0, 5.0).unwrap(), 0.0);
        assert_eq!(latency_effect(5.0, 5.0).unwrap(), 0.0);
        assert!((throughput_effect(100.0, 101.0).unwrap() - 0.01).abs() < 1e-15);
        assert_eq!(effect(EffectKind::Latency, pair(8.0, 6.0)).unwrap(), 0.25);
        assert_eq!(effect(EffectKind::Throughput, pair(8.0, 6.0)).unwrap(), -0.25);
    }

    #[test]
    fn invalid_control_is_an_error_not_nan() {
        for bad in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let t = throughput_effect(bad, 1.0);
            let l = latency_effect(bad, 1.0);
            assert!(matches!(t, Err(StatsError::InvalidControl { .. })), "{bad}: {t:?}");
            assert!(matches!(l, Err(StatsError::InvalidControl { .. })), "{bad}: {l:?}");
        }
    }

    #[test]
    fn invalid_candidate_is_an_error() {
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(throughput_effect(1.0, bad), Err(StatsError::InvalidCandidate { .. })));
        }
        // A zero candidate is a valid (terrible) throughput: effect -1.
        assert_eq!(throughput_effect(4.0, 0.0).unwrap(), -1.0);
    }

    #[test]
    fn block_effects_keeps_order_and_names_the_bad_block() {
        let pairs = [pair(10.0, 12.5), pair(10.0, 7.5), pair(10.0, 10.0)];
        assert_eq!(block_effects(EffectKind::Throughput, &pairs).unwrap(), [0.25, -0.25, 0.0]);
        assert_eq!(block_effects(EffectKind::Latency, &pairs).unwrap(), [-0.25, 0.25, 0.0]);
        let bad = [pair(10.0, 11.0), pair(0.0, 11.0)];
        assert_eq!(
            block_effects(EffectKind::Throughput, &bad),
            Err(StatsError::Block { block: 1, source: Box::new(StatsError::InvalidControl { value: 0.0 }) })
        );
        assert!(matches!(block_effects(EffectKind::Latency, &[]), Err(StatsError::Empty { .. })));
    }

    #[test]
    fn kind_serializes_snake_case() {
        assert_eq!(serde_json::to_string(&EffectKind::Throughput).unwrap(), "\"throughput\"");
        assert_eq!(serde_json::from_str::<EffectKind>("\"latency\"").unwrap(), EffectKind::Latency);
    }
}
