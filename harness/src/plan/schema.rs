//! The plan file as written: serde structs that mirror `plan.toml` key for key, with
//! unknown keys rejected (`deny_unknown_fields`). Owns the spelling of keys and enum
//! values. Must not judge values: ranges, cross-references and defaults that depend
//! on other keys belong to `validate`, which turns these into `types::Plan`.
//! Integers are read as `i64` so that a negative count gets a message naming its key.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::types::{ArmRole, CellKind, Metric};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    pub study: StudyFile,
    pub request: RequestFile,
    pub prompts: PromptsFile,
    pub warmup: WarmupFile,
    pub timing: TimingFile,
    pub blocks: BlocksFile,
    #[serde(default)]
    pub arms: Vec<ArmFile>,
    #[serde(default)]
    pub cells: Vec<CellFile>,
    pub analysis: Option<AnalysisFile>,
    #[serde(default)]
    pub hypotheses: Vec<HypothesisFile>,
    pub derive: Option<DeriveFile>,
    /// Written by `harness plan derive --write`; checked against `[derive]`.
    pub derived: Option<BTreeMap<String, toml::Value>>,
    /// Quality gates run before timing (`harness qualify`); see `validate_quality`.
    pub qualification: Option<QualificationFile>,
    /// `harness compare` settings, kept as written: `crate::commands::compare` owns their
    /// schema and validation (errors still name `compare.<key>`), reading it from
    /// the frozen bytes; declared here only so that the plan parses.
    #[allow(dead_code)]
    pub compare: Option<toml::Table>,
    /// When a run counts as failed (`[limits]`).
    pub limits: Option<LimitsFile>,
    /// Latency targets of goodput; see `validate_loads::slo`.
    pub slo: Option<SloFile>,
    /// A tuning study (baseline vs candidate configurations); see `tuning`.
    pub tuning: Option<super::tuning::TuningFile>,
    /// In-study pilots (`[pilots]`); see `pilots`.
    pub pilots: Option<PilotsFile>,
    /// A regression gate's stopping rule (`[sequential]`); see `sequential`.
    pub sequential: Option<super::sequential::SequentialFile>,
    /// The load generator's own process (`[client]`).
    pub client: Option<ClientFile>,
    /// Where the blocks run (`[executor]`); see `executor`.
    pub executor: Option<super::executor::ExecutorFile>,
}

/// `[client]`: where the harness itself (the load generator) runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    pub cpus: Option<Vec<i64>>,
}

