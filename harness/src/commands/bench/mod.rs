//! `harness bench`: an ad-hoc, one-arm study from vLLM-bench-like flags, without a
//! plan file. Owns the flags ([`BenchArgs`]), turning them into one-arm plan text
//! (`plan_text`, validated by the plan parser like any plan: the plan types are the
//! only judge of it) and the vLLM-bench-like summary block printed per cell
//! (`summary`: `metrics::render_table` of each summary read back from the study's
//! `results/summaries.json`).
//! Must not run anything itself: the caller runs the written plan through the very
//! path `harness run` takes (`run::run`), so the evidence is an ordinary study that
//! `harness replay` audits (the one request it sends is `discover_model`'s
//! `/v1/models` when `--model` is left out). Must not read a setting that is not
//! in the plan text.

mod argv;
mod plan_text;
mod save;
mod summary;
mod sweep;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::metrics::CellSummary;
use crate::plan::{FrozenPlan, PlanError};

pub use argv::split_words;
pub use plan_text::plan_text;
pub use save::save_results;
pub use summary::{BlockExtras, CellKey, block_extras, load_facts, render_block};
pub use sweep::{anchors_out, prepare_sweep};

/// Where the prompts come from (the panel sources of `[prompts]`, docs/plan.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dataset {
    /// Seeded uniform token IDs in 0..=--max-token-id, exactly --input-len each
    /// (vLLM's `random`; not natural text).
    Random,
    /// ShareGPT-format conversations (--dataset-path, --tokenizer): first human turn
    /// is the prompt, its answer's length the output length (vLLM's `sharegpt`).
    Sharegpt,
    /// Real text cut from the files in --dataset-path (a directory, `*.txt`),
    /// exactly --input-len tokens (--tokenizer), --output-len output tokens.
    Synthetic,
    /// A JSONL of `{"prompt"}` or `{"tokens"}` lines, optional `output_tokens`.
    Requests,
}

