//! `compare.json` (everything, machine-readable) and `compare.md` (the tables a
//! person reads: parity first, then the noise band, then the ladder with the band
//! beside every ratio). Owns their format. Must not compute numbers (`band` does) and
//! must not print.

use std::fmt::Write as _;

use crate::evidence::{CompareRecord, Measure, ParityMismatch};

pub const DEFINITIONS: [&str; 8] = [
    "parity: each prompt sent alone to a fresh server of each arm (greedy, temperature 0, ignore_eos, forced length); output token IDs compared position by position",
    "noise band: largest |X.b / X.a - 1| over the noise arms and noise rounds, X.a and X.b being the same arm measured twice on fresh servers, interleaved, before any comparison round",
    "ratio: candidate / reference per comparison round (plan block, arm order from [blocks].arm_order); reported as the median over rounds (mean of the middle two for an even count), min and max beside it",
    "arm values: median over comparison rounds of the per-round value",
    "total tok/s: (prompt + output tokens of valid requests) / observation interval (first intended arrival to last completion, drain included); output tok/s: output tokens only",
    "TTFT: first token-bearing SSE event minus HTTP send; ITL: gaps between consecutive token-bearing events, pooled over valid requests; percentiles by nearest rank",
    "cold start: server spawn to the first 200 from the health path; peak host RSS: VmHWM of the server PID read just before the stop",
    "verdict: blocked if any request failed; within noise if |ratio - 1| <= noise band; else candidate better/worse by the measure's direction (tokens/s higher is better; times and RSS lower is better) only if every round ratio lies outside the band on the same side; otherwise inconclusive",
];

fn value(m: Measure, v: Option<f64>) -> String {
    match (m, v) {
        (_, None) => "n/a".into(),
        (Measure::ColdStartS, Some(x)) => format!("{x:.3}"),
        (Measure::PeakRssMib, Some(x)) => format!("{x:.1}"),
        (_, Some(x)) => format!("{x:.2}"),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.4}x"))
}

fn band(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("±{:.2}%", x * 100.0))
}

