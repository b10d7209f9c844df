//! Validation: turns the file as written (`schema::PlanFile`) into a `types::Plan`,
//! collecting every problem as an `Issue` named by its key. Owns ranges, defaults and
//! cross-references. Must not touch the filesystem: whether input files exist is a
//! separate check (`Plan::missing_inputs`), so a plan validates the same anywhere.
//! Arms and the panel are checked in `validate_arms`; cells, hypotheses and the
//! derive tables in `validate_cells`.

use super::error::{Issue, PlanError};
use super::schema::{BlocksFile, OrderFile, PlanFile, RequestFile, TimingFile, WarmupFile};
use super::types::{Arm, Blocks, Cell, CellKind, Endpoint, Order, PanelSpec, Plan, RequestSpec, Study, Timing, Warmup};
use super::{validate_arms, validate_cells, validate_quality};

/// Collects issues while building typed values.
pub(super) struct Checker {
    pub issues: Vec<Issue>,
}

impl Checker {
    pub fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue::new(key, message));
    }

    /// An integer in `min..=max`, or an issue.
    pub fn int(&mut self, key: &str, v: i64, min: i64, max: i64) -> Option<u64> {
        if (min..=max).contains(&v) {
            Some(v as u64)
        } else if v < min && min == 1 {
            self.err(key, format!("must be at least 1, got {v}"));
            None
        } else {
            self.err(key, format!("must be in {min}..={max}, got {v}"));
            None
        }
    }

    /// A finite number with `v > 0` (or `v >= 0` when `zero_ok`).
    pub fn positive(&mut self, key: &str, v: f64, zero_ok: bool) -> Option<f64> {
        if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) {
            Some(v)
        } else {
            let what = if zero_ok { "zero or positive" } else { "positive" };
            self.err(key, format!("must be {what} and finite, got {v}"));
            None
        }
    }

    /// A duration in seconds: finite, `v > 0` (or `v >= 0` when `zero_ok`) and at
    /// most [`MAX_SECONDS`](super::MAX_SECONDS).
    pub fn seconds(&mut self, key: &str, v: f64, zero_ok: bool) -> Option<f64> {
        let v = self.positive(key, v, zero_ok)?;
        if v > super::MAX_SECONDS {
            self.err(key, format!("must be at most {} s (7 days), got {v:?}", super::MAX_SECONDS));
            return None;
        }
        Some(v)
    }

    /// A request rate in requests per second, within
    /// [`MIN_RATE_RPS`](super::MIN_RATE_RPS)..=[`MAX_RATE_RPS`](super::MAX_RATE_RPS).
    pub fn rate(&mut self, key: &str, v: f64) -> Option<f64> {
        let v = self.positive(key, v, false)?;
        if !(super::MIN_RATE_RPS..=super::MAX_RATE_RPS).contains(&v) {
            self.err(
                key,
                format!("must be in {}..={} requests/s, got {v:?}", super::MIN_RATE_RPS, super::MAX_RATE_RPS),
            );
            return None;
        }
        Some(v)
    }

    /// A name usable in file names: `[A-Za-z0-9][A-Za-z0-9._-]*`, at most 64 bytes.
    pub fn name(&mut self, key: &str, name: &str) {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name.as_bytes()[0].is_ascii_alphanumeric()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            self.err(key, format!("{name:?} must match [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 bytes)"));
        }
    }

    /// Rejects a key that does not apply, e.g. `rate` on a closed-loop cell.
    pub fn forbid<T>(&mut self, key: &str, v: &Option<T>, why: &str) {
        if v.is_some() {
            self.err(key, why.to_string());
        }
    }
}

/// Why a panel cannot go to the chat route.
pub(super) const CHAT_SOURCES: &str =
    "prompts.source must be \"sharegpt\", \"requests\" or \"synthetic\" cut from texts";

