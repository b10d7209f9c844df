//! The validated plan: typed values that every later layer reads (runner, metrics,
//! stats, report). Owns the meaning of each setting and the lookups over it. Must not
//! do I/O and must not be built except through `validate` (fields are public for
//! reading; a hand-built `Plan` skips the checks that make it trustworthy).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::derive::{DeriveSpec, DerivedLoads};

/// A validated plan. Build it with [`super::parse`] or [`super::freeze`].
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub study: Study,
    pub request: RequestSpec,
    pub arms: Vec<Arm>,
    pub prompts: PanelSpec,
    pub warmup: Warmup,
    pub timing: Timing,
    pub blocks: Blocks,
    pub cells: Vec<Cell>,
    /// Family-wise alpha for the Holm-corrected hypothesis family (`analysis.alpha`).
    pub alpha: Option<f64>,
    pub hypotheses: Vec<Hypothesis>,
    /// Pilot results and the formula (`[derive]`).
    pub derive: Option<DeriveSpec>,
    /// Values written by `harness plan derive --write` (`[derived]`), already checked
    /// to equal the formula's output.
    pub derived: Option<DerivedLoads>,
    /// Quality gates run before timing (`[qualification]`), when present.
    pub qualification: Option<Qualification>,
    /// Largest fraction of failed requests a cell may have before the run fails
    /// (`[limits] max_error_rate`, default 0: any failed request fails the run).
    pub max_error_rate: f64,
    /// Latency targets of goodput (`[slo]`), when present.
    pub slo: Option<Slo>,
    /// Which claims a failed request blocks (`analysis.blocking`, default study).
    pub blocking: Blocking,
    /// `[tuning]`, when present; its hypotheses are already in `hypotheses`.
    pub tuning: Option<super::tuning::Tuning>,
    /// In-study pilots (`[pilots]`), when present: `[derive]` then takes its pilot
    /// rates from them (see `plan::pilots`).
    pub pilots: Option<Pilots>,
    /// `[sequential]`, when present: the study stops at the first look where every
    /// hypothesis is decided (see `plan::sequential`, `crate::analysis::sequential`).
    pub sequential: Option<super::sequential::Sequential>,
    /// `[client]`: where the load generator runs.
    pub client: Client,
    /// `analysis.noise`: measures whose variance the report decomposes into blocks,
    /// servers and repeats (`crate::analysis::noise`); empty: none.
    pub noise: Vec<Metric>,
    /// `[executor]`: where the blocks run (local unless it says `slurm`).
    pub executor: super::executor::Executor,
}

/// `[client]`: the harness process that sends the load.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Client {
    /// CPUs every thread of the harness is pinned to for the session (sorted, each
    /// once); `None`: wherever the scheduler puts them.
    pub cpus: Option<Vec<u32>>,
}

/// `[pilots]`: `runs` closed-loop pilot runs of each of `arms` (control arms only),
/// each on a fresh server, before the confirmation blocks; excluded from every test.
#[derive(Debug, Clone, PartialEq)]
pub struct Pilots {
    /// Control arms, in plan order.
    pub arms: Vec<String>,
    pub concurrency: u32,
    /// Requests per pilot run.
    pub count: u64,
    /// Pilot runs per arm (fresh server each).
    pub runs: u32,
    /// Prompt length; `None` for a dataset panel.
    pub input_tokens: Option<u32>,
}

/// `analysis.blocking`: the scope of the validity rule "failed requests block claims".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Blocking {
    /// Any failed request in any confirmation cell of any confirmation block blocks
    /// every claim (the reference method's validity requirement; the default).
    #[default]
    Study,
    /// A failed request blocks only the hypotheses of its own cell and arms.
    Cell,
}

impl Blocking {
    /// The plan spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Blocking::Study => "study",
            Blocking::Cell => "cell",
        }
    }
}

/// `[slo]`: per-request latency targets in milliseconds, any subset (at least one);
/// a valid request meeting every target set counts toward goodput (see
/// `metrics::goodput` for the exact definitions, vLLM bench `--goodput`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Study {
    pub name: String,
    pub seed: u64,
    pub description: Option<String>,
}

