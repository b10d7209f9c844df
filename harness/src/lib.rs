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

/// An error on its way to `main`'s exit code. Whether the user's input is at fault
/// (exit 2) is asked of the error's own type by `From`, where that type is still
/// known, so `main` keeps no list of error types; whatever wraps it later (context)
/// does not change the verdict.
#[derive(Debug)]
pub struct Failure {
    error: anyhow::Error,
    bad_input: bool,
}

impl<E: BadInput + std::error::Error + Send + Sync + 'static> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure { bad_input: e.is_bad_input(), error: e.into() }
    }
}

impl Failure {
    /// An error about the command line itself (a flag combination clap cannot
    /// express): exit 2.
    pub fn usage(message: impl std::fmt::Display) -> Failure {
        Failure { error: anyhow::anyhow!("{message}"), bad_input: true }
    }

    /// An error no layer of the harness types (exit 1).
    pub fn other(error: impl Into<anyhow::Error>) -> Failure {
        Failure { error: error.into(), bad_input: false }
    }

    /// The same failure, said to have happened while doing `what`.
    pub fn context(self, what: impl std::fmt::Display + Send + Sync + 'static) -> Failure {
        Failure { error: self.error.context(what), bad_input: self.bad_input }
    }

    /// 2 when the user's input is at fault, 1 for anything else.
    pub fn exit_code(&self) -> u8 {
        if self.bad_input { 2 } else { 1 }
    }
}

impl std::fmt::Display for Failure {
    /// The whole chain on one line (`{:#}` of the error).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}
