//! Identity checks: whether a healthy server is what its arm claims, decided before
//! any timing. Owns which checks an arm's `[arms.identity]` becomes (its preset's,
//! those its argv implies, its own), how each is judged against what the server
//! showed (its log up to the check, `/version`, `/v1/models`, the names in
//! `/metrics`, this engine's startup line), and the record of each verdict. Pure:
//! callers fetch (`Invocation::identity`) and record (`startup.json`); replay
//! re-judges the recorded observations with the same functions.
//!
//! The presets (one line in a plan for the common case):
//! - `engine`: the startup line is there and no `engine: error` line; the
//!   `vllm:num_requests_running` and `vllm:kv_cache_usage_perc` metrics; from argv,
//!   `--kv-format`, `--cpu-path`, `--exact-quant-matmul` and `--device` must show in
//!   the startup line (`--device cuda[:N]`: the line's `device` names `cuda:N`, which
//!   only the CUDA backend writes, after opening that GPU; it also names the GPU,
//!   its driver and CUDA version, recorded with the rest of the line).
//! - `vllm`: no "Unknown vLLM environment variable" (a setting it ignored) and no
//!   "may cause the engine to crash or produce incorrect outputs"; the
//!   `vllm:num_requests_running/waiting` and `vllm:kv_cache_usage_perc` metrics;
//!   from argv, `--attention-backend X` must log "Using X attention backend" and
//!   `--attention-config.flash_attn_version=N` "Using FlashAttention version N".
//! - `sglang`: the `sglang:num_running_reqs` and `sglang:num_queue_reqs` metrics
//!   (SGLang needs `--enable-metrics`).
//! - `llama-cpp`: the `llamacpp:requests_processing` metric (llama-server needs
//!   `--metrics`); from argv, `-fa on` / `--flash-attn on` must log `flash_attn =
//!   enabled` (logged only at `-lv 4` and above; without it `plan check` says the
//!   setting goes unchecked).
//! - every preset: `--served-model-name X` (llama.cpp: `--alias X`) must be listed
//!   by `/v1/models`, and vLLM's and this engine's `--max-model-len N` published there.

use serde_json::Value;

use super::log_scan::LogFacts;
use crate::evidence::{CheckResult, ServerIdentity};
use crate::plan::{IdentityPreset, IdentitySpec};

/// One check an arm's identity implies.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// `/v1/models` lists this id.
    ServedModel(String),
    /// `/v1/models` (`max_model_len`) or `/props` (`n_ctx`) publishes this length.
    MaxModelLen(u64),
    /// `/version`'s `version` starts with this.
    Version(String),
    /// This engine's startup line is in the log.
    EngineStartup,
    /// A field of this engine's startup line (`kv_format`, `cpu_path`,
    /// `quant_matmul`, `weights`: the type most linear layers hold, `device`:
    /// `cpu` or the GPU's `cuda:N`) has this value.
    EngineField {
        field: &'static str,
        value: String,
    },
    LogHas(String),
    LogLacks(String),
    /// `/metrics` exposes this family or sample name.
    Metric(String),
}

impl Check {
    /// The check's kind, as recorded.
    pub fn kind(&self) -> &'static str {
        match self {
            Check::ServedModel(_) => "served_model",
            Check::MaxModelLen(_) => "max_model_len",
            Check::Version(_) => "version",
            Check::EngineStartup => "engine_startup",
            Check::EngineField { .. } => "engine_startup_field",
            Check::LogHas(_) => "log_has",
            Check::LogLacks(_) => "log_lacks",
            Check::Metric(_) => "metrics_have",
        }
    }

    /// What the check expects, in words.
    pub fn expected(&self) -> String {
        match self {
            Check::ServedModel(m) => format!("/v1/models lists {m:?}"),
            Check::MaxModelLen(n) => format!("the server publishes a context length of {n}"),
            Check::Version(v) => format!("/version starts with {v:?}"),
            Check::EngineStartup => "the engine's startup line (\"event\": \"kv_inventory\") in the log".into(),
            Check::EngineField { field, value } => format!("startup line {field} = {value}"),
            Check::LogHas(s) => format!("the log has {s:?}"),
            Check::LogLacks(s) => format!("the log lacks {s:?}"),
            Check::Metric(m) => format!("/metrics exposes {m}"),
        }
    }
}

