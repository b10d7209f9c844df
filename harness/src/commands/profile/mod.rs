//! `harness profile`: AIPerf 0.13's `aiperf profile` command line, turned into the
//! flags of `harness bench` (`BenchArgs`, the one engine behind every front door),
//! and AIPerf's export files written from the finished study into the artifact
//! directory (`export::aiperf_files`: `profile_export_aiperf.json`, `.csv` and
//! `profile_export.jsonl`). Owns the translation and the flags it refuses
//! (`refused`: AIPerf's table, with reasons; docs/bench.md has the mapping). Must
//! not run anything or compute a number: the caller runs the plan as `harness
//! bench` does, and the numbers are `export::aiperf_metrics`'.

mod mooncake;
pub mod refused;

use std::path::{Path, PathBuf};

use clap::Args;

use crate::commands::bench::refused::RefusedFlags;
use crate::commands::bench::{BenchArgs, BenchError, Dataset, LengthShape};

/// Output cap of a request when `--osl` is not given: AIPerf then sends no
/// `max_completion_tokens` (the server's limit applies); every request here states
/// its `max_tokens`, so this is it.
pub const UNSET_OSL_CAP: u32 = 2048;

/// The flags of `harness profile` (AIPerf 0.13's `profile`).
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// AIPerf's `--model-names/--model/-m`: the model every request names (one).
    #[arg(long = "model-names", visible_alias = "model", short = 'm', value_delimiter = ',')]
    pub model: Vec<String>,
    /// AIPerf's `--url/-u` (default http://localhost:8000; `http://` added when no
    /// scheme is given). One server.
    #[arg(long, short = 'u', default_value = "http://localhost:8000")]
    pub url: Vec<String>,
    /// AIPerf's `--endpoint-type`: chat (default) or completions.
    #[arg(long, default_value = "chat")]
    pub endpoint_type: String,
    /// AIPerf's `--custom-endpoint/--endpoint`: the standard paths only.
    #[arg(long = "custom-endpoint", alias = "endpoint")]
    pub custom_endpoint: Option<String>,
    /// AIPerf's `--streaming`: the streaming-only metrics (TTFT, ITL, ...) are
    /// exported (the harness always streams its requests).
    #[arg(long)]
    pub streaming: bool,
    /// AIPerf's `--request-timeout-seconds` (default 21600).
    #[arg(long, default_value_t = 21600.0)]
    pub request_timeout_seconds: f64,
    /// AIPerf's `--use-server-token-count`: how the harness always counts.
    #[arg(long)]
    pub use_server_token_count: bool,
    /// AIPerf's `--per-chunk-usage`: ITL subtracts the first chunk's tokens.
    #[arg(long)]
    pub per_chunk_usage: bool,
    /// AIPerf's `--extra-inputs key:value ...` or a JSON object: more body fields;
    /// `ignore_eos:true` forces every output to its length.
    #[arg(long, num_args = 1..)]
    pub extra_inputs: Vec<String>,
    /// AIPerf's `--header/-H Name:Value ...`.
    #[arg(long, short = 'H', num_args = 1..)]
    pub header: Vec<String>,
    /// AIPerf's `--input-file` (with --custom-dataset-type single_turn or
    /// mooncake_trace).
    #[arg(long)]
    pub input_file: Option<PathBuf>,
    /// AIPerf's `--custom-dataset-type`: single_turn (JSONL of `text` and optional
    /// `output_length`) or mooncake_trace (rows replayed at their timestamps).
    #[arg(long)]
    pub custom_dataset_type: Option<String>,
    /// AIPerf's `--random-seed` (default 0 here: a study always has one).
    #[arg(long)]
    pub random_seed: Option<u64>,
    /// AIPerf's `--goodput "tag:value ..."` (AIPerf's metric tags, display units).
    #[arg(long, num_args = 1..)]
    pub goodput: Vec<String>,
    /// AIPerf's `--output-artifact-dir/--artifact-dir` (default
    /// artifacts/<model>-openai-<endpoint>-<load>).
    #[arg(long = "output-artifact-dir", alias = "artifact-dir")]
    pub artifact_dir: Option<PathBuf>,
    /// AIPerf's `--profile-export-prefix/--profile-export-file`: the files' base name.
    #[arg(long = "profile-export-prefix", alias = "profile-export-file")]
    pub profile_export_prefix: Option<String>,
    /// AIPerf's `--tokenizer`: a tokenizer.json, a directory holding one, or a
    /// name in the local Hugging Face cache (default: --model, when it is one).
    /// Without one, prompts are random token IDs (not AIPerf's text).
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// AIPerf's `--tokenizer-revision` (default main).
    #[arg(long)]
    pub tokenizer_revision: Option<String>,
    /// AIPerf's `--benchmark-duration` (seconds): with --request-rate, rate x
    /// seconds requests.
    #[arg(long)]
    pub benchmark_duration: Option<f64>,
    /// AIPerf's `--concurrency` (a comma list: one cell each).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<u32>,
    /// AIPerf's `--request-rate` in req/s (a comma list: one cell each).
    #[arg(long, value_delimiter = ',')]
    pub request_rate: Vec<f64>,
    /// AIPerf's `--arrival-pattern/--request-rate-mode`: poisson (default),
    /// constant, gamma.
    #[arg(long = "arrival-pattern", alias = "request-rate-mode")]
    pub arrival_pattern: Option<String>,
    /// AIPerf's `--arrival-smoothness/--vllm-burstiness`: gamma's shape.
    #[arg(long = "arrival-smoothness", alias = "vllm-burstiness")]
    pub arrival_smoothness: Option<f64>,
    /// AIPerf's `--request-count/--num-requests` (default max(10, 2 x concurrency),
    /// or the input file's rows).
    #[arg(long = "request-count", alias = "num-requests")]
    pub request_count: Option<u64>,
    /// AIPerf's `--warmup-request-count/--num-warmup-requests` (default 0).
    #[arg(long = "warmup-request-count", alias = "num-warmup-requests")]
    pub warmup_request_count: Option<u32>,
    /// AIPerf's `--conversation-num/--num-conversations/--num-sessions`: single-turn
    /// conversations, so the request count when --request-count is not given.
    #[arg(long = "conversation-num", aliases = ["num-conversations", "num-sessions"])]
    pub conversation_num: Option<u64>,
    /// AIPerf's `--num-dataset-entries/--num-prompts`: distinct synthetic prompts
    /// (requests use them in turn).
    #[arg(long = "num-dataset-entries", alias = "num-prompts")]
    pub num_dataset_entries: Option<u64>,
    /// AIPerf's `--isl` (`--prompt-input-tokens-mean`; default 550).
    #[arg(long = "prompt-input-tokens-mean", aliases = ["synthetic-input-tokens-mean", "isl"], default_value_t = 550)]
    pub isl: u32,
    /// AIPerf's `--isl-stddev` (default 0).
    #[arg(long = "prompt-input-tokens-stddev", aliases = ["synthetic-input-tokens-stddev", "isl-stddev"], default_value_t = 0.0)]
    pub isl_stddev: f64,
    /// AIPerf's `--osl` (`--prompt-output-tokens-mean`; default: not sent).
    #[arg(long = "prompt-output-tokens-mean", aliases = ["output-tokens-mean", "osl"])]
    pub osl: Option<u32>,
    /// AIPerf's `--osl-stddev` (default 0).
    #[arg(long = "prompt-output-tokens-stddev", aliases = ["output-tokens-stddev", "osl-stddev"], default_value_t = 0.0)]
    pub osl_stddev: f64,
    /// AIPerf's `--model-selection-strategy`, `--url-strategy`, `--transport`: with
    /// one model, one server and HTTP, every choice is the same; accepted.
    #[arg(long)]
    pub model_selection_strategy: Option<String>,
    #[arg(long)]
    pub url_strategy: Option<String>,
    #[arg(long, alias = "transport-type", value_parser = ["http"])]
    pub transport: Option<String>,
    /// AIPerf's `--tokenizer-trust-remote-code`: accepted; nothing remote is loaded.
    #[arg(long)]
    pub tokenizer_trust_remote_code: bool,
    /// AIPerf's `--ui-type/--ui` (dashboard, simple, none): none is quiet.
    #[arg(long = "ui-type", alias = "ui")]
    pub ui_type: Option<String>,
    /// AIPerf's `--log-level`: accepted (the harness logs nothing more).
    #[arg(long)]
    pub log_level: Option<String>,
    /// AIPerf's `--verbose/-v`, `--extra-verbose/-vv`: accepted.
    #[arg(long, short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[arg(long = "extra-verbose", hide = true)]
    pub extra_verbose: bool,
    /// AIPerf's `--no-server-metrics`, `--no-gpu-telemetry`: how the harness runs.
    #[arg(long)]
    pub no_server_metrics: bool,
    #[arg(long)]
    pub no_gpu_telemetry: bool,
    /// The harness's own: the natural text synthetic prompts are cut from (with a
    /// tokenizer; AIPerf cuts Shakespeare, as the project's texts are).
    #[arg(long, default_value = "assets/texts")]
    pub texts: PathBuf,
    /// The harness's own: the name of the environment variable holding the API key
    /// (AIPerf's --api-key is refused: the key would be on the command line).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// The harness's own: the evidence directory (default reports/bench-<unix s>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The harness's own: replace an earlier evidence directory at --out.
    #[arg(long)]
    pub force: bool,
    /// AIPerf's flags refused here, each with its reason.
    #[command(flatten)]
    pub refused: RefusedFlags<refused::Aiperf>,
}