/// Validates a parsed plan file. With `check_derived` false the `[derived]` table is
/// ignored (used by `derive`, which replaces it).
pub(super) fn validate(file: PlanFile, check_derived: bool) -> Result<Plan, PlanError> {
    let mut c = Checker { issues: Vec::new() };
    c.name("study.name", &file.study.name);
    let seed = c.int("study.seed", file.study.seed, 0, i64::MAX).unwrap_or(0);
    let study = Study { name: file.study.name, seed, description: file.study.description };
    let dataset =
        matches!(file.prompts.source.as_str(), "sharegpt" | "requests" | "synthetic" | "shared_prefix" | "vllm_random")
            || super::validate_vllm_panel::is_vllm_legacy_source(&file.prompts.source);
    let request = request(&mut c, file.request, dataset);
    let session_panel = file.prompts.max_turns.is_some();
    let arms = validate_arms::arms(&mut c, file.arms);
    let prompts = validate_arms::prompts(&mut c, file.prompts, &arms);
    let chat_source = prompts.source.has_chat_text();
    let warmup = warmup(&mut c, file.warmup, &prompts, request.output_tokens);
    let timing = timing(&mut c, file.timing);
    let derive = validate_cells::derive(&mut c, file.derive, file.pilots.is_some());
    // `request.endpoint` is judged where a cell (or the pilots) takes it; a cell's
    // own `endpoint` is judged at that cell.
    if file.cells.iter().any(|f| f.endpoint.is_none()) || file.cells.is_empty() || file.pilots.is_some() {
        if request.endpoint == Endpoint::Chat && !chat_source {
            c.err("request.endpoint", format!("\"chat\" sends chat messages: {CHAT_SOURCES}"));
        }
        if session_panel && request.endpoint != Endpoint::Chat {
            c.err(
                "prompts.max_turns",
                "multi-turn sessions send chat history: set request.endpoint = \"chat\" (token-ID panels cannot \
                 carry replies)",
            );
        }
    }
    let routes =
        validate_cells::Routes { default: request.endpoint, chat_source, session_panel, token_ids: request.token_ids };
    let cells = validate_cells::cells(&mut c, file.cells, &prompts, derive.as_ref(), routes);
    let blocks = blocks(&mut c, file.blocks, &arms, &cells);
    if blocks.randomize_setup {
        for (i, a) in arms.iter().enumerate() {
            if a.env.contains_key(super::types::SETUP_PAD_ENV) {
                c.err(
                    format!("arms[{i}].env.{}", super::types::SETUP_PAD_ENV),
                    "set by the harness when blocks.randomize_setup is true",
                );
            }
        }
    }
    if blocks.rounds > 0 && session_panel {
        c.err("blocks.rounds", "multi-turn sessions (prompts.max_turns) cannot be cut into rounds: leave rounds at 0");
    }
    let blocking = super::validate_analysis::blocking(&mut c, file.analysis.as_ref());
    let noise = super::validate_analysis::noise(&mut c, file.analysis.as_ref(), blocks.count, &cells);
    let (alpha, mut hypotheses) = validate_cells::hypotheses(&mut c, file.analysis, file.hypotheses, &arms, &cells);
    let qualification = validate_quality::qualification(&mut c, file.qualification, &arms, &prompts, seed);
    let max_error_rate = validate_arms::limits(&mut c, file.limits);
    let slo = super::validate_loads::slo(&mut c, file.slo, &hypotheses);
    let pilots =
        super::pilots::validate(&mut c, file.pilots, &arms, &prompts, derive.is_some(), file.derived.is_some());
    let (tuning, expanded) =
        super::tuning::tuning(&mut c, file.tuning, &arms, &cells, &hypotheses, alpha, slo.as_ref());
    hypotheses.extend(expanded);
    let sequential = super::sequential::validate(&mut c, file.sequential, &blocks, &hypotheses);
    let client = super::types::Client {
        cpus: file.client.and_then(|f| f.cpus).and_then(|v| validate_arms::cpu_set(&mut c, "client.cpus", &v)),
    };
    let executor = super::executor::validate(&mut c, file.executor);
    let expected = derive.as_ref().and_then(|d| d.1.as_ref());
    let derived = match file.derived {
        Some(_) if pilots.is_some() => None,
        Some(table) if check_derived => super::derive::check_table(&table, expected, &mut c.issues),
        _ => None,
    };
    if !c.issues.is_empty() {
        return Err(PlanError::Invalid(c.issues));
    }
    let plan = Plan {
        study,
        request,
        arms,
        prompts,
        warmup,
        timing,
        blocks,
        cells,
        alpha,
        hypotheses,
        derive: derive.map(|d| d.0),
        derived,
        qualification,
        max_error_rate,
        slo,
        pilots,
        blocking,
        tuning,
        sequential,
        client,
        noise,
        executor,
    };
    // A plan that dispatches its blocks itself must be one that can be dispatched
    // (`--executor slurm` on the command line checks the same before anything runs).
    if plan.executor.kind == super::ExecutorKind::Slurm {
        let issues = plan.dispatch_problems();
        if !issues.is_empty() {
            return Err(PlanError::Invalid(issues));
        }
    }
    Ok(plan)
}

