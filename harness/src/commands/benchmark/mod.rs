//! `harness benchmark [run]`: guidellm 0.8's `guidellm run` command line (its
//! registry options `--backend`, `--profile`, `--constraint`, `--data`, `--output`,
//! `--seed` in its `kind=...,key=value` syntax or JSON; `kind`), turned into the
//! flags of `harness bench` (`BenchArgs`, the one engine behind every front door:
//! its profiles, sweep and durations), and the guidellm outputs written from the
//! finished study (`export::guidellm_report`). Owns the translation and the list of
//! what is refused and why (docs/bench.md has the table); a file dataset
//! (`data_file`) becomes a `requests` JSONL written beside the evidence directory
//! (`freeze_data`), which the plan names. Must not run anything or compute a
//! number: the caller runs the plan as `harness bench` does.

pub mod data_file;
mod kind;

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::{Map, Value};

use crate::commands::bench::{BenchArgs, BenchError, Dataset};

/// The flags of `harness benchmark` (guidellm 0.8.1's `run`).
#[derive(Debug, Clone, Args)]
pub struct BenchmarkArgs {
    /// guidellm's subcommand word (`guidellm run`), optional here.
    #[arg(value_parser = ["run"])]
    pub run: Option<String>,
    /// guidellm's `--backend kind=openai_http,target=URL[,model=M][,request_format=/v1/chat/completions]`.
    #[arg(long)]
    pub backend: Option<String>,
    /// guidellm's `--profile kind=synchronous|throughput|concurrent,streams=N|constant,rate=R|poisson,rate=R|
    /// sweep[,sweep_size=N]` (default: sweep).
    #[arg(long)]
    pub profile: Option<String>,
    /// guidellm's `--constraint kind=max_duration,seconds=S` or `kind=max_requests,count=N` (repeatable).
    #[arg(long = "constraint")]
    pub constraints: Vec<String>,
    /// guidellm's `--data kind=synthetic_text,prompt_tokens=N,output_tokens=M` or
    /// `kind=json_file|csv_file|text_file,path=P` (a local file).
    #[arg(long)]
    pub data: Vec<String>,
    /// guidellm's `--output kind=json|yaml|csv|html[,path=P]` (repeatable; P a file
    /// or a directory; default benchmarks.json and benchmarks.csv).
    #[arg(long = "output", alias = "outputs")]
    pub outputs: Vec<String>,
    /// guidellm's `--seed kind=static,value=N` (or just N).
    #[arg(long)]
    pub seed: Option<String>,
    /// guidellm's `--disable-console`: no progress, one line per cell.
    #[arg(long, alias = "disable-console-outputs")]
    pub disable_console: bool,
    /// guidellm's `--disable-console-interactive`: no progress bars.
    #[arg(long, alias = "disable-progress")]
    pub disable_console_interactive: bool,
    /// The harness's own: the evidence directory (default reports/bench-<unix s>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The harness's own: replace an earlier evidence directory at --out.
    #[arg(long)]
    pub force: bool,
    /// guidellm's options refused here, each with its reason.
    #[arg(long = "config", alias = "scenario", short = 'c', num_args = 0.., hide = true)]
    pub config: Vec<String>,
    #[arg(long = "label", short = 'l', num_args = 0.., hide = true)]
    pub label: Vec<String>,
    /// guidellm's `--tokenizer kind=huggingface_auto,model=P` (a tokenizer.json or
    /// its directory): encodes a file dataset's prompts.
    #[arg(long)]
    pub tokenizer: Option<String>,
    #[arg(long, num_args = 0.., hide = true)]
    pub data_column_mapper: Vec<String>,
    #[arg(long, num_args = 0.., hide = true)]
    pub data_preprocessor: Vec<String>,
    #[arg(long, num_args = 0.., hide = true)]
    pub data_finalizer: Vec<String>,
    #[arg(long, num_args = 0.., hide = true)]
    pub data_loader: Vec<String>,
    #[arg(long, num_args = 0.., hide = true)]
    pub metrics: Vec<String>,
    #[arg(long = "override", num_args = 0.., hide = true)]
    pub overrides: Vec<String>,
}

