//! Fixed number formatting for every text the report writes, the claims table (as
//! Markdown and as aligned terminal text) and the per-cell summary in the layout of
//! vLLM's `bench serve` table, one value column per arm (medians across blocks).
//! Owns formatting only; must not compute anything but medians' presentation.

use std::fmt::Write;

use crate::analysis::claims::{Analysis, CellMedians, Claim, HypothesisReport};
use crate::stats::Rule;

/// A fraction as a signed percentage with two decimals: `+4.21%`.
pub fn pct(v: f64) -> String {
    format!("{:+.2}%", v * 100.0)
}

/// A p-value: four decimals, or three significant digits below 0.001.
pub fn pval(p: f64) -> String {
    if p >= 0.001 || p == 0.0 { format!("{p:.4}") } else { format!("{p:.3e}") }
}

/// An optional value with fixed decimals, `n/a` without a sample.
pub fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.decimals$}"))
}

fn wins(h: &HypothesisReport) -> String {
    match &h.sign_test {
        Some(t) if t.ties > 0 => format!("{}/{} ({} tie{})", t.wins, t.n, t.ties, if t.ties == 1 { "" } else { "s" }),
        Some(t) => format!("{}/{}", t.wins, t.n),
        None => "n/a".into(),
    }
}

fn interval(h: &HypothesisReport) -> String {
    match (&h.median, &h.interval) {
        (Some(m), Some(i)) => format!(
            "{} [{}, {}; {:.4}%{}]",
            pct(m.median),
            pct(i.lower),
            pct(i.upper),
            i.coverage * 100.0,
            if i.target_reached { "" } else { " < target" }
        ),
        _ => "n/a".into(),
    }
}

fn effects(h: &HypothesisReport) -> String {
    h.blocks.iter().map(|b| b.effect.map_or("n/a".into(), pct)).collect::<Vec<_>>().join(", ")
}

/// The decision with every failed rule (and its numbers) or every blocking reason.
pub fn decision(h: &HypothesisReport) -> String {
    match &h.claim {
        Claim::Supported => "supported".into(),
        Claim::NotSupported { failed_rules } => {
            let rules: Vec<String> = failed_rules
                .iter()
                .map(|r| match r {
                    Rule::HolmSignTest => {
                        format!("{} (Holm p {} > alpha {})", r.failure(), pval(h.holm.adjusted_p), h.alpha)
                    }
                    Rule::MedianThreshold => format!(
                        "{} (median {} < {:.2}%)",
                        r.failure(),
                        h.median.as_ref().map_or("n/a".into(), |m| pct(m.median)),
                        h.threshold * 100.0
                    ),
                })
                .collect();
            format!("not supported: {}", rules.join("; "))
        }
        Claim::Blocked { reasons, .. } => format!("blocked: {}", reasons.join("; ")),
    }
}

/// The decision in a few words (the rules or blocking kinds, no numbers).
pub fn short_decision(h: &HypothesisReport) -> String {
    match &h.claim {
        Claim::Supported => "supported".into(),
        Claim::NotSupported { failed_rules } => {
            let names: Vec<&str> = failed_rules
                .iter()
                .map(|r| match r {
                    Rule::HolmSignTest => "sign test",
                    Rule::MedianThreshold => "median screen",
                })
                .collect();
            format!("not supported ({} failed)", names.join(" and "))
        }
        Claim::Blocked { failed_requests, reasons } => {
            let mut kinds = Vec::new();
            if *failed_requests > 0 {
                kinds.push(format!("{failed_requests} failed requests"));
            }
            for (needle, kind) in
                [(": server ", "arm fault"), (": no ", "missing measurement"), ("not qualified", "arm not qualified")]
            {
                if reasons.iter().any(|r| r.contains(needle)) {
                    kinds.push(kind.to_string());
                }
            }
            format!("blocked ({})", kinds.join(", "))
        }
    }
}

fn row(h: &HypothesisReport) -> [String; 11] {
    [
        h.name.clone(),
        h.metric.as_str().into(),
        h.cell.clone(),
        format!("{} vs {}", h.candidate, h.control),
        effects(h),
        wins(h),
        h.sign_test.as_ref().map_or("n/a".into(), |t| pval(t.p_value)),
        pval(h.holm.adjusted_p),
        interval(h),
        format!("{:.2}%", h.threshold * 100.0),
        decision(h),
    ]
}

