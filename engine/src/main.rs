//! The `engine` command line: `generate` (serial, in-process), `score`,
//! `calibrate`, `synth`, `bench`, `serve`, `export-tokenizer`, `dequantize` and
//! `roofline`. Errors are mapped to exit codes here and nowhere else: 2 for bad
//! input or assets, 1 for anything else.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use engine::commands::{self, CommandError};
use engine::kv::{KvFormat, ValueScales};
use engine::model::Arch;
use engine::runtime::{Engine, EngineOptions};
use engine::synth::{SynthDtype, SynthSpec, SynthTokenizer};
use engine::tokenizer::ChatMessage;
use std::path::{Path, PathBuf};

mod kernel_args;

use kernel_args::KernelArgs;

#[derive(Parser)]
#[command(name = "engine", version, about = "Inference engine for Qwen3-family and llama-architecture dense decoders")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Greedy generation, serial and in-process (the reference for serial parity).
    Generate(GenerateArgs),
    /// Per-token log-probabilities of a text (mean NLL in nats).
    Score(ScoreArgs),
    /// Per-layer k16v8 value scales from real activations: scale = max|v| / 448
    /// per layer, over every value element of every calibration token.
    Calibrate(CalibrateArgs),
    /// Write a deterministic random-weight model directory (for tests and CI).
    Synth(SynthArgs),
    /// Prefill and decode throughput per KV format and thread count, as JSON.
    Bench(BenchArgs),
    /// OpenAI-compatible HTTP server with continuous batching.
    Serve(ServeArgs),
    /// Write the tokenizer embedded in a GGUF file as tokenizer.json (+
    /// tokenizer_config.json with its chat template), for tools that read the
    /// Hugging Face format (the harness cuts prompts with it).
    ExportTokenizer(ExportTokenizerArgs),
    /// Rewrite a GGUF file with every tensor decoded to F32 (or F16): the values
    /// this engine's loader produces, under the same names, shapes and order,
    /// with every metadata key copied (general.file_type updated). Gives another
    /// server (llama.cpp) un-quantized weights for a token-exact comparison.
    Dequantize(DequantizeArgs),
    /// This machine's limits, as JSON: streaming read bandwidth of a large
    /// array and the int8 multiply-accumulate peak of the widest dot-product
    /// instruction, each on one thread and on all (scripts/bench-roofline
    /// sets the engine's decode and prefill against them). A benchmark.
    Roofline(RooflineArgs),
}

#[derive(Args)]
struct RooflineArgs {
    /// Bytes of the array the bandwidth figure reads, e.g. 1GiB (far above
    /// the last-level cache: main memory). A smaller array is read several
    /// times a repeat, at least 1 GiB in all.
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
    bytes: usize,
    /// Threads of the all-thread figures (default: every logical CPU).
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// Timed repeats of each figure (the best and the median are reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Also write the JSON here (it is always printed on stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct DequantizeArgs {
    /// The input .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// The output .gguf file (written to OUT.tmp, then renamed).
    #[arg(long)]
    out: PathBuf,
    /// Tensor type: f32 (bit-exact: the loader's values), f16 or bf16 (rounded
    /// to nearest-even; 1-D tensors stay f32).
    #[arg(long, default_value = "f32")]
    dtype: engine::gguf::OutDtype,
}