/// guidellm's options refused here and why (docs/bench.md's table).
pub const GUIDELLM_REFUSED: &[(&str, &str)] = &[
    ("--config", "guidellm's scenario files and built-in scenarios: give the options themselves"),
    ("--label", "run labels are not written into the report yet"),
    ("--data-column-mapper", "a file dataset's columns are guidellm's default mapping (docs/bench.md)"),
    ("--data-preprocessor", "no preprocessing: a file's rows are sent as they are"),
    ("--data-finalizer", "the requests are guidellm's default generative finalizer's"),
    ("--data-loader", "rows are read in file order, no shuffle (guidellm's default loader)"),
    ("--metrics", "the metrics are guidellm's generative metrics, always"),
    ("--override", "per-benchmark overrides: give the profile's own list (streams=[..], rate=[..])"),
];

fn bad(m: impl Into<String>) -> BenchError {
    BenchError::Args(m.into())
}

/// Refuses unknown keys of a kind's object.
fn only_keys(flag: &str, m: &Map<String, Value>, known: &[&str]) -> Result<(), BenchError> {
    match m.keys().find(|k| k.as_str() != "kind" && !known.contains(&k.as_str())) {
        Some(k) => Err(bad(format!(
            "{flag} kind={}: key {k:?} is refused here (known: {})",
            m["kind"].as_str().unwrap_or(""),
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        ))),
        None => Ok(()),
    }
}

fn kind_of(m: &Map<String, Value>) -> &str {
    m.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// The file formats guidellm writes (its `--output kind=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    Json,
    Yaml,
    Csv,
    Html,
}

impl OutputKind {
    /// guidellm's file name when `path` is a directory (or not given).
    pub fn default_file(self) -> &'static str {
        match self {
            OutputKind::Json => "benchmarks.json",
            OutputKind::Yaml => "benchmarks.yaml",
            OutputKind::Csv => "benchmarks.csv",
            OutputKind::Html => "benchmarks.html",
        }
    }
}

/// One output file guidellm writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub kind: OutputKind,
    pub path: PathBuf,
}

/// What `harness benchmark` runs: the engine's flags, the outputs it writes, and a
/// file dataset's rows (written by `freeze_data`).
#[derive(Debug, Clone)]
pub struct Translated {
    pub bench: BenchArgs,
    pub outputs: Vec<Output>,
    pub data: Option<Vec<data_file::Row>>,
}

/// The guidellm flags as `harness bench`'s, and the outputs; `defaults` is a
/// `BenchArgs` with every flag at its default.
pub fn translate(a: &BenchmarkArgs, defaults: BenchArgs) -> Result<Translated, BenchError> {
    let refused = [
        (!a.config.is_empty(), 0),
        (!a.label.is_empty(), 1),
        (!a.data_column_mapper.is_empty(), 2),
        (!a.data_preprocessor.is_empty(), 3),
        (!a.data_finalizer.is_empty(), 4),
        (!a.data_loader.is_empty(), 5),
        (!a.metrics.is_empty(), 6),
        (!a.overrides.is_empty(), 7),
    ];
    if let Some((_, k)) = refused.iter().find(|(given, _)| *given) {
        let (flag, why) = GUIDELLM_REFUSED[*k];
        return Err(bad(format!("{flag}: refused: {why}")));
    }
    let mut b = defaults;
    b.out = a.out.clone();
    b.force = a.force;
    b.quiet = a.disable_console || a.disable_console_interactive;
    backend(a, &mut b)?;
    profile(a, &mut b)?;
    for c in &a.constraints {
        let m = kind::parse("--constraint", c).map_err(bad)?;
        match kind_of(&m) {
            "max_duration" => {
                only_keys("--constraint", &m, &["seconds", "value"])?;
                let s = m.get("seconds").or_else(|| m.get("value")).and_then(Value::as_f64);
                b.max_seconds = Some(s.ok_or_else(|| bad("--constraint kind=max_duration: give seconds=S"))?);
            }
            "max_requests" => {
                only_keys("--constraint", &m, &["count", "value"])?;
                let n = m.get("count").or_else(|| m.get("value")).and_then(Value::as_u64);
                b.max_requests = Some(n.ok_or_else(|| bad("--constraint kind=max_requests: give count=N"))?);
            }
            other => {
                return Err(bad(format!(
                    "--constraint kind={other}: refused: a cell here is bounded by its request count or duration \
                     only (max_requests, max_duration); errors and saturation do not stop it"
                )));
            }
        }
    }
    let data = data(a, &mut b)?;
    if let Some(s) = &a.seed {
        let v = if s.trim().starts_with("kind=") || s.trim().starts_with('{') {
            let m = kind::parse("--seed", s).map_err(bad)?;
            if kind_of(&m) != "static" {
                return Err(bad(format!("--seed kind={}: refused: only kind=static (a fixed seed)", kind_of(&m))));
            }
            m.get("value").and_then(Value::as_u64)
        } else {
            s.trim().parse().ok()
        };
        b.seed = v.ok_or_else(|| bad(format!("--seed {s:?}: a non-negative integer seed")))?;
    }
    let outputs = outputs(a)?;
    Ok(Translated { bench: b, outputs, data })
}