const HEADERS: [&str; 11] = [
    "hypothesis",
    "metric",
    "cell",
    "candidate vs control",
    "per-block effects",
    "wins/n",
    "p",
    "Holm p",
    "median [interval; coverage]",
    "threshold",
    "decision",
];

/// The claims table in Markdown (one row per hypothesis, plan order).
pub fn claims_markdown(a: &Analysis) -> String {
    claims_markdown_with(a, None)
}

/// The claims table in Markdown with an extra last column (its header, then one cell
/// per hypothesis in plan order), e.g. the power figure beside every claim.
pub fn claims_markdown_with(a: &Analysis, extra: Option<&(String, Vec<String>)>) -> String {
    let mut headers: Vec<&str> = HEADERS.to_vec();
    headers.extend(extra.map(|(h, _)| h.as_str()));
    let mut o = format!("| {} |\n|{}\n", headers.join(" | "), " --- |".repeat(headers.len()));
    for (i, h) in a.hypotheses.iter().enumerate() {
        let mut cells: Vec<String> = row(h).to_vec();
        cells.extend(extra.map(|(_, c)| c.get(i).cloned().unwrap_or_else(|| "n/a".into())));
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
    o
}

/// The claims table as aligned terminal text (no per-block effects; short decisions);
/// empty for a descriptive study (no hypotheses).
pub fn claims_terminal(a: &Analysis) -> String {
    if a.hypotheses.is_empty() {
        return String::new();
    }
    let keep = [0usize, 1, 2, 3, 5, 6, 7, 8, 9];
    let mut rows: Vec<Vec<String>> =
        vec![keep.iter().map(|&i| HEADERS[i].to_string()).chain(["decision".into()]).collect()];
    for h in &a.hypotheses {
        let r = row(h);
        rows.push(keep.iter().map(|&i| r[i].clone()).chain([short_decision(h)]).collect());
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut o = String::new();
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(v, w)| format!("{v:<w$}")).collect();
        let _ = writeln!(o, "{}", line.join("  ").trim_end());
    }
    o
}

