//! The rules file (`gate.toml`, format `harness-gate-rules/1`): parsing and
//! validation into typed [`Rule`]s. Every problem is collected and named by its key
//! path (`rules[2].max_regression_pct: ...`), like the plan's validation; unknown
//! keys, keys that do not apply to a rule's kind, unknown metrics and duplicate rule
//! names are errors. Owns the defaults (statistic `median`, `max_failed = 0`, the
//! NLL limit ln(1.01), the loss limit 0.02, `role = "candidate"`) and which metric
//! columns each kind accepts. Must not read evidence: `eval` applies the rules.

use std::path::Path;

use serde::Serialize;
use toml::Value;

use super::GateError;
use crate::metrics::{FIELDS, field_kind, metric_field};
use crate::plan::{Metric, MetricKind};

/// Version tag a rules file may carry in `format`.
pub const RULES_FORMAT: &str = "harness-gate-rules/1";

/// Matrix columns a `throughput` rule may name: every throughput field of the
/// catalogue (higher is better).
pub fn throughput_metrics() -> Vec<&'static str> {
    FIELDS.iter().map(|(n, _)| *n).filter(|n| field_kind(n) == Some(MetricKind::Throughput)).collect()
}

/// Default metric of a `throughput` rule.
pub const DEFAULT_THROUGHPUT_METRIC: &str = metric_field(Metric::ThroughputRps);

/// Default NLL limit: ln(1.01) nats per token (DESIGN section 7).
pub fn default_nll_limit() -> f64 {
    1.01f64.ln()
}

/// Default limit of the GSM and retrieval loss bounds.
pub const DEFAULT_LOSS_LIMIT: f64 = 0.02;

/// Matrix columns a `latency` rule may name: every latency field of the catalogue
/// (lower is better).
pub fn latency_metrics() -> Vec<&'static str> {
    FIELDS.iter().map(|(n, _)| *n).filter(|n| field_kind(n) == Some(MetricKind::Latency)).collect()
}

/// How a metric's per-block values on one side become one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// Sample median across blocks (mean of the two middle values for even counts).
    Median,
    /// Arithmetic mean across blocks.
    Mean,
    /// The worst block: lowest throughput, highest latency.
    Worst,
}

impl Statistic {
    pub fn as_str(self) -> &'static str {
        match self {
            Statistic::Median => "median",
            Statistic::Mean => "mean",
            Statistic::Worst => "worst",
        }
    }
}

/// Which arm a rule reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmSelect {
    /// Every arm (failures, parity, qualified, quality bounds without `arm`/`role`).
    All,
    /// Arms with this role; a measure rule needs exactly one per side.
    Role(String),
    /// This arm on the candidate side; `baseline` names the baseline's arm when it differs.
    Name { candidate: String, baseline: String },
}

impl ArmSelect {
    /// The arm (or role) this selector picks on one side, for messages.
    pub fn describe(&self, baseline_side: bool) -> String {
        match self {
            ArmSelect::All => "every arm".into(),
            ArmSelect::Role(r) => format!("role {r}"),
            ArmSelect::Name { candidate, baseline } => {
                format!("arm {}", if baseline_side { baseline } else { candidate })
            }
        }
    }

    /// Whether an arm (with its role) is selected on one side.
    pub fn matches(&self, arm: &str, role: &str, baseline_side: bool) -> bool {
        match self {
            ArmSelect::All => true,
            ArmSelect::Role(r) => r == role,
            ArmSelect::Name { candidate, baseline } => arm == if baseline_side { baseline } else { candidate },
        }
    }
}

/// What a rule checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Check {
    /// A throughput column must not fall more than `max_regression_pct` below the baseline.
    Throughput { cell: String, metric: String, statistic: Statistic, max_regression_pct: f64 },
    /// A latency column must not rise more than `max_regression_pct` above the baseline.
    Latency { cell: String, metric: String, statistic: Statistic, max_regression_pct: f64 },
    /// At most `max_failed` failed requests, and every selected (block, arm, cell) measured.
    Failures { cell: Option<String>, max_failed: u64 },
    /// Serial parity results must exist and pass.
    Parity,
    /// Qualification verdicts must exist and say qualified.
    Qualified,
    /// A paired quality bound (`nll`: NLL upper bound; `gsm`, `retrieval`: loss-rate
    /// upper bound) of every selected comparison must be below `max_upper`.
    Bound { gate: String, control: Option<String>, max_upper: f64 },
}

impl Check {
    pub fn kind(&self) -> &str {
        match self {
            Check::Throughput { .. } => "throughput",
            Check::Latency { .. } => "latency",
            Check::Failures { .. } => "failures",
            Check::Parity => "parity",
            Check::Qualified => "qualified",
            Check::Bound { gate, .. } => gate,
        }
    }
}

/// One validated rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    pub name: String,
    pub arms: ArmSelect,
    #[serde(flatten)]
    pub check: Check,
}

/// A validated rules file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rules {
    pub description: Option<String>,
    pub rules: Vec<Rule>,
}