/// The flags of `harness bench` (see `--help` and docs/bench.md).
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("server").required(true).args(["url", "argv"])))]
#[command(group(clap::ArgGroup::new("loads").required(true).multiple(true).args(["rate", "concurrency", "request_rate", "max_concurrency", "profile"])))]
pub struct BenchArgs {
    /// Base URL of a running OpenAI-compatible server (not started or stopped).
    /// vLLM bench's `--base-url` is the same flag.
    #[arg(long, alias = "base-url", alias = "target")]
    pub url: Option<String>,
    /// Command line of a server to start (split on whitespace; quotes group words);
    /// placeholders {host}, {port}, {model} as in a plan's argv.
    #[arg(long, allow_hyphen_values = true)]
    pub argv: Option<String>,
    /// Port the started server listens on (default: a free loopback port, chosen
    /// when the plan is written).
    #[arg(long)]
    pub port: Option<u16>,
    /// The `model` name every request sends (vLLM bench's `--model`). Left out with
    /// --url: the first model the server lists at /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Open-loop Poisson request rates in req/s, e.g. 1,2,4: one cell each
    /// (`--rates` is accepted too, as in `bench-loadgen`).
    #[arg(long, alias = "rates", value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Closed-loop concurrencies, e.g. 1,8: one cell each (every request intended at
    /// the cell start, at most C in flight). With --rate too, both sweeps run.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<u32>,
    /// vLLM bench's `--request-rate`: a finite rate is one `--rate` cell; `inf`
    /// sends every request at once, at most `--max-concurrency` in flight (all of
    /// them without it): a closed loop, one `--concurrency` cell.
    #[arg(long, value_delimiter = ',')]
    pub request_rate: Vec<f64>,
    /// vLLM bench's `--max-concurrency`: with `--request-rate inf` (vLLM's default
    /// rate, so also alone) a closed loop of this many clients; with finite rates
    /// their open loops capped at this many in flight (a later arrival waits for a
    /// free slot; the plan's `cells[].max_concurrency`).
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Requests per cell (`--count` is accepted too, as a plan's cells spell it).
    #[arg(long, alias = "count", default_value_t = 100)]
    pub num_prompts: u64,
    /// The prompt source (vLLM bench's `--dataset-name` is the same flag).
    #[arg(long, alias = "dataset-name", value_enum, default_value_t = Dataset::Random)]
    pub dataset: Dataset,
    /// The dataset file (sharegpt, requests) or text directory (synthetic).
    #[arg(long)]
    pub dataset_path: Option<String>,
    /// tokenizer.json that encodes the dataset's text (sharegpt, synthetic; requests
    /// with text prompts).
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// Prompt tokens per request (random, synthetic; vLLM's `--random-input-len`).
    #[arg(long, alias = "random-input-len", default_value_t = 128)]
    pub input_len: u32,
    /// Output tokens per request (random, synthetic: exactly, EOS ignored); for
    /// sharegpt and requests, a cap on each entry's own output length (default
    /// 2048). vLLM's `--random-output-len`.
    #[arg(long, alias = "random-output-len")]
    pub output_len: Option<u32>,
    /// Sharegpt, requests: force each entry's whole output length (EOS ignored).
    /// Random and synthetic outputs are always forced, with or without it.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Random: largest token ID drawn (below the model's vocabulary size).
    #[arg(long, default_value_t = 255)]
    pub max_token_id: u32,
    /// Name of the environment variable holding the API key (sent as
    /// `Authorization: Bearer`); the key itself is never written anywhere.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Evidence directory (default: reports/bench-<unix seconds>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace an earlier evidence directory at --out.
    #[arg(long)]
    pub force: bool,
    /// Study name (the plan's study.name).
    #[arg(long, default_value = "bench")]
    pub name: String,
    /// Study seed (arrival gaps, prompt draws).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Path polled until the server answers 200.
    #[arg(long, default_value = crate::protocol::routes::DEFAULT_HEALTH_PATH)]
    pub health: String,
    /// Longest wait for the server's health path.
    #[arg(long, default_value_t = 600.0)]
    pub startup_timeout_s: f64,
    /// Longest a single request may take.
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout_s: f64,
    /// Idle seconds before each cell.
    #[arg(long, default_value_t = 1.0)]
    pub settle_s: f64,
    /// Largest fraction of a cell's requests that may fail before the run exits 2.
    #[arg(long, default_value_t = 0.0)]
    pub max_error_rate: f64,
    /// vLLM bench's `--save-result`: after the run, one vLLM result JSON per cell
    /// (vLLM's keys, as `harness export --format vllm-bench`), in --result-dir.
    #[arg(long)]
    pub save_result: bool,
    /// Where --save-result writes (default: the current directory).
    #[arg(long, requires = "save_result")]
    pub result_dir: Option<PathBuf>,
    /// The result file's name (default vLLM's `<label>-<rate>qps[-concurrency<C>]-
    /// <model>-<date>.json`; with several cells, the cell's name before the extension).
    #[arg(long, requires = "save_result")]
    pub result_filename: Option<String>,
    /// The result's `label` (vLLM's `--label`; default the endpoint type).
    #[arg(long)]
    pub label: Option<String>,
    /// vLLM's `--metadata KEY=VALUE ...`: extra string keys of every --save-result file.
    #[arg(long, num_args = 1.., requires = "save_result")]
    pub metadata: Vec<String>,
    /// vLLM's `--served-model-name`: the `model` every request names (default --model).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// vLLM's `--backend`: `openai`, `vllm` (both /v1/completions) or `openai-chat`
    /// (/v1/chat/completions, needs a dataset with messages: sharegpt or requests).
    #[arg(long, value_parser = ["openai", "vllm", "openai-chat"])]
    pub backend: Option<String>,
    /// vLLM's `--endpoint`: `/v1/completions` or `/v1/chat/completions`.
    #[arg(long, value_parser = [crate::protocol::routes::COMPLETIONS_PATH, crate::protocol::routes::CHAT_COMPLETIONS_PATH])]
    pub endpoint: Option<String>,
    /// vLLM's `--burstiness`: open-loop arrivals gamma-distributed with this shape
    /// (1.0, the default, is Poisson; smaller is burstier).
    #[arg(long)]
    pub burstiness: Option<f64>,
    /// vLLM's `--goodput KEY:VALUE ...` (keys ttft, tpot, e2el; milliseconds): the
    /// targets a request must meet to count toward goodput (the plan's `[slo]`).
    #[arg(long, num_args = 1..)]
    pub goodput: Vec<String>,
    /// vLLM's `--num-warmups N`: warm the server with N prompts (one batched call)
    /// before the cells (default 1).
    #[arg(long)]
    pub num_warmups: Option<u32>,
    /// vLLM's `--temperature` (default 0: greedy, as every study here).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// vLLM's `--header KEY=VALUE ...`: extra HTTP headers on every request.
    #[arg(long, num_args = 1..)]
    pub header: Vec<String>,
    /// Leave out `return_token_ids` from the timed requests, as vLLM bench does
    /// (`request.token_ids = false`): tokens are then counted one per text event,
    /// lengths from usage.
    #[arg(long)]
    pub no_token_ids: bool,
    /// vLLM's `--top-p`: sent in every body (`request.extra_body`).
    #[arg(long = "top-p")]
    pub top_p: Option<f64>,
    /// vLLM's `--top-k`: sent in every body.
    #[arg(long = "top-k")]
    pub top_k: Option<i64>,
    /// vLLM's `--min-p`: sent in every body.
    #[arg(long = "min-p")]
    pub min_p: Option<f64>,
    /// vLLM's `--frequency-penalty`: sent in every body (this engine refuses any
    /// value but 0).
    #[arg(long = "frequency-penalty")]
    pub frequency_penalty: Option<f64>,
    /// vLLM's `--presence-penalty`: sent in every body (this engine: 0 only).
    #[arg(long = "presence-penalty")]
    pub presence_penalty: Option<f64>,
    /// vLLM's `--repetition-penalty`: sent in every body (this engine: 1 only).
    #[arg(long = "repetition-penalty")]
    pub repetition_penalty: Option<f64>,
    /// vLLM's `--extra-body JSON`: more fields of every body, after the sampling
    /// flags (its keys win, as in vLLM); its `temperature` is --temperature.
    #[arg(long = "extra-body")]
    pub extra_body: Option<String>,
    /// vLLM's `--random-range-ratio R`: random prompt and output lengths uniform in
    /// [floor(L(1-R)), ceil(L(1+R))], R in [0, 1).
    #[arg(long = "random-range-ratio")]
    pub random_range_ratio: Option<f64>,
    /// vLLM's `--random-prefix-len N`: N random token IDs shared by every random
    /// prompt, before its own --random-input-len tokens.
    #[arg(long = "random-prefix-len")]
    pub random_prefix_len: Option<u32>,
    /// vLLM's `--percentile-metrics ttft,tpot,itl,e2el`: the sections of the printed
    /// block (all four without it); the saved result always holds all four.
    #[arg(long = "percentile-metrics")]
    pub percentile_metrics: Option<String>,
    /// vLLM's `--metric-percentiles 50,90,99`: the printed block's percentile lines
    /// after Mean and Median (P95 and P99 without it; nearest rank, as the note under
    /// the block says) and the saved result's `p<P>_*_ms` keys (NumPy's
    /// interpolation, as vLLM's; p99 always).
    #[arg(long = "metric-percentiles")]
    pub metric_percentiles: Option<String>,
    /// guidellm's `--profile`: `synchronous` (one request at a time), `concurrent`
    /// (--rate lists concurrencies), `throughput` (every request at once),
    /// `constant` or `poisson` (--rate lists req/s), `sweep` (synchronous and
    /// throughput anchors, then --rate N benchmarks in all, constant rates between
    /// the two measured rates; default 10).
    #[arg(long, value_parser = ["synchronous", "concurrent", "throughput", "constant", "poisson", "sweep"])]
    pub profile: Option<String>,
    /// guidellm's `--max-seconds`: each open-loop cell sends rate x seconds
    /// requests (at most --max-requests when given); closed loops need a count.
    #[arg(long)]
    pub max_seconds: Option<f64>,
    /// guidellm's `--max-requests`: requests per cell (sets --num-prompts).
    #[arg(long)]
    pub max_requests: Option<u64>,
    /// guidellm's synthetic `--data "prompt_tokens=N,output_tokens=M"`: random
    /// prompts of N token IDs, M forced output tokens (not natural text).
    #[arg(long)]
    pub data: Option<String>,
    /// Set from `--profile constant`: open-loop cells with evenly spaced arrivals.
    #[arg(skip)]
    pub constant_arrivals: bool,
    /// Set from `--max-seconds`: one cell per rate with its own count.
    #[arg(skip)]
    pub counts_per_rate: Vec<u64>,
    /// Set from `--profile sweep`: how many benchmarks the sweep holds (its
    /// synchronous and throughput anchors included; guidellm's `--rate` for sweep).
    #[arg(skip)]
    pub sweep: Option<u32>,
    /// After each cell's vLLM block, this harness's extra lines: latency from
    /// intended arrival, dispatch lag, failures by class, stream events.
    #[arg(long)]
    pub verbose: bool,
    /// Print the plan and stop (nothing is run or written).
    #[arg(long)]
    pub print_plan: bool,
    /// No progress bars, one line per cell during the run (the summary blocks
    /// print at the end either way). vLLM's `--disable-tqdm`.
    #[arg(long, alias = "disable-tqdm")]
    pub quiet: bool,
}

/// Bad flags: always exit 2 (the message names the flag).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Args(String),
    #[error("the plan made from these flags is invalid")]
    Plan(#[from] PlanError),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: cannot read the cell summaries: {why}")]
    Summaries { path: PathBuf, why: String },
    #[error("--save-result: {why}")]
    Save { why: String },
}

impl crate::BadInput for BenchError {
    fn is_bad_input(&self) -> bool {
        match self {
            BenchError::Args(_) => true,
            BenchError::Plan(p) => crate::BadInput::is_bad_input(p),
            _ => false,
        }
    }
}

/// The plan of a bench: its text, frozen (validated) from those bytes, and where the
/// evidence goes.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub text: String,
    pub frozen: FrozenPlan,
    pub out: PathBuf,
}

