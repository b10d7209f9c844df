//! The readable form of a `PowerReport`: what `harness plan power` prints (and what a
//! report may quote). Fixed formats, no timestamps. Must not compute anything.

use std::fmt::Write;

use super::{Detectable, HypothesisPower, PowerReport};

/// A fraction as a signed percentage with one decimal, e.g. 0.0314 -> "+3.1%".
pub fn percent(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

fn effect_or(x: Option<f64>, max_text: &str) -> String {
    x.map_or_else(|| format!("none up to {max_text}"), percent)
}

fn detect_line(d: &Detectable, max_text: &str) -> String {
    format!(
        "{} (sign test alone, exact), {} (full rule, simulated)",
        effect_or(d.sign_test_exact, max_text),
        effect_or(d.rule_simulated, max_text)
    )
}

fn hypothesis(o: &mut String, r: &PowerReport, h: &HypothesisPower) {
    let e = &h.noise;
    let max_text = match h.metric.kind() {
        crate::plan::MetricKind::Throughput => "+1000%",
        crate::plan::MetricKind::Latency => "+99.9%",
    };
    let _ = writeln!(
        o,
        "\nhypothesis {} ({} in {}, median threshold {}):",
        h.name,
        h.metric.as_str(),
        h.cell,
        percent(h.threshold)
    );
    let _ = writeln!(
        o,
        "  noise: SD {:.4} of ln(candidate/control) over {} blocks of pair {} ({} vs {} in {}), mean {:+.4}; 90% upper \
         bound of the SD {:.4}{}",
        e.sd,
        e.blocks.len(),
        e.source,
        e.candidate,
        e.control,
        e.cell,
        e.mean,
        e.sd_upper,
        if e.failed_requests > 0 {
            format!("; {} failed request(s) in that cell", e.failed_requests)
        } else {
            "".into()
        }
    );
    let need = h.critical_wins.map_or_else(
        || format!("unreachable: even {} wins of {} give p = 2^-{} > {:.5}", r.blocks, r.blocks, r.blocks, h.level),
        |k| format!("needs at least {k} wins of {}", r.blocks),
    );
    let _ = writeln!(o, "  sign test alone at alpha/m = {:.5}: {need}", h.level);
    let _ = writeln!(
        o,
        "  {:>8}  {:>7}  {:>17}  {:>26}",
        "effect", "P(win)", "sign test (exact)", "full rule (simulated +- se)"
    );
    for p in &h.curve {
        let _ = writeln!(
            o,
            "  {:>8}  {:>7.4}  {:>17.4}  {:>18.4} +- {:.4}",
            percent(p.effect),
            p.p_win,
            p.sign_test_exact,
            p.rule_simulated,
            p.rule_se
        );
    }
    for d in &h.detectable {
        let which = if d.sd == e.sd { "at the estimated SD" } else { "at the SD's 90% upper bound" };
        let _ = writeln!(
            o,
            "  smallest effect supported with {:.0}% probability {which} ({:.4}): {}",
            d.probability * 100.0,
            d.sd,
            detect_line(d, max_text)
        );
    }
    if let Some(t) = &h.target {
        let blocks = |n: Option<u32>| n.map_or_else(|| "not reached".to_string(), |n| format!("{n} blocks"));
        let _ = writeln!(
            o,
            "  blocks for {} with {:.0}% probability: {} (sign test alone, exact), {} (full rule, simulated){}",
            percent(t.effect),
            t.probability * 100.0,
            blocks(t.sign_test_exact),
            blocks(t.rule_simulated),
            t.note.as_ref().map(|n| format!("; {n}")).unwrap_or_default()
        );
    }
}

impl PowerReport {
    /// The printed table.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "power of study {} (plan sha256 {}): {} confirmation blocks, a Holm family of {} at alpha {}",
            self.study,
            self.plan_sha256.chars().take(12).collect::<String>(),
            self.blocks,
            self.family,
            self.alpha
        );
        let _ = writeln!(o, "noise from {} (study {})", self.noise_dir, self.noise_study);
        let _ = writeln!(o, "model and assumptions:");
        for a in &self.assumptions {
            let _ = writeln!(o, "  - {a}");
        }
        for h in &self.hypotheses {
            hypothesis(&mut o, self, h);
        }
        o
    }
}