fn backend(a: &BenchmarkArgs, b: &mut BenchArgs) -> Result<(), BenchError> {
    let Some(text) = &a.backend else {
        return Err(bad("--backend: give kind=openai_http,target=URL (guidellm's default target is not assumed)"));
    };
    let m = kind::parse("--backend", text).map_err(bad)?;
    if kind_of(&m) != "openai_http" {
        return Err(bad(format!(
            "--backend kind={}: refused: only openai_http (an OpenAI-compatible server)",
            kind_of(&m)
        )));
    }
    only_keys("--backend", &m, &["target", "model", "request_format"])?;
    let target = m.get("target").and_then(Value::as_str).ok_or_else(|| bad("--backend: give target=URL"))?;
    let target = target.trim_end_matches('/');
    b.url = Some(target.strip_suffix("/v1").unwrap_or(target).to_string());
    b.model = m.get("model").and_then(Value::as_str).map(str::to_string);
    match m.get("request_format").and_then(Value::as_str) {
        None | Some("/v1/completions") => {}
        Some("/v1/chat/completions") => b.endpoint = Some(crate::protocol::routes::CHAT_COMPLETIONS_PATH.into()),
        Some(other) => {
            return Err(bad(format!("--backend request_format={other}: refused: text generation routes only")));
        }
    }
    Ok(())
}

fn profile(a: &BenchmarkArgs, b: &mut BenchArgs) -> Result<(), BenchError> {
    let m = match &a.profile {
        Some(text) => kind::parse("--profile", text).map_err(bad)?,
        None => {
            let mut m = Map::new();
            m.insert("kind".into(), "sweep".into());
            m
        }
    };
    let list = |key: &str| -> Result<Vec<f64>, BenchError> {
        let v = m.get(key).ok_or_else(|| bad(format!("--profile kind={}: give {key}=", kind_of(&m))))?;
        kind::numbers("--profile", key, v).map_err(bad)
    };
    let k = kind_of(&m).to_string();
    match k.as_str() {
        "synchronous" => only_keys("--profile", &m, &[])?,
        "throughput" => {
            only_keys("--profile", &m, &["max_concurrency"])?;
            if let Some(c) = m.get("max_concurrency") {
                let c = kind::numbers("--profile", "max_concurrency", c).map_err(bad)?;
                b.rate = c;
                b.profile = Some("concurrent".into());
                return Ok(());
            }
        }
        "concurrent" => {
            only_keys("--profile", &m, &["streams"])?;
            b.rate = list("streams")?;
        }
        "constant" | "async" | "poisson" => {
            only_keys("--profile", &m, &["rate"])?;
            b.rate = list("rate")?;
        }
        "sweep" => {
            only_keys("--profile", &m, &["sweep_size", "strategy_type"])?;
            if let Some(s) = m.get("strategy_type").and_then(Value::as_str)
                && s != "constant"
            {
                return Err(bad(format!(
                    "--profile kind=sweep,strategy_type={s}: refused: the sweep's points are constant rates here"
                )));
            }
            b.rate = match m.get("sweep_size") {
                Some(v) => kind::numbers("--profile", "sweep_size", v).map_err(bad)?,
                None => Vec::new(),
            };
        }
        other => {
            return Err(bad(format!(
                "--profile kind={other}: refused (synchronous, throughput, concurrent, constant, async, poisson and \
                 sweep are built here)"
            )));
        }
    }
    b.profile = Some(if k == "async" { "constant".into() } else { k });
    Ok(())
}