const KINDS: [&str; 8] = ["throughput", "latency", "failures", "parity", "qualified", "nll", "gsm", "retrieval"];

/// Keys each kind accepts (besides `name` and `kind`).
fn allowed_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "throughput" | "latency" => {
            &["cell", "metric", "statistic", "max_regression_pct", "arm", "role", "baseline_arm"]
        }
        "failures" => &["cell", "arm", "role", "max_failed"],
        "parity" | "qualified" => &["arm", "role"],
        _ => &["arm", "control", "max_upper"],
    }
}

struct Checker {
    problems: Vec<String>,
}

impl Checker {
    fn err(&mut self, key: &str, message: impl std::fmt::Display) {
        self.problems.push(format!("{key}: {message}"));
    }

    fn string(&mut self, t: &toml::Table, base: &str, key: &str) -> Option<String> {
        match t.get(key)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::String(_) => {
                self.err(&format!("{base}.{key}"), "must not be empty");
                None
            }
            other => {
                self.err(&format!("{base}.{key}"), format!("must be a string, got {}", other.type_str()));
                None
            }
        }
    }

    fn number(&mut self, t: &toml::Table, base: &str, key: &str) -> Option<f64> {
        let k = format!("{base}.{key}");
        let v = match t.get(key)? {
            Value::Float(f) => *f,
            Value::Integer(i) => *i as f64,
            other => {
                self.err(&k, format!("must be a number, got {}", other.type_str()));
                return None;
            }
        };
        if v.is_finite() && v >= 0.0 {
            Some(v)
        } else {
            self.err(&k, format!("must be zero or positive and finite, got {v}"));
            None
        }
    }
}

/// Reads and validates a rules file.
pub fn load(path: &Path) -> Result<Rules, GateError> {
    let text =
        crate::evidence::read_input_text(path).map_err(|error| GateError::Io { path: path.to_path_buf(), error })?;
    parse(&text).map_err(|problems| GateError::Rules { path: path.to_path_buf(), problems })
}

/// Validates rules text; `Err` lists every problem, each named by its key.
pub fn parse(text: &str) -> Result<Rules, Vec<String>> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| vec![format!("not valid TOML: {e}")])?;
    let mut c = Checker { problems: Vec::new() };
    for key in table.keys() {
        if !["format", "description", "rules"].contains(&key.as_str()) {
            c.err(key, "unknown key (expected format, description, rules)");
        }
    }
    if let Some(f) = c.string(&table, "", "format").filter(|f| f != RULES_FORMAT) {
        c.err("format", format!("{f:?} is not {RULES_FORMAT:?}"));
    }
    let description = c.string(&table, "", "description");
    let mut rules = Vec::new();
    match table.get("rules") {
        None => c.err("rules", "missing: the file needs at least one [[rules]] entry"),
        Some(Value::Array(items)) if items.is_empty() => c.err("rules", "must hold at least one [[rules]] entry"),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let base = format!("rules[{i}]");
                match item {
                    Value::Table(t) => {
                        if let Some(r) = rule(&mut c, t, &base) {
                            if let Some(j) = rules.iter().position(|x: &Rule| x.name == r.name) {
                                c.err(
                                    &format!("{base}.name"),
                                    format!("duplicate rule name {:?} (also rules[{j}])", r.name),
                                );
                            }
                            rules.push(r);
                        }
                    }
                    other => c.err(&base, format!("must be a table ([[rules]]), got {}", other.type_str())),
                }
            }
        }
        Some(other) => c.err("rules", format!("must be an array of tables ([[rules]]), got {}", other.type_str())),
    }
    if c.problems.is_empty() { Ok(Rules { description, rules }) } else { Err(c.problems) }
}

