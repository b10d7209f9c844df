//! Arrival schedules: each cell's ordered request list with explicit intended
//! offsets in nanoseconds from the cell start, and the prompt each request sends.
//! Owns the arrival processes. Must not read clocks, sleep or rescale offsets to hit
//! a duration: the realized finite rate of an open-loop trace need not equal its
//! generating rate.
//!
//! - Open loop: the first request is at offset 0; request i+1 is at offset i plus a
//!   gap. Poisson gaps are exponential: -ln(1 - u) / rate with u uniform in [0, 1).
//!   Gamma gaps (vLLM's `--burstiness`) have shape = burstiness and
//!   scale = 1 / (rate * burstiness), drawn with `rand_distr::Gamma` (Marsaglia-Tsang,
//!   as pinned in Cargo.lock). Each gap is rounded to whole nanoseconds and offsets
//!   are summed in integers, so they never drift.
//! - Constant (`load = "constant"`, guidellm's `constant`): request i at
//!   round(i * 1e9 / rate) ns, computed from i directly (never by summing gaps), in
//!   f64 and rounded half away from zero: rate 3 gives 0, 333333333, 666666667,
//!   1000000000. No seed is drawn.
//! - Closed loop: every request intended at offset 0, in index order.
//! - Isolated: request i at offset i * spacing.
//! - Prompts: request i of a cell with L-token prompts sends the panel's document
//!   i mod N of length L (`PanelSpec::prompt_index`), the same for every arrival law.

use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

use super::TraceError;
use super::arrival_file::ArrivalRow;
use crate::plan::seed::{TraceRng, cell_seed, rng, unit};
use crate::plan::{Arrival, Plan, ResolvedCell, ResolvedLoad};

/// One request of a trace: one JSONL line `{"index":..,"offset_ns":..,"prompt":..}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceEntry {
    /// 0-based position in the cell's request list.
    pub index: u64,
    /// Intended arrival, nanoseconds after the cell start.
    pub offset_ns: u64,
    /// Index into `prompts.jsonl`.
    pub prompt: u64,
    /// Trace-file cells with `trace_lengths = true`: the file row's input length
    /// (the prompt is the panel's nearest length) and output length. Absent
    /// otherwise (and then not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_length: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_length: Option<u32>,
}

/// A cell's full request list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub cell: String,
    pub entries: Vec<TraceEntry>,
}

/// Draws one open-loop gap in seconds.
pub fn gap_s(rng: &mut TraceRng, rate_rps: f64, arrival: Arrival) -> f64 {
    match arrival {
        Arrival::Poisson => -(1.0 - unit(rng)).ln() / rate_rps,
        Arrival::Constant => 1.0 / rate_rps,
        Arrival::Gamma { burstiness } => {
            // Validation guarantees finite positive rate and burstiness.
            match Gamma::new(burstiness, 1.0 / (rate_rps * burstiness)) {
                Ok(g) => g.sample(rng),
                Err(_) => f64::NAN,
            }
        }
    }
}

/// Evenly spaced offsets: offset i = round(i * 1e9 / rate) ns.
pub fn constant_offsets(count: u64, rate_rps: f64) -> Vec<u64> {
    (0..count).map(|i| (i as f64 * 1e9 / rate_rps).round() as u64).collect()
}

/// Open-loop offsets: 0 first, then cumulative rounded gaps (constant arrivals:
/// [`constant_offsets`], no seed used).
pub fn open_loop_offsets(seed: [u8; 32], count: u64, rate_rps: f64, arrival: Arrival) -> Vec<u64> {
    if arrival == Arrival::Constant {
        return constant_offsets(count, rate_rps);
    }
    let mut r = rng(seed);
    let mut offsets = Vec::with_capacity(count as usize);
    let mut at: u64 = 0;
    for i in 0..count {
        if i > 0 {
            let gap = gap_s(&mut r, rate_rps, arrival);
            at = at.saturating_add((gap * 1e9).round() as u64);
        }
        offsets.push(at);
    }
    offsets
}

/// The trace of one resolved cell of `plan` (a trace-file cell needs its file's
/// rows: [`cell_trace_from`]).
pub fn cell_trace(plan: &Plan, cell: &ResolvedCell) -> Result<Trace, TraceError> {
    cell_trace_from(plan, cell, None)
}