/// Fields every timed request carries; identical for every arm.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// The `model` field of each request; every arm must serve under this name.
    pub model: String,
    /// Output length of a request whose panel entry carries none (`max_tokens`, and
    /// `min_tokens` when forced). For a panel whose entries carry their own lengths
    /// and a plan without `request.output_tokens`: `max_output_tokens`.
    pub output_tokens: u32,
    /// Forced output (`request.output = "forced"`): EOS may not end a request, which
    /// sends `min_tokens = max_tokens` and must return all of them. Natural
    /// (`"natural"`, or the older spelling `ignore_eos = false`): EOS may end it.
    pub ignore_eos: bool,
    pub temperature: f64,
    /// Cap on each request's `max_tokens` (`request.max_output_tokens`).
    pub max_output_tokens: Option<u32>,
    /// `request.endpoint`: where the timed requests of a cell that names no
    /// `endpoint` of its own go (`"completions"` by default); also the pilots' route.
    pub endpoint: Endpoint,
    /// `request.token_ids` (default true): the timed bodies ask for the streamed
    /// token IDs (`return_token_ids`), which each event's token count then comes
    /// from; `false` sends what `vllm bench serve` sends (no such field: vLLM keeps
    /// its cheaper streaming path) and counts one token per non-empty text event,
    /// the output length from `usage`.
    pub token_ids: bool,
    /// `request.extra_body`: more fields of every body (timed and warmup), after
    /// the harness's own, sorted by name (`top_p`, `top_k`, `min_p`, ...;
    /// vLLM bench's sampling flags and `--extra-body`). Never one of the fields the
    /// harness sets itself ([`RESERVED_BODY_FIELDS`]).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// `request.request_id_prefix`: every timed request carries the header
    /// `x-request-id: <prefix><panel index>` (vLLM bench's `--request-id-prefix`,
    /// whose sample index is the panel index); `None` sends no such header.
    /// Printable ASCII (a header value), at most [`MAX_REQUEST_ID_PREFIX`] bytes.
    pub request_id_prefix: Option<String>,
}

/// Longest `request.request_id_prefix`, in bytes.
pub const MAX_REQUEST_ID_PREFIX: usize = 200;

/// Body fields the harness writes itself, each with the plan key that sets it:
/// `request.extra_body` may not name them.
pub const RESERVED_BODY_FIELDS: [(&str, &str); 10] = [
    ("model", "request.model"),
    ("prompt", "the prompt panel"),
    ("messages", "the prompt panel (request.endpoint = \"chat\")"),
    ("max_tokens", "request.output_tokens or the panel's own output lengths"),
    ("min_tokens", "request.output = \"forced\""),
    ("ignore_eos", "request.output"),
    ("temperature", "request.temperature"),
    ("stream", "the harness (timed requests stream)"),
    ("stream_options", "the harness (usage is always asked for)"),
    ("return_token_ids", "request.token_ids"),
];

/// What a timed body is built for: its route, and whether it asks for the streamed
/// token IDs (`return_token_ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BodyKind {
    pub endpoint: Endpoint,
    pub token_ids: bool,
}

impl BodyKind {
    /// Its key in `run.json` `request_body_sha256`: the endpoint's name, with
    /// `-no-token-ids` appended when the body does not ask for them.
    pub fn key(self) -> String {
        if self.token_ids {
            self.endpoint.as_str().to_string()
        } else {
            format!("{}-no-token-ids", self.endpoint.as_str())
        }
    }
}

/// Where a cell's timed requests go (`request.endpoint`, `cells[].endpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// Token IDs to `/v1/completions`.
    #[default]
    Completions,
    /// Each panel entry's chat messages (a `sharegpt` or `requests` panel) to
    /// `/v1/chat/completions`; the server applies its own chat template.
    Chat,
}

