//! The summary block `harness bench` prints per cell, laid out as `vllm bench serve`
//! prints its result (40-column labels, the same line names and sections), from one
//! `CellSummary` of the evidence. Owns only the layout: every number is a field of
//! the summary, which replay recomputes from the raw records. Definitions differ
//! from vLLM's where DESIGN section 5 says so: the duration runs from the first
//! intended arrival to the last completion; "Median" is the nearest-rank p50.
//! Must not compute a measure.

use std::fmt::Write;

use crate::metrics::CellSummary;

/// `text` centred in 50 columns of `fill`, as Python's `'{:=^50}'` (extra fill right).
fn rule(t: &mut String, text: &str, fill: char) {
    let pad = 50usize.saturating_sub(text.chars().count());
    let left: String = std::iter::repeat_n(fill, pad / 2).collect();
    let right: String = std::iter::repeat_n(fill, pad - pad / 2).collect();
    let _ = writeln!(t, "{left}{text}{right}");
}

fn line(t: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(t, "{label:<40} {value:<10}");
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.2}"))
}

/// The block for one cell; `load` describes it (e.g. "open-loop 2 req/s poisson").
pub fn render_block(s: &CellSummary, load: &str) -> String {
    let mut t = String::new();
    rule(&mut t, &format!(" Serving Benchmark Result: {} ", s.cell), '=');
    line(&mut t, "Load:", load);
    line(&mut t, "Successful requests:", s.completed);
    line(&mut t, "Failed requests:", s.failed);
    line(&mut t, "Benchmark duration (s):", format!("{:.2}", s.duration_s));
    line(&mut t, "Total input tokens:", s.total_input_tokens);
    line(&mut t, "Total generated tokens:", s.total_output_tokens);
    line(&mut t, "Request throughput (req/s):", format!("{:.2}", s.request_throughput_rps));
    line(&mut t, "Output token throughput (tok/s):", format!("{:.2}", s.output_token_throughput_tps));
    line(&mut t, "Peak concurrent requests:", s.peak_concurrent_requests);
    line(&mut t, "Total Token throughput (tok/s):", format!("{:.2}", s.total_token_throughput_tps));
    let sections: [(&str, &str, [Option<f64>; 3]); 4] = [
        ("Time to First Token", "TTFT", [s.ttft_mean_ms, s.ttft_p50_ms, s.ttft_p99_ms]),
        ("Time per Output Token (excl. 1st token)", "TPOT", [s.tpot_mean_ms, s.tpot_p50_ms, s.tpot_p99_ms]),
        ("Inter-token Latency", "ITL", [s.itl_mean_ms, s.itl_p50_ms, s.itl_p99_ms]),
        ("End-to-end Latency", "E2EL", [s.e2e_mean_ms, s.e2e_p50_ms, s.e2e_p99_ms]),
    ];
    for (title, short, [mean, median, p99]) in sections {
        rule(&mut t, title, '-');
        line(&mut t, &format!("Mean {short} (ms):"), ms(mean));
        line(&mut t, &format!("Median {short} (ms):"), ms(median));
        line(&mut t, &format!("P99 {short} (ms):"), ms(p99));
    }
    rule(&mut t, "", '=');
    t
}