/// A check and where it came from: `plan`, `preset <name>` or `argv <flag>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub check: Check,
    pub source: String,
}

/// What a healthy server showed, at the time of the checks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    /// The server log up to the checks (empty for an external server), when held
    /// in memory; `log_facts` instead when it was read as a stream.
    pub log: &'a str,
    /// What the log checks need of the log, gathered in one streaming pass
    /// (`log_scan`); when `None`, gathered from `log`.
    pub log_facts: Option<&'a LogFacts>,
    pub version: Option<&'a Value>,
    pub models: Option<&'a Value>,
    /// llama.cpp's `/props`.
    pub props: Option<&'a Value>,
    /// Family and sample names of one `/metrics` answer; `None`: no answer.
    pub metric_names: Option<&'a [String]>,
}

impl<'a> Observed<'a> {
    /// The observations the checks judge from what `seen` recorded, with `log` the
    /// server log's first `seen.log_bytes`.
    pub fn of(seen: &'a ServerIdentity, log: &'a str) -> Observed<'a> {
        Observed {
            log,
            log_facts: None,
            version: seen.version.as_ref(),
            models: seen.models.as_ref(),
            props: seen.props.as_ref(),
            metric_names: seen.metric_names.as_deref(),
        }
    }
}

/// The checks of `spec` for a server started from `argv` (`None`: external).
pub fn planned(spec: &IdentitySpec, argv: Option<&[String]>) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    let mut push = |check: Check, source: String| {
        if !out.iter().any(|p| p.check == check) {
            out.push(Planned { check, source });
        }
    };
    if let Some(p) = spec.preset {
        let src = || format!("preset {}", p.as_str());
        let (lacks, metrics): (&[&str], &[&str]) = match p {
            IdentityPreset::Engine => (&["engine: error"], &["vllm:num_requests_running", "vllm:kv_cache_usage_perc"]),
            IdentityPreset::Vllm => (
                &["Unknown vLLM environment variable", "may cause the engine to crash or produce incorrect outputs"],
                &["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"],
            ),
            IdentityPreset::Sglang => (&[], &["sglang:num_running_reqs", "sglang:num_queue_reqs"]),
            IdentityPreset::LlamaCpp => (&[], &["llamacpp:requests_processing"]),
        };
        // The log checks need the server's log: a spawned server's (an external
        // server's log is not the harness's to read).
        if argv.is_some() {
            if p == IdentityPreset::Engine {
                push(Check::EngineStartup, src());
            }
            for s in lacks {
                push(Check::LogLacks((*s).into()), src());
            }
        }
        for m in metrics {
            push(Check::Metric((*m).into()), src());
        }
        if let Some(argv) = argv {
            for (check, flag) in from_argv(p, argv) {
                push(check, format!("argv {flag}"));
            }
        }
    }
    let plan = || "plan".to_string();
    if let Some(m) = &spec.served_model {
        push(Check::ServedModel(m.clone()), plan());
    }
    if let Some(n) = spec.max_model_len {
        push(Check::MaxModelLen(n), plan());
    }
    if let Some(v) = &spec.version {
        push(Check::Version(v.clone()), plan());
    }
    for (field, v) in [("kv_format", &spec.kv_format), ("cpu_path", &spec.cpu_path), ("weights", &spec.weights)] {
        if let Some(value) = v {
            push(Check::EngineField { field, value: value.clone() }, plan());
        }
    }
    for s in &spec.log_has {
        push(Check::LogHas(s.clone()), plan());
    }
    for s in &spec.log_lacks {
        push(Check::LogLacks(s.clone()), plan());
    }
    for m in &spec.metrics_have {
        push(Check::Metric(m.clone()), plan());
    }
    out
}