impl Endpoint {
    /// The route this endpoint's requests go to.
    pub fn route(self) -> &'static str {
        match self {
            Endpoint::Completions => crate::protocol::routes::COMPLETIONS_PATH,
            Endpoint::Chat => crate::protocol::routes::CHAT_COMPLETIONS_PATH,
        }
    }

    /// Every endpoint, in the order evidence lists them.
    pub const ALL: [Endpoint; 2] = [Endpoint::Completions, Endpoint::Chat];

    /// The plan spelling (and the key in `run.json` and `warmup.json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Completions => "completions",
            Endpoint::Chat => "chat",
        }
    }

    /// The plan spelling read back; `None` for anything else.
    pub fn parse(s: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

impl RequestSpec {
    /// Whether every request must return exactly its `max_tokens` (a shorter output
    /// is a `short_output` failure); natural outputs may stop at EOS.
    pub fn forced(&self) -> bool {
        self.ignore_eos
    }

    /// The `max_tokens` sent for a panel entry whose own output length is
    /// `entry` (none: the plan's `output_tokens`), capped by `max_output_tokens`.
    pub fn max_tokens_for(&self, entry: Option<u32>) -> u32 {
        let want = entry.unwrap_or(self.output_tokens);
        self.max_output_tokens.map_or(want, |cap| want.min(cap))
    }

    /// The `x-request-id` value of panel entry `index`: `<prefix><index>`, as vLLM
    /// bench names its requests; `None` without `request_id_prefix`.
    pub fn request_id(&self, index: u64) -> Option<String> {
        self.request_id_prefix.as_ref().map(|p| format!("{p}{index}"))
    }

    /// `; extra body fields {..}` when the plan sends any (for summaries), else "".
    pub fn extra_body_note(&self) -> String {
        if self.extra_body.is_empty() {
            return String::new();
        }
        format!("; extra body fields {}", serde_json::Value::Object(self.extra_body.clone()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArmRole {
    Candidate,
    Control,
}

impl ArmRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ArmRole::Candidate => "candidate",
            ArmRole::Control => "control",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Arm {
    pub name: String,
    pub role: ArmRole,
    pub server: Server,
    /// Extra environment for the spawned server; values may hold placeholders.
    pub env: BTreeMap<String, String>,
    /// Path polled for readiness, e.g. `/health`.
    pub health: String,
    pub startup_timeout_s: f64,
    /// Seconds between SIGTERM and SIGKILL when the harness stops this arm's server.
    pub stop_grace_s: f64,
    /// Receipts file the server writes (template; see `placeholders`).
    pub receipts: Option<String>,
    /// Tokenizer file this arm's model uses, when declared.
    pub tokenizer: Option<String>,
    /// Start failures of this arm after which `run` stops the study (default 2).
    pub max_start_failures: u32,
    /// Name of the environment variable whose value is sent as
    /// `Authorization: Bearer <value>` (never the key itself).
    pub api_key_env: Option<String>,
    /// Extra headers sent on every request to this arm (literal values).
    pub headers: BTreeMap<String, String>,
    /// What the server must show it is, checked after health and before warmup in
    /// every block (`arm::identity`); `None`: no checks.
    pub identity: Option<IdentitySpec>,
    /// CPUs a spawned server is started on (sorted, each once; inherited by its
    /// threads and children, `sched_setaffinity` before exec); `None`: unpinned.
    pub cpus: Option<Vec<u32>>,
}

/// An arm's identity claims (`[arms.identity]`), validated. The checks they
/// become, with the preset's and those the argv implies, are `arm::identity`'s.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IdentitySpec {
    /// A server dialect whose usual checks apply (`preset`).
    pub preset: Option<IdentityPreset>,
    /// `/v1/models` lists this model id.
    pub served_model: Option<String>,
    /// `/v1/models` (or llama.cpp's `/props`) publishes this context length.
    pub max_model_len: Option<u64>,
    /// `/version`'s `version` starts with this.
    pub version: Option<String>,
    /// This engine's startup line: KV format, CPU path, and the weight type most
    /// linear layers hold (preset `engine` only).
    pub kv_format: Option<String>,
    pub cpu_path: Option<String>,
    pub weights: Option<String>,
    /// Lines the server log must hold (substrings; runs of blanks match one blank).
    pub log_has: Vec<String>,
    /// Text the server log must not hold.
    pub log_lacks: Vec<String>,
    /// Metric names `/metrics` must expose (family or sample names).
    pub metrics_have: Vec<String>,
}

/// The server dialects with preset identity checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityPreset {
    Engine,
    Vllm,
    Sglang,
    LlamaCpp,
}

impl IdentityPreset {
    pub const ALL: [IdentityPreset; 4] =
        [IdentityPreset::Engine, IdentityPreset::Vllm, IdentityPreset::Sglang, IdentityPreset::LlamaCpp];

    pub fn as_str(self) -> &'static str {
        match self {
            IdentityPreset::Engine => "engine",
            IdentityPreset::Vllm => "vllm",
            IdentityPreset::Sglang => "sglang",
            IdentityPreset::LlamaCpp => "llama-cpp",
        }
    }

    pub fn parse(s: &str) -> Option<IdentityPreset> {
        IdentityPreset::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// How the harness reaches an arm.
#[derive(Debug, Clone, PartialEq)]
pub enum Server {
    /// A fresh server started from `argv` (no shell) for every block, on loopback.
    Spawn { argv: Vec<String>, port: u16 },
    /// A server the harness does not start or stop (`url`, no trailing slash).
    External { url: String },
}

impl Arm {
    /// Base URL of the arm, without a trailing slash.
    pub fn base_url(&self) -> String {
        match &self.server {
            Server::Spawn { port, .. } => format!("http://127.0.0.1:{port}"),
            Server::External { url } => url.clone(),
        }
    }

    /// The grace between SIGTERM and SIGKILL (`stop_grace_s`).
    pub fn stop_grace(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.stop_grace_s)
            .unwrap_or_else(|_| std::time::Duration::from_secs_f64(super::DEFAULT_STOP_GRACE_S))
    }
}

/// The prompt panel: `documents` prompts for each context length, cut from a source;
/// or, for a dataset source (`sharegpt`, `requests`, `synthetic`), `documents`
/// entries of their own lengths (`lengths` is then empty).
#[derive(Debug, Clone, PartialEq)]
pub struct PanelSpec {
    pub source: PanelSource,
    pub lengths: Vec<u32>,
    pub documents: u32,
    /// `prompts.max_turns`: each entry is a multi-turn chat session of up to this
    /// many user turns (turn i+1 sent when turn i completes, with the reply in its
    /// history); `None`: every entry is one request.
    pub max_turns: Option<u32>,
    /// `prompts.output_len` of a sharegpt or requests panel: every entry's output
    /// length, in place of its own (vLLM's `--sharegpt-output-len`,
    /// `--custom-output-len`).
    pub output_len: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PanelSource {
    /// Natural text files in `dir` whose names match `pattern` (one `*` at most),
    /// encoded with `tokenizer` (from `prompts.tokenizer` or the arms' common one).
    Text { dir: String, pattern: String, tokenizer: String },
    /// One JSON object per line with a `tokens` array of token IDs.
    Jsonl { path: String },
    /// Seeded uniform token IDs in `min..=max` (synthetic models only; not natural text).
    Random { min_token_id: u32, max_token_id: u32 },
    /// Conversations in the ShareGPT JSON format: first human turn = prompt, first
    /// assistant turn's token count = output length (see `trace::sources`).
    ShareGpt(ShareGptSpec),
    /// One request per JSONL line: `{"prompt"}` or `{"tokens"}`, optional `output_tokens`.
    Requests { path: String, tokenizer: Option<String> },
    /// Input and output lengths from named distributions, prompts cut from text files.
    Synthetic(SyntheticSpec),
    /// Groups of prompts sharing a system prefix cut from text files (SGLang's
    /// generated-shared-prefix).
    SharedPrefix(SharedPrefixSpec),
    /// vLLM bench's `random` dataset as vLLM 0.34 builds it: vocabulary-wide token
    /// IDs decoded to text and re-encoded (see `trace::sources::vllm_random`).
    VllmRandom(VllmRandomSpec),
    /// vLLM bench's `burstgpt` dataset as vLLM 0.34 builds it: rows of a BurstGPT
    /// CSV sampled with NumPy's legacy generator, synthetic IDs decoded to text
    /// and re-encoded (see `trace::sources::vllm_burstgpt`).
    VllmBurstGpt(VllmBurstGptSpec),
    /// vLLM bench's `prefix_repetition` dataset as vLLM 0.34 builds it: random
    /// prefixes shared by groups of prompts, drawn with NumPy's legacy generator
    /// and shuffled with Python's (see `trace::sources::vllm_prefix_repetition`).
    VllmPrefixRepetition(VllmPrefixRepetitionSpec),
}

impl PanelSource {
    /// Whether each panel entry has its own prompt (and output) length.
    pub fn is_dataset(&self) -> bool {
        matches!(
            self,
            PanelSource::ShareGpt(_)
                | PanelSource::Requests { .. }
                | PanelSource::Synthetic(_)
                | PanelSource::SharedPrefix(_)
                | PanelSource::VllmRandom(_)
                | PanelSource::VllmBurstGpt(_)
                | PanelSource::VllmPrefixRepetition(_)
        )
    }

    /// Whether its entries can be sent as chat messages (each has text): `sharegpt`,
    /// `requests`, and `synthetic` cut from texts.
    pub fn has_chat_text(&self) -> bool {
        match self {
            PanelSource::ShareGpt(_) | PanelSource::Requests { .. } => true,
            PanelSource::Synthetic(s) => matches!(s.tokens, SyntheticTokens::Text { .. }),
            _ => false,
        }
    }

    /// The tokenizer.json this source encodes text with, if any.
    pub fn tokenizer(&self) -> Option<&str> {
        match self {
            PanelSource::Text { tokenizer, .. } => Some(tokenizer),
            PanelSource::ShareGpt(s) => Some(&s.tokenizer),
            PanelSource::Requests { tokenizer, .. } => tokenizer.as_deref(),
            PanelSource::Synthetic(s) => match &s.tokens {
                SyntheticTokens::Text { tokenizer, .. } => Some(tokenizer),
                SyntheticTokens::Random { .. } => None,
            },
            PanelSource::SharedPrefix(s) => Some(&s.tokenizer),
            PanelSource::VllmRandom(s) => Some(&s.tokenizer),
            PanelSource::VllmBurstGpt(s) => Some(&s.tokenizer),
            PanelSource::VllmPrefixRepetition(s) => Some(&s.tokenizer),
            PanelSource::Jsonl { .. } | PanelSource::Random { .. } => None,
        }
    }
}

/// `prompts.source = "vllm_random"`: vLLM 0.34's `RandomDataset` (`vllm bench serve
/// --dataset-name random`), its arguments as vLLM names them.
#[derive(Debug, Clone, PartialEq)]
pub struct VllmRandomSpec {
    /// The tokenizer.json whose vocabulary the IDs come from (required: vLLM
    /// decodes them to text and re-encodes it).
    pub tokenizer: String,
    /// `--random-input-len`: tokens per prompt after the prefix (special tokens the
    /// tokenizer adds are subtracted, as in vLLM).
    pub input_len: u32,
    /// `--random-output-len`.
    pub output_len: u32,
    /// `--random-prefix-len`: tokens shared by every prompt, before its own.
    pub prefix_len: u32,
    /// `--random-range-ratio`: lengths uniform in [floor(L(1-r)), ceil(L(1+r))].
    pub input_range_ratio: f64,
    pub output_range_ratio: f64,
    /// The tokenizer's `all_special_ids`, kept out of the drawn IDs (`None`: the
    /// tokenizer.json's added tokens marked special). `harness bench` writes
    /// them from the tokenizer_config.json beside the tokenizer, as transformers
    /// reads them for vLLM.
    pub special_ids: Option<Vec<u32>>,
}

/// `prompts.source = "vllm_burstgpt"`: vLLM 0.34's `BurstGPTDataset` (`vllm bench
/// serve --dataset-name burstgpt`).
#[derive(Debug, Clone, PartialEq)]
pub struct VllmBurstGptSpec {
    /// The BurstGPT CSV (`--dataset-path`; the user brings the real file).
    pub path: String,
    /// The tokenizer.json that decodes the synthetic IDs and re-encodes the text.
    pub tokenizer: String,
}

/// `prompts.source = "vllm_prefix_repetition"`: vLLM 0.34's
/// `PrefixRepetitionRandomDataset` (`vllm bench serve --dataset-name
/// prefix_repetition`), its arguments as vLLM names them.
#[derive(Debug, Clone, PartialEq)]
pub struct VllmPrefixRepetitionSpec {
    /// The tokenizer.json whose vocabulary the IDs come from.
    pub tokenizer: String,
    /// `--prefix-repetition-prefix-len`: tokens of each shared prefix.
    pub prefix_len: u32,
    /// `--prefix-repetition-suffix-len`: tokens of each prompt's own suffix.
    pub suffix_len: u32,
    /// `--prefix-repetition-num-prefixes`: prefixes (groups); the panel holds
    /// `num_requests / num_prefixes` prompts per prefix.
    pub num_prefixes: u32,
    /// `--prefix-repetition-output-len`: every entry's output length.
    pub output_len: u32,
    /// Shuffle the prompts with Python's `random` (false: prefix-major order,
    /// vLLM's `--disable-shuffle`).
    pub shuffle: bool,
}

/// `prompts.source = "sharegpt"`: vLLM bench's ShareGPT sampling.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareGptSpec {
    pub path: String,
    pub tokenizer: String,
    /// Prompts and outputs shorter than this are dropped (vLLM: 4).
    pub min_tokens: u32,
    /// Prompts longer than this are dropped, when set (vLLM: 1024).
    pub max_prompt_tokens: Option<u32>,
    /// Prompt + output longer than this is dropped, when set (vLLM: 2048).
    pub max_total_tokens: Option<u32>,
    /// Conversations shuffled with the study seed before the filters (false:
    /// file order, vLLM's `--disable-shuffle`).
    pub shuffle: bool,
}

impl ShareGptSpec {
    /// How reports name the dataset: the offline play-dialogue file built by
    /// `scripts/fetch-assets` is always labelled as not being ShareGPT.
    pub fn label(&self) -> &'static str {
        if self.path.rsplit('/').next() == Some(PLAY_DIALOGUE_FILE) {
            "play dialogue in ShareGPT format, not ShareGPT"
        } else {
            "ShareGPT-format conversations"
        }
    }
}

/// File name of the play-dialogue ShareGPT-format file (`scripts/fetch-assets`).
pub const PLAY_DIALOGUE_FILE: &str = "plays_sharegpt.json";

/// `prompts.source = "synthetic"`.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    pub tokens: SyntheticTokens,
    pub input: LengthDist,
    pub output: LengthDist,
}

/// Where a synthetic panel's tokens come from.
#[derive(Debug, Clone, PartialEq)]
pub enum SyntheticTokens {
    /// Cut from the natural-text files in `texts` matching `pattern`.
    Text { texts: String, pattern: String, tokenizer: String },
    /// Seeded uniform token IDs in `min..=max` (vLLM bench's `random` dataset with
    /// `--random-range-ratio`), after `prefix` IDs shared by every entry
    /// (`--random-prefix-len`); not natural text.
    Random { min_token_id: u32, max_token_id: u32, prefix: u32 },
}

/// `prompts.source = "shared_prefix"`: `groups` x `prompts_per_group` requests of
/// `prefix_tokens` shared + `suffix_tokens` own tokens of natural text.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedPrefixSpec {
    pub texts: String,
    pub pattern: String,
    pub tokenizer: String,
    pub groups: u32,
    pub prompts_per_group: u32,
    pub prefix_tokens: u32,
    pub suffix_tokens: u32,
}