#[derive(Args)]
struct ExportTokenizerArgs {
    /// A .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    kernels: KernelArgs,
    /// Model name clients must send (default: the model file or directory name).
    #[arg(long)]
    served_model_name: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Most sequences in one batch.
    #[arg(long, default_value_t = 64)]
    max_num_seqs: usize,
    /// Most tokens computed in one step (prefill + decode).
    #[arg(long, default_value_t = 2048)]
    max_num_batched_tokens: usize,
    /// Longest prompt + output (default: the model's context length).
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Split long prompts across steps so decodes keep flowing.
    #[arg(long)]
    enable_chunked_prefill: bool,
    /// Share full KV pages of identical prompt prefixes.
    #[arg(long)]
    enable_prefix_caching: bool,
    /// Require `Authorization: Bearer KEY` on /v1/* (health and metrics stay
    /// open). Every user can read it in `ps`: prefer --api-key-env.
    #[arg(long, conflicts_with = "api_key_env")]
    api_key: Option<String>,
    /// Name of an environment variable holding the API key (kept off the
    /// command line; unset or empty is an error). With neither flag,
    /// VLLM_API_KEY is the key when set and not empty, as in vLLM.
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// Write one JSON line per scheduler step to FILE.
    #[arg(long)]
    receipts: Option<PathBuf>,
    /// Tokens per SSE event.
    #[arg(long, default_value_t = 1)]
    stream_interval: usize,
    /// With nothing running, wait up to this fraction of the next step's
    /// expected prefill time (at most 20 ms) for more requests, so that requests
    /// sent together are prefilled together (0 turns it off). Never delays a decode.
    #[arg(long, default_value_t = 0.02, value_parser = parse_fraction)]
    idle_gather_factor: f64,
    /// DEBUG KNOB: sleep this many microseconds after every step, to inject a
    /// known slowdown (the harness's validity tests use it). Off by default.
    #[arg(long, default_value_t = 0)]
    debug_step_delay_us: u64,
    /// DEBUG KNOB: after every step, busy-wait on the engine thread for this
    /// fraction of the step's own time, so every step takes (1 + F) times as
    /// long and the CPU stays busy (a sleep frees the cores; the power
    /// demonstration uses this). Off by default.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    debug_step_spin_fraction: f64,
    /// DEBUG KNOB: the forward pass after the first N fails once, as a model
    /// failure would (tests of the error path use it). Hidden.
    #[arg(long, hide = true)]
    debug_fail_forward_after: Option<u64>,
    /// Largest accepted request body.
    #[arg(long, default_value = "8MiB", value_parser = parse_bytes)]
    max_body: usize,
    /// Seconds in-flight requests may run after SIGTERM before they are aborted.
    #[arg(long, default_value_t = 5.0)]
    shutdown_grace_s: f64,
    /// Most sequences waiting for their first step; more requests get 503
    /// (OpenAI-shaped, with Retry-After).
    #[arg(long, default_value_t = 1024)]
    max_waiting: usize,
    /// Seconds a client may take to send a request head (also bounds an idle
    /// keep-alive connection, as hyper counts idle time toward it).
    #[arg(long, default_value_t = 10.0)]
    header_read_timeout_s: f64,
    /// Seconds an idle keep-alive connection stays open (uvicorn's and so
    /// vLLM's default is 5).
    #[arg(long, default_value_t = 5.0)]
    keep_alive_timeout_s: f64,
    /// Seconds a client may take to send a whole request body once its head
    /// is in; a slower one gets 408 and the connection closes.
    #[arg(long, default_value_t = 10.0)]
    body_read_timeout_s: f64,
    /// Most connections open at once; one accepted past it is closed at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
}

/// Options shared by every command that loads a model.
#[derive(Args, Clone)]
struct ModelArgs {
    /// A .gguf file or a Hugging Face model directory.
    #[arg(long)]
    model: PathBuf,
    /// KV cache storage format.
    #[arg(long, default_value = "f16", value_parser = kv_format_parser())]
    kv_format: KvFormat,
    /// Per-layer value scales (JSON from `engine calibrate`); required for k16v8.
    #[arg(long)]
    kv_scales: Option<PathBuf>,
    /// KV cache budget, e.g. 512MiB or 2GiB.
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    kv_budget: usize,
    /// Kernel threads.
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
}

#[derive(Args)]
struct BenchArgs {
    /// A .gguf file or a Hugging Face model directory.
    #[arg(long)]
    model: PathBuf,
    /// Text whose tokens form the prompt (else token IDs 100, 101, ...).
    #[arg(long)]
    text: Option<PathBuf>,
    #[arg(long, default_value_t = 512)]
    prefill_tokens: usize,
    #[arg(long, default_value_t = 64)]
    decode_tokens: usize,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// KV formats to measure (k16v8 scales are calibrated on the prompt).
    #[arg(long, value_delimiter = ',', default_value = "f16,bf16,k16v8")]
    kv_formats: Vec<KvFormat>,
    /// Timed repetitions per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Where to write the JSON (also printed to stdout).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    kernels: KernelArgs,
    /// Quantized-matmul modes to measure, alternated within each repeat (e.g.
    /// q8,exact); default: the one the kernel flags select.
    #[arg(long, value_delimiter = ',', conflicts_with = "exact_quant_matmul")]
    quant_matmul: Option<Vec<engine::kernels::QuantMatmul>>,
    /// Skip the linear-layer comparison with the `gemm` crate (whole-model
    /// figures only; `linear_kernel_vs_gemm_crate` is then empty).
    #[arg(long)]
    no_kernel_comparison: bool,
}

