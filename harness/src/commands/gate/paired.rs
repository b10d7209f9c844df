//! `harness gate --paired DIR`: the verdict of a paired sequential study, the CI
//! regression gate's form. Baseline and candidate builds are two arms of one study
//! (fresh servers per block, interleaved, order balanced), decided look by look by
//! its `[sequential]` rule (`sequential.json`, written by `harness run`, recomputed
//! by `harness replay`). This reads that record beside the exact correctness
//! checks (no failed request in any cell of any arm, every measured cell present,
//! every arm qualified when the study has a qualification) and gives one verdict:
//!
//! | verdict | exit | when |
//! | --- | --- | --- |
//! | passed | 0 | every hypothesis within its margin (or improved), correctness clean |
//! | regressed | 2 | a hypothesis regressed, or a correctness check failed |
//! | inconclusive | 3 | the cap (or time) came with a hypothesis undecided |
//!
//! Owns the paired verdict JSON (`harness-gate-paired/1`), its terminal table and
//! its Markdown summary. Must not recompute the rule (replay does).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::GateError;
use super::outcome::SideInfo;
use super::side::Side;
use crate::analysis::sequential::{HypothesisLook, SequentialRecord, StopReason};
use crate::evidence::Sealed;
use crate::stats::GateState;

pub const PAIRED_FORMAT: &str = "harness-gate-paired/1";

/// One arm's identity, from its first unit's `startup.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArmIdentity {
    pub arm: String,
    pub role: Option<String>,
    pub program: Option<String>,
    pub program_sha256: Option<String>,
}

/// One exact correctness check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Correctness {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

/// The paired verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedReport {
    pub format: &'static str,
    /// `passed`, `regressed` or `inconclusive`.
    pub verdict: &'static str,
    pub exit_code: u8,
    pub study: SideInfo,
    pub arms: Vec<ArmIdentity>,
    /// Blocks run, and the cap.
    pub blocks: u32,
    pub cap: u32,
    pub reason: StopReason,
    /// The sequential rule's own state at its stop.
    pub sequential_state: GateState,
    /// Every hypothesis at the last look.
    pub hypotheses: Vec<HypothesisLook>,
    pub correctness: Vec<Correctness>,
    #[serde(skip)]
    pub json_out: PathBuf,
}

fn identities(ev: &Sealed, record: &SequentialRecord) -> Result<Vec<ArmIdentity>, GateError> {
    let mut arms: Vec<String> = Vec::new();
    for h in record.looks.last().map_or(&[][..], |l| &l.hypotheses[..]) {
        for a in [&h.control, &h.candidate] {
            if !arms.contains(a) {
                arms.push(a.clone());
            }
        }
    }
    arms.into_iter()
        .map(|arm| {
            let bytes =
                ev.read_opt(&format!("{}/{}", crate::evidence::unit_path(0, &arm), crate::evidence::STARTUP_FILE))?;
            let v: Option<Value> = bytes.and_then(|b| serde_json::from_slice(&b).ok());
            let s = |k: &str| v.as_ref().and_then(|v| v.get(k)).and_then(Value::as_str).map(String::from);
            let program = v.as_ref().and_then(|v| v.pointer("/argv/0")).and_then(Value::as_str).map(String::from);
            Ok(ArmIdentity { role: s("role"), program, program_sha256: s("program_sha256"), arm })
        })
        .collect()
}

fn correctness(side: &Side) -> Vec<Correctness> {
    let mut out = Vec::new();
    match &side.matrix {
        None => out.push(Correctness {
            name: "every cell measured, no failed request".into(),
            pass: false,
            detail: format!("no results/matrix.csv in {}", side.evidence),
        }),
        Some(rows) => {
            let failed: u64 = rows.iter().map(|r| r.failed()).sum();
            let unmeasured: Vec<String> = rows
                .iter()
                .filter(|r| !r.measured())
                .map(|r| format!("b{}/{}/{} {}", r.block, r.arm, r.cell, r.status))
                .collect();
            out.push(Correctness {
                name: "no failed request".into(),
                pass: failed == 0,
                detail: format!("{failed} failed over {} cells of every arm", rows.len()),
            });
            out.push(Correctness {
                name: "every cell measured".into(),
                pass: unmeasured.is_empty(),
                detail: if unmeasured.is_empty() { format!("{} cells", rows.len()) } else { unmeasured.join(", ") },
            });
        }
    }
    if let Some(q) = &side.qualification {
        let bad: Vec<String> = q.arms.iter().filter(|a| !a.qualified).map(|a| a.arm.clone()).collect();
        out.push(Correctness {
            name: "every arm qualified".into(),
            pass: bad.is_empty(),
            detail: if bad.is_empty() {
                format!("{} arms ({})", q.arms.len(), q.source)
            } else {
                format!("not qualified: {}", bad.join(", "))
            },
        });
    }
    out
}

/// The `sequential.json` of the opened study `ev` (`Err`: none, or unreadable).
pub fn sequential_record(ev: &Sealed) -> Result<SequentialRecord, GateError> {
    let dir = ev.root();
    let name = crate::analysis::sequential::NAME;
    let bytes = ev.read_opt(name)?.ok_or_else(|| GateError::NotEvidence {
        path: dir.to_path_buf(),
        message: format!("no {name}: not a sequential study (a plan with [sequential], run to its stop)"),
    })?;
    crate::analysis::sequential::parse(&bytes)
        .map_err(|message| GateError::NotEvidence { path: dir.to_path_buf(), message })
}

