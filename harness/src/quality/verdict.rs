//! From every arm's runs to the verdict: pairs each candidate with each control on
//! the GSM, NLL and retrieval gates (`paired`), adds parity and failures, and says
//! per arm whether it is qualified and why not. A candidate is qualified when its
//! server ran, none of its gate requests failed, every paired gate passes against
//! every control and its parity (when declared) passes; a control when its server
//! ran, none of its requests failed and its parity passes. Must not run anything.

use std::collections::BTreeMap;

use super::driver::ArmRun;
use super::extract::TERMINAL_DOT_NOTE;
use super::outcome::{ArmQualification, Comparison, QUALIFICATION_FORMAT, QualifyOutcome};
use super::paired::{loss_gate, mean_gate, paired_counts};
use crate::plan::{ArmRole, Plan, Qualification};

fn compare(q: &Qualification, gate: &str, cand: &ArmRun, ctrl: &ArmRun) -> Comparison {
    let mut c = Comparison {
        gate: gate.to_string(),
        candidate: cand.arm.clone(),
        control: ctrl.arm.clone(),
        pass: false,
        loss: None,
        nll: None,
        detail: String::new(),
    };
    let (Some(a), Some(b)) = (cand.gate(gate), ctrl.gate(gate)) else {
        let who = if cand.gate(gate).is_none() { &cand.arm } else { &ctrl.arm };
        c.detail = format!("no {gate} scores for {who} (its server did not run)");
        return c;
    };
    let result = match gate {
        "nll" => {
            let limit = q.nll.as_ref().map(|n| n.max_upper).unwrap_or(1.01f64.ln());
            if a.values.len() != b.values.len() || a.values.iter().chain(&b.values).any(|v| !v.is_finite()) {
                Err(format!("failed documents ({} candidate, {} control): no paired NLL", a.failed, b.failed))
            } else {
                let diffs: Vec<f64> = a.values.iter().zip(&b.values).map(|(x, y)| x - y).collect();
                mean_gate(&diffs, q.confidence, limit)
                    .map(|g| {
                        c.detail = g.interval.clone();
                        c.pass = g.pass;
                        c.nll = Some(g);
                    })
                    .map_err(|e| e.to_string())
            }
        }
        _ => {
            let limit = match gate {
                "gsm" => q.gsm.as_ref().map(|g| g.max_loss_rate),
                _ => q.retrieval.as_ref().map(|r| r.max_loss_rate),
            }
            .unwrap_or(0.02);
            paired_counts(&a.correct, &b.correct)
                .and_then(|counts| loss_gate(counts, q.confidence, limit))
                .map(|g| {
                    c.detail = format!(
                        "{} right {}/{}, {} right {}/{}; losses {}, gains {}; {}",
                        cand.arm,
                        g.counts.candidate_right,
                        g.counts.n,
                        ctrl.arm,
                        g.counts.control_right,
                        g.counts.n,
                        g.counts.losses,
                        g.counts.gains,
                        g.rule
                    );
                    c.pass = g.pass;
                    c.loss = Some(g);
                })
                .map_err(|e| e.to_string())
        }
    };
    if let Err(e) = result {
        c.detail = e;
        c.pass = false;
    }
    c
}

pub fn verdict(plan: &Plan, q: &Qualification, runs: &[ArmRun], gsm_set: Option<super::gsm::GsmSet>) -> QualifyOutcome {
    let gates: Vec<&str> = [("gsm", q.gsm.is_some()), ("nll", q.nll.is_some()), ("retrieval", q.retrieval.is_some())]
        .into_iter()
        .filter_map(|(g, on)| on.then_some(g))
        .collect();
    let mut comparisons = Vec::new();
    for cand in runs.iter().filter(|r| r.role == ArmRole::Candidate) {
        for ctrl in runs.iter().filter(|r| r.role == ArmRole::Control) {
            for g in &gates {
                comparisons.push(compare(q, g, cand, ctrl));
            }
        }
    }
    let mut arms = Vec::new();
    for r in runs {
        let mut reasons = Vec::new();
        if let Some(e) = &r.error {
            reasons.push(format!("server: {e}"));
        }
        for g in &r.gates {
            if g.failed > 0 {
                reasons.push(format!("{}: {} of {} requests failed", g.gate, g.failed, g.records.len()));
            }
        }
        for c in comparisons.iter().filter(|c| c.candidate == r.arm && !c.pass) {
            reasons.push(format!("{} vs {}: {}", c.gate, c.control, c.detail));
        }
        if let Some(p) = &r.parity
            && !p.pass
        {
            let first: Vec<String> =
                p.mismatches.iter().take(4).map(|m| format!("prompt {} {}: {}", m.prompt, m.order, m.detail)).collect();
            reasons.push(format!("parity: {} mismatches ({})", p.mismatches.len(), first.join("; ")));
        }
        let wants_parity = q.parity.as_ref().is_some_and(|p| p.reference.contains_key(&r.arm));
        if wants_parity && r.parity.is_none() && r.error.is_none() {
            reasons.push("parity: declared but not run".into());
        }
        let scores: BTreeMap<String, serde_json::Value> =
            r.gates.iter().map(|g| (g.gate.to_string(), g.summary.clone())).collect();
        arms.push(ArmQualification {
            arm: r.arm.clone(),
            role: r.role.as_str().to_string(),
            qualified: reasons.is_empty(),
            reasons,
            startup_s: r.startup_s,
            error: r.error.clone(),
            scores,
        });
    }
    let mut notes = vec![
        "each loss bound concerns loss transitions (control right, candidate wrong) across all items, not net \
         accuracy change"
            .to_string(),
        "quality preservation here means passing these finite, frozen paired tests; it is not equivalence or a \
         universal accuracy guarantee"
            .to_string(),
    ];
    if let Some(s) = &gsm_set {
        notes.push(format!("GSM gate: {} ({} of {} items): {TERMINAL_DOT_NOTE}", s.label, s.used, s.lines));
    }
    QualifyOutcome {
        format: QUALIFICATION_FORMAT.to_string(),
        study: plan.study.name.clone(),
        required: q.required,
        confidence: q.confidence,
        gsm_set,
        arms,
        comparisons,
        parity: runs.iter().filter_map(|r| r.parity.clone()).collect(),
        notes,
    }
}
