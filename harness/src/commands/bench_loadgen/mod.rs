//! `harness bench-client`: a benchmark (not a test) of the harness's own load
//! generator. A minimal in-process streaming endpoint (`server`) answers every request
//! with N one-token SSE chunks at a fixed interval; the study's open-loop dispatcher
//! and recorder (`load::drive_cell`) drive it at each offered rate from a seeded
//! schedule; the result is JSON: achieved vs offered rate, dispatch and send lag,
//! CPU seconds per request, and the metrics cell summary. `--serve-only` runs the
//! endpoint alone (for driving it with another tool, e.g. guidellm). With
//! `--sharegpt FILE` every rate is measured twice in one run, the fixed-length
//! workload and then a ShareGPT-format panel's own prompt and output lengths
//! (`panel`), each a `rates` entry with its `workload`.
//!
//! Owns the benchmark's command-line arguments, runtimes and report. Must not assert
//! on timings, bind anything but 127.0.0.1, or hold load-generation logic of its own:
//! what it measures is `load`.
//!
//! Threads: the fake endpoint runs on its own tokio runtime (threads `bench-server`),
//! the client on another (`bench-client`), both in this process, started from a
//! dedicated OS thread so `run` may be called from inside or outside a runtime.

mod cpu;
mod drive;
mod panel;
mod server;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

pub use drive::{RateResult, RateSpec};
pub use panel::PanelInfo;
pub use server::{FakeConfig, FakeServer};

/// The arrival law of the benchmark's schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BenchArrival {
    /// Seeded exponential gaps (`trace::open_loop_offsets`).
    Poisson,
    /// Equal gaps of 1 / rate.
    Constant,
}

/// `harness bench-client` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Offered rates in requests per second, comma separated (`--rates` is the
    /// older name; `harness bench` spells it the same way).
    #[arg(long = "rate", alias = "rates", value_delimiter = ',', default_values_t = [100.0, 500.0, 2000.0])]
    pub rates: Vec<f64>,
    /// Measured seconds per rate (count = rate * duration), unless --num-prompts is given.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Measured requests per rate (overrides --duration-s; `--count` is the older name).
    #[arg(long = "num-prompts", alias = "count")]
    pub count: Option<u64>,
    #[arg(long, value_enum, default_value_t = BenchArrival::Poisson)]
    pub arrival: BenchArrival,
    /// Study seed of the Poisson schedules.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Unmeasured seconds at each rate before measuring (warms the runtimes and the fake).
    #[arg(long, default_value_t = 1.0)]
    pub warmup_s: f64,
    /// Token chunks per answer.
    #[arg(long, default_value_t = 16)]
    pub chunks: u32,
    /// Milliseconds before each chunk.
    #[arg(long, default_value_t = 5.0)]
    pub chunk_interval_ms: f64,
    /// Prompt length sent and reported in usage.
    #[arg(long, default_value_t = 8)]
    pub prompt_tokens: u32,
    /// Worker threads of the client runtime.
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
    /// Worker threads of the fake endpoint's runtime.
    #[arg(long, default_value_t = 1)]
    pub server_threads: usize,
    /// Send from these source addresses in turn (e.g. 127.0.0.1,127.0.0.2): each
    /// has its own ephemeral ports towards the target, so more connections fit.
    #[arg(long, value_delimiter = ',')]
    pub source_addresses: Vec<std::net::IpAddr>,
    /// How timed requests get their connection: `keep-alive` (pooled, pre-warmed
    /// before each rate's first timed send: its arrivals in the first 0.1 s) or
    /// `fresh` (a new connection per request, its connect inside every time: the
    /// harness before issue 53).
    #[arg(long, value_enum, default_value_t = crate::load::Connections::KeepAlive)]
    pub connections: crate::load::Connections,
    /// Drive this base URL (e.g. http://127.0.0.1:8123) instead of the in-process fake.
    #[arg(long)]
    pub target: Option<String>,
    /// Also write each rate's raw records to DIR/rate-<rate>.requests.jsonl.
    #[arg(long)]
    pub records_dir: Option<PathBuf>,
    /// Write the JSON report here (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only run the fake endpoint, until Ctrl-C.
    #[arg(long)]
    pub serve_only: bool,
    /// Port of the fake endpoint (0 = ephemeral).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Also measure each rate with this ShareGPT-format file's own lengths (e.g.
    /// assets/sharegpt-plays/plays_sharegpt.json), sampled as a `sharegpt` panel.
    #[arg(long)]
    pub sharegpt: Option<PathBuf>,
    /// tokenizer.json that encodes the --sharegpt texts.
    #[arg(long, default_value = "assets/smollm2/tokenizer.json")]
    pub tokenizer: PathBuf,
    /// Requests in the --sharegpt panel (sent round robin).
    #[arg(long, default_value_t = 1000)]
    pub panel_requests: usize,
    /// Cap on a --sharegpt request's max_tokens (its own output length otherwise).
    #[arg(long, default_value_t = 128)]
    pub max_output_tokens: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("cannot bind 127.0.0.1:{port}: {error}")]
    Bind { port: u16, error: String },
    #[error("cannot start a runtime: {0}")]
    Runtime(String),
    #[error("cpu time: {0}")]
    Cpu(String),
    #[error(transparent)]
    Load(#[from] crate::load::LoadError),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

impl crate::BadInput for BenchError {
    /// A flag value it cannot use; a port it cannot bind is the machine's.
    fn is_bad_input(&self) -> bool {
        matches!(self, BenchError::Invalid(_))
    }
}

/// The JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub what: String,
    pub target: String,
    pub available_parallelism: usize,
    pub client_threads: usize,
    pub server_threads: usize,
    pub chunks: u32,
    pub chunk_interval_ms: f64,
    pub prompt_tokens: u32,
    pub seed: u64,
    /// `--connections`.
    pub connections: crate::load::Connections,
    /// `load::SPIN_NS`: the dispatcher thread sleeps until this long before each
    /// intended time, then spins until it.
    pub dispatcher_spin_ns: u64,
    /// Whether the dispatcher thread got real-time scheduling (SCHED_FIFO).
    pub dispatcher_realtime: bool,
    /// The `--sharegpt` panel, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub panel: Option<PanelInfo>,
    /// Each rate: the fixed workload, then (with `--sharegpt`) the panel's.
    pub rates: Vec<RateResult>,
}