/// `--kv-format`, listing its values in `--help`.
fn kv_format_parser() -> impl clap::builder::TypedValueParser<Value = KvFormat> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["f16", "bf16", "k16v8"]).try_map(|s| s.parse::<KvFormat>())
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A finite number from 0 to 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number from 0 to 1")),
    }
}

/// Parses `1234`, `64KiB`, `512MiB`, `2GiB` (also KB/MB/GB as powers of 1000).
fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("{s:?} is not a size like 512MiB or 2GiB"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        u => {
            return Err(format!("unknown size unit {u:?} (use B, KiB, MiB, GiB, KB, MB or GB)"));
        }
    };
    Ok((value * mult) as usize)
}

impl ModelArgs {
    /// The engine on the kernels and device `k` selects (over the environment).
    fn engine_on(&self, k: &KernelArgs) -> Result<Engine> {
        let mut opts = self.options()?;
        opts.kernels = k.kernels(opts.kernels)?;
        opts.device = k.device()?;
        Engine::load(&self.model, &opts).with_context(|| format!("loading {}", self.model.display()))
    }

    fn options(&self) -> Result<EngineOptions> {
        let kv_scales = match &self.kv_scales {
            Some(p) => Some(ValueScales::load(p)?),
            None => None,
        };
        Ok(EngineOptions {
            kv_format: self.kv_format,
            kv_scales,
            kv_budget_bytes: self.kv_budget,
            threads: self.threads,
            kernels: engine::kernels::Kernels::from_env()
                .map_err(|e| engine::error::EngineError::Config(e.to_string()))?,
            device: engine::kernels::Device::Cpu,
        })
    }
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    kernels: KernelArgs,
    /// Prompt text.
    #[arg(long, conflicts_with_all = ["prompt_ids", "prompts_jsonl"])]
    prompt: Option<String>,
    /// Prompt as comma-separated token IDs.
    #[arg(long, value_delimiter = ',', conflicts_with = "prompts_jsonl")]
    prompt_ids: Option<Vec<u32>>,
    /// Many prompts, answered one after another by this one process, in file order:
    /// a JSONL file (`-` for stdin) of `{"index": N, "prompt_ids": [...]}` lines.
    /// Prints one JSON line per prompt as it finishes (implies --json): index,
    /// output_ids, text, finish_reason, elapsed_s. The serial reference of the
    /// harness's parity gate.
    #[arg(long)]
    prompts_jsonl: Option<PathBuf>,
    /// Wrap the prompt as one user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ScoreArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    kernels: KernelArgs,
    #[arg(long)]
    text_file: PathBuf,
    /// Character range of the file to score, START:END (Unicode scalar values).
    #[arg(long)]
    chars: Option<String>,
    /// Score only the first N tokens.
    #[arg(long)]
    max_tokens: Option<usize>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CalibrateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Calibration text (UTF-8).
    #[arg(long)]
    text: PathBuf,
    /// Use at most this many tokens of the text.
    #[arg(long, default_value_t = 2048)]
    max_tokens: usize,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct SynthArgs {
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = "qwen3", value_parser = parse_arch)]
    arch: Arch,
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    #[arg(long, default_value_t = 512)]
    intermediate: usize,
    #[arg(long, default_value_t = 4)]
    layers: usize,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    #[arg(long, default_value_t = 2)]
    kv_heads: usize,
    #[arg(long, default_value_t = 64)]
    head_dim: usize,
    #[arg(long, default_value_t = 4096)]
    max_positions: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Weight dtype in model.safetensors: f32, f16 or bf16.
    #[arg(long, default_value = "bf16")]
    dtype: SynthDtype,
    /// `byte` (small built-in byte-level tokenizer), a directory holding
    /// tokenizer.json + tokenizer_config.json to copy, or `auto`: the real Qwen3
    /// tokenizer at assets/qwen3-tokenizer when present, else `byte`.
    #[arg(long, default_value = "auto")]
    tokenizer: String,
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    match s {
        "qwen3" => Ok(Arch::Qwen3),
        "llama" => Ok(Arch::Llama),
        o => Err(format!("unknown architecture {o:?}; expected qwen3 or llama")),
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(a) => generate(a),
        Command::Score(a) => score(a),
        Command::Calibrate(a) => calibrate(a),
        Command::Synth(a) => synth(a),
        Command::Bench(a) => bench(a),
        Command::Serve(a) => serve(a),
        Command::ExportTokenizer(a) => export_tokenizer(a),
        Command::Dequantize(a) => dequantize(a),
        Command::Roofline(a) => roofline(a),
    };
    if let Err(e) = result {
        eprintln!("engine: error: {e:#}");
        std::process::exit(exit_code(&e));
    }
}

