//! The text table of one `CellSummary`, in the layout of vLLM's `bench serve`
//! ("==== Serving Benchmark Result ====", 40-column labels, two decimals, sections
//! for TTFT, TPOT, ITL and E2EL), followed by this harness's extra lines: latency from
//! intended arrival, dispatch lag, failures by class, stream event counts, and a note
//! on how the numbers were computed. Owns formatting only; must not compute measures.
//!
//! Differences from vLLM's table, on purpose: "Median" is the nearest-rank p50 (vLLM
//! interpolates); the duration runs from the first intended arrival to the last
//! completion (not from the benchmark's start); "Peak output token throughput" is
//! vLLM's own (token-bearing events in the busiest one-second bucket from the
//! earliest send, the vLLM export's `max_output_tokens_per_s`), printed only when
//! the caller passes it (`LoadFacts::peak_output_tps`: `harness bench` does), while
//! "Peak concurrent requests" is the most requests in flight at one instant (vLLM
//! counts a request in every one-second bucket it touches); the definitions note
//! says both; a measure with no sample prints `n/a`. `render_vllm_block` is vLLM's
//! part alone (with the load's "Maximum request concurrency" / "Request rate
//! configured" lines, and only
//! the sections and percentile lines vLLM's `--percentile-metrics` and
//! `--metric-percentiles` ask for, when they do: `BlockPercentiles`),
//! `render_extras` the rest, `render_line` one line per cell.

use std::fmt::Write;

use super::CellSummary;

const WIDTH: usize = 50;

struct Table(String);

impl Table {
    fn title(&mut self, fill: char, title: &str) {
        let title = if title.is_empty() { String::new() } else { format!(" {title} ") };
        let pad = WIDTH.saturating_sub(title.chars().count());
        let (left, right) = (pad / 2, pad - pad / 2);
        let fill = |n: usize| fill.to_string().repeat(n);
        let _ = writeln!(self.0, "{}{title}{}", fill(left), fill(right));
    }

    fn section(&mut self, title: &str) {
        // vLLM centres section names without surrounding spaces.
        let pad = WIDTH.saturating_sub(title.chars().count());
        let _ = writeln!(self.0, "{}{title}{}", "-".repeat(pad / 2), "-".repeat(pad - pad / 2));
    }

    fn line(&mut self, label: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{label:<40} {value}");
    }

    fn ms(&mut self, label: &str, value: Option<f64>) {
        self.ms_prec(label, value, 2);
    }

    fn ms_prec(&mut self, label: &str, value: Option<f64>, decimals: usize) {
        match value {
            Some(v) => self.line(label, format!("{v:.decimals$}")),
            None => self.line(label, "n/a"),
        }
    }

    fn dist(&mut self, name: &str, values: [Option<f64>; 4]) {
        for (stat, v) in ["Mean", "Median", "P95", "P99"].into_iter().zip(values) {
            self.ms(&format!("{stat} {name} (ms):"), v);
        }
    }
}

/// vLLM's name of a percentile: `str(int(p))` when whole, else `str(p)` (`99`,
/// `99.9`), in its block's lines (`P99 TTFT (ms):`) and its result's keys.
pub fn percentile_word(p: f64) -> String {
    if p.fract() == 0.0 { format!("{}", p as i64) } else { format!("{p}") }
}

/// What vLLM's `--percentile-metrics` and `--metric-percentiles` ask of the block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockPercentiles {
    /// The sections shown, of `ttft`, `tpot`, `itl`, `e2el` (vLLM's names); empty:
    /// all four.
    pub metrics: Vec<String>,
    /// The percentile lines after Mean and Median: each level with its `[TTFT,
    /// TPOT, ITL, E2EL]` values in ms (computed by the caller, by the summary's
    /// definition); empty: the summary's P95 and P99.
    pub lines: Vec<(f64, [Option<f64>; 4])>,
}

/// The four latency sections of vLLM's block: its metric name, its heading, the
/// table's label.
const SECTIONS: [(&str, &str, &str); 4] = [
    ("ttft", "Time to First Token", "TTFT"),
    ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
    ("itl", "Inter-token Latency", "ITL"),
    ("e2el", "End-to-end Latency", "E2EL"),
];

