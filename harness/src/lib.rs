//! The harness library: everything `harness` does, as modules a test can call.
//! The harness never links the engine crate: every arm is reached over HTTP.

pub mod analysis;
pub mod arm;
pub mod commands;
pub mod evidence;
pub mod export;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod host;
pub mod inputs;
pub mod load;
pub mod metrics;
pub mod mock;
pub mod plan;
pub mod protocol;
pub mod quality;
pub mod report;
pub mod stats;
pub mod trace;

/// Whether an error is about the user's input (exit 2: a plan, flag, input file or
/// evidence directory to fix) or anything else (exit 1). Each layer's error enum
/// answers for itself; `main` only asks.
pub trait BadInput {
    fn is_bad_input(&self) -> bool;
}