/// A named distribution of token counts; every draw is rounded and clipped to
/// `[min, max]` (at least 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LengthDist {
    Fixed(u32),
    Uniform { min: u32, max: u32 },
    Normal { mean: f64, sd: f64, min: u32, max: u32 },
    LogNormal { mu: f64, sigma: f64, min: u32, max: u32 },
}

impl PanelSpec {
    /// Index in `prompts.jsonl` of the prompt used by request `i` of a cell whose
    /// prompts have `length` tokens: documents are used in turn (round robin), and
    /// the panel lists lengths in plan order, `documents` prompts each.
    /// A dataset panel (`length` is `None`) is used in order, round robin.
    pub fn prompt_index(&self, length: Option<u32>, i: u64) -> Option<u64> {
        let n = u64::from(self.documents);
        let Some(length) = length else {
            return (self.source.is_dataset() && n > 0).then(|| i % n);
        };
        let li = self.lengths.iter().position(|&l| l == length)? as u64;
        Some(li * n + i % n)
    }
}

/// One non-streaming batched call of `prompts` prompts after each server start.
#[derive(Debug, Clone, PartialEq)]
pub struct Warmup {
    /// K; 0 means no warmup call.
    pub prompts: u32,
    /// One of `prompts.lengths`; `None` for a dataset panel (its first entries).
    pub input_tokens: Option<u32>,
    pub output_tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Idle seconds before each measured cell.
    pub settle_s: f64,
    pub request_timeout_s: f64,
    /// Longest wait, after the last intended arrival, for outstanding requests.
    pub drain_timeout_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    /// Confirmation blocks; each runs every confirmation cell on every arm.
    pub count: u32,
    /// Extra blocks after them that run the descriptive cells.
    pub descriptive: u32,
    pub arm_order: Order,
    pub cell_order: Order,
    /// 0: each arm's server runs alone in its turn (start, warm up, every cell,
    /// stop). R >= 1: interleaved: every arm's server of the block is up at once,
    /// and each cell runs in R rounds; round k sends the k-th of R contiguous
    /// slices of the cell's trace to every arm in turn, in the block's arm order
    /// in even rounds and reversed in odd ones, so both arms of a pair meet the
    /// same minutes of the machine (see `schedule::round_arms`).
    pub rounds: u32,
    /// Each spawned server gets `SETUP_PAD_ENV` in its environment, of a length
    /// drawn per (block, arm) from the study seed (`seed::setup_pad_len`), so that
    /// a layout bias tied to one arm's setup (environment size shifts the stack)
    /// becomes block-to-block noise (Mytkowicz et al. 2009; Stabilizer).
    pub randomize_setup: bool,
}

