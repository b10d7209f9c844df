//! `harness gate`: a regression gate for CI. Compares a candidate (an evidence
//! directory: a full study or a quick single-block run) with a stored baseline (an
//! evidence directory or a small `harness-gate-baseline/1` file written by
//! `--export-baseline`) under a rules file (`harness-gate-rules/1`, see
//! `docs/gate.md`), prints one row per rule, writes the verdict as JSON and lets the
//! command exit 2 on any violation.
//!
//! - `rules`: the rules file and its validation (errors name the key);
//! - `side`: reading one side (matrix rows, study identity, qualification) and the
//!   baseline file format and export;
//! - `csv`: the small CSV reader for `results/matrix.csv`;
//! - `eval`: one row per rule (missing data fails the row, never passes);
//! - `outcome`: the verdict JSON and terminal table;
//! - `paired`: `--paired DIR`, the verdict of a paired sequential study (the CI
//!   gate: baseline and candidate builds as two arms of one study), exit 0 / 2 / 3;
//! - `simulate`: `--simulate DIR...`, the paired rule's error rates on recorded noise;
//! - `history`: `--record-history H` appends a paired gate to a Parquet store,
//!   `--history H` finds change points over the stored gates.
//!
//! Every evidence directory is opened through `evidence::Sealed`: unfinished,
//! changed or unlisted evidence is refused, naming the file (exit 2).
//!
//! Owns `GateError`. Reads evidence only; never writes inside an evidence directory
//! (the default JSON path is beside the candidate, see [`side::default_json_out`]).

mod csv;
mod eval;
mod history;
mod outcome;
mod paired;
mod rules;
mod side;
mod simulate;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use eval::{RuleRow, evaluate};
pub use history::{History, change_points};
pub use outcome::{GATE_FORMAT, GateOutcome, GateReport, SideInfo, show};
pub use paired::{PAIRED_FORMAT, PairedReport};
pub use rules::{
    ArmSelect, Check, DEFAULT_LOSS_LIMIT, DEFAULT_THROUGHPUT_METRIC, RULES_FORMAT, Rule, Rules, Statistic,
    default_nll_limit, latency_metrics, load as load_rules,
};
pub use side::{
    BASELINE_FORMAT, MatrixRow, QualArm, QualComparison, QualParity, Qualification, Side, default_json_out, export,
    read_matrix,
};
pub use simulate::{Simulation, simulate};

use crate::evidence::{EvidenceError, SealError};

/// Everything that stops a gate before it can give a verdict (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {message}")]
    Json { path: PathBuf, message: String },
    #[error("{path}: invalid rules file:\n  {}", problems.join("\n  "))]
    Rules { path: PathBuf, problems: Vec<String> },
    #[error("{path}: {message}")]
    Matrix { path: PathBuf, message: String },
    #[error("{path}: not usable as a gate side: {message}")]
    NotEvidence { path: PathBuf, message: String },
    #[error("{0}")]
    Args(String),
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    /// An evidence directory refused by `evidence::Sealed` (exit 2).
    #[error(transparent)]
    Sealed(#[from] SealError),
}

impl crate::BadInput for GateError {
    /// Evidence that is not sealed and complete fails the gate (exit 2); every other
    /// error leaves it undecided (exit 1, docs/gate.md).
    fn is_bad_input(&self) -> bool {
        matches!(self, GateError::Sealed(_))
    }
}

/// `--draws`: at least one simulated gate per slowdown.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (simulated gates per slowdown)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `--record-history`: a history store is a directory (created when missing).
fn store_dir(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    match p.symlink_metadata() {
        Ok(m) if !m.is_dir() && !p.is_dir() => Err(format!(
            "{s} is {}, not a directory: a history store is a directory of Parquet files, one per gate",
            crate::evidence::kind_in_words(&m.file_type())
        )),
        _ => Ok(p),
    }
}

