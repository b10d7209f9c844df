//! Server lifecycle of one arm invocation, the one every command uses (`run`,
//! `qualify`, `compare`, `accept --plan`): spawn from the expanded argv, wait for the
//! health path, warm up, sample `/metrics` and memory once a second, and stop
//! (SIGTERM, then SIGKILL after the arm's `stop_grace_s`), keeping the log
//! (`invocation`, built from `process`, `health`, `sampler`); and the registry of
//! server dialects (`dialect`). External arms (`url`) are never spawned or stopped;
//! their health is still checked. Identity checks (`identity`) judge what a
//! healthy server shows against what its arm claims. Owns process handling. Must not send timed
//! requests, decide the schedule (`load`, `run`), or choose evidence file names and
//! shapes (each command writes its own records from `Startup` and `Stopped`).

mod access;
pub mod dialect;
mod health;
pub mod identity;
mod invocation;
pub mod log_scan;
mod process;
mod sampler;

use std::path::PathBuf;

pub use access::{arm_headers, check_api_keys, client_headers, plan_secrets};
pub use dialect::{Adapter, ServerKind, ServerKindArg};
pub use health::{HEALTH_POLL, wait_healthy, warmup};
pub use invocation::{Invocation, Startup, Stopped};
pub use process::ServerProcess;
pub use sampler::{GpuProcess, SAMPLE_PERIOD, Sampler, SamplerSpec, find_nvidia_smi, read_rss};

use crate::evidence::EvidenceError;

/// Everything that can go wrong with a server. The first four are arm faults: the
/// runner records them and goes on with the next arm; the others stop the study.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    #[error("cannot start {program:?}: {detail}")]
    Spawn { program: String, detail: String },
    #[error("the server exited before it was healthy: {detail}")]
    ExitedBeforeHealthy { detail: String },
    /// `log`: the tail of the server's log, as `with_log_tail` words it (or empty).
    #[error("{url} did not answer 200 within {after_s} s (last: {last}){log}")]
    HealthTimeout { url: String, after_s: f64, last: String, log: String },
    #[error(
        "{url}: no server answers there ({cause}) after {after_s} s of tries; the harness never starts a url \
         arm: start the server first, or check the host and port"
    )]
    Unreachable { url: String, after_s: f64, cause: String },
    #[error("warmup failed: {detail}")]
    Warmup { detail: String },
    /// The server is not what its arm claims (`[arms.identity]`).
    #[error("arm {arm} is not what it claims ({n} identity check(s) failed): {failures}")]
    Identity { arm: String, n: usize, failures: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("the sampler task failed: {0} (a harness bug)")]
    Task(String),
    #[error(
        "arm {arm}: api_key_env names the environment variable {var}, which is not set (or not valid UTF-8, or \
         empty); export it with the key before the run (the plan names the variable, never the key)"
    )]
    MissingApiKey { arm: String, var: String },
    #[error("arm {arm}: the key in {var} is not a valid HTTP header value (visible ASCII only)")]
    BadApiKey { arm: String, var: String },
}

impl ArmError {
    /// A fault of the arm (recorded, study goes on), not of the harness.
    pub fn is_arm_fault(&self) -> bool {
        matches!(
            self,
            ArmError::Spawn { .. }
                | ArmError::ExitedBeforeHealthy { .. }
                | ArmError::HealthTimeout { .. }
                | ArmError::Unreachable { .. }
                | ArmError::Warmup { .. }
                | ArmError::Identity { .. }
        )
    }
}
