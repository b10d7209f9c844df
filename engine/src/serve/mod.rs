//! `engine serve`: the OpenAI-compatible HTTP server. axum + tokio serve HTTP;
//! the model runs in its own engine loop on a dedicated thread (`engine_loop`),
//! fed by a command channel. The port is bound before the model loads, so
//! `/health` answers 503 while loading and 200 once ready. SIGTERM or SIGINT
//! stops accepting, lets in-flight requests finish for a grace period, aborts
//! what remains, and exits 0.

pub mod admission;
pub mod api;
pub mod choice;
pub mod engine_loop;
pub mod error;
pub mod extras;
pub mod listen;
pub mod metrics;
pub mod receipts;
pub mod response;
pub mod routes;
pub mod sampling;
pub mod state;
pub mod stop;
pub mod stream;

use crate::error::EngineError;
use crate::kv::{KvFormat, ValueScales};
use crate::runtime::{Engine, EngineOptions};
use crate::sched::{FitLimits, SchedulerConfig};
use engine_loop::{Command, EngineLoop, LoopConfig};
use metrics::Metrics;
use state::{AppState, Ready};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// CPU code path and quantized-matmul mode of the model's kernels.
    pub kernels: crate::kernels::Kernels,
    /// Where the forward pass runs (opened by the caller, before binding).
    pub device: crate::kernels::Device,
    pub model: PathBuf,
    pub served_model_name: Option<String>,
    pub host: String,
    pub port: u16,
    pub kv_format: KvFormat,
    pub kv_scales: Option<PathBuf>,
    pub kv_budget_bytes: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub max_model_len: Option<usize>,
    pub chunked_prefill: bool,
    pub prefix_caching: bool,
    pub threads: usize,
    /// Required on /v1/* when set (from `--api-key`, `--api-key-env` or
    /// `VLLM_API_KEY`; the CLI resolves which).
    pub api_key: Option<state::ApiKey>,
    pub receipts: Option<PathBuf>,
    pub stream_interval: usize,
    pub debug_step_delay_us: u64,
    /// DEBUG KNOB: busy-wait this fraction of each step's time after it.
    pub debug_step_spin_fraction: f64,
    /// DEBUG KNOB: fail the forward pass after the first N (tests only).
    pub debug_fail_forward_after: Option<u64>,
    pub idle_gather_factor: f64,
    pub body_limit_bytes: usize,
    pub shutdown_grace: Duration,
    /// Sequences that may wait for their first step before requests get 503.
    pub max_waiting: usize,
    /// Closes a connection whose request head is not complete in this time.
    pub header_read_timeout: Duration,
    /// Closes a keep-alive connection idle for this long.
    pub keep_alive_timeout: Duration,
    /// Answers 408 (and closes) when a request body is not complete in this time.
    pub body_read_timeout: Duration,
    /// Most connections open at once; more are closed when accepted.
    pub max_connections: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("{0}")]
    Engine(#[from] EngineError),
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    #[error("the engine loop failed to start: {0}")]
    Loop(String),
}