fn rule(c: &mut Checker, t: &toml::Table, base: &str) -> Option<Rule> {
    let before = c.problems.len();
    let kind = match t.get("kind") {
        None => {
            c.err(&format!("{base}.kind"), format!("missing (one of {})", KINDS.join(", ")));
            return None;
        }
        Some(Value::String(k)) if KINDS.contains(&k.as_str()) => k.clone(),
        Some(other) => {
            c.err(&format!("{base}.kind"), format!("{other} is not one of {}", KINDS.join(", ")));
            return None;
        }
    };
    let allowed = allowed_keys(&kind);
    for key in t.keys() {
        if key != "name" && key != "kind" && !allowed.contains(&key.as_str()) {
            let all = KINDS.iter().flat_map(|k| allowed_keys(k)).any(|k| k == key);
            let why = if all {
                format!("does not apply to kind {kind:?} (it takes {})", allowed.join(", "))
            } else {
                format!("unknown key (kind {kind:?} takes name, kind, {})", allowed.join(", "))
            };
            c.err(&format!("{base}.{key}"), why);
        }
    }
    let name = c.string(t, base, "name");
    let arm = c.string(t, base, "arm");
    let role = c.string(t, base, "role");
    let baseline_arm = c.string(t, base, "baseline_arm");
    if let Some(r) = role.as_deref().filter(|r| *r != "candidate" && *r != "control") {
        c.err(&format!("{base}.role"), format!("{r:?} is not candidate or control"));
    }
    if arm.is_some() && role.is_some() {
        c.err(&format!("{base}.role"), "set `arm` or `role`, not both");
    }
    if baseline_arm.is_some() && arm.is_none() {
        c.err(&format!("{base}.baseline_arm"), "needs `arm` (the candidate's arm)");
    }
    let measure = kind == "throughput" || kind == "latency";
    let arms = match (arm, role) {
        (Some(a), _) => ArmSelect::Name { baseline: baseline_arm.unwrap_or_else(|| a.clone()), candidate: a },
        (None, Some(r)) => ArmSelect::Role(r),
        (None, None) if measure => ArmSelect::Role("candidate".into()),
        (None, None) => ArmSelect::All,
    };
    let check = match kind.as_str() {
        "throughput" | "latency" => {
            let cell = c.string(t, base, "cell");
            if cell.is_none() && !t.contains_key("cell") {
                c.err(&format!("{base}.cell"), "missing: the cell whose measure is compared");
            }
            let metric = c.string(t, base, "metric");
            let metric = if kind == "throughput" {
                let m = metric.unwrap_or_else(|| DEFAULT_THROUGHPUT_METRIC.into());
                let ok = throughput_metrics();
                if !ok.contains(&m.as_str()) {
                    c.err(
                        &format!("{base}.metric"),
                        format!("{m:?} is not a throughput column (one of {})", ok.join(", ")),
                    );
                }
                Some(m)
            } else {
                let ok = latency_metrics();
                match metric {
                    None if !t.contains_key("metric") => {
                        c.err(&format!("{base}.metric"), format!("missing (a latency column: {})", ok.join(", ")));
                        None
                    }
                    Some(m) if !ok.contains(&m.as_str()) => {
                        c.err(
                            &format!("{base}.metric"),
                            format!("{m:?} is not a latency column (one of {})", ok.join(", ")),
                        );
                        None
                    }
                    m => m,
                }
            };
            let statistic = match c.string(t, base, "statistic").as_deref() {
                None | Some("median") => Statistic::Median,
                Some("mean") => Statistic::Mean,
                Some("worst") => Statistic::Worst,
                Some(s) => {
                    c.err(&format!("{base}.statistic"), format!("{s:?} is not one of median, mean, worst"));
                    Statistic::Median
                }
            };
            let max = c.number(t, base, "max_regression_pct");
            if !t.contains_key("max_regression_pct") {
                c.err(&format!("{base}.max_regression_pct"), "missing: the largest allowed regression, in percent");
            }
            let (cell, metric, max_regression_pct) = (cell?, metric?, max?);
            if kind == "throughput" {
                Check::Throughput { cell, metric, statistic, max_regression_pct }
            } else {
                Check::Latency { cell, metric, statistic, max_regression_pct }
            }
        }
        "failures" => {
            let max_failed = match t.get("max_failed") {
                None => Some(0),
                Some(Value::Integer(i)) if *i >= 0 => Some(*i as u64),
                Some(other) => {
                    c.err(&format!("{base}.max_failed"), format!("must be an integer >= 0, got {other}"));
                    None
                }
            };
            Check::Failures { cell: c.string(t, base, "cell"), max_failed: max_failed? }
        }
        "parity" => Check::Parity,
        "qualified" => Check::Qualified,
        gate => {
            let default = if gate == "nll" { default_nll_limit() } else { DEFAULT_LOSS_LIMIT };
            let max_upper = if t.contains_key("max_upper") { c.number(t, base, "max_upper")? } else { default };
            Check::Bound { gate: gate.to_string(), control: c.string(t, base, "control"), max_upper }
        }
    };
    if c.problems.len() > before {
        return None;
    }
    let name = name.unwrap_or_else(|| default_name(&check, &arms));
    Some(Rule { name, arms, check })
}

/// The name of a rule without `name`: kind, cell, metric, statistic and arm.
fn default_name(check: &Check, arms: &ArmSelect) -> String {
    let who = match arms {
        ArmSelect::All => String::new(),
        ArmSelect::Role(r) if r == "candidate" && matches!(check, Check::Throughput { .. } | Check::Latency { .. }) => {
            String::new()
        }
        other => format!(" ({})", other.describe(false)),
    };
    let what = match check {
        Check::Throughput { cell, metric, statistic, .. } | Check::Latency { cell, metric, statistic, .. } => {
            format!("{} {cell} {metric} {}", check.kind(), statistic.as_str())
        }
        Check::Failures { cell: Some(cell), .. } => format!("failures {cell}"),
        Check::Bound { gate, control: Some(ctrl), .. } => format!("{gate} bound vs {ctrl}"),
        Check::Bound { gate, .. } => format!("{gate} bound"),
        other => other.kind().to_string(),
    };
    format!("{what}{who}")
}
