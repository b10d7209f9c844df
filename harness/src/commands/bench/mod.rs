//! `harness bench`: `vllm bench serve` of vLLM 0.34, a one-arm study without a plan
//! file, and the engine behind every peer front door (`harness benchmark` fills
//! the same [`BenchArgs`]). Owns the flags (vLLM's, with its defaults; those it
//! refuses are `refused`'s table), turning them into one-arm plan text
//! (`plan_text`, validated by the plan parser like any plan: the plan types are the
//! only judge of it), vLLM's result files (`save`) and the summary block printed
//! per cell (`summary`: `metrics::render_table` of each summary read back from the
//! study's `results/summaries.json`).
//! Must not run anything itself: the caller runs the written plan through the very
//! path `harness run` takes (`run::run`), so the evidence is an ordinary study that
//! `harness replay` audits (the one request it sends is `discover_model`'s
//! `/v1/models` when `--model` is left out). Must not read a setting that is not
//! in the plan text.

mod argv;
mod plan_text;
pub mod refused;
mod save;
mod summary;
mod sweep;

#[cfg(test)]
mod tests;

/// What other commands' tests need of a finished bench (summaries of anchors).
#[cfg(test)]
pub(crate) mod tests_support {
    use crate::metrics::CellSummary;

    /// The two anchors' summaries of a sweep of `n` requests: synchronous `sync`
    /// req/s, throughput `thr` req/s.
    pub fn anchors(sync: f64, thr: f64, n: u32) -> Vec<CellSummary> {
        vec![
            super::tests::summary_of("closed-c1", sync),
            super::tests::summary_of(&crate::plan::concurrency_cell_name("closed", i64::from(n)), thr),
        ]
    }
}

use std::path::{Path, PathBuf};

use clap::Args;

use crate::metrics::CellSummary;
use crate::plan::{FrozenPlan, PlanError};

pub use argv::split_words;
pub use plan_text::plan_text;
pub use save::save_results;
pub use summary::{BlockExtras, CellKey, block_extras, load_facts, render_block};
pub use sweep::{anchors_out, prepare_sweep};

/// Where the prompts come from: vLLM 0.34's `--dataset-name` values that the
/// harness builds, and the harness's own panels under their own names
/// (docs/bench.md has the table, with the vLLM names refused and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// vLLM's `random`, as vLLM builds it: vocabulary-wide token IDs decoded to text
    /// and re-encoded (needs --tokenizer; the plan's `vllm_random` panel).
    Random,
    /// vLLM's `burstgpt`, as vLLM builds it: GPT-4 rows of a BurstGPT CSV
    /// (--dataset-path) sampled with NumPy's legacy generator, synthetic IDs
    /// decoded and re-encoded (needs --tokenizer; the plan's `vllm_burstgpt` panel).
    Burstgpt,
    /// vLLM's `prefix_repetition`, as vLLM builds it: random prefixes shared by
    /// groups of prompts (needs --tokenizer; the plan's `vllm_prefix_repetition`
    /// panel).
    PrefixRepetition,
    /// The harness's own random prompts: seeded uniform token IDs in
    /// 0..=--max-token-id, exactly the input length each (not vLLM's `random`: no
    /// text, no tokenizer; for synthetic models).
    RandomIds,
    /// ShareGPT-format conversations (--dataset-path, --tokenizer): first human turn
    /// is the prompt, its answer's length the output length (vLLM's `sharegpt`).
    Sharegpt,
    /// vLLM's `custom`: a JSONL of `{"prompt": ..}` lines, --custom-output-len
    /// output tokens each (-1: the line's own `output_tokens`).
    Custom,
    /// The harness's own: real text cut from the files in --dataset-path (a
    /// directory, `*.txt`), exactly the input length (--tokenizer).
    Synthetic,
    /// The harness's own: a JSONL of `{"prompt"}` or `{"tokens"}` lines, optional
    /// `output_tokens`.
    Requests,
}