/// The `request.request_id_prefix` of a profile's plan: `profile-<8 hex digits>-`,
/// drawn once here and frozen in the plan (a rerun or replay sends the same ids),
/// so that every timed request carries an `x-request-id` as AIPerf's carry its
/// `X-Request-ID` (AIPerf's is a fresh uuid4 per request; here the prefix and the
/// request's panel index: docs/bench.md).
fn request_id_prefix() -> String {
    format!("profile-{:08x}-", rand::random::<u32>())
}

fn bad(m: impl Into<String>) -> BenchError {
    BenchError::Args(m.into())
}

/// What `harness profile` runs: the engine's flags, and what its exports need.
#[derive(Debug, Clone)]
pub struct Translated {
    pub bench: BenchArgs,
    pub artifact_dir: PathBuf,
    pub prefix: Option<String>,
    pub shape: crate::export::AiperfRunShape,
    /// AIPerf's `input_config` (null: its BenchmarkConfig is not built here).
    pub input_config: serde_json::Value,
}

/// The AIPerf flags as `harness bench`'s; `defaults` is a `BenchArgs` with every
/// flag at its default.
pub fn translate(a: &ProfileArgs, defaults: BenchArgs) -> Result<Translated, BenchError> {
    if let Some(m) = a.refused.first_message() {
        return Err(bad(m));
    }
    let mut b = defaults;
    b.out = a.out.clone();
    b.force = a.force;
    b.quiet = a.ui_type.as_deref() == Some("none");
    b.api_key_env = a.api_key_env.clone();
    b.seed = a.random_seed.unwrap_or(0);
    b.request_timeout_s = a.request_timeout_seconds;
    b.num_warmups = a.warmup_request_count;
    b.tokenizer = a.tokenizer.clone();
    b.tokenizer_revision = a.tokenizer_revision.clone();
    b.name = "profile".into();
    b.request_id_prefix = Some(request_id_prefix());
    match a.model.as_slice() {
        [m] => b.model = Some(m.clone()),
        [] => return Err(bad("--model: required (AIPerf's --model-names/-m)")),
        _ => return Err(bad("--model: one model here (AIPerf's multi-model selection is not built)")),
    }
    match a.url.as_slice() {
        [u] => {
            let u = if u.contains("://") { u.clone() } else { format!("http://{u}") };
            let u = u.trim_end_matches('/');
            b.url = Some(u.strip_suffix("/v1").unwrap_or(u).to_string());
        }
        _ => return Err(bad("--url: one server here (AIPerf's load balancing over several is not built)")),
    }
    let chat = match a.endpoint_type.as_str() {
        "chat" => true,
        "completions" => false,
        other => {
            return Err(bad(format!(
                "--endpoint-type {other}: refused: the harness measures text generation on chat and completions only"
            )));
        }
    };
    let route =
        if chat { crate::protocol::routes::CHAT_COMPLETIONS_PATH } else { crate::protocol::routes::COMPLETIONS_PATH };
    if let Some(e) = &a.custom_endpoint
        && e.trim_end_matches('/') != route
    {
        return Err(bad(format!("--custom-endpoint {e}: refused: the engine serves {route} for this endpoint type")));
    }
    b.endpoint = Some(route.into());
    for h in &a.header {
        let (k, v) = h.split_once(':').ok_or_else(|| bad(format!("--header {h:?}: expected Name:Value")))?;
        b.header.push(format!("{}={}", k.trim(), v.trim()));
    }
    let forced = extra_inputs(a, &mut b)?;
    loads(a, &mut b)?;
    let from_file = dataset(a, &mut b, chat, forced)?;
    let shape = crate::export::AiperfRunShape {
        streaming: a.streaming,
        requested_osl: a.osl.is_some() || from_file,
        per_chunk_usage: a.per_chunk_usage,
        goodput: goodput(a)?,
        closed_loop: b.request_rate.is_empty() && b.trace_replay.is_none(),
    };
    let load = match (a.concurrency.first(), a.request_rate.first()) {
        _ if b.trace_replay.is_some() => "fixed_schedule".into(),
        (_, Some(r)) => format!("request_rate{r}"),
        (Some(c), None) => format!("concurrency{c}"),
        (None, None) => "concurrency1".into(),
    };
    let model = b.model.clone().unwrap_or_default().replace(['/', '\\', ':'], "_");
    let artifact_dir = a
        .artifact_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("artifacts").join(format!("{model}-openai-{}-{load}", a.endpoint_type)));
    // AIPerf's `input_config` is its whole `BenchmarkConfig` (models, datasets,
    // phases, ...), which is not built here: left out, as AIPerf's schema allows
    // (the plan.toml in the evidence directory says what ran).
    let input_config = serde_json::Value::Null;
    Ok(Translated { bench: b, artifact_dir, prefix: a.profile_export_prefix.clone(), shape, input_config })
}

