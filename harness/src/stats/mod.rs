//! Statistics for paired block designs: pure functions, no I/O, no global
//! state.
//!
//! Owns the numbers behind every claim (DESIGN sections 5-7):
//! - `effects`: paired per-block effects, positive = candidate better;
//! - `sign_test`: exact one-sided sign test (ties are non-wins);
//! - `holm`: Holm step-down adjusted p-values over the whole family;
//! - `median_interval`: sample median, median screen, order-statistic
//!   interval with exact coverage;
//! - `clopper_pearson`: one-sided exact binomial upper bound (quality gates);
//! - `percentile`: the one percentile method (nearest rank) for all layers;
//! - `power`: the probability that the rule supports a true effect (exact sign
//!   test, seeded simulation of the whole rule);
//! - `decision`: supported / not supported (naming failed rules) / blocked;
//! - `nested`: variance components of a nested A/A design (block, server, repeat);
//! - `sequential`: the regression gate's rule over looks (regressed / within /
//!   improved / undecided) with its error bounds.
//!
//! It must not read files, the plan or raw request records: callers pass
//! numbers in and get numbers and claims out. Every failure is a `StatsError`.

mod clopper_pearson;
mod decision;
mod effects;
mod error;
mod exact;
mod holm;
mod median_interval;
mod nested;
mod percentile;
mod power;
mod sequential;
mod sign_test;

#[cfg(test)]
mod power_tests;

pub use clopper_pearson::clopper_pearson_upper;
pub use decision::{Decision, HypothesisInput, HypothesisOutcome, Rule, decide, decide_family};
pub use effects::{BlockPair, EffectKind, block_effects, effect, latency_effect, throughput_effect};
pub use error::{Result, StatsError};
pub use exact::MAX_EXACT_N;
pub use holm::{HolmResult, holm};
pub use median_interval::{
    DEFAULT_INTERVAL_COVERAGE, MedianInterval, MedianScreen, median, median_interval, median_interval_rank,
    median_screen,
};
pub use nested::{COMPONENT_COVERAGE, Component, Nested, nested, nested_by_machine};
pub use percentile::{nearest_rank, percentile, percentile_u64, percentiles};
pub use power::{
    MAX_LATENCY_EFFECT, MAX_THROUGHPUT_EFFECT, NoiseDraws, SimHypothesis, binomial_upper_tail, critical_wins,
    effect_of_log, log_shift, monte_carlo_se, sign_test_power, simulate_rule, smallest_effect, win_probability,
};
pub use sequential::{Ending, GateState, Look, SequentialRule, Verdict, combine, nan_as_null, run as run_sequential};
pub use sign_test::{SignTest, sign_test, sign_test_p_value};