/// vLLM 0.34's `--dataset-name` values the harness does not build, and why.
const REFUSED_DATASETS: &[(&str, &str)] = &[
    (
        "hf",
        "Hugging Face hub datasets need the hub, which this harness never reaches (offline); save the rows as JSONL and use `custom`",
    ),
    ("random-mm", "multimodal prompts (images, video): the harness sends text and token IDs only"),
    ("random-rerank", "reranking requests: the harness measures generation only"),
    ("custom_image", "multimodal prompts: the harness sends text and token IDs only"),
    ("custom_audio", "audio prompts: the harness sends text and token IDs only"),
    ("spec_bench", "its prompts are rendered with the chat template client-side, which the harness does not do"),
    ("speed_bench", "a Hugging Face hub dataset (offline)"),
    (
        "timed_trace",
        "per-request timestamps and hash-id prefixes: write a plan with a `trace` arrival file instead (docs/plan.md)",
    ),
    ("sonnet", "vLLM 0.34 has no `sonnet` dataset any more (its --dataset-name refuses it too)"),
];

/// `--dataset-name`'s parser: vLLM's names and the harness's own, each refused
/// vLLM name with its reason.
fn parse_dataset(name: &str) -> Result<Dataset, String> {
    Ok(match name {
        "random" => Dataset::Random,
        "burstgpt" => Dataset::Burstgpt,
        "prefix_repetition" => Dataset::PrefixRepetition,
        "random-ids" => Dataset::RandomIds,
        "sharegpt" => Dataset::Sharegpt,
        "custom" => Dataset::Custom,
        "synthetic" => Dataset::Synthetic,
        "requests" => Dataset::Requests,
        other => {
            return Err(match REFUSED_DATASETS.iter().find(|(n, _)| *n == other) {
                Some((_, why)) => format!("refused: {why}"),
                None => "expected random, sharegpt, custom, burstgpt, prefix_repetition (vLLM's) or random-ids, \
                         synthetic, requests (the harness's own)"
                    .into(),
            });
        }
    })
}

/// `--backend`'s parser: vLLM's generation backends over the OpenAI routes.
fn parse_backend(name: &str) -> Result<String, String> {
    match name {
        "openai" | "vllm" | "openai-chat" => Ok(name.to_string()),
        "openai-audio"
        | "openai-embeddings"
        | "openai-embeddings-chat"
        | "openai-embeddings-clip"
        | "openai-embeddings-vlm2vec"
        | "infinity-embeddings"
        | "infinity-embeddings-clip"
        | "vllm-pooling"
        | "vllm-rerank" => {
            Err(format!("refused: {name} is not a generation backend; the harness measures text generation"))
        }
        other => Err(format!("{other}: expected openai, vllm or openai-chat")),
    }
}

/// `--tokenizer-mode`'s parser: the Hugging Face tokenizer only.
fn parse_tokenizer_mode(mode: &str) -> Result<String, String> {
    match mode {
        "auto" | "hf" => Ok(mode.to_string()),
        other => Err(format!("refused: {other}: the harness reads Hugging Face tokenizer.json files only")),
    }
}