/// Whether llama-server's argv raises its log verbosity to 4 or above (`-lv 4`,
/// `--log-verbosity 4`, `-v`, `--verbose`, `--log-verbose`), where it logs its
/// context settings (`llama_context: flash_attn = enabled`).
fn llama_logs_settings(argv: &[String]) -> bool {
    argv.iter().any(|a| matches!(a.as_str(), "-v" | "--verbose" | "--log-verbose"))
        || flag_value(argv, &["-lv", "--log-verbosity"])
            .and_then(|(v, _)| v.parse::<u32>().ok())
            .is_some_and(|n| n >= 4)
}

/// Claims an arm makes that its checks cannot see, in words (for `plan check`).
pub fn unverifiable(spec: &IdentitySpec, argv: Option<&[String]>) -> Vec<String> {
    let mut out = Vec::new();
    if spec.preset == Some(IdentityPreset::LlamaCpp)
        && let Some(argv) = argv
        && !llama_logs_settings(argv)
        && (flag_value(argv, &["-fa", "--flash-attn"]).is_some()
            || spec.log_has.iter().any(|l| l.contains("flash_attn")))
    {
        out.push(
            "llama-server logs its flash-attention setting (`llama_context: flash_attn = ...`) only at log \
             verbosity 4: add `-lv 4` to the argv, or the setting goes unchecked (a log_has on it fails)"
                .to_string(),
        );
    }
    out
}

/// Pairs of planned checks that cannot both pass (one field, two values: a claim
/// against what the argv asks for), in words: a plan mistake `plan check` can name
/// before any server starts.
pub fn contradictions(planned: &[Planned]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in planned.iter().enumerate() {
        for b in &planned[i + 1..] {
            let clash = match (&a.check, &b.check) {
                (Check::EngineField { field: f, value: x }, Check::EngineField { field: g, value: y }) => {
                    f == g && x != y
                }
                (Check::MaxModelLen(x), Check::MaxModelLen(y)) => x != y,
                _ => false,
            };
            if clash {
                out.push(format!(
                    "{} (from {}) and {} (from {}) cannot both hold: the server will fail one",
                    a.check.expected(),
                    a.source,
                    b.check.expected(),
                    b.source
                ));
            }
        }
    }
    out
}

/// The value of `--flag V` or `--flag=V` in `argv` (the last one wins, as in argparse).
fn flag_value<'a>(argv: &'a [String], names: &[&str]) -> Option<(&'a str, String)> {
    let mut found = None;
    for (i, a) in argv.iter().enumerate() {
        for n in names {
            if a == n {
                if let Some(v) = argv.get(i + 1) {
                    found = Some((v.as_str(), (*n).to_string()));
                }
            } else if let Some(v) = a.strip_prefix(n).and_then(|r| r.strip_prefix('=')) {
                found = Some((v, (*n).to_string()));
            }
        }
    }
    found
}