/// The environment variable that carries the setup pad.
pub const SETUP_PAD_ENV: &str = "HARNESS_SETUP_PAD";

/// A counterbalancing scheme (see `schedule`).
#[derive(Debug, Clone, PartialEq)]
pub enum Order {
    /// Plan order in every block.
    Fixed,
    /// Plan order in even blocks, reversed in odd blocks.
    Alternate,
    /// Rows of a balanced (Williams) Latin square, cycled over blocks.
    Latin,
    /// These orders, cycled over blocks; each lists every arm (or every cell) once.
    Explicit(Vec<Vec<String>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CellKind {
    /// Enters the hypothesis tests; runs in every confirmation block.
    Confirmation,
    /// Reported, never tested; runs in the descriptive blocks.
    Descriptive,
}

impl CellKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CellKind::Confirmation => "confirmation",
            CellKind::Descriptive => "descriptive",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub name: String,
    pub kind: CellKind,
    pub load: Load,
    pub count: Count,
    /// Prompt length in tokens; one of `prompts.lengths`. `None` for a dataset
    /// panel: the cell sends its entries in order, each of its own length.
    pub input_tokens: Option<u32>,
    pub retries: u32,
    /// How much of each stream is recorded (`recorder`, default full).
    pub recorder: Recorder,
    /// Where this cell's timed requests go (`cells[].endpoint`, else `request.endpoint`).
    pub endpoint: Endpoint,
    /// Whether this cell's bodies ask for streamed token IDs (`token_ids`, default
    /// `request.token_ids`).
    pub token_ids: bool,
    /// `cells[].max_concurrency` (open, constant and trace loads; vLLM bench's
    /// `--max-concurrency` beside a finite `--request-rate`): at most C requests in
    /// flight. Arrivals keep their schedule; one that finds C in flight waits, from
    /// its dispatch to its admission, for the first to end (so TTFT, from the send,
    /// leaves the wait out, and latency from intended arrival holds it).
    pub max_concurrency: Option<u32>,
}

/// `cells[].recorder`: what the client keeps of each response stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recorder {
    /// Every SSE event's timestamp, token count and token IDs (the default).
    #[default]
    Full,
    /// Only the first token-bearing event, `[DONE]` and usage (descriptive cells
    /// only: TPOT and inter-token gaps are not measured). Paired with a full cell of
    /// the same load it shows what recording costs (the observer-effect check).
    Light,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// `concurrency` clients; every request intended at the cell start.
    Closed { concurrency: u32 },
    /// Open-loop arrivals at `rate` requests/s.
    Open { rate: Rate, arrival: Arrival },
    /// One request every `spacing_s` seconds.
    Isolated { spacing_s: f64 },
    /// Arrivals replayed from a trace file (`load = "trace"`): `path` is a Mooncake
    /// JSONL or Azure CSV trace; offsets are multiplied by `time_scale`; with
    /// `lengths`, each request's prompt and output length follow the file's row.
    Trace { path: String, time_scale: f64, lengths: bool },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps with shape = burstiness, scale = 1 / (rate * burstiness).
    Gamma { burstiness: f64 },
    /// Evenly spaced (`load = "constant"`, guidellm's `constant`): request i at
    /// round(i * 1e9 / rate) ns.
    Constant,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Rate {
    Fixed(f64),
    /// `derived:<name>`: a load from `[derived]` (`near` or a `[derive.fractions]` key).
    Derived(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Count {
    Fixed(u64),
    /// `derived:count`.
    Derived,
}

/// Whether larger is better (throughput) or smaller is better (latency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    Throughput,
    Latency,
}

/// A cell-level measure a hypothesis compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
pub enum Metric {
    /// Valid completed requests / observation interval (first intended arrival to last
    /// completion, drain included).
    #[serde(rename = "throughput_rps")]
    ThroughputRps,
    /// Output tokens of valid completed requests / the same interval.
    #[serde(rename = "output_tokens_per_s")]
    OutputTokensPerS,
    /// p95 of time to first token-bearing event, from HTTP send.
    #[serde(rename = "ttft_p95")]
    TtftP95,
    /// p95 across requests of per-request time per output token.
    #[serde(rename = "tpot_p95")]
    TpotP95,
    /// p95 of end-to-end latency ([DONE]) from HTTP send.
    #[serde(rename = "e2e_p95")]
    E2eP95,
    /// p95 of end-to-end latency from intended arrival.
    #[serde(rename = "e2e_p95_intended")]
    E2eP95Intended,
    /// Requests meeting every `[slo]` target / observation interval (needs `[slo]`).
    #[serde(rename = "goodput_rps")]
    GoodputRps,
    /// Arithmetic mean over valid completed requests of end-to-end latency ([DONE])
    /// from HTTP send (the tuning table's "mean latency").
    #[serde(rename = "e2e_mean")]
    E2eMean,
    /// Arithmetic mean over valid requests with a token-bearing event of time to
    /// first token from HTTP send.
    #[serde(rename = "ttft_mean")]
    TtftMean,
    /// Median (nearest rank) of time to first token-bearing event, from HTTP send:
    /// the regression gate's typical latency.
    #[serde(rename = "ttft_p50")]
    TtftP50,
    /// The engine's own time per decode token from its receipts (`metrics`
    /// engine TPOT; needs the arm's `receipts`): the regression gate's engine measure.
    #[serde(rename = "engine_tpot")]
    EngineTpot,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Throughput => "throughput",
            MetricKind::Latency => "latency",
        }
    }
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::ThroughputRps,
        Metric::OutputTokensPerS,
        Metric::TtftP95,
        Metric::TpotP95,
        Metric::E2eP95,
        Metric::E2eP95Intended,
        Metric::GoodputRps,
        Metric::E2eMean,
        Metric::TtftMean,
        Metric::TtftP50,
        Metric::EngineTpot,
    ];

    pub fn kind(self) -> MetricKind {
        match self {
            Metric::ThroughputRps | Metric::OutputTokensPerS | Metric::GoodputRps => MetricKind::Throughput,
            _ => MetricKind::Latency,
        }
    }

    /// The plan spelling, e.g. `e2e_p95_intended`.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::ThroughputRps => "throughput_rps",
            Metric::OutputTokensPerS => "output_tokens_per_s",
            Metric::TtftP95 => "ttft_p95",
            Metric::TpotP95 => "tpot_p95",
            Metric::E2eP95 => "e2e_p95",
            Metric::E2eP95Intended => "e2e_p95_intended",
            Metric::GoodputRps => "goodput_rps",
            Metric::E2eMean => "e2e_mean",
            Metric::TtftMean => "ttft_mean",
            Metric::TtftP50 => "ttft_p50",
            Metric::EngineTpot => "engine_tpot",
        }
    }
}