/// The trace of one resolved cell; `rows` are the parsed rows of its trace file
/// (`load = "trace"`; ignored for other loads).
pub fn cell_trace_from(plan: &Plan, cell: &ResolvedCell, rows: Option<&[ArrivalRow]>) -> Result<Trace, TraceError> {
    let trace = if let ResolvedLoad::Trace { time_scale, lengths } = cell.load {
        super::replayed::trace_cell(plan, cell, rows, time_scale, lengths)?
    } else {
        generated_trace(plan, cell)?
    };
    // Offsets are sums of gaps (saturating): a rate of 1e-300 or a huge spacing or
    // time scale would pass unnoticed and the runner would wait for ever.
    let span = trace.entries.last().map_or(0, |e| e.offset_ns);
    crate::plan::check_trace_span(span).map_err(|message| {
        TraceError::Plan(crate::plan::PlanError::invalid(format!("cells.{}", cell.name), message))
    })?;
    Ok(trace)
}

/// The trace of a cell whose arrivals the harness draws (not a trace file).
fn generated_trace(plan: &Plan, cell: &ResolvedCell) -> Result<Trace, TraceError> {
    let offsets: Vec<u64> = match cell.load {
        ResolvedLoad::Trace { .. } => Vec::new(),
        ResolvedLoad::Closed { .. } => vec![0; cell.count as usize],
        ResolvedLoad::Isolated { spacing_ns } => (0..cell.count).map(|i| i.saturating_mul(spacing_ns)).collect(),
        ResolvedLoad::Open { rate_rps, arrival } => {
            let seed = cell_seed(plan.study.seed, &cell.name);
            open_loop_offsets(seed, cell.count, rate_rps, arrival)
        }
    };
    let entries = offsets
        .into_iter()
        .enumerate()
        .map(|(i, offset_ns)| {
            let index = i as u64;
            let prompt = plan.prompts.prompt_index(cell.input_tokens, index).ok_or_else(|| {
                TraceError::Plan(crate::plan::PlanError::invalid(
                    format!("cells.{}.input_tokens", cell.name),
                    "not a panel length",
                ))
            })?;
            Ok(TraceEntry { index, offset_ns, prompt, input_length: None, output_length: None })
        })
        .collect::<Result<Vec<_>, TraceError>>()?;
    Ok(Trace { cell: cell.name.clone(), entries })
}

impl Trace {
    /// The JSONL text: one entry per line, `\n`-terminated, keys in a fixed order.
    pub fn to_jsonl(&self) -> String {
        let mut s = String::with_capacity(self.entries.len() * 48);
        for e in &self.entries {
            s.push_str(&format!("{{\"index\":{},\"offset_ns\":{},\"prompt\":{}", e.index, e.offset_ns, e.prompt));
            if let Some(l) = e.input_length {
                s.push_str(&format!(",\"input_length\":{l}"));
            }
            if let Some(l) = e.output_length {
                s.push_str(&format!(",\"output_length\":{l}"));
            }
            s.push_str("}\n");
        }
        s
    }