/// The checks a preset's argv implies, each with the flag that implies it.
fn from_argv(p: IdentityPreset, argv: &[String]) -> Vec<(Check, String)> {
    let mut out = Vec::new();
    let name_flags: &[&str] = if p == IdentityPreset::LlamaCpp { &["--alias", "-a"] } else { &["--served-model-name"] };
    if let Some((v, flag)) = flag_value(argv, name_flags)
        && !v.contains('{')
    {
        out.push((Check::ServedModel(v.to_string()), flag));
    }
    match p {
        IdentityPreset::Engine => {
            if let Some((v, flag)) = flag_value(argv, &["--kv-format"]) {
                out.push((Check::EngineField { field: "kv_format", value: v.to_string() }, flag));
            }
            if let Some((v, flag)) = flag_value(argv, &["--cpu-path"]) {
                out.push((Check::EngineField { field: "cpu_path", value: v.to_string() }, flag));
            }
            if let Some((v, flag)) = flag_value(argv, &["--device"]) {
                let device = if v == "cuda" { "cuda:0" } else { v };
                out.push((Check::EngineField { field: "device", value: device.to_string() }, flag));
            }
            if argv.iter().any(|a| a == "--exact-quant-matmul") {
                let check = Check::EngineField { field: "quant_matmul", value: "exact".into() };
                out.push((check, "--exact-quant-matmul".into()));
            }
            if let Some((v, flag)) = flag_value(argv, &["--max-model-len"])
                && let Ok(n) = v.parse()
            {
                out.push((Check::MaxModelLen(n), flag));
            }
        }
        IdentityPreset::Vllm => {
            if let Some((v, flag)) = flag_value(argv, &["--attention-backend"]) {
                out.push((Check::LogHas(format!("Using {v} attention backend")), flag));
            }
            if let Some((v, flag)) = flag_value(argv, &["--attention-config.flash_attn_version"]) {
                out.push((Check::LogHas(format!("Using FlashAttention version {v}")), flag));
            }
            if let Some((v, flag)) = flag_value(argv, &["--max-model-len"])
                && let Ok(n) = v.parse()
            {
                out.push((Check::MaxModelLen(n), flag));
            }
        }
        // llama-server logs its context settings only at log verbosity 4 and above.
        IdentityPreset::LlamaCpp if llama_logs_settings(argv) => {
            if let Some((v, flag)) = flag_value(argv, &["-fa", "--flash-attn"])
                && v == "on"
            {
                out.push((Check::LogHas("flash_attn = enabled".into()), flag));
            }
        }
        IdentityPreset::LlamaCpp => {}
        IdentityPreset::Sglang => {}
    }
    out
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`), runs of blanks as one
/// blank.
pub(crate) fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut blank = false;
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        if c == ' ' || c == '\t' {
            if !blank {
                out.push(' ');
            }
            blank = true;
        } else {
            out.push(c);
            blank = false;
        }
    }
    out
}

/// What the log checks of `planned` need from a log: the needles of `log_has` and
/// `log_lacks`, and the startup line for the engine's checks (`log_scan` gathers them).
pub fn log_facts(planned: &[Planned]) -> LogFacts {
    let needles = planned.iter().filter_map(|p| match &p.check {
        Check::LogHas(s) | Check::LogLacks(s) => Some(s.clone()),
        _ => None,
    });
    let startup = planned.iter().any(|p| matches!(p.check, Check::EngineStartup | Check::EngineField { .. }));
    LogFacts::new(needles, startup)
}

/// The engine's startup line (`"event": "kv_inventory"`) in `log`.
pub fn engine_startup(log: &str) -> Option<Value> {
    LogFacts::new([], true).of_text(log).startup().cloned()
}

/// The identity failure of a server pinned to CPUs `planned` (the kernel's list)
/// whose threads may run on `allowed` instead (a server that moved itself, e.g.
/// `taskset` in its argv): the first check of every spawned, pinned server, in a
/// study and in `plan check --probe` alike. `None` when it is not pinned or stayed.
pub fn cpus_left(arm: &str, planned: Option<&str>, allowed: Option<&str>) -> Option<super::ArmError> {
    let planned = planned?;
    (allowed != Some(planned)).then(|| super::ArmError::Identity {
        arm: arm.to_string(),
        n: 1,
        failures: format!(
            "cpus: the plan pins it to CPUs {planned}, its threads may run on {}",
            allowed.unwrap_or("(unreadable)")
        ),
    })
}

/// Whether `check` is judged from the server log.
pub fn reads_log(check: &str) -> bool {
    matches!(check, "log_has" | "log_lacks" | "engine_startup" | "engine_startup_field")
}

/// A startup-line field as the checks name it.
fn engine_field(line: &Value, field: &str) -> String {
    match field {
        "kv_format" => line.pointer("/kv/format").and_then(Value::as_str).unwrap_or("absent").to_string(),
        // The type most linear layers hold (a Q4_1 file keeps its head in q8_0).
        "weights" => line
            .get("weights")
            .and_then(Value::as_object)
            .and_then(|w| w.iter().filter_map(|(k, n)| Some((n.as_u64()?, k))).max())
            .map_or("absent".into(), |(_, k)| k.clone()),
        // `{"kind": "cpu"}`, or the GPU's identity with its `device` (`cuda:N`).
        "device" => match line.get("device") {
            Some(d) if d.get("kind").and_then(Value::as_str) == Some("cuda") => {
                d.get("device").and_then(Value::as_str).unwrap_or("absent").to_string()
            }
            Some(d) => d.get("kind").and_then(Value::as_str).unwrap_or("absent").to_string(),
            None => "absent".into(),
        },
        f => line.get(f).and_then(Value::as_str).unwrap_or("absent").to_string(),
    }
}

/// Metric family names (`# TYPE`) and sample names of a Prometheus text answer.
pub fn metric_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        let name = if let Some(rest) = line.strip_prefix("# TYPE ") {
            rest.split_whitespace().next()
        } else if line.starts_with('#') || line.is_empty() {
            None
        } else {
            line.split(['{', ' ']).next()
        };
        if let Some(n) = name.filter(|n| !n.is_empty())
            && !names.iter().any(|x| x == n)
        {
            names.push(n.to_string());
        }
    }
    names
}

