//! The harness library: everything `harness` does, as modules a test can call.
//! The harness never links the engine crate: every arm is reached over HTTP.

pub mod plan;
pub mod record;
pub mod stats;
pub mod trace;
