//! `harness accept`: an HTTP acceptance suite that runs unchanged against any
//! OpenAI-compatible server (our engine, vLLM, SGLang, llama.cpp's server), either
//! already running (`--url`) or started from a plan's arm (`--plan --arm`). Cases:
//! single request after warmup, 2/4/8 concurrent requests with a fixed budget,
//! isolation, long-then-short, two simultaneous streams (completions and chat),
//! disconnect then recovery, input validation, and `/metrics` when exposed. Every
//! request carries the client headers (`--api-key-env`, `--header`, a plan arm's
//! `api_key_env` and `headers`: `headers`). Every
//! payload is built once from `--seed` and its SHA-256 recorded, so two servers get
//! byte-identical requests. Owns the command's arguments, errors and output files.
//! Must not print (the CLI prints `AcceptOutcome::markdown`) and must not reach a
//! server that is not on a loopback address.

mod arm;
mod cases_load;
mod cases_server;
mod cases_stream;
mod check;
mod headers;
mod http;
mod outcome;
mod payload;
mod suite;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use crate::arm::{Adapter, ServerKind, ServerKindArg};
pub use outcome::{AcceptOutcome, CaseResult, PayloadRecord, ServerInfo, Verdict};
pub use payload::{Prompt, PromptGen};

/// Groups of cases for `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaseGroup {
    Single,
    /// The 2/4/8 levels and the isolation case built on their answers.
    Concurrent,
    LongShort,
    /// Completions streams and, unless --no-chat, chat streams.
    Streams,
    Disconnect,
    Validation,
    Metrics,
}

/// `harness accept`.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct AcceptArgs {
    /// Base URL of an already-running server on a loopback address, e.g. http://127.0.0.1:8000.
    #[arg(long, conflicts_with = "plan", required_unless_present = "plan")]
    pub url: Option<String>,
    /// A plan whose arm (--arm) is started, accepted and stopped.
    #[arg(long, requires = "arm")]
    pub plan: Option<PathBuf>,
    /// The plan's arm to start.
    #[arg(long, requires = "plan")]
    pub arm: Option<String>,
    /// Model name to send (default: the plan's request.model, else the first id of /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// API dialect.
    #[arg(long, value_enum, default_value = "auto")]
    pub server_kind: ServerKindArg,
    /// Completion tokens of every ordinary request (sent with ignore_eos; long requests get 4x).
    #[arg(long, default_value_t = 16)]
    pub max_tokens: u32,
    /// Limit for any one request or stream, in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_s: f64,
    /// Seed of every prompt.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prompts as token-ID lists (the default).
    #[arg(long, conflicts_with = "text_prompts")]
    pub prompt_ids: bool,
    /// Prompts as text, for servers that take no token-ID prompts.
    #[arg(long)]
    pub text_prompts: bool,
    /// Smallest token id drawn for prompts.
    #[arg(long, default_value_t = 100)]
    pub min_token_id: u32,
    /// Largest token id drawn (inclusive). Kept small: the vocabulary bound is unknown.
    #[arg(long, default_value_t = 255)]
    pub max_token_id: u32,
    /// Prompt length of ordinary requests (ids, or words for text prompts).
    #[arg(long, default_value_t = 32)]
    pub prompt_tokens: u32,
    /// Prompt length of the long request (cut to fit a published context).
    #[arg(long, default_value_t = 384)]
    pub long_prompt_tokens: u32,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    pub levels: Vec<u32>,
    /// Discarded rounds before the single-request measurement.
    #[arg(long, default_value_t = 1)]
    pub warmup_rounds: u32,
    /// Skip the chat streams case (servers without a chat template).
    #[arg(long)]
    pub no_chat: bool,
    /// Run only these case groups (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<CaseGroup>,
    /// How long the running/waiting gauges may take to return to 0, in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub metrics_settle_s: f64,
    /// Write the JSON record here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the Markdown table here.
    #[arg(long)]
    pub md: Option<PathBuf>,
    /// Where a --plan arm's server log goes (default: the system temp directory).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Name of the environment variable that holds an API key, sent as
    /// `Authorization: Bearer <key>` on every request (the key is never written).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// An extra header on every request, 'Name: value' (repeatable; only the names
    /// are recorded in --json).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    #[serde(rename = "headers", serialize_with = "headers::header_names")]
    pub headers: Vec<String>,
}