/// `--extra-inputs` into the body (`--extra-body`); whether `ignore_eos:true`
/// forced the outputs.
fn extra_inputs(a: &ProfileArgs, b: &mut BenchArgs) -> Result<bool, BenchError> {
    let mut body = serde_json::Map::new();
    for item in &a.extra_inputs {
        if item.trim_start().starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(item).map_err(|e| bad(format!("--extra-inputs: not JSON ({e})")))?;
            let serde_json::Value::Object(m) = v else { return Err(bad("--extra-inputs: a JSON object")) };
            body.extend(m);
            continue;
        }
        let (k, v) = item.split_once(':').ok_or_else(|| bad(format!("--extra-inputs {item:?}: expected key:value")))?;
        // AIPerf parses each value as JSON when it can (numbers, booleans), else a string.
        let value = serde_json::from_str(v.trim()).unwrap_or_else(|_| serde_json::Value::String(v.to_string()));
        body.insert(k.trim().to_string(), value);
    }
    let forced = match body.remove("ignore_eos") {
        None => false,
        Some(serde_json::Value::Bool(f)) => f,
        Some(v) => return Err(bad(format!("--extra-inputs ignore_eos:{v}: true or false"))),
    };
    if forced {
        // min_tokens is what forcing sends; AIPerf users often pass it beside ignore_eos.
        body.remove("min_tokens");
    }
    if let Some(t) = body.remove("max_tokens").or_else(|| body.remove("max_completion_tokens")) {
        return Err(bad(format!(
            "--extra-inputs max_tokens:{t}: give --osl (the output length every request asks for)"
        )));
    }
    if !body.is_empty() {
        b.extra_body = Some(serde_json::Value::Object(body).to_string());
    }
    Ok(forced)
}