enum Line {
    Title(&'static str),
    Section(&'static str),
    Value(&'static str, &'static str, usize),
    /// A value printed only when some arm has it (goodput, with `[slo]`).
    Optional(&'static str, &'static str, usize),
}

use Line::{Optional, Section, Title, Value};

const LAYOUT: &[Line] = &[
    Title("Serving Benchmark Result"),
    Value("Successful requests:", "completed", 0),
    Value("Benchmark duration (s):", "duration_s", 2),
    Value("Total input tokens:", "total_input_tokens", 0),
    Value("Total generated tokens:", "total_output_tokens", 0),
    Value("Request throughput (req/s):", "request_throughput_rps", 2),
    Optional("Request goodput (req/s):", "goodput_rps", 2),
    Optional("SLO attainment:", "slo_attainment", 3),
    Value("Output token throughput (tok/s):", "output_token_throughput_tps", 2),
    Value("Peak concurrent requests:", "peak_concurrent_requests", 0),
    Value("Total Token throughput (tok/s):", "total_token_throughput_tps", 2),
    Section("Time to First Token"),
    Value("Mean TTFT (ms):", "ttft_mean_ms", 2),
    Value("Median TTFT (ms):", "ttft_p50_ms", 2),
    Value("P95 TTFT (ms):", "ttft_p95_ms", 2),
    Value("P99 TTFT (ms):", "ttft_p99_ms", 2),
    Section("Time per Output Token (excl. 1st token)"),
    Value("Mean TPOT (ms):", "tpot_mean_ms", 2),
    Value("Median TPOT (ms):", "tpot_p50_ms", 2),
    Value("P95 TPOT (ms):", "tpot_p95_ms", 2),
    Value("P99 TPOT (ms):", "tpot_p99_ms", 2),
    Section("Inter-token Latency"),
    Value("Mean ITL (ms):", "itl_mean_ms", 2),
    Value("Median ITL (ms):", "itl_p50_ms", 2),
    Value("P95 ITL (ms):", "itl_p95_ms", 2),
    Value("P99 ITL (ms):", "itl_p99_ms", 2),
    Section("End-to-end Latency"),
    Value("Mean E2EL (ms):", "e2e_mean_ms", 2),
    Value("Median E2EL (ms):", "e2e_p50_ms", 2),
    Value("P95 E2EL (ms):", "e2e_p95_ms", 2),
    Value("P99 E2EL (ms):", "e2e_p99_ms", 2),
    Section("Request lengths (tokens sent / received)"),
    Value("Min input tokens:", "input_tokens_min", 0),
    Value("Median input tokens:", "input_tokens_p50", 0),
    Value("P90 input tokens:", "input_tokens_p90", 0),
    Value("Max input tokens:", "input_tokens_max", 0),
    Value("Min output tokens:", "output_tokens_min", 0),
    Value("Median output tokens:", "output_tokens_p50", 0),
    Value("P90 output tokens:", "output_tokens_p90", 0),
    Value("Max output tokens:", "output_tokens_max", 0),
    Title("From intended arrival"),
    Value("Mean TTFT (ms):", "ttft_from_intended_mean_ms", 2),
    Value("Median TTFT (ms):", "ttft_from_intended_p50_ms", 2),
    Value("P95 TTFT (ms):", "ttft_from_intended_p95_ms", 2),
    Value("P99 TTFT (ms):", "ttft_from_intended_p99_ms", 2),
    Value("Mean E2EL (ms):", "e2e_from_intended_mean_ms", 2),
    Value("Median E2EL (ms):", "e2e_from_intended_p50_ms", 2),
    Value("P95 E2EL (ms):", "e2e_from_intended_p95_ms", 2),
    Value("P99 E2EL (ms):", "e2e_from_intended_p99_ms", 2),
    Value("Median dispatch lag (ms):", "dispatch_lag_p50_ms", 3),
    Value("P99 dispatch lag (ms):", "dispatch_lag_p99_ms", 3),
];

const WIDTH: usize = 50;
const COLUMN: usize = 20;

fn rule(o: &mut String, fill: char, title: &str, width: usize) {
    let title = if title.is_empty() || fill == '-' { title.to_string() } else { format!(" {title} ") };
    let pad = width.saturating_sub(title.chars().count());
    let _ = writeln!(o, "{}{title}{}", fill.to_string().repeat(pad / 2), fill.to_string().repeat(pad - pad / 2));
}

/// One cell's table: a value column per arm, each the median across that arm's blocks
/// (`Successful requests` too); `Failed requests` is the sum over blocks.
pub fn cell_table(arms: &[&CellMedians]) -> String {
    let width = WIDTH.max(41 + COLUMN * arms.len());
    let mut o = String::new();
    let cols = |values: Vec<String>| values.iter().map(|v| format!("{v:<COLUMN$}")).collect::<String>();
    for line in LAYOUT {
        match line {
            Title(t) => {
                rule(&mut o, '=', t, width);
                let names = cols(arms.iter().map(|m| m.arm.clone()).collect());
                let _ = writeln!(o, "{:<40} {}", "", names.trim_end());
                if *t == "Serving Benchmark Result" {
                    let blocks = cols(arms.iter().map(|m| m.blocks.len().to_string()).collect());
                    let _ = writeln!(o, "{:<40} {}", "Blocks (medians across them):", blocks.trim_end());
                    let failed = cols(arms.iter().map(|m| m.failed.to_string()).collect());
                    let _ = writeln!(o, "{:<40} {}", "Failed requests (sum over blocks):", failed.trim_end());
                }
            }
            Section(t) => rule(&mut o, '-', t, width),
            Value(label, field, decimals) => {
                let values = cols(arms.iter().map(|m| num(m.get(field), *decimals)).collect());
                let _ = writeln!(o, "{label:<40} {}", values.trim_end());
            }
            Optional(label, field, decimals) => {
                if arms.iter().any(|m| m.get(field).is_some()) {
                    let values = cols(arms.iter().map(|m| num(m.get(field), *decimals)).collect());
                    let _ = writeln!(o, "{label:<40} {}", values.trim_end());
                }
            }
        }
    }
    rule(&mut o, '=', "", width);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_the_terminal_block_prints_is_in_the_catalogue() {
        for line in LAYOUT {
            if let Value(label, name, _) | Optional(label, name, _) = line {
                assert!(crate::metrics::getter(name).is_some(), "{label} prints {name}, not a summary field");
            }
        }
    }
}