/// Runs the server until a shutdown signal; returns after a clean exit.
pub fn run(opts: ServeOptions) -> Result<(), ServeError> {
    // Fail fast on inputs that need no model.
    let scales = match &opts.kv_scales {
        Some(p) => Some(ValueScales::load(p)?),
        None => None,
    };
    if opts.kv_format.needs_scales() && scales.is_none() {
        return Err(
            EngineError::KvScales("the k16v8 format needs --kv-scales FILE (from `engine calibrate`)".into()).into()
        );
    }
    let served = opts.served_model_name.clone().unwrap_or_else(|| {
        opts.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into())
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("engine-http")
        .enable_all()
        .build()?;
    runtime.block_on(serve(opts, scales, served))
}

async fn serve(opts: ServeOptions, scales: Option<ValueScales>, served: String) -> Result<(), ServeError> {
    let started = Instant::now();
    let addr = format!("{}:{}", opts.host, opts.port);
    let listener =
        tokio::net::TcpListener::bind(&addr).await.map_err(|source| ServeError::Bind { addr: addr.clone(), source })?;
    tracing::info!("listening on http://{addr} (model loading)");
    let metrics = Arc::new(Metrics::new(&served));
    let (tx, rx) = std::sync::mpsc::channel::<Command>();
    let state = Arc::new(AppState {
        served_model_name: served,
        ready: OnceLock::new(),
        commands: Mutex::new(tx.clone()),
        metrics: metrics.clone(),
        api_key: opts.api_key.clone(),
        body_limit: opts.body_limit_bytes,
        body_read_timeout: opts.body_read_timeout,
        stream_interval: opts.stream_interval,
        accepting: AtomicBool::new(true),
        next_id: AtomicU64::new(1),
        admission: admission::AdmissionQueue::new(opts.max_waiting),
    });

    let loop_state = state.clone();
    let loop_opts = opts.clone();
    let engine_thread = std::thread::Builder::new().name("engine-loop".into()).spawn(move || {
        let engine_opts = EngineOptions {
            kv_format: loop_opts.kv_format,
            kv_scales: scales,
            kv_budget_bytes: loop_opts.kv_budget_bytes,
            threads: loop_opts.threads,
            kernels: loop_opts.kernels,
            device: loop_opts.device.clone(),
        };
        let engine = match Engine::load(&loop_opts.model, &engine_opts) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("engine: error: loading {}: {e}", loop_opts.model.display());
                std::process::exit(if e.is_input() { 2 } else { 1 });
            }
        };
        let max_model_len =
            loop_opts.max_model_len.unwrap_or(engine.model.max_positions()).min(engine.model.max_positions());
        let inv = engine.cache.inventory();
        let receipts = match &loop_opts.receipts {
            Some(p) => match receipts::ReceiptWriter::create(p) {
                Ok(w) => Some(w),
                Err(e) => {
                    eprintln!("engine: error: cannot create receipts file {}: {e}", p.display());
                    std::process::exit(2);
                }
            },
            None => None,
        };
        // The one startup line with the KV inventory, how many linear layers hold
        // each weight type, the kernels (CPU path, quantized-matmul mode) and the
        // device (`{"kind": "cpu"}`, or the GPU, its driver and CUDA version), on
        // stdout, as JSON: what `harness` identity checks read.
        let weights = engine.model.weight_dtypes();
        println!(
            "{}",
            serde_json::json!({"event": "kv_inventory", "kv": inv, "max_model_len": max_model_len, "weights": weights,
                "cpu_path": loop_opts.kernels.path().name(),
                "quant_matmul": loop_opts.kernels.quant_matmul().name(),
                "device": engine.model.device_info()})
        );
        let cfg = LoopConfig {
            scheduler: SchedulerConfig {
                max_num_seqs: loop_opts.max_num_seqs,
                max_num_batched_tokens: loop_opts.max_num_batched_tokens,
                chunked_prefill: loop_opts.chunked_prefill,
                long_prefill_token_threshold: 0,
                prefix_caching: loop_opts.prefix_caching,
            },
            step_delay: Duration::from_micros(loop_opts.debug_step_delay_us),
            step_spin_fraction: loop_opts.debug_step_spin_fraction,
            idle_gather_factor: loop_opts.idle_gather_factor,
            eos_token_ids: engine.tokenizer.eos_token_ids().to_vec(),
            debug_fail_forward_after: loop_opts.debug_fail_forward_after,
        };
        let ready = Ready {
            tokenizer: engine.tokenizer.clone(),
            vocab_size: engine.model.config.vocab_size,
            max_model_len,
            fit: FitLimits::new(&cfg.scheduler, inv.logical_token_slots),
        };
        let lp = EngineLoop::new(engine, cfg, metrics, receipts, started);
        let _ = loop_state.ready.set(ready);
        tracing::info!("model loaded in {:.2} s; ready", started.elapsed().as_secs_f64());
        lp.run(rx);
    })?;

    let shutdown_state = state.clone();
    let grace = opts.shutdown_grace;
    let app = routes::router(state.clone());
    let limits = listen::ConnLimits {
        header_read_timeout: opts.header_read_timeout,
        keep_alive_timeout: opts.keep_alive_timeout,
        max_connections: opts.max_connections,
    };
    listen::raise_fd_limit(opts.max_connections);
    listen::serve(listener, app, limits, async move {
        shutdown_signal().await;
        tracing::info!("shutdown requested: no new requests; in-flight ones get {grace:?}");
        shutdown_state.accepting.store(false, Ordering::SeqCst);
        let abort_state = shutdown_state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let Ok(tx) = abort_state.commands.lock() {
                let _ = tx.send(Command::Shutdown);
            }
        });
    })
    .await;
    let _ = tx.send(Command::Shutdown);
    drop(tx);
    if let Ok(tx) = state.commands.lock() {
        let _ = tx.send(Command::Shutdown);
    }
    engine_thread.join().map_err(|_| ServeError::Loop("the engine loop panicked".into()))?;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