/// 2 for bad input or assets (the user's to fix), 1 for anything else.
fn exit_code(e: &anyhow::Error) -> i32 {
    let input = e.chain().any(|c| {
        c.downcast_ref::<engine::error::EngineError>().is_some_and(engine::error::EngineError::is_input)
            || c.downcast_ref::<CommandError>().is_some_and(CommandError::is_input)
    });
    if input { 2 } else { 1 }
}

fn generate(a: GenerateArgs) -> Result<()> {
    let mut engine = a.model.engine_on(&a.kernels)?;
    if let Some(path) = &a.prompts_jsonl {
        if a.chat {
            bail!("--chat needs --prompt (text), not --prompts-jsonl");
        }
        return generate_serial(&mut engine, path, a.max_tokens, a.ignore_eos);
    }
    let prompt_ids = match (&a.prompt, &a.prompt_ids) {
        (Some(text), None) => {
            let text = if a.chat {
                engine
                    .tokenizer
                    .apply_chat_template(&[ChatMessage { role: "user".into(), content: text.clone() }], true)?
            } else {
                text.clone()
            };
            engine.tokenizer.encode(&text, !a.chat)?
        }
        (None, Some(ids)) => {
            if a.chat {
                bail!("--chat needs --prompt (text), not --prompt-ids");
            }
            ids.clone()
        }
        _ => bail!("give exactly one of --prompt or --prompt-ids"),
    };
    let g = engine.generate_greedy(&prompt_ids, a.max_tokens, a.ignore_eos)?;
    let text = engine.tokenizer.decode(&g.output_ids, true)?;
    if a.json {
        let out = serde_json::json!({
            "prompt_ids": g.prompt_ids,
            "output_ids": g.output_ids,
            "text": text,
            "finish_reason": g.finish_reason,
            "kv_format": a.model.kv_format,
        });
        println!("{out}");
    } else {
        println!("{text}");
        println!("[output ids: {:?}; finish_reason: {:?}]", g.output_ids, g.finish_reason);
    }
    Ok(())
}

/// One line of `--prompts-jsonl`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SerialPrompt {
    index: u64,
    prompt_ids: Vec<u32>,
}

/// `generate --prompts-jsonl`: every prompt in file order on one engine, one JSON
/// line per answer, flushed as it is written.
fn generate_serial(engine: &mut Engine, path: &Path, max_tokens: usize, ignore_eos: bool) -> Result<()> {
    use std::io::{BufRead, Write};
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut out = std::io::stdout().lock();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{} line {}", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let p: SerialPrompt = serde_json::from_str(&line).map_err(|e| {
            engine::error::EngineError::InvalidRequest(format!("{} line {}: {e}", path.display(), n + 1))
        })?;
        let t0 = std::time::Instant::now();
        let g = engine
            .generate_greedy(&p.prompt_ids, max_tokens, ignore_eos)
            .with_context(|| format!("prompt {} ({} line {})", p.index, path.display(), n + 1))?;
        let text = engine.tokenizer.decode(&g.output_ids, true)?;
        let rec = serde_json::json!({
            "index": p.index,
            "output_ids": g.output_ids,
            "text": text,
            "finish_reason": g.finish_reason,
            "elapsed_s": t0.elapsed().as_secs_f64(),
        });
        writeln!(out, "{rec}")?;
        out.flush()?;
    }
    Ok(())
}