#[derive(clap::Parser)]
#[command(no_binary_name = true)]
struct Standalone {
    #[command(flatten)]
    args: AcceptArgs,
}

impl AcceptArgs {
    /// Parses the flags alone (no program name), with the CLI's defaults.
    pub fn try_parse_from<I, T>(flags: I) -> Result<AcceptArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        <Standalone as clap::Parser>::try_parse_from(flags).map(|s| s.args)
    }

    fn validate(&self) -> Result<(), AcceptError> {
        let bad = |m: String| Err(AcceptError::Args(m));
        if !(1..=4096).contains(&self.max_tokens) {
            return bad(format!("--max-tokens {} must be in 1..=4096", self.max_tokens));
        }
        if !(self.timeout_s > 0.0 && self.timeout_s <= 3600.0) {
            return bad(format!("--timeout-s {} must be in (0, 3600]", self.timeout_s));
        }
        if self.min_token_id > self.max_token_id {
            return bad(format!("--min-token-id {} > --max-token-id {}", self.min_token_id, self.max_token_id));
        }
        if !(1..=8192).contains(&self.prompt_tokens) || !(1..=131_072).contains(&self.long_prompt_tokens) {
            return bad("--prompt-tokens must be in 1..=8192 and --long-prompt-tokens in 1..=131072".into());
        }
        if self.levels.is_empty() || self.levels.len() > 8 || self.levels.iter().any(|&n| !(1..=64).contains(&n)) {
            return bad(format!("--levels {:?}: 1 to 8 levels, each in 1..=64", self.levels));
        }
        if self.warmup_rounds > 10 || !(0.0..=60.0).contains(&self.metrics_settle_s) {
            return bad("--warmup-rounds must be at most 10 and --metrics-settle-s in 0..=60".into());
        }
        headers::check(self)
    }
}

/// Why a run could not produce an outcome (a failing case is not an error).
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("{0}")]
    Args(String),
    #[error("{url}: only loopback servers are accepted (127.0.0.0/8, ::1, localhost)")]
    NotLoopback { url: String },
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error("the plan has no arm {arm:?} (arms: {known})")]
    UnknownArm { arm: String, known: String },
    #[error("the arm's server: {0}")]
    Arm(#[from] crate::arm::ArmError),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("discovery: {0}")]
    Discovery(String),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
}

impl crate::BadInput for AcceptError {
    fn is_bad_input(&self) -> bool {
        match self {
            AcceptError::Plan(p) => crate::BadInput::is_bad_input(p),
            AcceptError::Args(_) | AcceptError::NotLoopback { .. } | AcceptError::UnknownArm { .. } => true,
            _ => false,
        }
    }
}

/// Rejects URLs whose host is not a loopback address.
pub fn require_loopback(url: &str) -> Result<(), AcceptError> {
    let err = || AcceptError::NotLoopback { url: url.to_string() };
    let parsed = reqwest::Url::parse(url).map_err(|_| err())?;
    let host = parsed.host_str().unwrap_or("").trim_start_matches('[').trim_end_matches(']');
    let ok =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if ok && parsed.scheme() == "http" { Ok(()) } else { Err(err()) }
}