/// A token count, or `n/a` without a sample.
fn tokens(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}"))
}

/// What a cell's load was, for the lines vLLM prints about it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadFacts {
    /// Closed loop: its concurrency ("Maximum request concurrency").
    pub max_concurrency: Option<u32>,
    /// Open loop: its rate ("Request rate configured (RPS)").
    pub rate_rps: Option<f64>,
    /// A closed loop, whose requests are all intended at the cell start.
    pub closed: bool,
    /// vLLM's "Peak output token throughput" of the cell (its export's
    /// `max_output_tokens_per_s`), when the caller computed it.
    pub peak_output_tps: Option<f64>,
}

/// The summary as text, one `\n`-terminated line each (see the module doc): vLLM's
/// block, then this harness's extra lines.
pub fn render_table(s: &CellSummary) -> String {
    let mut t = vllm_block(s, LoadFacts::default(), &BlockPercentiles::default());
    t.0.push_str(&render_extras(s, LoadFacts::default()));
    t.0
}

/// vLLM's block alone (its lines, in its order, with the load's lines when `load`
/// gives them, the sections and percentiles `pct` asks for), closed by the
/// definitions note.
pub fn render_vllm_block(s: &CellSummary, load: LoadFacts, pct: &BlockPercentiles) -> String {
    let mut t = vllm_block(s, load, pct);
    t.title('=', "");
    notes(&mut t, s);
    if load.peak_output_tps.is_some() {
        t.0.push_str(
            "Peaks: output tokens as vLLM counts them (token events in the busiest 1-s bucket from the earliest send); \
             concurrent requests at one instant (vLLM: in any 1-s bucket).\n",
        );
    }
    t.0
}

fn notes(t: &mut Table, s: &CellSummary) {
    let _ = writeln!(
        t.0,
        "Percentiles: {} over {} valid completed requests; failures counted, not measured.\n\
         Duration: first intended arrival to last completion (drain included).\n\
         Output tokens: usage.completion_tokens when present ({} requests), else event tokens ({}).",
        s.percentile_method.replace('_', " "),
        s.completed,
        s.output_tokens_from_usage_requests,
        s.output_tokens_from_events_requests,
    );
}

fn vllm_block(s: &CellSummary, load: LoadFacts, pct: &BlockPercentiles) -> Table {
    let mut t = Table(String::new());
    t.title('=', "Serving Benchmark Result");
    t.line("Successful requests:", s.completed);
    t.line("Failed requests:", s.failed);
    if let Some(c) = load.max_concurrency {
        t.line("Maximum request concurrency:", c);
    }
    if let Some(r) = load.rate_rps {
        t.line("Request rate configured (RPS):", format!("{r:.2}"));
    }
    t.line("Benchmark duration (s):", format!("{:.2}", s.duration_s));
    t.line("Total input tokens:", s.total_input_tokens);
    t.line("Total generated tokens:", s.total_output_tokens);
    t.line("Request throughput (req/s):", format!("{:.2}", s.request_throughput_rps));
    if let Some(g) = s.goodput_rps {
        t.line("Request goodput (req/s):", format!("{g:.2}"));
    }
    t.line("Output token throughput (tok/s):", format!("{:.2}", s.output_token_throughput_tps));
    if let Some(p) = load.peak_output_tps {
        t.line("Peak output token throughput (tok/s):", format!("{p:.2}"));
    }
    t.line("Peak concurrent requests:", s.peak_concurrent_requests);
    t.line("Total Token throughput (tok/s):", format!("{:.2}", s.total_token_throughput_tps));
    let summary = [
        [s.ttft_mean_ms, s.ttft_p50_ms, s.ttft_p95_ms, s.ttft_p99_ms],
        [s.tpot_mean_ms, s.tpot_p50_ms, s.tpot_p95_ms, s.tpot_p99_ms],
        [s.itl_mean_ms, s.itl_p50_ms, s.itl_p95_ms, s.itl_p99_ms],
        [s.e2e_mean_ms, s.e2e_p50_ms, s.e2e_p95_ms, s.e2e_p99_ms],
    ];
    for (i, ((metric, heading, name), values)) in SECTIONS.into_iter().zip(summary).enumerate() {
        if !pct.metrics.is_empty() && !pct.metrics.iter().any(|m| m == metric) {
            continue;
        }
        t.section(heading);
        if pct.lines.is_empty() {
            t.dist(name, values);
            continue;
        }
        t.ms(&format!("Mean {name} (ms):"), values[0]);
        t.ms(&format!("Median {name} (ms):"), values[1]);
        for (p, row) in &pct.lines {
            t.ms(&format!("P{} {name} (ms):", percentile_word(*p)), row[i]);
        }
    }
    t.section("Request lengths (tokens sent / received)");
    let input = [s.input_tokens_min, s.input_tokens_p50, s.input_tokens_p90, s.input_tokens_max];
    let output = [s.output_tokens_min, s.output_tokens_p50, s.output_tokens_p90, s.output_tokens_max];
    for (stat, (i, o)) in ["Min", "Median", "P90", "Max"].into_iter().zip(input.into_iter().zip(output)) {
        t.line(&format!("{stat} input / output tokens:"), format!("{} / {}", tokens(i), tokens(o)));
    }
    t
}