    /// Reads a trace written by [`Trace::to_jsonl`], checking that indices run 0..n
    /// and offsets never decrease.
    pub fn from_jsonl(cell: &str, text: &str) -> Result<Trace, TraceError> {
        let bad = |line: usize, message: String| TraceError::Malformed {
            what: format!("trace of cell {cell:?}, line {line}"),
            message,
        };
        let mut entries: Vec<TraceEntry> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let e: TraceEntry = serde_json::from_str(line).map_err(|e| bad(n + 1, e.to_string()))?;
            if e.index != n as u64 {
                return Err(bad(n + 1, format!("index {} out of order", e.index)));
            }
            if entries.last().is_some_and(|p| p.offset_ns > e.offset_ns) {
                return Err(bad(n + 1, "offset_ns decreases".into()));
            }
            entries.push(e);
        }
        Ok(Trace { cell: cell.to_string(), entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_bound(seed: &str, rate: f64, arrival: Arrival, sd_gap: f64) -> (f64, f64) {
        let n = 100_000u64;
        let offsets = open_loop_offsets(cell_seed(42, seed), n + 1, rate, arrival);
        let mean_s = offsets[n as usize] as f64 / 1e9 / n as f64;
        // 5 standard errors of the mean of n gaps, plus the rounding of n gaps (<= 0.5 ns each).
        let bound = 5.0 * sd_gap / (n as f64).sqrt() + 0.5e-9;
        ((mean_s - 1.0 / rate).abs(), bound)
    }

    #[test]
    fn poisson_mean_gap_is_within_five_sigma() {
        let rate = 14.9;
        // Exponential gaps: sd = mean = 1 / rate.
        let (err, bound) = mean_and_bound("open", rate, Arrival::Poisson, 1.0 / rate);
        assert!(err < bound, "mean gap off by {err} s, bound {bound} s");
    }

    #[test]
    fn gamma_mean_gap_is_within_five_sigma() {
        let (rate, b): (f64, f64) = (8.1, 0.5);
        // Gamma(k = b, theta = 1/(rate b)): variance k theta^2 = 1 / (rate^2 b).
        let sd = 1.0 / (rate * b.sqrt());
        let (err, bound) = mean_and_bound("gamma", rate, Arrival::Gamma { burstiness: b }, sd);
        assert!(err < bound, "mean gap off by {err} s, bound {bound} s");
    }

    #[test]
    fn open_loop_is_deterministic_per_seed_and_starts_at_zero() {
        let a = open_loop_offsets(cell_seed(1, "c"), 1000, 3.7, Arrival::Poisson);
        let b = open_loop_offsets(cell_seed(1, "c"), 1000, 3.7, Arrival::Poisson);
        let c = open_loop_offsets(cell_seed(2, "c"), 1000, 3.7, Arrival::Poisson);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a[0], 0);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        // A prefix does not depend on the count: no rescaling to a duration.
        assert_eq!(open_loop_offsets(cell_seed(1, "c"), 10, 3.7, Arrival::Poisson), a[..10]);
    }

    #[test]
    fn golden_offsets_pin_the_generator() {
        // If this fails, the generator, seed derivation or gap law changed: every
        // committed trace would change too. Bump the seed tag ("v1") if intended.
        let a = open_loop_offsets(cell_seed(20261019, "open-near"), 4, 14.9, Arrival::Poisson);
        assert_eq!(a, GOLDEN);
    }

    // Reproduced independently by the Python snippet in docs/plan.md.
    const GOLDEN: [u64; 4] = [0, 210_178_528, 256_457_137, 277_246_442];

    #[test]
    fn constant_offsets_are_exact_and_do_not_drift() {
        assert_eq!(constant_offsets(4, 3.0), [0, 333_333_333, 666_666_667, 1_000_000_000]);
        assert_eq!(constant_offsets(3, 4.0), [0, 250_000_000, 500_000_000]);
        let seed = cell_seed(1, "c");
        assert_eq!(open_loop_offsets(seed, 4, 3.0, Arrival::Constant), constant_offsets(4, 3.0));
        // Computed from the index, not by summing rounded gaps: 1/7 s = 142857142.857 ns
        // would drift by 0.857 ns per gap if the rounded gap were summed.
        let far = constant_offsets(7001, 7.0);
        assert_eq!(far[7000], 1_000_000_000_000);
        assert_eq!(far[1], 142_857_143);
    }

    #[test]
    fn jsonl_round_trips() {
        let t = Trace {
            cell: "c".into(),
            entries: vec![
                TraceEntry { index: 0, offset_ns: 0, prompt: 3, input_length: None, output_length: None },
                TraceEntry { index: 1, offset_ns: 12, prompt: 4, input_length: Some(7), output_length: Some(9) },
            ],
        };
        let text = t.to_jsonl();
        assert_eq!(
            text,
            "{\"index\":0,\"offset_ns\":0,\"prompt\":3}\n\
             {\"index\":1,\"offset_ns\":12,\"prompt\":4,\"input_length\":7,\"output_length\":9}\n"
        );
        assert_eq!(Trace::from_jsonl("c", &text).unwrap(), t);
        assert!(Trace::from_jsonl("c", "{\"index\":1,\"offset_ns\":0,\"prompt\":0}\n").is_err());
    }
}