/// Runs the suite and writes `--json` / `--md`. `Ok` even when cases failed:
/// `AcceptOutcome::failed` says so (the CLI exits non-zero).
pub async fn run(args: AcceptArgs) -> Result<AcceptOutcome, AcceptError> {
    args.validate()?;
    let env = |v: &str| std::env::var(v).ok();
    // A missing key variable stops the run before any server starts.
    headers::build(&args, Default::default(), env)?;
    let t0 = Instant::now();
    let mut server = match (&args.url, &args.plan, &args.arm) {
        (Some(url), None, None) => {
            require_loopback(url)?;
            None
        }
        (None, Some(plan), Some(arm)) => {
            let dir = args.log_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("harness-accept"));
            Some(arm::ArmServer::start(plan, arm, &dir).await?)
        }
        _ => return Err(AcceptError::Args("give --url URL, or --plan PLAN with --arm NAME".into())),
    };
    let base = match (&args.url, &server) {
        (Some(u), _) => u.clone(),
        (None, Some(s)) => s.base_url.clone(),
        (None, None) => return Err(AcceptError::Args("no server to accept".into())),
    };
    let settings = serde_json::to_value(&args).unwrap_or_default();
    let result = async {
        let arm_headers = server.as_ref().map(|s| s.headers.clone()).unwrap_or_default();
        let headers = headers::build(&args, arm_headers, env)?;
        let timeout = Duration::from_secs_f64(args.timeout_s);
        let http = http::Http::new(&base, timeout, headers).map_err(AcceptError::Client)?;
        let hint = server.as_ref().map(|s| s.model.clone());
        let (suite, mut info) = suite::Suite::discover(http, &args, hint.as_deref()).await?;
        if let Some(s) = &server {
            info.arm = Some(s.name.clone());
            info.server_log = s.log.as_ref().map(|p| p.display().to_string());
            info.startup_s = Some(s.startup_s);
        }
        let cases = suite.run(&args.only).await;
        Ok::<_, AcceptError>(suite.outcome(info, settings, cases, t0))
    }
    .await;
    let stop = match server.as_mut() {
        Some(s) => s.stop().await,
        None => None,
    };
    let mut outcome = result?;
    outcome.server.stop = stop.map(|r| r.how);
    outcome.wall_s = t0.elapsed().as_secs_f64();
    for (path, text) in [(&args.json, outcome.to_json()), (&args.md, outcome.markdown())] {
        if let Some(p) = path {
            crate::evidence::write_atomic(p, text.as_bytes())
                .map_err(|error| AcceptError::Io { path: p.clone(), error })?;
        }
    }
    Ok(outcome)
}

/// `run` on a runtime of its own, for a synchronous caller such as `main`.
pub fn run_blocking(args: AcceptArgs) -> Result<AcceptOutcome, AcceptError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| AcceptError::Runtime(e.to_string()))?;
    rt.block_on(run(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only() {
        for ok in ["http://127.0.0.1:8000", "http://localhost:1/", "http://[::1]:9", "http://127.1.2.3"] {
            assert!(require_loopback(ok).is_ok(), "{ok}");
        }
        for bad in ["http://10.0.0.1:8000", "http://example.com", "https://127.0.0.1", "127.0.0.1:80", ""] {
            assert!(require_loopback(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_and_defaults() {
        let a = AcceptArgs::try_parse_from(["--url", "http://127.0.0.1:1"]).expect("parses");
        assert_eq!((a.max_tokens, a.levels.clone(), a.min_token_id, a.max_token_id), (16, vec![2, 4, 8], 100, 255));
        assert!(a.validate().is_ok());
        assert!(AcceptArgs::try_parse_from(["--plan", "p.toml"]).is_err(), "--plan needs --arm");
        assert!(AcceptArgs::try_parse_from(["--url", "u", "--plan", "p", "--arm", "a"]).is_err());
        assert!(AcceptArgs::try_parse_from(["--url", "u", "--text-prompts", "--prompt-ids"]).is_err());
        let b = AcceptArgs::try_parse_from(["--url", "u", "--levels", "0,2"]).expect("parses");
        assert!(b.validate().is_err());
        let c = AcceptArgs::try_parse_from(["--url", "u", "--only", "single,streams"]).expect("parses");
        assert_eq!(c.only, vec![CaseGroup::Single, CaseGroup::Streams]);
    }
}