impl BenchReport {
    /// One line per rate, for the terminal.
    pub fn render_text(&self) -> String {
        let mut s = format!(
            "bench-client: {} ({} CPUs, client {} threads, server {} threads)\n\
             {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>7} {:>6}\n",
            self.target,
            self.available_parallelism,
            self.client_threads,
            self.server_threads,
            "workload",
            "offered",
            "requests",
            "scheduled",
            "dispatch",
            "complete",
            "lag p50us",
            "lag p99us",
            "lag maxus",
            "send p99",
            "cpu us/req",
            "failed",
            "others",
        );
        for r in &self.rates {
            s.push_str(&format!(
                "{:>8} {:>8.1} {:>9} {:>10.2} {:>10.2} {:>10.2} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>7} {:>6.2}\n",
                r.workload,
                r.offered_rate_rps,
                r.requests,
                r.scheduled_rate_rps,
                r.achieved_dispatch_rate_rps,
                r.completion_throughput_rps,
                r.dispatch_lag_p50_us,
                r.dispatch_lag_p99_us,
                r.dispatch_lag_max_us,
                r.send_lag_p99_us,
                r.client_cpu_s_per_request * 1e6,
                r.failed,
                r.other_processes_cores.unwrap_or(f64::NAN),
            ));
        }
        s
    }
}

fn fake_config(args: &Args) -> Result<FakeConfig, BenchError> {
    if args.chunks == 0 || !(args.chunk_interval_ms.is_finite() && args.chunk_interval_ms >= 0.0) {
        return Err(BenchError::Invalid("--chunks must be >= 1 and --chunk-interval-ms finite and >= 0".into()));
    }
    Ok(FakeConfig {
        chunks: args.chunks,
        interval: Duration::from_secs_f64(args.chunk_interval_ms / 1e3),
        prompt_tokens: args.prompt_tokens,
        from_body: args.sharegpt.is_some(),
    })
}

fn runtime(name: &str, threads: usize) -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| BenchError::Runtime(e.to_string()))
}

/// Runs `f` on a fresh OS thread (so runtimes can be built and blocked on there).
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> Result<T, BenchError> + Send + 'static) -> Result<T, BenchError> {
    std::thread::Builder::new()
        .name("bench-main".into())
        .spawn(f)
        .map_err(|e| BenchError::Runtime(e.to_string()))?
        .join()
        .map_err(|_| BenchError::Runtime("the benchmark thread panicked".into()))?
}

fn write_records(
    path: &std::path::Path,
    records: &[crate::evidence::request_record::RequestRecord],
) -> Result<(), BenchError> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).unwrap_or_default());
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|error| BenchError::Io { path: path.to_path_buf(), error })
}

/// Runs the fake endpoint alone until Ctrl-C, printing its URL first.
pub fn serve(args: &Args) -> Result<(), BenchError> {
    let (cfg, port, threads) = (fake_config(args)?, args.port, args.server_threads);
    on_thread(move || {
        runtime(drive::SERVER_THREADS, threads)?.block_on(async move {
            let server = server::start(cfg, port).await?;
            println!("bench-client fake endpoint listening on http://{}", server.addr);
            let _ = tokio::signal::ctrl_c().await;
            server.shutdown();
            Ok(())
        })
    })
}

