//! An OpenAI-compatible streaming server whose token times are known: `harness
//! mock` (commands/mock.rs) and the in-process mock that measures a session's
//! measurement floor (`load::floor`). A spec (`spec`: fixed, normal, lognormal or
//! empirical TTFT and ITL, linear in the prompt length and in the requests in
//! service; a FIFO queue; reasoning deltas; injected 500s, resets and stalls) is
//! drawn per request (`dist`), each answer is scheduled on CLOCK_MONOTONIC and woken
//! by a dedicated timer thread (`timer`), and every request's arrival and every
//! event's scheduled, handed-over and written times go to the ground truth
//! (`truth`). Owns the mock's behaviour. Must not be reached by anything that times
//! a real server, or record anything a study's evidence holds.

mod dist;
mod metrics;
mod server;
pub mod spec;
mod timer;
pub mod truth;
pub mod wire;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use spec::{DistSpec, MockSpec, TimeSpec};
pub use timer::mono_ns;
pub use truth::{Lateness, TruthRecord, read_truth};

/// Failures of the mock.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error("mock spec: {field}: {problem}")]
    Spec { field: String, problem: String },
    #[error("mock spec {path}: {problem}")]
    SpecFile { path: PathBuf, problem: String },
    #[error("--{flag}: {problem}")]
    Flag { flag: &'static str, problem: String },
    #[error("cannot bind {addr}: {error}")]
    Bind { addr: SocketAddr, error: String },
    #[error("ground truth {path}: {error}")]
    Truth { path: PathBuf, error: String },
    #[error("cannot start the mock: {0}")]
    Start(String),
}

impl crate::BadInput for MockError {
    fn is_bad_input(&self) -> bool {
        matches!(self, MockError::Spec { .. } | MockError::SpecFile { .. } | MockError::Flag { .. })
    }
}

/// Where and how the mock serves.
#[derive(Debug, Clone)]
pub struct MockOptions {
    pub host: IpAddr,
    pub port: u16,
    pub spec: MockSpec,
    pub ground_truth: Option<PathBuf>,
    /// Keep every ground-truth record in memory (`Mock::stop` returns them).
    pub keep_truth: bool,
    /// How long before each deadline the timer thread spins (0: it only sleeps).
    pub timer_spin: Duration,
}

/// A running mock.
pub struct Mock {
    running: server::RunningMock,
    sink: truth::TruthSink,
}

impl Mock {
    /// Validates the spec, creates the ground truth, binds and serves on the current
    /// tokio runtime.
    pub async fn start(opts: &MockOptions) -> Result<Mock, MockError> {
        opts.spec.validate()?;
        let header = truth::TruthHeader {
            format: truth::TRUTH_FORMAT.into(),
            clock: "CLOCK_MONOTONIC nanoseconds (on Linux the clock of std::time::Instant)".into(),
            spec: serde_json::to_value(&opts.spec).unwrap_or_default(),
            pid: std::process::id(),
        };
        let sink = truth::TruthSink::start(opts.ground_truth.as_deref(), &header, opts.keep_truth).map_err(|e| {
            MockError::Truth { path: opts.ground_truth.clone().unwrap_or_default(), error: e.to_string() }
        })?;
        let timer = timer::Timer::start(opts.timer_spin).map_err(|e| MockError::Start(e.to_string()))?;
        let shared = Arc::new(server::Shared::new(opts.spec.clone(), timer, sink.sender())?);
        let running = server::start(opts, shared).await?;
        Ok(Mock { running, sink })
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    /// Stops serving (open answers get `grace` to end), writes the rest of the
    /// ground truth and returns the lateness of every written event (and the
    /// records, with `keep_truth`).
    pub async fn stop(self, grace: Duration) -> Result<(Lateness, Vec<TruthRecord>), MockError> {
        let Mock { running, sink } = self;
        let shared = running.shared.clone();
        running.stop(grace).await;
        // The answers' last references (and their truth) go with the server's tasks.
        drop(shared);
        tokio::task::spawn_blocking(move || sink.finish())
            .await
            .map_err(|e| MockError::Start(e.to_string()))?
            .map_err(|e| MockError::Truth { path: PathBuf::new(), error: e.to_string() })
    }
}