/// Reads the study at `dir` through [`Sealed`] and gives its verdict (`Err`:
/// nothing decidable: evidence refused, exit 2; a sealed study that is not a
/// sequential one, exit 1).
pub fn judge(dir: &Path, json_out: PathBuf) -> Result<PairedReport, GateError> {
    let ev = Sealed::open(dir)?;
    let side = Side::from_sealed(&ev)?;
    let record = sequential_record(&ev)?;
    let correctness = correctness(&side);
    let clean = correctness.iter().all(|c| c.pass);
    let (verdict, exit_code) = match record.state {
        _ if !clean => ("regressed", 2),
        GateState::Regressed => ("regressed", 2),
        GateState::Passed => ("passed", 0),
        GateState::Inconclusive | GateState::Continue => ("inconclusive", 3),
    };
    Ok(PairedReport {
        format: PAIRED_FORMAT,
        verdict,
        exit_code,
        study: SideInfo::new(dir, &side),
        arms: identities(&ev, &record)?,
        blocks: record.blocks,
        cap: *record.rule.looks.last().unwrap_or(&record.blocks),
        reason: record.reason,
        sequential_state: record.state,
        hypotheses: record.looks.last().map(|l| l.hypotheses.clone()).unwrap_or_default(),
        correctness,
        json_out,
    })
}

fn pct(log: f64) -> String {
    if log.is_finite() { format!("{:+.2}%", log.exp_m1() * 100.0) } else { "n/a".into() }
}

fn reason(r: &PairedReport) -> &'static str {
    match r.reason {
        StopReason::Decided => "decided",
        StopReason::Cap => "undecided at the cap",
        StopReason::Time => "undecided at the time cap",
    }
}

/// The terminal text: one row per hypothesis, the correctness checks, the verdict.
pub fn render(r: &PairedReport) -> String {
    let mut o = String::new();
    let rev = r.study.git.as_ref().and_then(|g| g.get("revision")).and_then(Value::as_str).unwrap_or("?");
    let _ = writeln!(
        o,
        "gate (paired): {} (study {}, git {})",
        r.study.path,
        r.study.study.as_deref().unwrap_or("?"),
        &rev[..rev.len().min(12)]
    );
    for a in &r.arms {
        let sha = a.program_sha256.as_deref().unwrap_or("?");
        let _ = writeln!(
            o,
            "  {:<10} {:<9} {} (sha256 {})",
            a.arm,
            a.role.as_deref().unwrap_or("?"),
            a.program.as_deref().unwrap_or("?"),
            &sha[..sha.len().min(12)]
        );
    }
    let _ = writeln!(o, "  {} of at most {} blocks ({})\n", r.blocks, r.cap, reason(r));
    let _ = writeln!(
        o,
        "{:<28} {:>5} {:>9} {:>21} {:>7}  verdict",
        "hypothesis", "pairs", "change", "alarm interval", "margin"
    );
    for h in &r.hypotheses {
        let _ = writeln!(
            o,
            "{:<28} {:>5} {:>9} {:>21} {:>7}  {}",
            h.name,
            h.look.n,
            pct(h.look.mean),
            format!("[{}, {}]", pct(h.look.alarm_lower), pct(h.look.alarm_upper)),
            format!("+-{:.0}%", h.margin * 100.0),
            h.look.verdict.as_str()
        );
    }
    o.push('\n');
    for c in &r.correctness {
        let _ = writeln!(o, "{:<28} {}  {}", c.name, if c.pass { "pass" } else { "FAIL" }, c.detail);
    }
    let _ = writeln!(
        o,
        "\ngate {} (exit {}); change = candidate worse by (positive: slower or higher latency)\nverdict JSON: {}",
        r.verdict.to_uppercase(),
        r.exit_code,
        r.json_out.display()
    );
    o
}

/// A short Markdown summary, ready for a pull-request comment.
pub fn markdown(r: &PairedReport) -> String {
    let mut o = String::new();
    let icon = match r.verdict {
        "passed" => "passed",
        "regressed" => "**REGRESSED**",
        _ => "**inconclusive**",
    };
    let _ = writeln!(o, "### Performance gate: {icon}\n");
    let _ = writeln!(o, "{} of at most {} paired blocks ({}).\n", r.blocks, r.cap, reason(r));
    let _ = writeln!(o, "| measure | cell | change (+ = candidate worse) | alarm interval | margin | verdict |");
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for h in &r.hypotheses {
        let _ = writeln!(
            o,
            "| {} ({}) | {} | {} | [{}, {}] | +-{:.0}% | {} |",
            h.name,
            h.metric,
            h.cell,
            pct(h.look.mean),
            pct(h.look.alarm_lower),
            pct(h.look.alarm_upper),
            h.margin * 100.0,
            h.look.verdict.as_str()
        );
    }
    let failed: Vec<&Correctness> = r.correctness.iter().filter(|c| !c.pass).collect();
    if failed.is_empty() {
        let _ = writeln!(o, "\nCorrectness: {} checks passed.", r.correctness.len());
    } else {
        for c in failed {
            let _ = writeln!(o, "\nCorrectness FAILED: {}: {}", c.name, c.detail);
        }
    }
    for a in &r.arms {
        let sha = a.program_sha256.as_deref().unwrap_or("?");
        let _ = writeln!(
            o,
            "\n- `{}` ({}): `{}` sha256 `{}`",
            a.arm,
            a.role.as_deref().unwrap_or("?"),
            a.program.as_deref().unwrap_or("?"),
            &sha[..sha.len().min(12)]
        );
    }
    o
}