/// `args` with `--model` filled in from the running server's `/v1/models` (its first
/// id) when neither `--model` nor `--served-model-name` is given: vLLM bench's
/// habit. Only with --url (a server started by --argv is not up yet). Sends the
/// `--api-key-env` key and the `--header`s as the study would.
pub fn discover_model(args: &BenchArgs) -> Result<BenchArgs, BenchError> {
    if args.model.is_some() || args.served_model_name.is_some() {
        return Ok(args.clone());
    }
    let Some(url) = &args.url else {
        return Err(BenchError::Args(
            "--model is required with --argv (the server is not started yet to be asked); with --url it may be \
             left out (the first model of /v1/models)"
                .into(),
        ));
    };
    let base = url.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    let models = format!("{base}{}", crate::protocol::routes::MODELS_PATH);
    let ask = |why: String| BenchError::Args(format!("--model left out, and {models} {why}: give --model"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| ask(e.to_string()))?;
    let body: serde_json::Value = rt.block_on(async {
        let mut req = reqwest::Client::new().get(&models).timeout(std::time::Duration::from_secs(10));
        if let Some(var) = &args.api_key_env
            && let Ok(key) = std::env::var(var)
        {
            req = req.bearer_auth(key);
        }
        for h in &args.header {
            if let Some((k, v)) = h.split_once('=') {
                req = req.header(k.trim(), v);
            }
        }
        let r = req.send().await.map_err(|e| ask(format!("did not answer ({e})")))?;
        if !r.status().is_success() {
            return Err(ask(format!("answered {}", r.status())));
        }
        r.json().await.map_err(|e| ask(format!("sent no JSON ({e})")))
    })?;
    let id = body
        .get("data")
        .and_then(serde_json::Value::as_array)
        .and_then(|d| d.first())
        .and_then(|m| m.get("id"))
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| ask("lists no model".into()))?;
    let mut out = args.clone();
    out.model = Some(id.to_string());
    Ok(out)
}