/// Loads: concurrencies are closed loops, rates open ones (capped in flight by a
/// concurrency given beside them), neither one request at a time; the count.
fn loads(a: &ProfileArgs, b: &mut BenchArgs) -> Result<(), BenchError> {
    if let Some(r) = a.request_rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(bad(format!("--request-rate: every rate must be a positive req/s, got {r}")));
    }
    if a.concurrency.contains(&0) {
        return Err(bad("--concurrency: at least 1"));
    }
    if a.request_rate.is_empty() {
        b.concurrency = if a.concurrency.is_empty() { vec![1] } else { a.concurrency.clone() };
        if a.arrival_pattern.is_some() || a.arrival_smoothness.is_some() {
            return Err(bad("--arrival-pattern: shapes --request-rate's arrivals; give --request-rate"));
        }
    } else {
        b.request_rate = a.request_rate.clone();
        match a.concurrency.as_slice() {
            [] => {}
            [c] => b.max_concurrency = Some(*c),
            _ => return Err(bad("--concurrency: one cap beside --request-rate")),
        }
        match (a.arrival_pattern.as_deref(), a.arrival_smoothness) {
            (None | Some("poisson"), None) => {}
            (Some("constant"), None) => b.profile = Some("constant".into()),
            (None | Some("gamma"), Some(s)) => b.burstiness = Some(s),
            (Some("gamma"), None) => b.burstiness = Some(1.0),
            (Some(p), _) => {
                return Err(bad(format!(
                    "--arrival-pattern {p}: refused (poisson, constant and gamma with --arrival-smoothness are built)"
                )));
            }
        }
    }
    let max_c = a.concurrency.iter().copied().max().unwrap_or(1);
    let count = a.request_count.or(a.conversation_num);
    b.num_prompts = match (count, a.benchmark_duration) {
        (Some(n), None) => n,
        (None, None) => 10.max(2 * u64::from(max_c)),
        (_, Some(s)) => {
            let [r] = a.request_rate.as_slice() else {
                return Err(bad(
                    "--benchmark-duration: with one --request-rate (rate x seconds requests); a closed loop here is \
                     bounded by --request-count",
                ));
            };
            if !(s.is_finite() && s > 0.0) {
                return Err(bad(format!("--benchmark-duration: positive seconds, got {s}")));
            }
            let n = (r * s).ceil().max(1.0) as u64;
            count.map_or(n, |c| c.min(n))
        }
    };
    if b.num_prompts == 0 {
        return Err(bad("--request-count: at least 1"));
    }
    Ok(())
}