/// This harness's lines after vLLM's block: latency from intended arrival,
/// dispatch lag, failures by class, stream events, and the definitions note.
pub fn render_extras(s: &CellSummary, load: LoadFacts) -> String {
    let mut t = Table(String::new());
    t.title('=', "From intended arrival");
    if load.closed {
        t.0.push_str(
            "(closed loop: every request is intended at the cell start, so these include the wait for a client slot)\n",
        );
    }
    t.section("Time to First Token");
    let ttft_i = [s.ttft_from_intended_mean_ms, s.ttft_from_intended_p50_ms];
    t.dist("TTFT", [ttft_i[0], ttft_i[1], s.ttft_from_intended_p95_ms, s.ttft_from_intended_p99_ms]);
    t.section("End-to-end Latency");
    let e2e_i = [s.e2e_from_intended_mean_ms, s.e2e_from_intended_p50_ms];
    t.dist("E2EL", [e2e_i[0], e2e_i[1], s.e2e_from_intended_p95_ms, s.e2e_from_intended_p99_ms]);
    t.section("Dispatch lag (dispatch - intended)");
    // Microsecond resolution: a dispatcher is judged in tens of microseconds.
    t.ms_prec("Median dispatch lag (ms):", s.dispatch_lag_p50_ms, 3);
    t.ms_prec("P99 dispatch lag (ms):", s.dispatch_lag_p99_ms, 3);
    t.ms_prec("Max dispatch lag (ms):", s.dispatch_lag_max_ms, 3);

    t.title('=', "Failures and stream");
    t.section("Failures by class");
    if s.failed_by_class.is_empty() {
        t.0.push_str("(none)\n");
    }
    for (class, n) in &s.failed_by_class {
        t.line(&format!("{class}:"), n);
    }
    t.section("Stream events (valid requests)");
    t.line("Events (excl. [DONE]):", s.stream_events);
    t.line("Empty events (no tokens):", s.empty_events);
    t.line("Multi-token events:", s.multi_token_events);
    t.line("Requests without token events:", s.requests_without_token_events);
    t.line("Usage/event token count mismatches:", s.usage_event_token_mismatch_requests);
    t.line("TPOT samples (>= 2 output tokens):", s.tpot_samples);
    t.line("ITL samples (token event gaps):", s.itl_samples);
    t.title('=', "");
    notes(&mut t, s);
    t.0
}

/// One line per cell (what `harness run` prints as each cell ends; the tables are
/// in report.md).
pub fn render_line(s: &CellSummary) -> String {
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.1}"));
    format!(
        "{} of {} ok, {:.2} req/s, {:.1} tok/s; TTFT p50 {} ms, TPOT p50 {} ms, E2E p50 {} ms, p99 {} ms",
        s.completed,
        s.requests,
        s.request_throughput_rps,
        s.output_token_throughput_tps,
        ms(s.ttft_p50_ms),
        ms(s.tpot_p50_ms),
        ms(s.e2e_p50_ms),
        ms(s.e2e_p99_ms)
    )
}