fn model_ids(models: Option<&Value>) -> Vec<&str> {
    models
        .and_then(|m| m.get("data"))
        .and_then(Value::as_array)
        .map(|d| d.iter().filter_map(|e| e.get("id").and_then(Value::as_str)).collect())
        .unwrap_or_default()
}

/// Judges every planned check against what the server showed.
pub fn evaluate(planned: &[Planned], seen: &Observed) -> Vec<CheckResult> {
    let gathered;
    let facts = match seen.log_facts {
        Some(f) => f,
        None => {
            gathered = log_facts(planned).of_text(seen.log);
            &gathered
        }
    };
    planned
        .iter()
        .map(|p| {
            let (ok, found) = judge(&p.check, seen, facts);
            CheckResult {
                check: p.check.kind().into(),
                expected: p.check.expected(),
                source: p.source.clone(),
                ok,
                found,
            }
        })
        .collect()
}

fn judge(check: &Check, seen: &Observed, log: &LogFacts) -> (bool, String) {
    let startup = log.startup();
    match check {
        Check::ServedModel(m) => {
            let ids = model_ids(seen.models);
            match seen.models {
                None => (false, "/v1/models did not answer".into()),
                Some(_) => (ids.contains(&m.as_str()), format!("ids {ids:?}")),
            }
        }
        Check::MaxModelLen(n) => {
            let kind = if seen.props.is_some() { super::ServerKind::LlamaCpp } else { super::ServerKind::OpenAiVllm };
            let entry = seen.models.and_then(|m| m.get("data")).and_then(Value::as_array).and_then(|d| d.first());
            match super::Adapter::new(kind).max_context(entry, seen.props) {
                Some(got) => (got == *n, format!("{got}")),
                None => (false, "no context length published".into()),
            }
        }
        Check::Version(v) => {
            let got = seen.version.and_then(|x| x.get("version")).and_then(Value::as_str);
            match got {
                Some(g) => (g.starts_with(v.as_str()), g.to_string()),
                None => (false, "/version did not answer with a version".into()),
            }
        }
        Check::EngineStartup => match startup {
            Some(_) => (true, "present".into()),
            None => (false, "no startup line in the log".into()),
        },
        Check::EngineField { field, value } => match startup {
            Some(line) => {
                let got = engine_field(line, field);
                (&got == value, got)
            }
            None => (false, "no startup line in the log".into()),
        },
        Check::LogHas(s) => match log.line(s) {
            Some(l) => (true, l.to_string()),
            None => (false, "no such line".into()),
        },
        Check::LogLacks(s) => match log.line(s) {
            Some(l) => (false, l.to_string()),
            None => (true, "absent".into()),
        },
        Check::Metric(m) => match seen.metric_names {
            None => (false, "/metrics did not answer".into()),
            Some(names) => {
                let ok = names.iter().any(|n| n == m);
                (ok, if ok { "exposed".into() } else { format!("not among {} names", names.len()) })
            }
        },
    }
}