fn request(c: &mut Checker, r: RequestFile, dataset: bool) -> RequestSpec {
    if r.model.trim().is_empty() {
        c.err("request.model", "must not be empty");
    }
    let temperature = r.temperature.unwrap_or(0.0);
    c.positive("request.temperature", temperature, true);
    let ignore_eos = match (r.output.as_deref(), r.ignore_eos) {
        (None, v) => v.unwrap_or(true),
        (Some(mode @ ("forced" | "natural")), v) => {
            let forced = mode == "forced";
            if v.is_some_and(|v| v != forced) {
                c.err("request.ignore_eos", format!("contradicts request.output = {mode:?}; leave it out"));
            }
            forced
        }
        (Some(other), _) => {
            c.err("request.output", format!("unknown value {other:?} (use \"forced\" or \"natural\")"));
            true
        }
    };
    let cap = r.max_output_tokens.and_then(|v| c.int("request.max_output_tokens", v, 1, u32::MAX.into()));
    let max_output_tokens = cap.map(|v| v as u32);
    let output_tokens = match (r.output_tokens, max_output_tokens) {
        (Some(v), cap) => {
            let v = c.int("request.output_tokens", v, 1, u32::MAX.into()).unwrap_or(1) as u32;
            if let Some(cap) = cap.filter(|&cap| cap < v) {
                c.err("request.output_tokens", format!("{v} exceeds request.max_output_tokens {cap}"));
            }
            v
        }
        (None, Some(cap)) if dataset => cap,
        (None, _) => {
            let why = if dataset {
                "required unless request.max_output_tokens caps the dataset's own output lengths"
            } else {
                "required: this panel's prompts carry no output length"
            };
            c.err("request.output_tokens", why);
            1
        }
    };
    let endpoint = endpoint(c, "request.endpoint", r.endpoint.as_deref(), Endpoint::Completions);
    let token_ids = r.token_ids.unwrap_or(true);
    let extra_body = extra_body(c, r.extra_body.unwrap_or_default());
    if let Some(p) = &r.request_id_prefix {
        let max = super::types::MAX_REQUEST_ID_PREFIX;
        if p.len() > max || !p.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            c.err(
                "request.request_id_prefix",
                format!("printable ASCII of at most {max} bytes (it starts an `x-request-id` header value)"),
            );
        }
    }
    RequestSpec {
        model: r.model,
        output_tokens,
        ignore_eos,
        temperature,
        max_output_tokens,
        endpoint,
        token_ids,
        extra_body,
        request_id_prefix: r.request_id_prefix,
    }
}

/// `request.extra_body` as JSON: no field the harness sets itself, no TOML date or
/// time (JSON has none), finite numbers only.
fn extra_body(c: &mut Checker, t: toml::Table) -> serde_json::Map<String, serde_json::Value> {
    fn plain(v: &toml::Value) -> bool {
        match v {
            toml::Value::Datetime(_) => false,
            toml::Value::Float(f) => f.is_finite(),
            toml::Value::Array(a) => a.iter().all(plain),
            toml::Value::Table(t) => t.values().all(plain),
            _ => true,
        }
    }
    let mut out = serde_json::Map::new();
    for (k, v) in t {
        let key = format!("request.extra_body.{k}");
        if let Some((_, owner)) = super::types::RESERVED_BODY_FIELDS.iter().find(|(f, _)| *f == k) {
            c.err(key, format!("the harness sets `{k}` itself (from {owner}); leave it out here"));
        } else if !plain(&v) {
            c.err(key, "a JSON value: string, integer, finite float, bool, array or table (no dates, nan or inf)");
        } else {
            // Plain TOML values always have a JSON form.
            out.insert(k, serde_json::to_value(&v).unwrap_or_default());
        }
    }
    out
}

/// An endpoint as written at `key`, or `default` when left out (or unknown, reported).
pub(super) fn endpoint(c: &mut Checker, key: &str, v: Option<&str>, default: Endpoint) -> Endpoint {
    let Some(v) = v else { return default };
    Endpoint::parse(v).unwrap_or_else(|| {
        c.err(key, format!("unknown value {v:?} (use \"completions\" or \"chat\")"));
        default
    })
}