/// Measures every rate of `args` and returns the report (writes only `--records-dir`).
pub fn bench(args: &Args) -> Result<BenchReport, BenchError> {
    let cfg = fake_config(args)?;
    if args.rates.is_empty() || args.rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(BenchError::Invalid("--rates must be finite and > 0".into()));
    }
    if args.count.is_none() && !(args.duration_s.is_finite() && args.duration_s > 0.0) {
        return Err(BenchError::Invalid("--duration-s must be finite and > 0".into()));
    }
    if args.max_output_tokens == 0 || args.panel_requests == 0 {
        return Err(BenchError::Invalid("--max-output-tokens and --panel-requests must be >= 1".into()));
    }
    let panel = match &args.sharegpt {
        Some(path) => {
            let (prepared, info) =
                panel::build(path, &args.tokenizer, args.panel_requests, args.seed, args.max_output_tokens)?;
            Some((std::sync::Arc::<[crate::load::PreparedRequest]>::from(prepared), info))
        }
        None => None,
    };
    let args = args.clone();
    on_thread(move || {
        let server_rt = runtime(drive::SERVER_THREADS, args.server_threads)?;
        let (base, _server) = match &args.target {
            Some(url) => (url.trim_end_matches('/').to_string(), None),
            None => {
                let s = server_rt.block_on(server::start(cfg, 0))?;
                (format!("http://{}", s.addr), Some(s))
            }
        };
        let client_rt = runtime(drive::CLIENT_THREADS, args.client_threads)?;
        let target = base.clone();
        let (panel_bodies, panel_info) = match panel {
            Some((bodies, info)) => (Some(bodies), Some(info)),
            None => (None, None),
        };
        let rates = client_rt.block_on(async move {
            // Spawned, so the driving future runs on the client runtime's workers.
            let task = tokio::spawn(async move {
                let conns = args.connections;
                let sources = crate::load::http_clients_from(&Default::default(), &args.source_addresses, conns)?;
                let driver = drive::Driver {
                    client: crate::load::http_client_for(Default::default(), conns)?,
                    connections: conns,
                    sources: sources.into(),
                    url: format!("{base}/v1/completions"),
                    clock: crate::load::StudyClock::start(),
                    server_exit: tokio::sync::watch::channel(None),
                };
                let mut out = Vec::new();
                for &rate_rps in &args.rates {
                    let count = args.count.unwrap_or((rate_rps * args.duration_s).round() as u64).max(2);
                    let fixed = RateSpec {
                        rate_rps,
                        arrival: args.arrival,
                        count,
                        seed: args.seed,
                        chunks: args.chunks,
                        prompt_tokens: args.prompt_tokens,
                        panel: None,
                    };
                    let with_panel = panel_bodies.clone().map(|p| RateSpec { panel: Some(p), ..fixed.clone() });
                    for spec in std::iter::once(fixed).chain(with_panel) {
                        let (result, records) = driver.measure(&spec, args.warmup_s).await?;
                        if let Some(dir) = &args.records_dir {
                            let name = match spec.panel {
                                None => format!("rate-{rate_rps}.requests.jsonl"),
                                Some(_) => format!("rate-{rate_rps}-{}.requests.jsonl", spec.workload()),
                            };
                            write_records(&dir.join(name), &records)?;
                        }
                        out.push(result);
                    }
                }
                Ok::<_, BenchError>(out)
            });
            task.await.map_err(|e| BenchError::Runtime(format!("benchmark task: {e}")))?
        })?;
        Ok(BenchReport {
            what: "open-loop dispatcher and SSE recorder (load::drive_cell) against a fake streaming endpoint".into(),
            target,
            available_parallelism: std::thread::available_parallelism().map_or(0, |n| n.get()),
            client_threads: args.client_threads,
            server_threads: args.server_threads,
            chunks: args.chunks,
            chunk_interval_ms: args.chunk_interval_ms,
            prompt_tokens: args.prompt_tokens,
            seed: args.seed,
            connections: args.connections,
            dispatcher_spin_ns: crate::load::SPIN_NS,
            dispatcher_realtime: crate::load::realtime_dispatch_available(),
            panel: panel_info,
            rates,
        })
    })
}