/// The failed checks in words, one per line (empty when every check passed).
pub fn failures(results: &[CheckResult]) -> String {
    results
        .iter()
        .filter(|r| !r.ok)
        .map(|r| format!("{} ({}, from {}): got {}", r.check, r.expected, r.source, r.found))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn spec(preset: IdentityPreset) -> IdentitySpec {
        IdentitySpec { preset: Some(preset), ..IdentitySpec::default() }
    }

    fn failed(results: &[CheckResult]) -> Vec<&str> {
        results.iter().filter(|r| !r.ok).map(|r| r.expected.as_str()).collect()
    }

    const ENGINE_LOG: &str = "\u{1b}[2m2026-12-05T09:32:52Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m listening (model loading)\n\
{\"event\":\"kv_inventory\",\"kv\":{\"format\":\"f16\"},\"max_model_len\":256,\"weights\":{\"bf16\":28,\"q8_0\":1},\"cpu_path\":\"avx512\",\"quant_matmul\":\"q8\"}\n\
INFO model loaded in 0.01 s; ready\n";

    fn engine_seen(log: &str) -> (Value, Vec<String>) {
        let models = json!({"data": [{"id": "synth", "max_model_len": 256}]});
        let names = metric_names(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n# TYPE vllm:kv_cache_usage_perc gauge\n",
        );
        let _ = log;
        (models, names)
    }

    #[test]
    fn a_mislabelled_engine_arm_fails_on_its_kv_format_and_a_true_one_passes() {
        let (models, names) = engine_seen(ENGINE_LOG);
        let seen =
            Observed { log: ENGINE_LOG, models: Some(&models), metric_names: Some(&names), ..Observed::default() };
        // Claims k16v8 and was started with f16: the startup line says f16.
        let claim = IdentitySpec { kv_format: Some("k16v8".into()), ..spec(IdentityPreset::Engine) };
        let a = argv("engine serve --served-model-name synth --kv-format f16 --max-model-len 256");
        let r = evaluate(&planned(&claim, Some(&a)), &seen);
        assert_eq!(failed(&r), ["startup line kv_format = k16v8"], "{r:#?}");
        assert!(failures(&r).contains("got f16"), "{}", failures(&r));
        let c = contradictions(&planned(&claim, Some(&a)));
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(c[0].starts_with(
            "startup line kv_format = f16 (from argv --kv-format) and startup line kv_format = k16v8 (from plan)"
        ));
        let truthful = IdentitySpec { kv_format: Some("f16".into()), weights: Some("bf16".into()), ..claim };
        let r = evaluate(&planned(&truthful, Some(&a)), &seen);
        assert!(failed(&r).is_empty(), "{r:#?}");
        // The preset alone already holds the server to its argv.
        let kinds: Vec<_> = planned(&spec(IdentityPreset::Engine), Some(&a)).iter().map(|p| p.source.clone()).collect();
        assert!(kinds.contains(&"argv --kv-format".to_string()) && kinds.contains(&"argv --max-model-len".to_string()));
        // A server that ignored --kv-format k16v8 fails on the preset alone.
        let a = argv("engine serve --kv-format k16v8 --cpu-path avx2");
        let r = evaluate(&planned(&spec(IdentityPreset::Engine), Some(&a)), &seen);
        assert_eq!(failed(&r), ["startup line kv_format = k16v8", "startup line cpu_path = avx2"]);
    }

    /// `--device cuda` holds the startup line's `device` to the GPU: a CPU
    /// server (its line says `{"kind": "cpu"}`, or an older engine says nothing)
    /// fails, one that opened cuda:0 passes, and `cuda:1` is not `cuda:0`.
    #[test]
    fn an_arm_started_on_a_gpu_must_show_that_gpu_in_its_startup_line() {
        let (models, names) = engine_seen(ENGINE_LOG);
        let gpu_line = ENGINE_LOG.replace(
            "\"quant_matmul\":\"q8\"}",
            "\"quant_matmul\":\"q8\",\"device\":{\"kind\":\"cuda\",\"device\":\"cuda:0\",\"gpu\":\"NVIDIA H100 80GB HBM3\"}}",
        );
        let cpu_line =
            ENGINE_LOG.replace("\"quant_matmul\":\"q8\"}", "\"quant_matmul\":\"q8\",\"device\":{\"kind\":\"cpu\"}}");
        let judge = |log: &str, a: &str| {
            let seen = Observed { log, models: Some(&models), metric_names: Some(&names), ..Observed::default() };
            failed(&evaluate(&planned(&spec(IdentityPreset::Engine), Some(&argv(a))), &seen))
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        };
        let on_gpu = "engine serve --kv-format f16 --device cuda";
        assert_eq!(judge(&gpu_line, on_gpu), Vec::<String>::new());
        assert_eq!(judge(&cpu_line, on_gpu), ["startup line device = cuda:0"]);
        assert_eq!(judge(ENGINE_LOG, on_gpu), ["startup line device = cuda:0"]);
        assert_eq!(judge(&gpu_line, "engine serve --kv-format f16 --device cuda:1"), ["startup line device = cuda:1"]);
        assert_eq!(judge(&cpu_line, "engine serve --kv-format f16 --device cpu"), Vec::<String>::new());
        assert_eq!(judge(&cpu_line, "engine serve --kv-format f16"), Vec::<String>::new(), "no flag, no check");
    }

    #[test]
    fn an_engine_log_without_its_startup_line_or_with_an_error_fails() {
        let (models, names) = engine_seen("");
        let log = "engine: error: loading m: no such file\n";
        let seen = Observed { log, models: Some(&models), metric_names: Some(&names), ..Observed::default() };
        let r = evaluate(&planned(&spec(IdentityPreset::Engine), Some(&argv("engine serve"))), &seen);
        assert_eq!(failed(&r).len(), 2, "{r:#?}");
        assert!(r.iter().any(|c| !c.ok && c.found.contains("engine: error: loading m")));
    }

    const VLLM_LOG: &str = "(APIServer pid=10) INFO 12-05 10:00:00 [utils.py:253] non-default args: {...}\n\
(EngineCore pid=163) INFO 12-05 10:08:32 [cuda.py:334] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER'].\n\
(EngineCore pid=163) INFO 12-05 10:08:32 [flash_attn.py:593] Using FlashAttention version 3\n";

    fn vllm_metrics() -> Vec<String> {
        metric_names(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n\
             # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 0.0\n\
             # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.0\n\
             # TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total{engine=\"0\"} 0.0\n",
        )
    }

    #[test]
    fn a_vllm_arm_that_claims_flashinfer_but_logs_fa3_fails_naming_the_flag() {
        let names = vllm_metrics();
        let models = json!({"object": "list", "data": [{"id": "m", "max_model_len": 2048}]});
        let version = json!({"version": "0.34.0"});
        let seen = Observed {
            log: VLLM_LOG,
            version: Some(&version),
            models: Some(&models),
            metric_names: Some(&names),
            ..Observed::default()
        };
        let fa3 = argv(
            "vllm serve m --served-model-name m --max-model-len 2048 --attention-backend FLASH_ATTN \
             --attention-config.flash_attn_version=3",
        );
        let claim = IdentitySpec { version: Some("0.34".into()), ..spec(IdentityPreset::Vllm) };
        let r = evaluate(&planned(&claim, Some(&fa3)), &seen);
        assert!(failed(&r).is_empty(), "{r:#?}");
        assert!(
            names.contains(&"vllm:num_preemptions_total".to_string()) && names.contains(&"vllm:num_preemptions".into())
        );
        let fi = argv("vllm serve m --attention-backend=FLASHINFER");
        let r = evaluate(&planned(&spec(IdentityPreset::Vllm), Some(&fi)), &seen);
        assert_eq!(failed(&r), ["the log has \"Using FLASHINFER attention backend\""]);
        assert!(r.iter().any(|c| !c.ok && c.source == "argv --attention-backend"));
        // An ignored variable and the chunked-prefill warning are refused.
        let warned = format!(
            "{VLLM_LOG}WARNING 12-05 [envs.py:1] Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND\n"
        );
        let seen = Observed { log: &warned, ..seen };
        let r = evaluate(&planned(&spec(IdentityPreset::Vllm), Some(&fa3)), &seen);
        assert_eq!(failed(&r), ["the log lacks \"Unknown vLLM environment variable\""]);
        let v =
            evaluate(&planned(&claim, Some(&fa3)), &Observed { version: Some(&json!({"version": "0.33.1"})), ..seen });
        assert!(failed(&v).contains(&"/version starts with \"0.34\""));
    }

    #[test]
    fn llama_cpp_flash_attention_and_metrics_follow_its_argv() {
        // Lines as llama-server (llama-cpp-python 0.3.36's llama.cpp) logs them at -lv 4.
        let log = "0.00.188.940 I llama_context: n_ctx                 = 4096\n\
                   0.00.188.979 I llama_context: flash_attn            = disabled\n";
        let props = json!({"default_generation_settings": {"n_ctx": 4096}});
        let models = json!({"data": [{"id": "smol", "owned_by": "llamacpp"}]});
        let quiet = argv("llama-server -m m.gguf -fa on --alias smol --metrics");
        assert!(
            planned(&spec(IdentityPreset::LlamaCpp), Some(&quiet)).iter().all(|p| !matches!(p.check, Check::LogHas(_)))
        );
        assert!(unverifiable(&spec(IdentityPreset::LlamaCpp), Some(&quiet))[0].contains("-lv 4"));
        let a = argv("llama-server -m m.gguf -fa on --alias smol --metrics -lv 4");
        assert!(unverifiable(&spec(IdentityPreset::LlamaCpp), Some(&a)).is_empty());
        let claim = IdentitySpec { max_model_len: Some(4096), ..spec(IdentityPreset::LlamaCpp) };
        let seen =
            Observed { log, models: Some(&models), props: Some(&props), metric_names: None, ..Observed::default() };
        let r = evaluate(&planned(&claim, Some(&a)), &seen);
        assert_eq!(
            failed(&r),
            ["/metrics exposes llamacpp:requests_processing", "the log has \"flash_attn = enabled\""]
        );
        let log = "0.00.183.916 I llama_context: flash_attn            = enabled\n";
        let names = metric_names("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n");
        let seen = Observed { log, metric_names: Some(&names), ..seen };
        assert!(failed(&evaluate(&planned(&claim, Some(&a)), &seen)).is_empty());
    }

    #[test]
    fn an_external_server_is_held_to_what_it_answers_not_to_a_log_the_harness_never_sees() {
        let kinds: Vec<&str> = planned(&spec(IdentityPreset::Engine), None).iter().map(|p| p.check.kind()).collect();
        assert_eq!(kinds, ["metrics_have", "metrics_have"]);
        let vllm: Vec<&str> = planned(&spec(IdentityPreset::Vllm), None).iter().map(|p| p.check.kind()).collect();
        assert!(vllm.iter().all(|k| *k == "metrics_have"), "{vllm:?}");
    }

    #[test]
    fn plain_text_checks_ignore_colour_codes_and_blank_runs_and_argv_placeholders_are_not_claims() {
        assert_eq!(plain("\u{1b}[32m INFO\u{1b}[0m  a \t b"), " INFO a b");
        let facts = LogFacts::new(["flash_attn = enabled".to_string()], false).of_text("x  flash_attn    = enabled");
        assert_eq!(facts.line("flash_attn = enabled"), Some("x flash_attn = enabled"));
        let a = argv("engine serve --served-model-name {model}");
        assert!(
            planned(&spec(IdentityPreset::Engine), Some(&a)).iter().all(|p| !matches!(p.check, Check::ServedModel(_)))
        );
        // The same check from the preset and the plan is kept once.
        let s = IdentitySpec { metrics_have: vec!["vllm:num_requests_running".into()], ..spec(IdentityPreset::Engine) };
        let n =
            planned(&s, None).iter().filter(|p| p.check == Check::Metric("vllm:num_requests_running".into())).count();
        assert_eq!(n, 1);
    }
}
