//! `harness mock`: the mock server (`crate::mock`) from the command line: flags and
//! `--spec FILE` into one checked spec (a bad value exits 2 naming its flag or key
//! before anything is bound or written), the runtime (its threads pinned with
//! `--cpus`, so the mock can have a core of its own), the descriptor limit raised,
//! serving until SIGINT or SIGTERM, then the lateness summary. Owns the command's
//! flags. Must not hold the mock's behaviour.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::mock::{Mock, MockError, MockOptions, MockSpec, TimeSpec};

/// `harness mock` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct MockArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to bind (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Fixed time to first token, milliseconds (overrides the spec's [ttft]).
    #[arg(long)]
    pub ttft_ms: Option<f64>,
    /// Fixed time between tokens, milliseconds (overrides the spec's [itl]).
    #[arg(long)]
    pub itl_ms: Option<f64>,
    /// The spec (TOML): distributions, queue, reasoning, errors (docs/mock.md).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Write the ground truth (JSON lines, CLOCK_MONOTONIC) here.
    #[arg(long)]
    pub ground_truth: Option<PathBuf>,
    /// Write the lateness summary (JSON) here when stopped.
    #[arg(long)]
    pub summary: Option<PathBuf>,
    /// Model id served (overrides the spec's `model`).
    #[arg(long)]
    pub model: Option<String>,
    /// Seed of every draw (overrides the spec's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Pin the mock to these CPUs (kernel list syntax, e.g. `1` or `2-3`).
    #[arg(long)]
    pub cpus: Option<String>,
    /// Worker threads of the mock's runtime.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Microseconds before each deadline the timer thread spins instead of sleeping
    /// (0: never; spin only where the timer has a core to itself).
    #[arg(long, default_value_t = 0)]
    pub timer_spin_us: u64,
}

fn flag(flag: &'static str, problem: impl Into<String>) -> MockError {
    MockError::Flag { flag, problem: problem.into() }
}

/// The spec the flags and `--spec` make together (flags win).
pub fn options(args: &MockArgs) -> Result<MockOptions, MockError> {
    let mut spec = match &args.spec {
        Some(path) => MockSpec::from_file(path)?,
        None => MockSpec::default(),
    };
    for (name, value, slot) in [("ttft-ms", args.ttft_ms, &mut spec.ttft), ("itl-ms", args.itl_ms, &mut spec.itl)] {
        if let Some(ms) = value {
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(flag(name, format!("must be finite and >= 0, got {ms}")));
            }
            *slot = TimeSpec::fixed(ms);
        }
    }
    if let Some(m) = &args.model {
        spec.model = m.clone();
    }
    if let Some(s) = args.seed {
        spec.seed = s;
    }
    spec.validate()?;
    if args.workers == 0 {
        return Err(flag("workers", "must be at least 1"));
    }
    Ok(MockOptions {
        host: args.host,
        port: args.port,
        spec,
        ground_truth: args.ground_truth.clone(),
        keep_truth: false,
        timer_spin: Duration::from_micros(args.timer_spin_us),
    })
}

/// What `harness mock` writes to `--summary` (and prints) when it stops.
#[derive(Debug, serde::Serialize)]
pub struct MockSummary {
    pub address: String,
    pub cpus: Option<String>,
    pub workers: usize,
    pub timer_spin_us: u64,
    /// Written token and `[DONE]` events: written minus scheduled.
    pub lateness: crate::mock::Lateness,
}

/// Serves until SIGINT or SIGTERM.
pub fn run(args: &MockArgs) -> Result<(), MockError> {
    let opts = options(args)?;
    let cpus = match &args.cpus {
        Some(list) => {
            let cpus = crate::host::parse_cpu_list(list).map_err(|e| flag("cpus", e))?;
            Some(crate::host::pin_this_process(&cpus).map_err(|e| flag("cpus", e))?)
        }
        None => None,
    };
    crate::host::raise_fd_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .thread_name("mock-worker")
        .enable_all()
        .build()
        .map_err(|e| MockError::Start(e.to_string()))?;
    rt.block_on(async {
        let mock = Mock::start(&opts).await?;
        let address = format!("http://{}", mock.addr());
        println!("harness mock: listening on {address}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        stop_signal().await;
        let (lateness, _) = mock.stop(Duration::from_secs(2)).await?;
        let summary = MockSummary { address, cpus, workers: args.workers, timer_spin_us: args.timer_spin_us, lateness };
        let json = serde_json::to_string_pretty(&summary).unwrap_or_default();
        if let Some(path) = &args.summary {
            std::fs::write(path, json.clone() + "\n")
                .map_err(|e| MockError::Truth { path: path.clone(), error: e.to_string() })?;
        }
        let l = &summary.lateness;
        let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        eprintln!(
            "harness mock: {} requests, {} scheduled events written; lateness against the schedule p50 {} us, p99 {} us, max {} us",
            l.requests,
            l.events,
            us(l.p50_us),
            us(l.p99_us),
            us(l.max_us)
        );
        Ok(())
    })
}

async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MockArgs,
    }

    fn parse(argv: &str) -> MockArgs {
        Cli::parse_from(std::iter::once("mock").chain(argv.split_whitespace())).args
    }

    #[test]
    fn flags_override_the_spec_and_bad_ones_are_named() {
        let o = options(&parse("--ttft-ms 3 --itl-ms 0.5 --model m --seed 4")).unwrap();
        assert_eq!((o.spec.ttft.clone(), o.spec.itl.clone()), (TimeSpec::fixed(3.0), TimeSpec::fixed(0.5)));
        assert_eq!((o.spec.model.as_str(), o.spec.seed), ("m", 4));
        let e = options(&parse("--ttft-ms=-1")).unwrap_err();
        assert!(e.to_string().starts_with("--ttft-ms") && crate::BadInput::is_bad_input(&e), "{e}");
        assert!(options(&parse("--itl-ms NaN")).unwrap_err().to_string().starts_with("--itl-ms"));
        assert!(options(&parse("--workers 0")).unwrap_err().to_string().starts_with("--workers"));
        let tmp = tempfile::tempdir().unwrap();
        let spec = tmp.path().join("s.toml");
        std::fs::write(&spec, "[queue]\nmax_in_service = 0\n").unwrap();
        let e = options(&parse(&format!("--spec {}", spec.display()))).unwrap_err();
        assert!(e.to_string().contains("queue.max_in_service") && crate::BadInput::is_bad_input(&e), "{e}");
    }
}