/// The flags of `harness bench`: `vllm bench serve`'s (vLLM 0.34), with its
/// defaults and meanings, then the harness's own (docs/bench.md has the table).
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// vLLM's `--base-url`: a running OpenAI-compatible server (not started or
    /// stopped); default http://--host:--port.
    #[arg(long = "base-url", alias = "url")]
    pub url: Option<String>,
    /// vLLM's `--host` of the server (with --port; ignored with --base-url).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// vLLM's `--port` of the server (default 8000). With --argv, the port the
    /// started server listens on (default: a free loopback port).
    #[arg(long)]
    pub port: Option<u16>,
    /// The harness's own: the command line of a server to start fresh (split on
    /// whitespace; quotes group words); placeholders {host}, {port}, {model} as in
    /// a plan's argv.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "url")]
    pub argv: Option<String>,
    /// vLLM's `--model`: the `model` every request sends. Left out: the first model
    /// the server lists at /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// The harness's own: open-loop Poisson request rates in req/s, e.g. 1,2,4: one
    /// cell each.
    #[arg(long, alias = "rates", value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// The harness's own: closed-loop concurrencies, e.g. 1,8: one cell each.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<u32>,
    /// vLLM's `--request-rate` (default inf): a finite rate is an open loop (Poisson,
    /// or gamma with --burstiness); inf sends every request at once, at most
    /// --max-concurrency in flight. A comma list gives one cell each.
    #[arg(long, value_delimiter = ',')]
    pub request_rate: Vec<f64>,
    /// vLLM's `--max-concurrency`: most requests in flight.
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// vLLM's `--num-prompts` (default 1000).
    #[arg(long, alias = "count", default_value_t = 1000)]
    pub num_prompts: u64,
    /// vLLM's `--dataset-name` (default random): random, sharegpt, custom,
    /// burstgpt, prefix_repetition; or the harness's own random-ids, synthetic,
    /// requests.
    #[arg(long = "dataset-name", alias = "dataset", default_value = "random", value_parser = parse_dataset)]
    pub dataset: Dataset,
    /// vLLM's `--dataset-path`: the dataset file (sharegpt, custom, burstgpt's
    /// CSV, requests) or text directory (synthetic).
    #[arg(long)]
    pub dataset_path: Option<String>,
    /// vLLM's `--tokenizer`: a tokenizer.json, or a directory holding one (default:
    /// --model when that is such a directory). Hub names cannot be fetched.
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// vLLM's `--tokenizer-mode` (auto, hf: a Hugging Face tokenizer).
    #[arg(long, default_value = "auto", value_parser = parse_tokenizer_mode)]
    pub tokenizer_mode: String,
    /// vLLM's `--input-len`: sets --random-input-len.
    #[arg(long)]
    pub input_len: Option<u32>,
    /// vLLM's `--output-len`: sets --random-output-len, --sharegpt-output-len,
    /// --custom-output-len and --prefix-repetition-output-len.
    #[arg(long)]
    pub output_len: Option<u32>,
    /// vLLM's `--random-input-len` (default 1024).
    #[arg(long, default_value_t = 1024)]
    pub random_input_len: u32,
    /// vLLM's `--random-output-len` (default 128).
    #[arg(long, default_value_t = 128)]
    pub random_output_len: u32,
    /// vLLM's `--random-range-ratio`: a float, or `{"input": R, "output": R}`;
    /// lengths uniform in [floor(L(1-R)), ceil(L(1+R))], R in [0, 1).
    #[arg(long = "random-range-ratio")]
    pub random_range_ratio: Option<String>,
    /// vLLM's `--random-prefix-len`: tokens shared by every random prompt.
    #[arg(long = "random-prefix-len")]
    pub random_prefix_len: Option<u32>,
    /// vLLM's `--random-batch-size`: 1 only (larger batches are for embeddings).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1))]
    pub random_batch_size: u32,
    /// vLLM's `--sharegpt-output-len`: every sharegpt request's output length
    /// (instead of its answer's).
    #[arg(long)]
    pub sharegpt_output_len: Option<u32>,
    /// vLLM's `--custom-output-len` (default 256; -1: each line's `output_tokens`).
    #[arg(long, default_value_t = 256, allow_negative_numbers = true)]
    pub custom_output_len: i64,
    /// vLLM's `--prefix-repetition-prefix-len` (default 256): tokens of each
    /// shared prefix.
    #[arg(long, default_value_t = 256)]
    pub prefix_repetition_prefix_len: u32,
    /// vLLM's `--prefix-repetition-suffix-len` (default 256): each prompt's own
    /// tokens after its prefix.
    #[arg(long, default_value_t = 256)]
    pub prefix_repetition_suffix_len: u32,
    /// vLLM's `--prefix-repetition-num-prefixes` (default 10): prompts per prefix
    /// are --num-prompts / this.
    #[arg(long, default_value_t = 10)]
    pub prefix_repetition_num_prefixes: u32,
    /// vLLM's `--prefix-repetition-output-len` (default 128).
    #[arg(long, default_value_t = 128)]
    pub prefix_repetition_output_len: u32,
    /// vLLM's `--skip-chat-template`: custom prompts are sent as written (vLLM
    /// otherwise renders the chat template client-side, which the harness does not).
    #[arg(long)]
    pub skip_chat_template: bool,
    /// vLLM's `--disable-shuffle`: sharegpt conversations in file order,
    /// prefix_repetition prompts prefix-major (custom lines are always in file
    /// order here).
    #[arg(long)]
    pub disable_shuffle: bool,
    /// vLLM's `--no-oversample`: the harness never oversamples (too few entries is
    /// an error), so this is how it always runs.
    #[arg(long)]
    pub no_oversample: bool,
    /// vLLM's `--trust-remote-code`: accepted; nothing remote is loaded here.
    #[arg(long)]
    pub trust_remote_code: bool,
    /// vLLM's `--ignore-eos`: sharegpt, custom, burstgpt, prefix_repetition,
    /// requests outputs run to their length (random outputs always do, as in vLLM).
    #[arg(long)]
    pub ignore_eos: bool,
    /// The harness's own: random-ids' largest token ID (below the vocabulary size).
    #[arg(long, default_value_t = 255)]
    pub max_token_id: u32,
    /// The harness's own: the name of the environment variable holding the API key
    /// (sent as `Authorization: Bearer`); the key is never written anywhere.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// The harness's own: the evidence directory (default reports/bench-<unix s>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace an earlier evidence directory at --out.
    #[arg(long)]
    pub force: bool,
    /// Study name (the plan's study.name).
    #[arg(long, default_value = "bench")]
    pub name: String,
    /// vLLM's `--seed` (default 0): prompt draws and arrival gaps.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Path polled until the server answers 200.
    #[arg(long, default_value = crate::protocol::routes::DEFAULT_HEALTH_PATH)]
    pub health: String,
    /// Longest wait for the server's health path (vLLM's
    /// `--ready-check-timeout-sec`, when given, sets it).
    #[arg(long, default_value_t = 600.0)]
    pub startup_timeout_s: f64,
    /// vLLM's `--ready-check-timeout-sec` (vLLM: 0 skips the check; the harness
    /// always waits for health, this long).
    #[arg(long)]
    pub ready_check_timeout_sec: Option<u32>,
    /// Longest a single request may take.
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout_s: f64,
    /// Idle seconds before each cell.
    #[arg(long, default_value_t = 1.0)]
    pub settle_s: f64,
    /// Largest fraction of a cell's requests that may fail before the run exits 2.
    #[arg(long, default_value_t = 0.0)]
    pub max_error_rate: f64,
    /// vLLM's `--save-result`: after the run, one vLLM result JSON per cell.
    #[arg(long)]
    pub save_result: bool,
    /// vLLM's `--save-detailed`: the per-request keys too (input_lens, ttfts,
    /// itls, ...); without it vLLM's smaller key set.
    #[arg(long)]
    pub save_detailed: bool,
    /// vLLM's `--append-result`: append to the result file (one JSON per line).
    #[arg(long)]
    pub append_result: bool,
    /// vLLM's `--result-dir` (default: the current directory).
    #[arg(long)]
    pub result_dir: Option<PathBuf>,
    /// vLLM's `--result-filename` (default vLLM's `<label>-<rate>qps[-concurrency<C>]-
    /// <model>-<date>.json`; with several cells, the cell's name before the extension).
    #[arg(long)]
    pub result_filename: Option<String>,
    /// vLLM's `--label` (default the backend).
    #[arg(long)]
    pub label: Option<String>,
    /// vLLM's `--metadata KEY=VALUE ...`: extra keys of the saved result.
    #[arg(long, num_args = 1..)]
    pub metadata: Vec<String>,
    /// vLLM's `--served-model-name`: the `model` every request names (default --model).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// vLLM's `--backend` (default openai): openai, vllm (/v1/completions) or
    /// openai-chat (/v1/chat/completions).
    #[arg(long, value_parser = parse_backend)]
    pub backend: Option<String>,
    /// vLLM's `--endpoint` (default /v1/completions).
    #[arg(long, value_parser = [crate::protocol::routes::COMPLETIONS_PATH, crate::protocol::routes::CHAT_COMPLETIONS_PATH])]
    pub endpoint: Option<String>,
    /// vLLM's `--burstiness` (default 1.0, Poisson): gamma arrivals of this shape.
    #[arg(long)]
    pub burstiness: Option<f64>,
    /// vLLM's `--goodput KEY:VALUE ...` (ttft, tpot, e2el; ms).
    #[arg(long, num_args = 1..)]
    pub goodput: Vec<String>,
    /// vLLM's `--num-warmups` (default 0).
    #[arg(long)]
    pub num_warmups: Option<u32>,
    /// vLLM's `--temperature` (the harness sends 0 without it).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// vLLM's `--header KEY=VALUE ...`: extra HTTP headers on every request (a
    /// secret-bearing one is refused: use --api-key-env).
    #[arg(long, num_args = 1..)]
    pub header: Vec<String>,
    /// The harness's own: leave `return_token_ids` out of the timed requests, as
    /// vLLM bench does.
    #[arg(long)]
    pub no_token_ids: bool,
    /// vLLM's `--top-p`.
    #[arg(long = "top-p")]
    pub top_p: Option<f64>,
    /// vLLM's `--top-k`.
    #[arg(long = "top-k")]
    pub top_k: Option<i64>,
    /// vLLM's `--min-p`.
    #[arg(long = "min-p")]
    pub min_p: Option<f64>,
    /// vLLM's `--frequency-penalty`.
    #[arg(long = "frequency-penalty")]
    pub frequency_penalty: Option<f64>,
    /// vLLM's `--presence-penalty`.
    #[arg(long = "presence-penalty")]
    pub presence_penalty: Option<f64>,
    /// vLLM's `--repetition-penalty`.
    #[arg(long = "repetition-penalty")]
    pub repetition_penalty: Option<f64>,
    /// vLLM's `--extra-body JSON`: more fields of every body (its keys win).
    #[arg(long = "extra-body")]
    pub extra_body: Option<String>,
    /// vLLM's `--percentile-metrics` (default ttft,tpot,itl): the block's sections.
    #[arg(long = "percentile-metrics")]
    pub percentile_metrics: Option<String>,
    /// vLLM's `--metric-percentiles` (default 99).
    #[arg(long = "metric-percentiles")]
    pub metric_percentiles: Option<String>,
    /// vLLM's `--request-id-prefix` (default `bench-<8 random hex digits>-`, drawn
    /// when the plan is written and frozen in it): every timed request sends
    /// `x-request-id: <prefix><index>`. `harness profile` draws its own
    /// (`profile-<8 hex digits>-`); `harness benchmark` sends none.
    #[arg(long = "request-id-prefix")]
    pub request_id_prefix: Option<String>,
    /// vLLM's flags that the harness refuses, each with its reason.
    #[command(flatten)]
    pub refused: refused::RefusedFlags,
    /// Set by `harness benchmark` (guidellm's profile): see `guidellm_loads`.
    #[arg(skip)]
    pub profile: Option<String>,
    /// Set by `harness benchmark` (guidellm's max_duration constraint).
    #[arg(skip)]
    pub max_seconds: Option<f64>,
    /// Set by `harness benchmark` (guidellm's max_requests constraint).
    #[arg(skip)]
    pub max_requests: Option<u64>,
    /// Set by `harness benchmark` (guidellm's synthetic_text data).
    #[arg(skip)]
    pub data: Option<String>,
    /// Set from `--profile constant`: open-loop cells with evenly spaced arrivals.
    #[arg(skip)]
    pub constant_arrivals: bool,
    /// Set from max_duration: one cell per rate with its own count.
    #[arg(skip)]
    pub counts_per_rate: Vec<u64>,
    /// Set from the sweep profile: how many benchmarks the sweep holds.
    #[arg(skip)]
    pub sweep: Option<u32>,
    /// Set by `harness profile` (AIPerf's --num-dataset-entries): how many entries
    /// a synthetic or random panel holds (requests use them in turn); default one
    /// per request.
    #[arg(skip)]
    pub panel_entries: Option<u64>,
    /// Set by `harness profile` (AIPerf's --isl/--osl and their stddevs, or
    /// --random-range-ratio): the synthetic panel's length distributions and
    /// output mode, instead of fixed lengths and forced outputs.
    #[arg(skip)]
    pub length_shape: Option<LengthShape>,
    /// Set by `harness profile` (AIPerf's --custom-dataset-type mooncake_trace): one
    /// trace cell replaying the file's timestamps, instead of rate or concurrency
    /// cells.
    #[arg(skip)]
    pub trace_replay: Option<TraceReplay>,
    /// Set by `harness profile` (AIPerf's --tokenizer-revision): the revision of a
    /// hub name looked up in the local Hugging Face cache (default `main`).
    #[arg(skip)]
    pub tokenizer_revision: Option<String>,
    /// After each cell's vLLM block, this harness's extra lines.
    #[arg(long)]
    pub verbose: bool,
    /// Print the plan and stop (nothing is run or written).
    #[arg(long)]
    pub print_plan: bool,
    /// vLLM's `--disable-tqdm`: no progress bars, one line per cell.
    #[arg(long = "disable-tqdm", alias = "quiet")]
    pub quiet: bool,
}