/// vLLM's `--metric-percentiles` (comma-separated, each in [0, 100]; default 99).
pub fn metric_percentiles(a: &BenchArgs) -> Result<Vec<f64>, BenchError> {
    let Some(list) = &a.metric_percentiles else { return Ok(vec![99.0]) };
    list.split(',')
        .map(str::trim)
        .map(|x| {
            x.parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p)).ok_or_else(|| {
                BenchError::Args(format!("--metric-percentiles {list}: {x:?} is not a percentile in [0, 100]"))
            })
        })
        .collect()
}

/// The default evidence directory under `reports`: `bench-<now>`, or the first of
/// `bench-<now>-2`, `-3`, ... that is free with its `-anchors` sibling, so runs
/// started within one second (a vLLM parameter sweep's, a shell loop's) each get
/// their own.
pub fn default_out(reports: &Path, now_unix_s: u64) -> PathBuf {
    let free = |p: &PathBuf| !p.exists() && !anchors_out(p).exists();
    let first = reports.join(format!("bench-{now_unix_s}"));
    std::iter::once(first)
        .chain((2u64..).map(|k| reports.join(format!("bench-{now_unix_s}-{k}"))))
        .find(free)
        .unwrap_or_default()
}

/// The plan the flags describe, validated by the plan parser; `port` is the
/// spawned server's port when `--port` is not given.
pub fn prepare(args: &BenchArgs, port: impl FnOnce() -> u16, now_unix_s: u64) -> Result<BenchPlan, BenchError> {
    let args = &resolved(args)?;
    let text = plan_text(args, port)?;
    let frozen = crate::plan::freeze(text.clone().into_bytes())?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("reports/bench-{now_unix_s}")));
    Ok(BenchPlan { text, frozen, out })
}

