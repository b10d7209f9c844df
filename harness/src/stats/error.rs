//! The statistics module's single error type.
//!
//! Owns `StatsError` and nothing else. Every function in `stats` rejects bad
//! input (empty samples, non-finite values, out-of-range parameters) with one of
//! these variants instead of returning NaN or panicking.

use thiserror::Error;

/// Everything that can go wrong in `stats`. Values that caused the error are
/// carried so that a report can quote them.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum StatsError {
    /// A sample (effects, p-values, values for a percentile) was empty.
    #[error("{what}: no observations")]
    Empty { what: &'static str },

    /// An observation was NaN or infinite.
    #[error("{what}[{index}] is not finite ({value})")]
    NonFinite { what: &'static str, index: usize, value: f64 },

    /// A control value was zero, negative or non-finite, so no ratio exists.
    #[error("control value {value} must be finite and greater than zero")]
    InvalidControl { value: f64 },

    /// A candidate value was negative or non-finite.
    #[error("candidate value {value} must be finite and not negative")]
    InvalidCandidate { value: f64 },

    /// A per-block error, with the block's index (0-based, in input order).
    #[error("block {block}: {source}")]
    Block {
        block: usize,
        #[source]
        source: Box<StatsError>,
    },

    /// A per-hypothesis error, with the hypothesis's id.
    #[error("hypothesis {id}: {source}")]
    Hypothesis {
        id: String,
        #[source]
        source: Box<StatsError>,
    },

    /// A count of successes exceeded its number of trials.
    #[error("count {count} exceeds the number of trials {trials}")]
    CountExceedsTrials { count: u64, trials: u64 },

    /// A parameter (alpha, confidence, coverage target, percentile level,
    /// p-value, threshold) was outside its allowed range or not finite.
    #[error("{name} = {value} is outside {allowed}")]
    OutOfRange { name: &'static str, value: f64, allowed: &'static str },

    /// A numerical search failed to bracket or converge. Should not happen for
    /// valid input; reported rather than returned as a wrong number.
    #[error("numerical failure: {0}")]
    Numerical(&'static str),
}

/// Shorthand used throughout the module.
pub type Result<T> = std::result::Result<T, StatsError>;

/// Rejects an empty slice or any non-finite element.
pub(crate) fn check_finite(what: &'static str, values: &[f64]) -> Result<()> {
    if values.is_empty() {
        return Err(StatsError::Empty { what });
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(StatsError::NonFinite { what, index, value: values[index] }),
        None => Ok(()),
    }
}

/// Checks `lo < value < hi` (open interval), rejecting NaN.
pub(crate) fn check_open_unit(name: &'static str, value: f64) -> Result<()> {
    if value > 0.0 && value < 1.0 {
        Ok(())
    } else {
        Err(StatsError::OutOfRange { name, value, allowed: "the open interval (0, 1)" })
    }
}