fn score(a: ScoreArgs) -> Result<()> {
    let mut engine = a.model.engine_on(&a.kernels)?;
    let text = engine::commands::read_text(&a.text_file, a.chars.as_deref())?;
    let mut ids = engine.tokenizer.encode(&text, false)?;
    if let Some(n) = a.max_tokens {
        ids.truncate(n);
    }
    let logprobs = engine.score(&ids)?;
    let mean_nll = -logprobs.iter().sum::<f64>() / logprobs.len() as f64;
    if a.json {
        let out = serde_json::json!({
            "token_ids": ids,
            "logprobs": logprobs,
            "mean_nll": mean_nll,
            "scored_tokens": logprobs.len(),
            "kv_format": a.model.kv_format,
        });
        println!("{out}");
    } else {
        println!(
            "{} tokens, {} scored, mean NLL {mean_nll:.6} nats ({} KV)",
            ids.len(),
            logprobs.len(),
            a.model.kv_format
        );
    }
    Ok(())
}

fn calibrate(a: CalibrateArgs) -> Result<()> {
    let report = commands::calibrate(commands::CalibrateOptions {
        model: &a.model.model,
        engine: a.model.options()?,
        text: &a.text,
        max_tokens: a.max_tokens,
        out: a.out.clone(),
    })?;
    eprintln!("engine: wrote {} scales ({} tokens) to {}", report.layers, report.tokens, a.out.display());
    Ok(())
}

fn export_tokenizer(a: ExportTokenizerArgs) -> Result<()> {
    commands::export_tokenizer(&a.model, &a.out)?;
    eprintln!("engine: wrote {}/tokenizer.json and tokenizer_config.json", a.out.display());
    Ok(())
}