/// The flags with vLLM's and guidellm's spellings turned into ours (what
/// `plan_text` reads): loads, counts, profiles, data.
pub fn resolved(args: &BenchArgs) -> Result<BenchArgs, BenchError> {
    guidellm_loads(&vllm_loads(args)?)
}

/// vLLM bench's load flags in ours: each finite `--request-rate` becomes a
/// `--rate` (capped in flight by `--max-concurrency` when given), `inf` a
/// `--concurrency` of `--max-concurrency` (or `--num-prompts`: every request at once).
fn vllm_loads(a: &BenchArgs) -> Result<BenchArgs, BenchError> {
    let mut out = a.clone();
    if let Some(r) = a.request_rate.iter().find(|r| r.is_nan() || **r <= 0.0) {
        return Err(BenchError::Args(format!("--request-rate: every rate must be positive (or inf), got {r}")));
    }
    // vLLM's default --request-rate is inf: --max-concurrency C alone is a closed loop of C.
    if a.rate.is_empty() && a.concurrency.is_empty() && a.request_rate.is_empty() && a.max_concurrency.is_some() {
        out.request_rate.push(f64::INFINITY);
    }
    for r in std::mem::take(&mut out.request_rate) {
        if r.is_infinite() && r > 0.0 {
            let c = a.max_concurrency.unwrap_or(u32::try_from(a.num_prompts).unwrap_or(u32::MAX));
            if !out.concurrency.contains(&c) {
                out.concurrency.push(c);
            }
        } else {
            out.rate.push(r);
        }
    }
    // With finite rates it caps their open loops in flight (as in vLLM); an
    // infinite rate's closed loop already is that cap.
    out.max_concurrency = if out.rate.is_empty() { None } else { a.max_concurrency };
    Ok(out)
}