/// A synthetic panel's length distributions (plan TOML, e.g. `{ dist = "normal",
/// mean = 550.0, sd = 10.0, min = 1, max = 650 }`) and whether outputs end
/// naturally (`max_tokens` only, at most `output_cap`) or are forced.
#[derive(Debug, Clone, PartialEq)]
pub struct LengthShape {
    pub input: String,
    pub output: String,
    pub natural: bool,
    pub output_cap: u32,
}

/// A trace cell's file and panel: `path` (a Mooncake JSONL, as given: read from
/// the working directory, copied into the evidence's inputs), the panel lengths
/// (the distinct input lengths of the rows sent), documents per length, and the
/// largest output length of those rows (`request.output_tokens`; each request
/// sends its own row's).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceReplay {
    pub path: String,
    pub lengths: Vec<u32>,
    pub documents: u64,
    pub max_output: u32,
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
    refuse(args)?;
    if args.model.is_some() || args.served_model_name.is_some() {
        return Ok(args.clone());
    }
    let Some(url) = &target_url(args) else {
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

/// `args` with vLLM bench's default `--request-id-prefix` filled in when it is not
/// given: `bench-<8 hex digits>-`, as vLLM draws it (`uuid4().hex[:8]`, 32 random
/// bits), drawn here once so that the plan states the concrete prefix and a replay
/// or rerun of the plan sends the same ids. For `harness bench` only (vLLM always
/// sends request ids; the other front doors' peers differ).
pub fn with_vllm_request_ids(args: &BenchArgs) -> BenchArgs {
    let mut out = args.clone();
    if out.request_id_prefix.is_none() {
        out.request_id_prefix = Some(format!("bench-{:08x}-", rand::random::<u32>()));
    }
    out
}

/// A refused vLLM flag, as bad input naming it and why (before anything is sent).
pub fn refuse(args: &BenchArgs) -> Result<(), BenchError> {
    match args.refused.first_message() {
        Some(m) => Err(BenchError::Args(m)),
        None => Ok(()),
    }
}

/// The server's URL: `--base-url`, else vLLM's `http://--host:--port` (port
/// 8000); `None` with `--argv` (the harness starts the server).
pub fn target_url(a: &BenchArgs) -> Option<String> {
    if a.argv.is_some() {
        return None;
    }
    a.url.clone().or_else(|| {
        let host =
            if a.host.contains(':') && !a.host.starts_with('[') { format!("[{}]", a.host) } else { a.host.clone() };
        Some(format!("http://{host}:{}", a.port.unwrap_or(8000)))
    })
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
    refuse(args)?;
    let args = &resolved(args)?;
    save::check_destination(args)?;
    let text = plan_text(args, port)?;
    let frozen = crate::plan::freeze(text.clone().into_bytes())?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("reports/bench-{now_unix_s}")));
    Ok(BenchPlan { text, frozen, out })
}