fn dequantize(a: DequantizeArgs) -> Result<()> {
    let report = commands::dequantize(&a.model, &a.out, a.dtype)?;
    eprintln!(
        "engine: wrote {} ({} tensors as {}, general.file_type {}, {:.1} MiB)",
        a.out.display(),
        report.tensors,
        a.dtype,
        a.dtype.file_type(),
        report.bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    let from_env =
        engine::kernels::Kernels::from_env().map_err(|e| engine::error::EngineError::Config(e.to_string()))?;
    let doc = commands::bench(
        &commands::BenchOptions {
            model: a.model,
            text: a.text,
            prefill_tokens: a.prefill_tokens,
            decode_tokens: a.decode_tokens,
            threads: a.threads,
            kv_formats: a.kv_formats,
            repeats: a.repeats,
            kernels: a.kernels.kernels(from_env)?,
            device: a.kernels.device()?,
            modes: a.quant_matmul.unwrap_or_default(),
            kernel_comparison: !a.no_kernel_comparison,
            out: a.out.clone(),
        },
        |row| eprintln!("bench: {row}"),
    )?;
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

fn roofline(a: RooflineArgs) -> Result<()> {
    let doc = commands::roofline(&commands::RooflineOptions {
        bytes: a.bytes,
        threads: a.threads,
        repeats: a.repeats,
        command_line: std::env::args().collect(),
        out: a.out.clone(),
    })?;
    println!("{}", serde_json::to_string_pretty(&doc)?);
    if let Some(p) = &a.out {
        eprintln!("engine: wrote {}", p.display());
    }
    Ok(())
}

fn positive_secs(flag: &str, s: f64) -> Result<std::time::Duration> {
    if !(s.is_finite() && s > 0.0) {
        bail!("{flag} must be a positive number of seconds, got {s}");
    }
    Ok(std::time::Duration::from_secs_f64(s))
}

/// The variable vLLM reads its API key from when `--api-key` is not given.
const VLLM_API_KEY: &str = "VLLM_API_KEY";

/// The API key: `--api-key`, else the variable `--api-key-env` names (unset or
/// empty is bad input), else `VLLM_API_KEY` when set and not empty (vLLM's
/// fallback). Logs where it came from, never the key.
fn api_key(flag: Option<String>, env_name: Option<&str>) -> Result<Option<engine::serve::state::ApiKey>> {
    let bad = |m: String| engine::error::EngineError::InvalidRequest(m);
    let (key, from) = match (flag, env_name) {
        (Some(k), _) if k.is_empty() => return Err(bad("--api-key must not be empty".into()).into()),
        (Some(k), _) => (Some(k), "--api-key".to_string()),
        (None, Some(var)) => match std::env::var(var) {
            Ok(k) if !k.is_empty() => (Some(k), format!("the environment variable {var}")),
            _ => return Err(bad(format!("--api-key-env: the environment variable {var} is unset or empty")).into()),
        },
        (None, None) => (std::env::var(VLLM_API_KEY).ok().filter(|k| !k.is_empty()), VLLM_API_KEY.to_string()),
    };
    if key.is_some() {
        tracing::info!("/v1/* requires the API key from {from}");
    }
    Ok(key.map(engine::serve::state::ApiKey::new))
}

fn serve(a: ServeArgs) -> Result<()> {
    if a.max_num_seqs == 0
        || a.max_num_batched_tokens == 0
        || a.stream_interval == 0
        || a.max_waiting == 0
        || a.max_connections == 0
    {
        bail!(
            "--max-num-seqs, --max-num-batched-tokens, --stream-interval, --max-waiting and --max-connections must be positive"
        );
    }
    // Resolved here so that a bad --cpu-path or environment value is bad input
    // (exit 2) before the server binds; the flags override the environment.
    let from_env =
        engine::kernels::Kernels::from_env().map_err(|e| engine::error::EngineError::Config(e.to_string()))?;
    let kernels = a.kernels.kernels(from_env)?;
    // Opened before the server binds: no driver, no GPU or a bad index is
    // bad input (exit 2) before anything listens.
    let device = a.kernels.device()?;
    let opts = engine::serve::ServeOptions {
        kernels,
        device,
        model: a.model.model.clone(),
        served_model_name: a.served_model_name,
        host: a.host,
        port: a.port,
        kv_format: a.model.kv_format,
        kv_scales: a.model.kv_scales.clone(),
        kv_budget_bytes: a.model.kv_budget,
        max_num_seqs: a.max_num_seqs,
        max_num_batched_tokens: a.max_num_batched_tokens,
        max_model_len: a.max_model_len,
        chunked_prefill: a.enable_chunked_prefill,
        prefix_caching: a.enable_prefix_caching,
        threads: a.model.threads,
        api_key: api_key(a.api_key, a.api_key_env.as_deref())?,
        receipts: a.receipts,
        stream_interval: a.stream_interval,
        debug_step_delay_us: a.debug_step_delay_us,
        debug_step_spin_fraction: a.debug_step_spin_fraction,
        debug_fail_forward_after: a.debug_fail_forward_after,
        idle_gather_factor: a.idle_gather_factor,
        body_limit_bytes: a.max_body,
        shutdown_grace: std::time::Duration::from_secs_f64(a.shutdown_grace_s.max(0.0)),
        max_waiting: a.max_waiting,
        header_read_timeout: positive_secs("--header-read-timeout-s", a.header_read_timeout_s)?,
        keep_alive_timeout: positive_secs("--keep-alive-timeout-s", a.keep_alive_timeout_s)?,
        body_read_timeout: positive_secs("--body-read-timeout-s", a.body_read_timeout_s)?,
        max_connections: a.max_connections,
    };
    engine::serve::run(opts)?;
    Ok(())
}

fn synth(a: SynthArgs) -> Result<()> {
    let tokenizer = match a.tokenizer.as_str() {
        "byte" => SynthTokenizer::ByteLevel,
        "auto" => {
            let real = Path::new("assets/qwen3-tokenizer");
            if real.join("tokenizer.json").is_file() {
                SynthTokenizer::CopyFrom(real.to_path_buf())
            } else {
                SynthTokenizer::ByteLevel
            }
        }
        dir => SynthTokenizer::CopyFrom(PathBuf::from(dir)),
    };
    let spec = SynthSpec {
        arch: a.arch,
        hidden_size: a.hidden,
        intermediate_size: a.intermediate,
        num_hidden_layers: a.layers,
        num_attention_heads: a.heads,
        num_key_value_heads: a.kv_heads,
        head_dim: a.head_dim,
        max_position_embeddings: a.max_positions,
        rope_theta: 1_000_000.0,
        seed: a.seed,
        dtype: a.dtype,
        tokenizer,
    };
    let cfg = engine::synth::write_model(&spec, &a.out)?;
    eprintln!(
        "engine: wrote synthetic {:?} model to {} (vocab {}, hidden {}, {} layers)",
        cfg.arch,
        a.out.display(),
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_hidden_layers
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("1.5KB"), Ok(1500));
        assert!(parse_bytes("2 parsecs").is_err());
        assert!(parse_bytes("GiB").is_err());
    }
}
