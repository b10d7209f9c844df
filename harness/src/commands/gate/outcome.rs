//! What a gate run produced: the verdict (`harness-gate/1`, the JSON written by
//! `--json`) with one row per rule, or the summary of a baseline export; and
//! their terminal text (the rules table, then the reason of every failed row). Owns
//! the JSON layout and the table format. Must not evaluate anything.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::eval::RuleRow;
use super::side::Side;

/// Version of the verdict JSON.
pub const GATE_FORMAT: &str = "harness-gate/1";

/// Identity of one side in the verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideInfo {
    /// The path given on the command line.
    pub path: String,
    /// `evidence` (a directory) or `baseline-file`.
    pub source: &'static str,
    /// The evidence directory the numbers come from.
    pub evidence: String,
    pub study: Option<String>,
    pub plan_sha256: Option<String>,
    pub git: Option<Value>,
    /// Where its qualification was read, if any.
    pub qualification: Option<String>,
}

impl SideInfo {
    pub fn new(path: &std::path::Path, side: &Side) -> SideInfo {
        SideInfo {
            path: path.display().to_string(),
            source: if path.is_file() { "baseline-file" } else { "evidence" },
            evidence: side.evidence.clone(),
            study: side.study.clone(),
            plan_sha256: side.plan_sha256.clone(),
            git: side.git.clone(),
            qualification: side.qualification.as_ref().map(|q| q.source.clone()),
        }
    }
}

/// The verdict of `harness gate`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateReport {
    pub format: &'static str,
    /// Every rule passed.
    pub passed: bool,
    pub violations: usize,
    pub rules: String,
    pub baseline: SideInfo,
    pub candidate: SideInfo,
    pub rows: Vec<RuleRow>,
    /// Where this JSON was written.
    #[serde(skip)]
    pub json_out: PathBuf,
}

impl GateReport {
    pub fn row(&self, name: &str) -> Option<&RuleRow> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Names of the failed rules, in file order.
    pub fn failed(&self) -> Vec<&str> {
        self.rows.iter().filter(|r| !r.pass).map(|r| r.name.as_str()).collect()
    }
}

/// What `harness gate` did (the report is large, but one is made per run).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum GateOutcome {
    /// Rules applied to a candidate.
    Gated(GateReport),
    /// `--export-baseline`: a baseline file written.
    Exported { out: PathBuf, evidence: String, rows: usize, qualification: bool },
    /// `--paired`: the verdict of a paired sequential study.
    Paired(super::paired::PairedReport),
    /// `--simulate`: the paired rule on recorded noise.
    Simulated(super::simulate::Simulation),
    /// `--history`: change points over a history store.
    History(super::history::History),
}

impl GateOutcome {
    /// False only when a rule failed (an export always passes).
    pub fn passed(&self) -> bool {
        match self {
            GateOutcome::Gated(r) => r.passed,
            GateOutcome::Exported { .. } => true,
            GateOutcome::Paired(r) => r.exit_code == 0,
            GateOutcome::Simulated(_) | GateOutcome::History(_) => true,
        }
    }

    /// The process exit code: 0 passed, 2 a rule failed or the candidate regressed,
    /// 3 a paired gate undecided at its cap.
    pub fn exit_code(&self) -> u8 {
        match self {
            GateOutcome::Gated(r) => {
                if r.passed {
                    0
                } else {
                    2
                }
            }
            GateOutcome::Exported { .. } => 0,
            GateOutcome::Paired(r) => r.exit_code,
            GateOutcome::Simulated(_) | GateOutcome::History(_) => 0,
        }
    }

    pub fn report(&self) -> Option<&GateReport> {
        match self {
            GateOutcome::Gated(r) => Some(r),
            GateOutcome::Exported { .. }
            | GateOutcome::Paired(_)
            | GateOutcome::Simulated(_)
            | GateOutcome::History(_) => None,
        }
    }

    /// The terminal text.
    pub fn render_text(&self) -> String {
        match self {
            GateOutcome::Gated(r) => render(r),
            GateOutcome::Paired(r) => super::paired::render(r),
            GateOutcome::Simulated(s) => super::simulate::render(s),
            GateOutcome::History(h) => super::history::render(h),
            GateOutcome::Exported { out, evidence, rows, qualification } => format!(
                "wrote baseline {} from {evidence}: {rows} matrix rows, {}\n",
                out.display(),
                if *qualification { "with its qualification" } else { "no qualification" }
            ),
        }
    }
}

/// A value as the table shows it: numbers with 4 significant decimals.
pub fn show(v: &Value) -> String {
    match v {
        Value::Null => "missing".into(),
        Value::Number(n) => match n.as_f64() {
            Some(x) if n.is_u64() || n.is_i64() => format!("{x}"),
            Some(x) if x != 0.0 && x.abs() < 0.01 => format!("{x:.6}"),
            Some(x) => format!("{x:.4}"),
            None => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}~", s.chars().take(n - 1).collect::<String>()) }
}

fn render(r: &GateReport) -> String {
    let mut o = String::new();
    let who = |s: &SideInfo| {
        let study = s.study.as_deref().unwrap_or("?");
        let rev = s.git.as_ref().and_then(|g| g.get("revision")).and_then(Value::as_str).unwrap_or("?");
        format!("{} (study {study}, git {})", s.path, &rev[..rev.len().min(12)])
    };
    let _ = writeln!(o, "gate: rules {}", r.rules);
    let _ = writeln!(o, "  baseline:  {}", who(&r.baseline));
    let _ = writeln!(o, "  candidate: {}", who(&r.candidate));
    let table: Vec<[String; 7]> = r
        .rows
        .iter()
        .map(|row| {
            [
                cut(&row.name, 40),
                cut(&row.subject, 52),
                cut(&show(&row.baseline), 24),
                cut(&show(&row.candidate), 24),
                row.change_pct.map_or("-".into(), |c| format!("{c:+.2}%")),
                row.limit.clone(),
                if row.pass { "pass".into() } else { "FAIL".into() },
            ]
        })
        .collect();
    let header = ["rule", "compared", "baseline", "candidate", "change", "limit", "result"].map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for line in &table {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |o: &mut String, cells: &[String; 7]| {
        let parts: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        let _ = writeln!(o, "{}", parts.join("  ").trim_end());
    };
    o.push('\n');
    line(&mut o, &header);
    line(&mut o, &widths.map(|w| "-".repeat(w)));
    for cells in &table {
        line(&mut o, cells);
    }
    o.push('\n');
    for row in r.rows.iter().filter(|x| !x.pass) {
        let _ = writeln!(o, "FAIL {}: {}", row.name, row.detail);
    }
    let verdict = if r.passed {
        format!("gate PASSED: {} rules", r.rows.len())
    } else {
        format!("gate FAILED: {} of {} rules violated ({})", r.violations, r.rows.len(), r.failed().join(", "))
    };
    let _ = writeln!(o, "{verdict}\nverdict JSON: {}", r.json_out.display());
    o
}