/// The flags with vLLM's and guidellm's spellings turned into ours (what
/// `plan_text` reads): loads, counts, profiles, data.
pub fn resolved(args: &BenchArgs) -> Result<BenchArgs, BenchError> {
    let mut a = guidellm_loads(&vllm_loads(args)?)?;
    a.url = target_url(&a);
    if a.url.is_some() {
        a.port = None;
    }
    if let Some(s) = a.ready_check_timeout_sec.filter(|s| *s > 0) {
        a.startup_timeout_s = f64::from(s);
    }
    if let Some(n) = a.input_len {
        a.random_input_len = n;
    }
    if let Some(n) = a.output_len {
        a.random_output_len = n;
        a.sharegpt_output_len = Some(n);
        a.custom_output_len = i64::from(n);
        a.prefix_repetition_output_len = n;
    }
    a.tokenizer = tokenizer_file(&a)?;
    Ok(a)
}

/// vLLM's `--tokenizer` as the tokenizer.json it names: a file, a directory
/// holding one, or a hub name found in the local Hugging Face cache (as
/// transformers reads it offline; `inputs::hf_cache`); without it, `--model` when
/// that is such a directory or cached name (vLLM's default tokenizer is the
/// model's). A `--tokenizer` that is none of these stays as given: reading it is
/// the error that names it.
fn tokenizer_file(a: &BenchArgs) -> Result<Option<String>, BenchError> {
    let revision = a.tokenizer_revision.as_deref().unwrap_or("main");
    let resolve = |name: &str| -> Option<String> {
        let p = Path::new(name);
        if p.is_dir() {
            return Some(p.join("tokenizer.json").display().to_string());
        }
        if p.is_file() {
            return Some(name.to_string());
        }
        crate::inputs::hf_cache::cached_file(name, revision, "tokenizer.json").map(|f| f.display().to_string())
    };
    Ok(match &a.tokenizer {
        Some(t) => Some(resolve(t).unwrap_or_else(|| t.clone())),
        None => a.model.as_deref().and_then(resolve).filter(|f| Path::new(f).is_file()),
    })
}