/// One member of the hypothesis family: candidate beats control on `metric` in `cell`
/// by at least `threshold` (median block effect, as a fraction: 0.01 = 1%).
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    pub name: String,
    pub metric: Metric,
    pub cell: String,
    pub candidate: String,
    pub control: String,
    pub threshold: f64,
}

impl Plan {
    pub fn arm(&self, name: &str) -> Option<&Arm> {
        self.arms.iter().find(|a| a.name == name)
    }

    pub fn cell(&self, name: &str) -> Option<&Cell> {
        self.cells.iter().find(|c| c.name == name)
    }

    /// The endpoints the cells send to, in `Endpoint::ALL` order (a plan without
    /// cells: `request.endpoint`). The panel carries what each needs, `inputs/`
    /// freezes one body per entry for each, and the warmup warms each.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        if self.cells.is_empty() {
            return vec![self.request.endpoint];
        }
        Endpoint::ALL.into_iter().filter(|&e| self.cells.iter().any(|c| c.endpoint == e)).collect()
    }

    /// The endpoint cell `name` sends to (`request.endpoint` for an unknown name).
    pub fn endpoint_of(&self, name: &str) -> Endpoint {
        self.cell(name).map_or(self.request.endpoint, |c| c.endpoint)
    }

    /// The kind of body cell `name` sends (`request`'s for an unknown name).
    pub fn body_kind_of(&self, name: &str) -> BodyKind {
        self.cell(name).map_or(self.body_kind(self.request.endpoint), |c| BodyKind {
            endpoint: c.endpoint,
            token_ids: c.token_ids,
        })
    }

    /// The body `[request]` describes on `endpoint` (its `token_ids`).
    pub fn body_kind(&self, endpoint: Endpoint) -> BodyKind {
        BodyKind { endpoint, token_ids: self.request.token_ids }
    }

    /// The kinds of body the cells send, each once, ordered by endpoint then
    /// token IDs asked for first (a plan without cells: `[request]`'s). `inputs/`
    /// freezes one body per panel entry for each.
    pub fn body_kinds(&self) -> Vec<BodyKind> {
        if self.cells.is_empty() {
            return vec![self.body_kind(self.request.endpoint)];
        }
        let mut kinds: Vec<BodyKind> =
            self.cells.iter().map(|c| BodyKind { endpoint: c.endpoint, token_ids: c.token_ids }).collect();
        kinds.sort_by_key(|k| (k.endpoint, !k.token_ids));
        kinds.dedup();
        kinds
    }

    /// Indices in `prompts.jsonl` of the warmup call's prompts.
    pub fn warmup_prompts(&self) -> Vec<u64> {
        (0..u64::from(self.warmup.prompts))
            .filter_map(|i| self.prompts.prompt_index(self.warmup.input_tokens, i))
            .collect()
    }
}