/// `[pilots]`: closed-loop pilot runs of control arms that `harness run` runs first.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PilotsFile {
    pub arms: Option<Vec<String>>,
    pub concurrency: i64,
    pub count: i64,
    pub runs: Option<i64>,
    pub input_tokens: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    pub max_error_rate: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloFile {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    pub name: String,
    pub seed: i64,
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFile {
    pub model: String,
    pub output_tokens: Option<i64>,
    pub ignore_eos: Option<bool>,
    pub temperature: Option<f64>,
    /// "forced" or "natural".
    pub output: Option<String>,
    pub max_output_tokens: Option<i64>,
    /// "completions" (default) or "chat".
    pub endpoint: Option<String>,
    /// Ask for streamed token IDs (`return_token_ids`, default true).
    pub token_ids: Option<bool>,
    /// More body fields, sent as written (sampling parameters, vLLM's `--extra-body`).
    pub extra_body: Option<toml::Table>,
    /// Each timed request's `x-request-id` header: this prefix and the panel index
    /// (vLLM bench's `--request-id-prefix`); none sent without it.
    pub request_id_prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptsFile {
    /// "text", "jsonl", "random", "sharegpt", "requests", "synthetic", "shared_prefix",
    /// "vllm_random", "vllm_burstgpt" or "vllm_prefix_repetition".
    pub source: String,
    /// Absent and `[]` differ: a dataset panel refuses the key even when empty.
    pub lengths: Option<Vec<i64>>,
    pub documents: Option<i64>,
    pub texts: Option<String>,
    pub pattern: Option<String>,
    pub tokenizer: Option<String>,
    pub path: Option<String>,
    pub min_token_id: Option<i64>,
    pub max_token_id: Option<i64>,
    /// Dataset panels (sharegpt, requests, synthetic): how many entries.
    pub num_requests: Option<i64>,
    /// sharegpt filters (vLLM's): shortest prompt/output, longest prompt, longest total.
    pub min_tokens: Option<i64>,
    pub max_prompt_tokens: Option<i64>,
    pub max_total_tokens: Option<i64>,
    /// sharegpt: shuffle the conversations with the study seed (default true;
    /// vLLM's `--disable-shuffle` is false).
    pub shuffle: Option<bool>,
    /// synthetic: the input and output length distributions.
    pub input_tokens: Option<DistFile>,
    pub output_tokens: Option<DistFile>,
    /// shared_prefix: groups, requests per group, shared prefix and own suffix tokens.
    pub groups: Option<i64>,
    pub prompts_per_group: Option<i64>,
    pub prefix_tokens: Option<i64>,
    pub suffix_tokens: Option<i64>,
    /// sharegpt and requests on the chat endpoint: entries are multi-turn sessions
    /// of up to this many user turns.
    pub max_turns: Option<i64>,
    /// vllm_random: vLLM's `--random-input-len`, `--random-output-len`,
    /// `--random-prefix-len` and `--random-range-ratio` (`output_range_ratio` when
    /// the output's differs, vLLM's `{"input": .., "output": ..}`).
    pub input_len: Option<i64>,
    pub output_len: Option<i64>,
    pub prefix_len: Option<i64>,
    pub range_ratio: Option<f64>,
    pub output_range_ratio: Option<f64>,
    /// vllm_random: the tokenizer's special token IDs (Hugging Face's `all_special_ids`).
    pub special_ids: Option<Vec<i64>>,
    /// vllm_prefix_repetition: vLLM's `--prefix-repetition-suffix-len` and
    /// `--prefix-repetition-num-prefixes` (its prefix and output lengths are
    /// `prefix_len` and `output_len`).
    pub suffix_len: Option<i64>,
    pub num_prefixes: Option<i64>,
}

/// A length distribution as written: `{ dist = "normal", mean = .., sd = .., min = .., max = .. }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistFile {
    /// "fixed", "uniform", "normal" or "lognormal".
    pub dist: String,
    pub value: Option<i64>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub mean: Option<f64>,
    pub sd: Option<f64>,
    pub mu: Option<f64>,
    pub sigma: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupFile {
    pub prompts: i64,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingFile {
    pub settle_s: f64,
    pub request_timeout_s: f64,
    pub drain_timeout_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksFile {
    pub count: i64,
    pub descriptive: Option<i64>,
    pub arm_order: OrderFile,
    pub cell_order: OrderFile,
    pub rounds: Option<i64>,
    #[serde(default)]
    pub randomize_setup: bool,
}

/// A counterbalancing scheme by name, or an explicit list of orders cycled over blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OrderFile {
    Scheme(String),
    Explicit(Vec<Vec<String>>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmFile {
    pub name: String,
    pub role: ArmRole,
    pub argv: Option<Vec<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub port: Option<i64>,
    pub health: Option<String>,
    pub startup_timeout_s: Option<f64>,
    pub stop_grace_s: Option<f64>,
    pub url: Option<String>,
    pub receipts: Option<String>,
    pub tokenizer: Option<String>,
    pub max_start_failures: Option<i64>,
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// What the server must show it is before any timing; see `validate_identity`.
    pub identity: Option<IdentityFile>,
    /// CPUs the spawned server (and every process it starts) may run on.
    pub cpus: Option<Vec<i64>>,
}

/// `[arms.identity]`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityFile {
    pub preset: Option<String>,
    pub served_model: Option<String>,
    pub max_model_len: Option<i64>,
    pub version: Option<String>,
    pub kv_format: Option<String>,
    pub cpu_path: Option<String>,
    pub weights: Option<String>,
    #[serde(default)]
    pub log_has: Vec<String>,
    #[serde(default)]
    pub log_lacks: Vec<String>,
    #[serde(default)]
    pub metrics_have: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellFile {
    pub name: String,
    pub kind: CellKind,
    /// "closed", "open" or "isolated".
    pub load: String,
    pub count: NumOrRef<i64>,
    pub input_tokens: Option<i64>,
    pub retries: Option<i64>,
    /// One value, or a list (a sweep: one cell per value, see `sweep`).
    pub concurrency: Option<OneOrMany<i64>>,
    /// A number, a `derived:` reference, or a list of numbers (a sweep).
    pub rate: Option<NumOrRef<f64>>,
    pub arrival: Option<String>,
    pub burstiness: Option<f64>,
    pub spacing_s: Option<f64>,
    /// `load = "trace"`: the trace file (`.jsonl` Mooncake, `.csv` Azure).
    pub trace: Option<String>,
    pub time_scale: Option<f64>,
    /// Whether prompts and output lengths follow the trace file's rows.
    pub trace_lengths: Option<bool>,
    /// "full" (default) or "light" (descriptive cells only): see `types::Recorder`.
    pub recorder: Option<String>,
    /// Ask for streamed token IDs (default `request.token_ids`).
    pub token_ids: Option<bool>,
    /// "completions" or "chat": overrides `request.endpoint` for this cell.
    pub endpoint: Option<String>,
    /// Open, constant and trace cells: at most this many requests in flight.
    pub max_concurrency: Option<i64>,
}

/// A literal number, or a reference such as `"derived:near"`; where the key allows
/// it (`rate`), a list of numbers (a sweep).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum NumOrRef<T> {
    Num(T),
    Ref(String),
    List(Vec<T>),
}

/// One value or a list of values (a sweep).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalysisFile {
    pub alpha: f64,
    /// Which claims a failed request blocks: "study" (default) or "cell".
    pub blocking: Option<String>,
    /// Measures whose variance the report decomposes (`noise`).
    pub noise: Option<Vec<Metric>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HypothesisFile {
    pub name: Option<String>,
    pub metric: Metric,
    pub cell: String,
    pub candidate: String,
    pub control: String,
    pub threshold: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeriveFile {
    /// Absent when `[pilots]` measures the rates inside the study.
    pub pilot_rates: Option<Vec<f64>>,
    pub near_fraction: f64,
    #[serde(default)]
    pub fractions: BTreeMap<String, f64>,
    pub count_floor: Option<i64>,
    pub count_duration_s: Option<f64>,
    pub count_multiple: Option<i64>,
    pub note: Option<String>,
}

/// `[qualification]`: shared settings of the quality gates; a gate runs when its
/// sub-table is present.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualificationFile {
    pub required: Option<bool>,
    pub confidence: Option<f64>,
    pub concurrency: Option<i64>,
    pub request_timeout_s: Option<f64>,
    pub seed: Option<i64>,
    pub tokenizer: Option<String>,
    pub texts: Option<String>,
    pub pattern: Option<String>,
    pub gsm: Option<GsmFile>,
    pub nll: Option<NllFile>,
    pub retrieval: Option<RetrievalFile>,
    pub parity: Option<ParityFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GsmFile {
    pub path: String,
    /// "gsm8k" or "gsm-style".
    pub dataset: String,
    pub subset: Option<i64>,
    pub template: Option<String>,
    pub fewshot: Option<i64>,
    pub fewshot_path: Option<String>,
    pub max_tokens: Option<i64>,
    pub stop: Option<Vec<String>>,
    pub max_loss_rate: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NllFile {
    pub documents: Option<i64>,
    pub tokens: Option<i64>,
    pub max_upper: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalFile {
    pub prompts: Option<i64>,
    pub context_tokens: i64,
    pub max_tokens: Option<i64>,
    pub max_loss_rate: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParityFile {
    pub prompts: Option<i64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub concurrency: Option<i64>,
    /// Arm name -> argv of its serial in-process reference (e.g. `engine generate ... --json`).
    #[serde(default)]
    pub reference: BTreeMap<String, Vec<String>>,
}