/// `--data`: guidellm's synthetic_text as the random-ID panel, or a local file's
/// rows (`data_file`) as a `requests` panel; the file's rows, when one is read.
fn data(a: &BenchmarkArgs, b: &mut BenchArgs) -> Result<Option<Vec<data_file::Row>>, BenchError> {
    let one = match a.data.as_slice() {
        [] => return Err(bad("--data: required, e.g. kind=synthetic_text,prompt_tokens=256,output_tokens=128")),
        [one] => one,
        _ => return Err(bad("--data: one source here (several are mixed by guidellm; not built)")),
    };
    let m = kind::parse("--data", one).map_err(bad)?;
    if let Some(file) = data_file::FileKind::from_name(kind_of(&m)) {
        return file_data(a, b, &m, file).map(Some);
    }
    if a.tokenizer.is_some() {
        return Err(bad("--tokenizer: refused with synthetic_text (its prompts are token IDs here, no tokenizer)"));
    }
    match kind_of(&m) {
        "synthetic_text" => {}
        hub @ ("huggingface" | "hf") => {
            return Err(bad(format!(
                "--data kind={hub}: refused: a Hugging Face dataset needs the hub, which this harness never reaches \
                 (offline); save its rows as a local .jsonl or .csv and give kind=json_file or csv_file,path=P"
            )));
        }
        other => {
            return Err(bad(format!(
                "--data kind={other}: refused: synthetic_text, json_file, csv_file and text_file are built by this \
                 front door"
            )));
        }
    }
    only_keys("--data", &m, &["prompt_tokens", "output_tokens"])?;
    let n = |k: &str| {
        m.get(k)
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(format!("--data kind=synthetic_text: give {k}=N (a positive integer)")))
    };
    b.data = Some(format!("prompt_tokens={},output_tokens={}", n("prompt_tokens")?, n("output_tokens")?));
    b.dataset = Dataset::RandomIds;
    Ok(None)
}

/// A local file's rows as the `requests` panel: every row once per cell, in file
/// order (guidellm's benchmark ends when its data runs out), so the count is the
/// rows' (at most max_requests'); forced outputs when the rows give their lengths
/// (guidellm's max_tokens with ignore_eos), else each stops where the model stops.
fn file_data(
    a: &BenchmarkArgs,
    b: &mut BenchArgs,
    m: &Map<String, Value>,
    file: data_file::FileKind,
) -> Result<Vec<data_file::Row>, BenchError> {
    only_keys("--data", m, &["path"])?;
    let path = match m.get("path") {
        Some(Value::String(p)) => PathBuf::from(p),
        _ => return Err(bad(format!("--data kind={}: give path=P (a local file)", kind_of(m)))),
    };
    let rows = data_file::read(file, &path).map_err(|e| bad(format!("--data kind={}: {e}", kind_of(m))))?;
    let n = rows.len() as u64;
    b.max_requests = Some(b.max_requests.map_or(n, |cap| cap.min(n)));
    b.num_prompts = n;
    let forced = rows.iter().all(|r| r.output_tokens.is_some());
    b.ignore_eos = forced;
    let longest = rows.iter().filter_map(|r| r.output_tokens).max().unwrap_or(0);
    b.output_len = Some(longest.max(DATASET_OUTPUT_CAP));
    b.dataset = Dataset::Requests;
    if let Some(t) = &a.tokenizer {
        let t = kind::parse("--tokenizer", t).map_err(bad)?;
        if !matches!(kind_of(&t), "huggingface_auto" | "hf_auto") {
            return Err(bad(format!("--tokenizer kind={}: refused: huggingface_auto (hf_auto) only", kind_of(&t))));
        }
        only_keys("--tokenizer", &t, &["model"])?;
        let model = t.get("model").and_then(Value::as_str);
        b.tokenizer =
            Some(model.ok_or_else(|| bad("--tokenizer: give model=P (a tokenizer.json or its directory)"))?.into());
    }
    if let Some(out) = &b.out {
        b.dataset_path = Some(requests_path(out).display().to_string());
    }
    Ok(rows)
}

/// A natural output's cap with a file dataset that gives no lengths (guidellm
/// sends no max_tokens; a request here always has one).
const DATASET_OUTPUT_CAP: u32 = 2048;

