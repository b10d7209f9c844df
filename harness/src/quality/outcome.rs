//! The outcome of qualification, as written to `qualification/qualification.json`
//! and read by `harness run` (timing claims of an arm that is not qualified are
//! blocked), the report and replay. Owns the per-arm verdict and its reasons. Must
//! not run anything.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::gsm::GsmSet;
use super::paired::{LossGate, MeanGate};
use super::parity::ParityResult;

/// Version of `qualification.json`.
pub const QUALIFICATION_FORMAT: &str = "harness-qualification/v1";

/// One candidate against one control on one paired gate (`gsm`, `nll`, `retrieval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub gate: String,
    pub candidate: String,
    pub control: String,
    pub pass: bool,
    /// GSM and retrieval: losses, gains and the Clopper-Pearson bound.
    pub loss: Option<LossGate>,
    /// NLL: the Student-t bound of the mean paired difference.
    pub nll: Option<MeanGate>,
    /// The rule and its numbers, or why the comparison could not be made.
    pub detail: String,
}

/// The verdict for one arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmQualification {
    pub arm: String,
    /// `candidate` or `control`.
    pub role: String,
    pub qualified: bool,
    /// Why not (empty when qualified): each failed gate with its rule and numbers,
    /// failed requests, a server that did not start.
    pub reasons: Vec<String>,
    pub startup_s: Option<f64>,
    /// The server fault, when it did not come up.
    pub error: Option<String>,
    /// Per gate: this arm's own scores (the `<gate>.scores.json` summaries).
    pub scores: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualifyOutcome {
    pub format: String,
    pub study: String,
    /// The plan's `qualification.required`.
    pub required: bool,
    pub confidence: f64,
    /// Which GSM set was used and how much of it ("GSM-style set, not GSM8K").
    pub gsm_set: Option<GsmSet>,
    pub arms: Vec<ArmQualification>,
    pub comparisons: Vec<Comparison>,
    pub parity: Vec<ParityResult>,
    /// Statements every report repeats (extractor limitation, what the bounds mean).
    pub notes: Vec<String>,
}

impl QualifyOutcome {
    pub fn arm(&self, name: &str) -> Option<&ArmQualification> {
        self.arms.iter().find(|a| a.arm == name)
    }

    /// `Some(qualified)` for an arm of the plan.
    pub fn qualified(&self, name: &str) -> Option<bool> {
        self.arm(name).map(|a| a.qualified)
    }

    pub fn all_qualified(&self) -> bool {
        self.arms.iter().all(|a| a.qualified)
    }

    /// A short human summary (what `harness qualify` prints).
    pub fn render_text(&self) -> String {
        let mut s =
            format!("qualification of study {:?} (one-sided {:.0}% bounds)\n", self.study, self.confidence * 100.0);
        if let Some(g) = &self.gsm_set {
            s.push_str(&format!("GSM gate set: {} ({} of {} items, {})\n", g.label, g.used, g.lines, g.path));
        }
        for c in &self.comparisons {
            let verdict = if c.pass { "pass" } else { "FAIL" };
            s.push_str(&format!("  {:<9} {} vs {}: {verdict}: {}\n", c.gate, c.candidate, c.control, c.detail));
        }
        for p in &self.parity {
            let verdict = if p.pass { "pass".to_string() } else { format!("FAIL ({} mismatches)", p.mismatches.len()) };
            s.push_str(&format!("  parity    {}: {verdict}: {}\n", p.arm, p.rule));
            for m in p.mismatches.iter().take(8) {
                s.push_str(&format!("            prompt {} ({}): {}\n", m.prompt, m.order, m.detail));
            }
        }
        for a in &self.arms {
            let v = if a.qualified { "QUALIFIED" } else { "NOT QUALIFIED" };
            s.push_str(&format!("arm {} ({}): {v}\n", a.arm, a.role));
            for r in &a.reasons {
                s.push_str(&format!("  - {r}\n"));
            }
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s
    }
}