/// The prompts: `--input-file` single_turn rows, else AIPerf's synthetic lengths
/// (text cut from `--texts` with a tokenizer, sent on the chat route as one user
/// message; else random token IDs, completions only); whether the prompts came
/// from a file.
fn dataset(a: &ProfileArgs, b: &mut BenchArgs, chat: bool, forced: bool) -> Result<bool, BenchError> {
    b.ignore_eos = forced;
    if let Some(path) = &a.input_file {
        match a.custom_dataset_type.as_deref().unwrap_or("single_turn").replace('-', "_").as_str() {
            "single_turn" => {}
            "mooncake_trace" => {
                let tokenizer = crate::commands::bench::resolved(b)?.tokenizer.is_some();
                mooncake::translate(a, b, chat, tokenizer)?;
                return Ok(true);
            }
            other => {
                return Err(bad(format!(
                    "--custom-dataset-type {other}: refused: not built for this front door (single_turn and \
                     mooncake_trace are; {})",
                    unbuilt_dataset_reason(other)
                )));
            }
        }
        b.dataset = Dataset::Requests;
        b.dataset_path = Some(path.display().to_string());
        if a.request_count.is_none() && a.conversation_num.is_none() {
            let text =
                std::fs::read_to_string(path).map_err(|e| bad(format!("--input-file {}: {e}", path.display())))?;
            b.num_prompts = text.lines().filter(|l| !l.trim().is_empty()).count().max(1) as u64;
        }
        b.output_len = a.osl;
        return Ok(true);
    }
    if a.custom_dataset_type.is_some() {
        return Err(bad("--custom-dataset-type: needs --input-file"));
    }
    let dist = |mean: u32, sd: f64| -> Result<String, BenchError> {
        if !(sd.is_finite() && sd >= 0.0) {
            return Err(bad(format!("--isl-stddev/--osl-stddev: a non-negative number, got {sd}")));
        }
        if mean == 0 {
            return Err(bad("--isl/--osl: at least 1"));
        }
        Ok(if sd == 0.0 {
            format!("{{ dist = \"fixed\", value = {mean} }}")
        } else {
            let max = (f64::from(mean) + 10.0 * sd).ceil() as u64;
            format!("{{ dist = \"normal\", mean = {:?}, sd = {sd:?}, min = 1, max = {max} }}", f64::from(mean))
        })
    };
    let cap = a.osl.map_or(UNSET_OSL_CAP, |o| (f64::from(o) + 10.0 * a.osl_stddev).ceil() as u32);
    b.length_shape = Some(LengthShape {
        input: dist(a.isl, a.isl_stddev)?,
        output: dist(a.osl.unwrap_or(UNSET_OSL_CAP), if a.osl.is_some() { a.osl_stddev } else { 0.0 })?,
        natural: !forced,
        output_cap: cap,
    });
    b.panel_entries = a.num_dataset_entries;
    let tokenizer = crate::commands::bench::resolved(b)?.tokenizer;
    if tokenizer.is_some() {
        b.dataset = Dataset::Synthetic;
        b.dataset_path = Some(a.texts.display().to_string());
    } else if chat {
        return Err(bad(format!(
            "--endpoint-type chat with synthetic prompts: refused: no tokenizer resolves (--tokenizer, else --model \
             {:?} as a tokenizer.json, a directory holding one or a name in the local Hugging Face cache), and \
             without one the synthetic prompts are token IDs, which a chat message cannot carry; give --tokenizer, \
             --endpoint-type completions, or an --input-file of single_turn rows",
            b.model.as_deref().unwrap_or_default()
        )));
    } else {
        b.dataset = Dataset::RandomIds;
    }
    Ok(false)
}