/// `--history`: an existing history store.
fn existing_store(s: &str) -> Result<PathBuf, String> {
    let p = store_dir(s)?;
    if p.is_dir() {
        Ok(p)
    } else {
        Err(format!("{s}: no such directory (a history store written by --record-history)"))
    }
}

/// `harness gate`: see `docs/gate.md`.
#[derive(Debug, Clone, clap::Args)]
pub struct GateArgs {
    /// The baseline: an evidence directory or a baseline file (--export-baseline).
    #[arg(long, required_unless_present_any = ["export_baseline", "paired", "simulate", "history"])]
    pub baseline: Option<PathBuf>,
    /// The candidate evidence directory (e.g. a quick single-block run).
    #[arg(long, required_unless_present_any = ["export_baseline", "paired", "simulate", "history"])]
    pub candidate: Option<PathBuf>,
    /// The rules file (harness-gate-rules/1; example: plans/gate-ci.toml).
    #[arg(long, required_unless_present_any = ["export_baseline", "paired", "simulate", "history"])]
    pub rules: Option<PathBuf>,
    /// Where the candidate's qualification is (a qualification.json or a
    /// `harness qualify` directory), when it is not inside the candidate directory.
    #[arg(long)]
    pub qualification: Option<PathBuf>,
    /// Write the verdict JSON here (default: <candidate>.gate.json beside the
    /// candidate directory, never inside it). `--json-out` is the older name.
    #[arg(long = "json", alias = "json-out")]
    pub json_out: Option<PathBuf>,
    /// Instead of gating: write the baseline file of this evidence directory to --out.
    #[arg(long, conflicts_with_all = ["baseline", "candidate", "rules", "json_out"], requires = "out")]
    pub export_baseline: Option<PathBuf>,
    /// The baseline file to write (with --export-baseline).
    #[arg(long, requires = "export_baseline")]
    pub out: Option<PathBuf>,
    /// Instead of comparing two studies: the verdict of one paired sequential
    /// study (baseline and candidate builds as its two arms, `[sequential]`):
    /// exit 0 passed, 2 regressed, 3 inconclusive.
    #[arg(long, conflicts_with_all = ["baseline", "candidate", "rules", "qualification", "export_baseline"])]
    pub paired: Option<PathBuf>,
    /// Instead of gating: simulate the paired gate's rule on the recorded noise of
    /// these finished sequential studies (each study's mean removed, blocks
    /// resampled, a uniform slowdown of 0, the margin and twice the margin).
    #[arg(long, num_args = 1.., conflicts_with_all = ["baseline", "candidate", "rules", "qualification", "export_baseline", "paired"])]
    pub simulate: Vec<PathBuf>,
    /// Simulated gates per slowdown (with --simulate; at least 1).
    #[arg(long, default_value_t = 4000, value_parser = at_least_one)]
    pub draws: usize,
    /// Seed of the simulation (with --simulate).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// With --paired: append the gate's per-block results to this history store
    /// (a directory of Parquet files, one per gate).
    #[arg(long, requires = "paired", value_parser = store_dir)]
    pub record_history: Option<PathBuf>,
    /// Instead of gating: change points over the gates of this history store.
    #[arg(long, value_parser = existing_store, conflicts_with_all = ["baseline", "candidate", "rules", "qualification", "export_baseline", "paired"])]
    pub history: Option<PathBuf>,
    /// With --simulate: the rule and margins of this plan's [sequential] instead of
    /// the first study's.
    #[arg(long, requires = "simulate")]
    pub plan: Option<PathBuf>,
    /// With --simulate: the slowdown shifts only these hypotheses (default: all).
    #[arg(long, value_delimiter = ',')]
    pub shift_only: Vec<String>,
    /// With --paired: also write a Markdown summary here (a pull-request comment).
    #[arg(long, requires = "paired")]
    pub summary_md: Option<PathBuf>,
}

fn need<'a>(v: &'a Option<PathBuf>, flag: &str) -> Result<&'a PathBuf, GateError> {
    v.as_ref().ok_or_else(|| GateError::Args(format!("{flag} is required")))
}