/// Where a file dataset's `requests` lines go: beside the evidence directory `out`
/// (`<out>.requests.jsonl`), outside it (the run writes into an empty directory),
/// so the plan frozen in the evidence names a file that outlives the run.
pub fn requests_path(out: &Path) -> PathBuf {
    let name = out.file_name().map_or_else(|| "bench".into(), |n| n.to_string_lossy().into_owned());
    out.with_file_name(format!("{name}{}", crate::evidence::BESIDE_REQUESTS_SUFFIX))
}

/// Writes a file dataset's rows as `requests` lines beside the evidence directory
/// (`bench.out`, which must be set) and names them in the plan; nothing without
/// a file dataset. Returns the path written.
pub fn freeze_data(t: &mut Translated) -> Result<Option<PathBuf>, BenchError> {
    let (Some(rows), Some(out)) = (&t.data, &t.bench.out) else { return Ok(None) };
    let path = requests_path(out);
    let io = |e: std::io::Error| BenchError::Io { path: path.clone(), error: e };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    crate::evidence::write_atomic(&path, data_file::to_requests_jsonl(rows).as_bytes()).map_err(io)?;
    t.bench.dataset_path = Some(path.display().to_string());
    Ok(Some(path))
}

/// guidellm's `--output kind=json|yaml|csv|html[,path=P]` (repeatable); without
/// one, guidellm's default: JSON and CSV in the working directory.
fn outputs(a: &BenchmarkArgs) -> Result<Vec<Output>, BenchError> {
    let default = |kind: OutputKind| Output { kind, path: PathBuf::from(kind.default_file()) };
    if a.outputs.is_empty() {
        return Ok(vec![default(OutputKind::Json), default(OutputKind::Csv)]);
    }
    let mut out = Vec::new();
    for text in &a.outputs {
        let m = kind::parse("--output", text).map_err(bad)?;
        only_keys("--output", &m, &["path"])?;
        let kind = match kind_of(&m) {
            "json" => OutputKind::Json,
            "yaml" => OutputKind::Yaml,
            "csv" => OutputKind::Csv,
            "html" => OutputKind::Html,
            "console" => {
                return Err(bad("--output kind=console: refused: the console summary is the harness's own, printed \
                                 after every run"));
            }
            other => {
                return Err(bad(format!(
                    "--output kind={other}: refused: json, yaml, csv and html are written (plot images are not)"
                )));
            }
        };
        let path = match m.get("path") {
            None => PathBuf::from(kind.default_file()),
            Some(Value::String(p)) => PathBuf::from(p),
            Some(other) => return Err(bad(format!("--output kind={}: path must be a path, got {other}", kind_of(&m)))),
        };
        out.push(Output { kind, path });
    }
    Ok(out)
}

/// Where an output goes: its path, or guidellm's file name inside it when it is
/// a directory.
fn destination(o: &Output) -> PathBuf {
    if o.path.is_dir() { o.path.join(o.kind.default_file()) } else { o.path.clone() }
}

/// Writes guidellm's report of the finished study at `evidence` to each output:
/// JSON and YAML (the YAML file holds the same document as the JSON one: JSON is
/// YAML 1.2, and guidellm's loader reads it with PyYAML), CSV
/// (`export::guidellm_csv`) and HTML (`export::guidellm_html`), each from the same
/// report; returns the paths written.
pub fn write_outputs(outputs: &[Output], evidence: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let export = |e: crate::export::ExportError| BenchError::Save { why: e.to_string() };
    let plan = crate::export::read_plan(evidence).map_err(export)?;
    let cells = crate::export::read_cells(evidence, &plan).map_err(export)?;
    let report =
        crate::export::guidellm_report(&plan.plan, &plan.sha256, &cells, crate::export::started_unix_ms(evidence));
    let mut written = Vec::new();
    for o in outputs {
        let text = match o.kind {
            OutputKind::Json | OutputKind::Yaml => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
            OutputKind::Csv => crate::export::guidellm_csv(&report),
            OutputKind::Html => crate::export::guidellm_html(&report),
        };
        let path = destination(o);
        let io = |e: std::io::Error| BenchError::Io { path: path.clone(), error: e };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        crate::evidence::write_atomic(&path, text.as_bytes()).map_err(io)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod data_tests;
#[cfg(test)]
mod tests;