/// guidellm's profile, duration and data flags in ours: `--profile` chooses what
/// `--rate` means and the load kind, `--max-requests` the count, `--max-seconds`
/// each open-loop cell's count (rate x seconds), `--data` the random panel's lengths.
fn guidellm_loads(a: &BenchArgs) -> Result<BenchArgs, BenchError> {
    let bad = |m: String| BenchError::Args(m);
    let mut out = a.clone();
    if let Some(n) = a.max_requests {
        out.num_prompts = n;
    }
    if let Some(spec) = &a.data {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| bad(format!("--data {spec:?}: expected KEY=VALUE,...")))?;
            let n: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(format!("--data: {k} must be a positive integer, got {v:?}")))?;
            match k.trim() {
                "prompt_tokens" => out.input_len = n,
                "output_tokens" => out.output_len = Some(n),
                other => {
                    return Err(bad(format!(
                        "--data: {other:?} is not supported (prompt_tokens and output_tokens only: fixed lengths; \
                         length distributions are a `synthetic` panel in a plan file)"
                    )));
                }
            }
        }
        if a.dataset != Dataset::Random {
            return Err(bad("--data: guidellm's synthetic spec makes random prompts; leave out --dataset".into()));
        }
    }
    let ints = |rates: &[f64]| -> Result<Vec<u32>, BenchError> {
        rates
            .iter()
            .map(|r| {
                (r.fract() == 0.0 && *r >= 1.0 && *r <= f64::from(u32::MAX))
                    .then_some(*r as u32)
                    .ok_or_else(|| bad(format!("--profile concurrent: --rate lists concurrencies, got {r}")))
            })
            .collect()
    };
    let closed_only = |p: &str| -> Result<(), BenchError> {
        if a.rate.is_empty() { Ok(()) } else { Err(bad(format!("--profile {p}: takes no --rate"))) }
    };
    match a.profile.as_deref() {
        None | Some("poisson") => {}
        Some("constant") => out.constant_arrivals = true,
        Some("synchronous") => {
            closed_only("synchronous")?;
            out.concurrency = vec![1];
        }
        Some("throughput") => {
            closed_only("throughput")?;
            out.concurrency = vec![u32::try_from(out.num_prompts).unwrap_or(u32::MAX)];
        }
        Some("concurrent") => {
            out.concurrency = ints(&a.rate)?;
            out.rate.clear();
        }
        Some(_) => {
            // The anchors' study: one request at a time, then every request at once.
            let n = match a.rate.as_slice() {
                [] => sweep::DEFAULT_BENCHMARKS,
                [r] if r.fract() == 0.0 && *r >= 3.0 && *r <= 100.0 => *r as u32,
                _ => return Err(bad("--profile sweep: --rate is the number of benchmarks, 3 to 100".into())),
            };
            out.sweep = Some(n);
            out.rate.clear();
            out.concurrency = vec![1, u32::try_from(out.num_prompts).unwrap_or(u32::MAX)];
        }
    }
    if matches!(a.profile.as_deref(), Some("constant" | "poisson")) && out.rate.is_empty() {
        return Err(bad(format!(
            "--profile {}: give --rate (req/s, a comma list)",
            a.profile.as_deref().unwrap_or("")
        )));
    }
    if let Some(s) = a.max_seconds {
        if !(s.is_finite() && s > 0.0) {
            return Err(bad(format!("--max-seconds: must be a positive number of seconds, got {s}")));
        }
        if !out.concurrency.is_empty() && out.sweep.is_none() {
            return Err(bad(
                "--max-seconds: a closed loop is bounded by its count here; give --max-requests (a duration-bound \
                 closed loop is not supported yet)"
                    .into(),
            ));
        }
        out.counts_per_rate = out
            .rate
            .iter()
            .map(|r| {
                let n = (r * s).ceil().max(1.0) as u64;
                a.max_requests.map_or(n, |cap| n.min(cap))
            })
            .collect();
    }
    Ok(out)
}

/// A free loopback port (bound and released; the plan freezes it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(18400, |a| a.port())
}

/// Writes the plan where `harness run` will read it from: `dir/plan.toml`.
pub fn write_plan(plan: &BenchPlan, dir: &Path) -> Result<PathBuf, BenchError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| BenchError::Io { path, error }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join("plan.toml");
    std::fs::write(&path, &plan.text).map_err(io(&path))?;
    Ok(path)
}

/// The cell summaries of a finished study (`results/summaries.json`), in run order.
pub fn summaries(evidence: &Path) -> Result<Vec<CellSummary>, BenchError> {
    let path = evidence.join("results").join("summaries.json");
    let bytes = std::fs::read(&path).map_err(|error| BenchError::Io { path: path.clone(), error })?;
    serde_json::from_slice(&bytes).map_err(|e| BenchError::Summaries { path, why: e.to_string() })
}