/// `[qualification]`: the quality gates run before any timing (`harness qualify`).
/// Each gate runs when its sub-table is present.
#[derive(Debug, Clone, PartialEq)]
pub struct Qualification {
    /// `harness run` must qualify every arm first; an arm that fails is not qualified
    /// and its timing claims are blocked.
    pub required: bool,
    /// One-sided confidence of every gate bound (0.95).
    pub confidence: f64,
    /// Most requests in flight per arm (GSM, NLL, retrieval).
    pub concurrency: u32,
    pub request_timeout_s: f64,
    /// Seed of subsets, cuts and passkeys (default: `study.seed`).
    pub seed: u64,
    /// tokenizer.json every gate tokenizes with; prompts are sent as token IDs.
    pub tokenizer: String,
    /// Natural-text directory and file pattern (NLL panel, filler, parity prompts).
    pub texts: String,
    pub pattern: String,
    pub gsm: Option<GsmGateSpec>,
    pub nll: Option<NllGateSpec>,
    pub retrieval: Option<RetrievalGateSpec>,
    pub parity: Option<ParityGateSpec>,
}

/// Which set a GSM gate reads: the real GSM8K test JSONL, or the offline GSM-style set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GsmDataset {
    #[serde(rename = "gsm8k")]
    Gsm8k,
    #[serde(rename = "gsm-style")]
    GsmStyle,
}

impl GsmDataset {
    /// How every report names it.
    pub fn label(self) -> &'static str {
        match self {
            GsmDataset::Gsm8k => "GSM8K",
            GsmDataset::GsmStyle => "GSM-style set, not GSM8K",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GsmGateSpec {
    pub path: String,
    pub dataset: GsmDataset,
    /// A seeded subset of this many items (`None`: every item).
    pub subset: Option<u32>,
    /// Prompt template with `{question}`.
    pub template: String,
    /// Worked examples before each question, the first `fewshot` lines of `fewshot_path`.
    pub fewshot: u32,
    pub fewshot_path: Option<String>,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    pub max_loss_rate: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NllGateSpec {
    pub documents: u32,
    /// Exact token length of each document.
    pub tokens: u32,
    /// Limit of the upper bound of the mean paired difference (ln(1.01)).
    pub max_upper: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalGateSpec {
    pub prompts: u32,
    pub context_tokens: u32,
    pub max_tokens: u32,
    pub max_loss_rate: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParityGateSpec {
    pub prompts: u32,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub concurrency: u32,
    /// Arm name -> serial reference argv (placeholders allowed, not `{receipts}`).
    pub reference: BTreeMap<String, Vec<String>>,
}