/// vLLM bench's load flags in ours: each finite `--request-rate` becomes a
/// `--rate` (capped in flight by `--max-concurrency` when given), `inf` a
/// `--concurrency` of `--max-concurrency` (or `--num-prompts`: every request at once).
fn vllm_loads(a: &BenchArgs) -> Result<BenchArgs, BenchError> {
    let mut out = a.clone();
    if a.trace_replay.is_some() {
        // The trace file is the load; `max_concurrency` is its in-flight cap.
        return Ok(out);
    }
    if let Some(r) = a.request_rate.iter().find(|r| r.is_nan() || **r <= 0.0) {
        return Err(BenchError::Args(format!("--request-rate: every rate must be positive (or inf), got {r}")));
    }
    // vLLM's default --request-rate is inf: every request at once (at most
    // --max-concurrency in flight), unless another load is given.
    if a.rate.is_empty() && a.concurrency.is_empty() && a.request_rate.is_empty() && a.profile.is_none() {
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

/// guidellm's profile, constraints and data (set by `harness benchmark`, the
/// guidellm front door) in ours: the profile chooses what `rate` lists and the
/// load kind, max_requests the count, max_duration each open-loop cell's count
/// (rate x seconds), synthetic_text the random panel's lengths.
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
                "prompt_tokens" => out.random_input_len = n,
                "output_tokens" => out.random_output_len = n,
                other => {
                    return Err(bad(format!(
                        "--data: {other:?} is not supported (prompt_tokens and output_tokens only: fixed lengths; \
                         length distributions are a `synthetic` panel in a plan file)"
                    )));
                }
            }
        }
        out.dataset = Dataset::RandomIds;
    }
    let ints = |rates: &[f64]| -> Result<Vec<u32>, BenchError> {
        rates
            .iter()
            .map(|r| {
                (r.fract() == 0.0 && *r >= 1.0 && *r <= f64::from(u32::MAX))
                    .then_some(*r as u32)
                    .ok_or_else(|| bad(format!("--profile kind=concurrent: streams are whole numbers, got {r}")))
            })
            .collect()
    };
    let closed_only = |p: &str| -> Result<(), BenchError> {
        if a.rate.is_empty() { Ok(()) } else { Err(bad(format!("--profile kind={p}: takes no rate"))) }
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
                _ => return Err(bad("--profile kind=sweep: sweep_size is the number of benchmarks, 3 to 100".into())),
            };
            out.sweep = Some(n);
            out.rate.clear();
            out.concurrency = vec![1, u32::try_from(out.num_prompts).unwrap_or(u32::MAX)];
        }
    }
    if matches!(a.profile.as_deref(), Some("constant" | "poisson")) && out.rate.is_empty() {
        return Err(bad(format!(
            "--profile kind={}: give rate=R (req/s, or a list [..])",
            a.profile.as_deref().unwrap_or("")
        )));
    }
    if let Some(s) = a.max_seconds {
        if !(s.is_finite() && s > 0.0) {
            return Err(bad(format!("--constraint kind=max_duration: seconds must be positive, got {s}")));
        }
        if !out.concurrency.is_empty() && out.sweep.is_none() {
            return Err(bad(
                "--constraint kind=max_duration: a closed loop is bounded by its request count here; give \
                 kind=max_requests,count=N (a duration-bound closed loop is not supported yet)"
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
    let path = evidence.join(crate::evidence::SUMMARIES_FILE);
    let bytes = std::fs::read(&path).map_err(|error| BenchError::Io { path: path.clone(), error })?;
    serde_json::from_slice(&bytes).map_err(|e| BenchError::Summaries { path, why: e.to_string() })
}