/// The verdict must not land inside the candidate evidence directory: every file
/// there is covered by its manifest, and replay would flag a new one.
fn refuse_inside(json_out: &std::path::Path, candidate: &std::path::Path) -> Result<(), GateError> {
    let (Ok(cand), Some(parent)) = (std::fs::canonicalize(candidate), json_out.parent()) else { return Ok(()) };
    let parent = if parent.as_os_str().is_empty() { std::path::Path::new(".") } else { parent };
    match std::fs::canonicalize(parent) {
        Ok(p) if cand.is_dir() && p.starts_with(&cand) => Err(GateError::Args(format!(
            "--json {} is inside the candidate evidence directory {}: write it elsewhere",
            json_out.display(),
            candidate.display()
        ))),
        _ => Ok(()),
    }
}

/// Runs the gate (or the export). `Ok` even when rules fail: the caller exits 2 when
/// [`GateOutcome::passed`] is false. `Err`: nothing could be decided (exit 1).
pub fn run(args: &GateArgs) -> Result<GateOutcome, GateError> {
    if let Some(dir) = &args.export_baseline {
        let out = need(&args.out, "--out")?;
        let side = export(dir, args.qualification.as_deref(), out)?;
        return Ok(GateOutcome::Exported {
            out: out.clone(),
            evidence: side.evidence,
            rows: side.matrix.as_ref().map_or(0, Vec::len),
            qualification: side.qualification.is_some(),
        });
    }
    if let Some(store) = &args.history {
        let h = history::analyse(store, args.seed)?;
        if let Some(out) = &args.json_out {
            crate::evidence::write_json(out, &h)?;
        }
        return Ok(GateOutcome::History(h));
    }
    if !args.simulate.is_empty() {
        if args.draws == 0 {
            return Err(GateError::Args("--draws must be at least 1".into()));
        }
        let sim = simulate(&args.simulate, args.draws, args.seed, &args.shift_only, args.plan.as_deref())?;
        if let Some(out) = &args.json_out {
            crate::evidence::write_json(out, &sim)?;
        }
        return Ok(GateOutcome::Simulated(sim));
    }
    if let Some(dir) = &args.paired {
        let json_out = match &args.json_out {
            Some(p) => p.clone(),
            None => default_json_out(dir)?,
        };
        refuse_inside(&json_out, dir)?;
        let report = paired::judge(dir, json_out)?;
        crate::evidence::write_json(&report.json_out, &report)?;
        if let Some(store) = &args.record_history {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
            let path = history::append(store, &report, i64::try_from(now).unwrap_or(i64::MAX))?;
            println!("history: appended {}", path.display());
        }
        if let Some(md) = &args.summary_md {
            refuse_inside(md, dir)?;
            crate::evidence::write_bytes(md, paired::markdown(&report).as_bytes())?;
        }
        return Ok(GateOutcome::Paired(report));
    }
    let (b_path, c_path, r_path) =
        (need(&args.baseline, "--baseline")?, need(&args.candidate, "--candidate")?, need(&args.rules, "--rules")?);
    let rules = rules::load(r_path)?;
    let baseline = Side::open(b_path, None)?;
    let candidate = Side::open(c_path, args.qualification.as_deref())?;
    let json_out = match &args.json_out {
        Some(p) => p.clone(),
        None => default_json_out(c_path)?,
    };
    refuse_inside(&json_out, c_path)?;
    let rows = evaluate(&rules.rules, &baseline, &candidate);
    let violations = rows.iter().filter(|r| !r.pass).count();
    let report = GateReport {
        format: GATE_FORMAT,
        passed: violations == 0,
        violations,
        rules: r_path.display().to_string(),
        baseline: SideInfo::new(b_path, &baseline),
        candidate: SideInfo::new(c_path, &candidate),
        rows,
        json_out,
    };
    crate::evidence::write_json(&report.json_out, &report)?;
    Ok(GateOutcome::Gated(report))
}