fn warmup(c: &mut Checker, w: WarmupFile, panel: &PanelSpec, output: u32) -> Warmup {
    let prompts = c.int("warmup.prompts", w.prompts, 0, 1 << 20).unwrap_or(0) as u32;
    let input_tokens = match w.input_tokens {
        Some(_) if panel.source.is_dataset() => {
            c.err("warmup.input_tokens", "a dataset panel's warmup sends its first entries; leave it out");
            None
        }
        None if panel.source.is_dataset() => None,
        Some(l) => {
            let l = c.int("warmup.input_tokens", l, 1, 1 << 24).unwrap_or(0) as u32;
            if l != 0 && !panel.lengths.contains(&l) {
                c.err("warmup.input_tokens", format!("{l} is not one of prompts.lengths {:?}", panel.lengths));
            }
            Some(l)
        }
        None if panel.lengths.len() == 1 => Some(panel.lengths[0]),
        None => {
            if prompts > 0 {
                c.err("warmup.input_tokens", "required when prompts.lengths lists several lengths");
            }
            panel.lengths.first().copied()
        }
    };
    let output_tokens = match w.output_tokens {
        Some(o) => c.int("warmup.output_tokens", o, 1, u32::MAX.into()).unwrap_or(1) as u32,
        None => output,
    };
    Warmup { prompts, input_tokens, output_tokens }
}

fn timing(c: &mut Checker, t: TimingFile) -> Timing {
    c.seconds("timing.settle_s", t.settle_s, true);
    c.seconds("timing.request_timeout_s", t.request_timeout_s, false);
    c.seconds("timing.drain_timeout_s", t.drain_timeout_s, false);
    Timing { settle_s: t.settle_s, request_timeout_s: t.request_timeout_s, drain_timeout_s: t.drain_timeout_s }
}

fn blocks(c: &mut Checker, b: BlocksFile, arms: &[Arm], cells: &[Cell]) -> Blocks {
    let count = c.int("blocks.count", b.count, 0, 100_000).unwrap_or(0) as u32;
    let n_conf = cells.iter().filter(|x| x.kind == CellKind::Confirmation).count();
    let n_desc = cells.len() - n_conf;
    let descriptive = match b.descriptive {
        Some(d) => c.int("blocks.descriptive", d, 0, 100_000).unwrap_or(0) as u32,
        None => u32::from(n_desc > 0),
    };
    if n_conf > 0 && count == 0 {
        c.err("blocks.count", "the plan has confirmation cells but no confirmation blocks");
    }
    if n_conf == 0 && count > 0 {
        c.err("blocks.count", format!("{count} confirmation blocks but no confirmation cell"));
    }
    if n_desc > 0 && descriptive == 0 {
        c.err("blocks.descriptive", "the plan has descriptive cells but no descriptive block");
    }
    if n_desc == 0 && descriptive > 0 {
        c.err("blocks.descriptive", format!("{descriptive} descriptive blocks but no descriptive cell"));
    }
    let arm_names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
    let cell_names: Vec<&str> = cells.iter().map(|x| x.name.as_str()).collect();
    let rounds = match b.rounds {
        Some(r) => c.int("blocks.rounds", r, 0, 1000).unwrap_or(0) as u32,
        None => 0,
    };
    Blocks {
        count,
        descriptive,
        arm_order: order(c, "blocks.arm_order", b.arm_order, &arm_names, "arm"),
        cell_order: order(c, "blocks.cell_order", b.cell_order, &cell_names, "cell"),
        rounds,
        randomize_setup: b.randomize_setup,
    }
}

fn order(c: &mut Checker, key: &str, o: OrderFile, names: &[&str], what: &str) -> Order {
    match o {
        OrderFile::Scheme(s) => match s.as_str() {
            "fixed" => Order::Fixed,
            "alternate" => Order::Alternate,
            "latin" => Order::Latin,
            other => {
                c.err(
                    key,
                    format!("unknown scheme {other:?} (use \"fixed\", \"alternate\", \"latin\" or a list of orders)"),
                );
                Order::Fixed
            }
        },
        OrderFile::Explicit(rows) => {
            if rows.is_empty() {
                c.err(key, "an explicit order needs at least one row");
            }
            for (i, row) in rows.iter().enumerate() {
                let mut sorted: Vec<&str> = row.iter().map(String::as_str).collect();
                sorted.sort_unstable();
                let mut want = names.to_vec();
                want.sort_unstable();
                if sorted != want {
                    c.err(format!("{key}[{i}]"), format!("must list every {what} exactly once: {want:?}"));
                }
            }
            Order::Explicit(rows)
        }
    }
}