/// The subcommand: `--serve-only` serves; otherwise benchmarks, writes the JSON report
/// to `--out` (or prints it), and prints the one-line-per-rate text to stderr.
pub fn run(args: &Args) -> Result<(), BenchError> {
    if args.serve_only {
        return serve(args);
    }
    let report = bench(args)?;
    let json = serde_json::to_string_pretty(&report).unwrap_or_default();
    match &args.out {
        Some(path) => {
            std::fs::write(path, json + "\n").map_err(|error| BenchError::Io { path: path.clone(), error })?
        }
        None => println!("{json}"),
    }
    eprint!("{}", report.render_text());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &str) -> Args {
        Cli::parse_from(std::iter::once("bench-client").chain(argv.split_whitespace())).args
    }

    #[test]
    fn defaults_are_the_documented_benchmark() {
        let a = parse("");
        assert_eq!(a.rates, [100.0, 500.0, 2000.0]);
        assert_eq!((a.duration_s, a.chunks, a.chunk_interval_ms, a.arrival), (10.0, 16, 5.0, BenchArrival::Poisson));
        assert!(bench(&parse("--rates 0")).is_err());
        assert!(bench(&parse("--chunks 0")).is_err());
    }

    #[test]
    fn fake_endpoint_streams_what_the_recorder_expects() {
        // Functional only: every request completes with 4 one-token chunks, one
        // usage-only chunk and [DONE]; no timing is asserted.
        let args = parse("--rates 400 --count 40 --warmup-s 0 --chunks 4 --chunk-interval-ms 1 --arrival constant");
        let report = bench(&args).unwrap();
        let r = &report.rates[0];
        assert_eq!((r.requests, r.completed, r.failed), (40, 40, 0), "{:?}", r.failed_by_class);
        let s = &r.summary;
        assert_eq!((s.stream_events, s.empty_events, s.multi_token_events), (200, 40, 0));
        assert_eq!((s.total_output_tokens, s.total_input_tokens, s.itl_samples), (160, 320, 120));
        assert_eq!(r.scheduled_rate_rps, 400.0);
        assert!(r.achieved_dispatch_rate_rps > 0.0 && r.client_cpu_s >= 0.0);
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["rates"][0]["dispatch_lag_p99_us"].is_number());
        assert_eq!(json["rates"][0]["workload"], "fixed");
        assert!(json.get("panel").is_none());
    }

    #[test]
    fn a_sharegpt_panel_is_measured_beside_the_fixed_lengths() {
        // Structure only: each rate twice (fixed, then the panel's own lengths), every
        // panel request streams its own max_tokens; no timing is asserted.
        let tmp = tempfile::tempdir().unwrap();
        let tokenizer = tmp.path().join("tokenizer.json");
        std::fs::write(
            &tokenizer,
            r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"a":0,"b":1,"[UNK]":2},"unk_token":"[UNK]"}}"#,
        )
        .unwrap();
        let conv = |p: usize, a: usize| {
            format!(
                r#"{{"conversations": [{{"from": "human", "value": "{}"}}, {{"from": "gpt", "value": "{}"}}]}}"#,
                "a ".repeat(p),
                "b ".repeat(a)
            )
        };
        let data = tmp.path().join("sg.json");
        std::fs::write(&data, format!("[{}, {}, {}]", conv(4, 5), conv(9, 7), conv(6, 40))).unwrap();
        let argv = |n: usize| {
            format!(
                "--rates 300 --count 12 --warmup-s 0 --chunk-interval-ms 0.2 --arrival constant --sharegpt {} \
                 --tokenizer {} --panel-requests {n} --max-output-tokens 10",
                data.display(),
                tokenizer.display()
            )
        };
        let report = bench(&parse(&argv(3))).unwrap();
        let workloads: Vec<&str> = report.rates.iter().map(|r| r.workload.as_str()).collect();
        assert_eq!(workloads, ["fixed", "sharegpt"]);
        let panel = report.panel.as_ref().expect("panel info");
        assert_eq!((panel.requests, panel.max_output_tokens), (3, 10));
        assert_eq!(panel.prompt_tokens_min_p50_p90_max, [4.0, 6.0, 9.0, 9.0]);
        assert_eq!(panel.max_tokens_min_p50_p90_max, [5.0, 7.0, 10.0, 10.0]);
        let s = &report.rates[1];
        assert_eq!((s.requests, s.completed, s.failed), (12, 12, 0), "{:?}", s.failed_by_class);
        // 12 requests round robin over outputs 5, 7 and 10 (capped), prompts 4, 9, 6
        // (in the sampled order): 4 of each.
        assert_eq!((s.summary.total_output_tokens, s.summary.total_input_tokens), (4 * 22, 4 * 19));
        assert!(s.dispatch_lag_p99_us.is_finite());
        let bad = bench(&parse(&argv(4))).err().unwrap().to_string();
        assert!(bad.contains("4 requests asked"), "{bad}");
    }
}