/// Why an AIPerf `--custom-dataset-type` other than single_turn and
/// mooncake_trace is not built.
fn unbuilt_dataset_reason(kind: &str) -> &'static str {
    match kind {
        "multi_turn" => {
            "its sessions carry each turn's own text and delay, and the harness's sessions are panel turns of \
             synthetic lengths (prompts.max_turns), which cannot hold a file's turns"
        }
        "random_pool" => "it samples prompts from a directory of files, which no harness panel reads",
        _ => "AIPerf's other loaders read formats no harness panel reads",
    }
}

/// `--goodput "tag:value ..."` as (AIPerf tag, threshold), each tag AIPerf's.
fn goodput(a: &ProfileArgs) -> Result<Vec<(String, f64)>, BenchError> {
    let mut out = Vec::new();
    for item in a.goodput.iter().flat_map(|g| g.split_whitespace()) {
        let (k, v) = item.split_once(':').ok_or_else(|| bad(format!("--goodput {item:?}: expected tag:value")))?;
        if crate::export::aiperf_metric(k).is_none() {
            return Err(bad(format!(
                "--goodput {k}: not an AIPerf metric tag (e.g. time_to_first_token, request_latency)"
            )));
        }
        let x: f64 = v
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite())
            .ok_or_else(|| bad(format!("--goodput {item:?}: a number")))?;
        out.push((k.to_string(), x));
    }
    Ok(out)
}

/// The files written for one cell, under `dir` with `prefix` (AIPerf's
/// `--profile-export-prefix`: `<prefix>.json`, `.csv`, `.jsonl`).
fn file_names(prefix: Option<&str>) -> [String; 3] {
    use crate::export::{AIPERF_CSV_FILE, AIPERF_JSON_FILE, AIPERF_JSONL_FILE};
    match prefix {
        Some(p) => {
            let p = p.trim_end_matches(".json").trim_end_matches(".csv").trim_end_matches(".jsonl");
            [format!("{p}.json"), format!("{p}.csv"), format!("{p}.jsonl")]
        }
        None => [AIPERF_JSON_FILE.into(), AIPERF_CSV_FILE.into(), AIPERF_JSONL_FILE.into()],
    }
}

/// Writes AIPerf's export files of the finished study at `evidence` (one cell:
/// into the artifact directory; several: a subdirectory per cell) and returns the
/// paths written and each cell's console table.
pub fn write_exports(t: &Translated, evidence: &Path, cli: &str) -> Result<(Vec<PathBuf>, String), BenchError> {
    let export = |e: crate::export::ExportError| BenchError::Save { why: e.to_string() };
    let plan = crate::export::read_plan(evidence).map_err(export)?;
    let cells = crate::export::read_cells(evidence, &plan).map_err(export)?;
    let zero_unix_ns = u128::from(crate::export::started_unix_ms(evidence).unwrap_or(0)) * 1_000_000;
    let mut written = Vec::new();
    let mut console = String::new();
    for cell in &cells {
        let dir = if cells.len() == 1 { t.artifact_dir.clone() } else { t.artifact_dir.join(&cell.cell) };
        let info = crate::export::AiperfRunInfo {
            shape: t.shape.clone(),
            input_config: t.input_config.clone(),
            cli_command: cli.to_string(),
            benchmark_id: format!("{}-{}", plan.sha256.get(..12).unwrap_or_default(), cell.cell),
            random_seed: Some(plan.plan.study.seed),
            zero_unix_ns,
            request_id_prefix: plan.plan.request.request_id_prefix.clone(),
        };
        let files = crate::export::aiperf_files(cell, &info);
        std::fs::create_dir_all(&dir).map_err(|error| BenchError::Io { path: dir.clone(), error })?;
        let [j, c, l] = file_names(t.prefix.as_deref());
        for (name, text) in [(j, &files.json), (c, &files.csv), (l, &files.jsonl)] {
            let path = dir.join(name);
            crate::evidence::write_atomic(&path, text.as_bytes())
                .map_err(|e| BenchError::Io { path: path.clone(), error: std::io::Error::other(e.to_string()) })?;
            written.push(path);
        }
        console.push_str(&files.console);
    }
    Ok((written, console))
}

#[cfg(test)]
mod tests;