fn tokens(t: &[u32]) -> String {
    t.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

/// `compare.json`'s text.
pub fn to_json(rec: &CompareRecord) -> String {
    let mut s = serde_json::to_string_pretty(rec).unwrap_or_default();
    s.push('\n');
    s
}

/// `compare.md`.
pub fn markdown(rec: &CompareRecord) -> String {
    let s = &rec.spec;
    let mut md = String::new();
    let _ = writeln!(md, "# Binding comparison: {} (candidate) vs {} (reference)\n", s.candidate, s.reference);
    let dirty = if rec.git.dirty == Some(true) { " (dirty)" } else { "" };
    let _ = writeln!(
        md,
        "Study `{}`, plan sha256 `{}`, git `{}`{dirty}, harness {}.\n",
        rec.study, rec.plan_sha256, rec.git.revision, rec.harness_version
    );
    parity_md(rec, &mut md);
    if !rec.parity.pass {
        let _ =
            writeln!(md, "\n**The comparison stopped here: the outputs are not identical, so no speed is reported.**");
        return md;
    }
    noise_md(rec, &mut md);
    ladder_md(rec, &mut md);
    let _ = writeln!(md, "\n## Method\n");
    for d in DEFINITIONS {
        let _ = writeln!(md, "- {d}");
    }
    md
}

fn parity_md(rec: &CompareRecord, md: &mut String) {
    let p = &rec.parity;
    let _ = writeln!(md, "## 1. Parity: {}\n", if p.pass { "PASS" } else { "FAIL" });
    if let Some(n) = p.prefix_tokens {
        let _ = writeln!(
            md,
            "**WARNING: PREFIX PARITY ONLY. The plan sets `parity_prefix_tokens = {n}`: only the first {n} of \
             {} output tokens were required to match. The speed numbers below are for outputs that are NOT \
             token-for-token identical beyond that prefix ({} of {} prompts differ later).**\n",
            p.output_tokens,
            p.full_output_differences.len(),
            p.prompts
        );
    }
    let _ = writeln!(md, "Rule: {}.\n", p.rule);
    let same = (p.prompts as usize).saturating_sub(p.mismatches.len());
    let _ = writeln!(md, "Identical under the rule: {same} of {} prompts.\n", p.prompts);
    for (arm, d) in &p.dialects {
        let _ = writeln!(md, "- dialect of `{arm}`: {} ({})", d.kind.as_str(), d.how);
    }
    let list = |md: &mut String, title: &str, ms: &[ParityMismatch]| {
        if ms.is_empty() {
            return;
        }
        let _ = writeln!(md, "\n{title}\n");
        let _ = writeln!(
            md,
            "| prompt | first difference | from position | reference tokens | candidate tokens | detail |"
        );
        let _ = writeln!(md, "| ---: | ---: | ---: | --- | --- | --- |");
        for m in ms {
            let pos = m.first_difference.map_or("n/a".into(), |p| p.to_string());
            let _ = writeln!(
                md,
                "| {} | {pos} | {} | {} | {} | {} |",
                m.prompt,
                m.window_start,
                tokens(&m.reference_window),
                tokens(&m.candidate_window),
                m.detail
            );
        }
    };
    list(md, "Mismatches (these decide parity):", &p.mismatches);
    list(md, "Differences beyond the prefix (NOT identical outputs):", &p.full_output_differences);
}

fn noise_md(rec: &CompareRecord, md: &mut String) {
    let s = &rec.spec;
    let _ = writeln!(
        md,
        "\n## 2. Noise band, measured before any delta\n\n{} measured twice on fresh servers (X.a, then X.b, \
         interleaved), {} round(s). Band = largest |X.b / X.a - 1|.{}\n",
        s.noise_arm_names().join(" and "),
        s.noise_rounds,
        if s.noise_rounds < 3 { " With so few rounds the band is a rough lower bound on the noise." } else { "" }
    );
    let _ = writeln!(md, "| C | measure | X.b / X.a per arm and round | band |");
    let _ = writeln!(md, "| ---: | --- | --- | ---: |");
    for r in &rec.rows {
        let c = r.concurrency.map_or("server".into(), |c| c.to_string());
        let ratios: Vec<String> =
            r.noise_ratios.iter().map(|n| format!("{} r{}: {:.4}", n.arm, n.round, n.ratio)).collect();
        let _ = writeln!(md, "| {c} | {} | {} | {} |", r.measure.label(), ratios.join(", "), band(r.noise_band));
    }
}

fn ladder_md(rec: &CompareRecord, md: &mut String) {
    let s = &rec.spec;
    let rounds = rec.rows.iter().map(|r| r.rounds.len()).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "\n## 3. Ratios {c} / {r}, {rounds} interleaved round(s), closed loop\n\n\
         Medians over rounds; every ratio is candidate / reference with the noise band beside it.\n",
        c = s.candidate,
        r = s.reference
    );
    let _ = writeln!(
        md,
        "| C | measure | {} (ref) | {} (cand) | ratio | rounds min-max | noise band | verdict |",
        s.reference, s.candidate
    );
    let _ = writeln!(md, "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- |");
    for r in &rec.rows {
        let c = r.concurrency.map_or("server".into(), |c| c.to_string());
        let range = match (r.ratio_min, r.ratio_max) {
            (Some(lo), Some(hi)) => format!("{lo:.4}-{hi:.4}"),
            _ => "n/a".into(),
        };
        let _ = writeln!(
            md,
            "| {c} | {} | {} | {} | {} | {range} | {} | {} |",
            r.measure.label(),
            value(r.measure, r.reference_median),
            value(r.measure, r.candidate_median),
            ratio(r.ratio_median),
            band(r.noise_band),
            r.verdict
        );
    }
}
