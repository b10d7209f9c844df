//! `compare.json`, the report of `harness compare`, as one typed record: what
//! compare writes and what replay reads. Owns the file's name, its format string
//! and every part of it: the `[compare]` settings as validated (`CompareSpec`), the
//! parity verdict (`ParityReport`), the measured values (`Obs`), the table rows
//! (`Row`) and the measures' names (`Measure`). Must not compute: the band and the
//! ratios are `commands::compare::band`'s, the parity verdict `commands::compare::
//! parity`'s (and replay recomputes both its own way).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{GitInfo, ServerRecord};
use crate::protocol::routes::ServerKind;

/// A comparison's report, at the evidence root.
pub const COMPARE_FILE: &str = "compare.json";
/// The `format` of `compare.json`.
pub const COMPARE_FORMAT: &str = "harness-compare/1";

/// `compare.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareRecord {
    pub format: String,
    pub study: String,
    pub plan_sha256: String,
    pub harness_version: String,
    pub git: GitInfo,
    pub spec: CompareSpec,
    pub status: CompareStatus,
    pub parity: ParityReport,
    /// Empty when parity failed.
    pub rows: Vec<Row>,
    pub units: Vec<ServerRecord>,
    pub observations: Vec<Obs>,
    pub definitions: Vec<String>,
}

/// How a comparison ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareStatus {
    /// Parity failed: no speed is reported.
    ParityFailed,
    Complete,
}

impl CompareStatus {
    /// The name `compare.json` writes.
    pub fn name(self) -> &'static str {
        match self {
            CompareStatus::ParityFailed => "parity_failed",
            CompareStatus::Complete => "complete",
        }
    }
}

/// Which arms are measured twice (A, A') for the noise band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoiseArms {
    Reference,
    Both,
}

/// The validated `[compare]` settings (`plan::compare::parse` makes them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareSpec {
    pub reference: String,
    pub candidate: String,
    pub noise_arms: NoiseArms,
    /// Rounds of A, A' (each a fresh server per arm) before any comparison round.
    pub noise_rounds: u32,
    /// Panel documents 0..n of length `parity_input_tokens`.
    pub parity_prompts: u32,
    pub parity_input_tokens: u32,
    pub parity_output_tokens: u32,
    /// When set, parity compares only the first N output tokens: stated loudly in
    /// every output. `None`: the whole output must be identical.
    pub parity_prefix_tokens: Option<u32>,
    /// Dialects fixed by the plan; arms not listed are detected.
    pub dialects: BTreeMap<String, ServerKind>,
}

impl CompareSpec {
    /// The arms measured twice for the noise band, in run order.
    pub fn noise_arm_names(&self) -> Vec<&str> {
        match self.noise_arms {
            NoiseArms::Reference => vec![self.reference.as_str()],
            NoiseArms::Both => vec![self.reference.as_str(), self.candidate.as_str()],
        }
    }
}

/// The parity verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParityReport {
    pub pass: bool,
    pub rule: String,
    pub prompts: u32,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Set only when the plan says `parity_prefix_tokens`: then only this many
    /// leading output tokens were required to match.
    pub prefix_tokens: Option<u32>,
    /// Mismatches within the compared tokens (what decides `pass`).
    pub mismatches: Vec<ParityMismatch>,
    /// With a prefix rule: where the full outputs differ beyond it.
    #[serde(default)]
    pub full_output_differences: Vec<ParityMismatch>,
    pub dialects: BTreeMap<String, Dialect>,
}

/// One prompt whose outputs differ (or that one arm did not answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityMismatch {
    pub prompt: u64,
    /// First differing position (or the shorter length); `None` when an arm failed.
    pub first_difference: Option<usize>,
    /// Position of the first token of both windows.
    pub window_start: usize,
    pub reference_window: Vec<u32>,
    pub candidate_window: Vec<u32>,
    pub reference_tokens: usize,
    pub candidate_tokens: usize,
    pub detail: String,
}

/// How an arm's dialect was chosen.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dialect {
    /// `openai-vllm` or `llama-cpp`.
    #[serde(with = "dialect_name")]
    pub kind: ServerKind,
    pub how: String,
}

/// A dialect by its name in plans and flags (`ServerKind::as_str`).
mod dialect_name {
    use super::ServerKind;

    pub fn serialize<S: serde::Serializer>(k: &ServerKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.as_str())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ServerKind, D::Error> {
        let name = <String as serde::Deserialize>::deserialize(d)?;
        [ServerKind::OpenAiVllm, ServerKind::LlamaCpp]
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown dialect {name:?}")))
    }
}

/// What is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// (prompt + output tokens of valid requests) / observation interval.
    TotalTokensPerS,
    /// Output tokens of valid requests / observation interval.
    OutputTokensPerS,
    TtftP50Ms,
    TtftP99Ms,
    ItlP50Ms,
    ItlP99Ms,
    /// Spawn to the first 200 from the health path.
    ColdStartS,
    /// VmHWM of the server process before the stop.
    PeakRssMib,
}

impl Measure {
    /// The measures of each cell.
    pub const CELL: [Measure; 6] = [
        Measure::TotalTokensPerS,
        Measure::OutputTokensPerS,
        Measure::TtftP50Ms,
        Measure::TtftP99Ms,
        Measure::ItlP50Ms,
        Measure::ItlP99Ms,
    ];
    /// The measures of each server start (key `server`).
    pub const SERVER: [Measure; 2] = [Measure::ColdStartS, Measure::PeakRssMib];

    /// The name `compare.json` writes (`total_tokens_per_s`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Measure::TotalTokensPerS => "total_tokens_per_s",
            Measure::OutputTokensPerS => "output_tokens_per_s",
            Measure::TtftP50Ms => "ttft_p50_ms",
            Measure::TtftP99Ms => "ttft_p99_ms",
            Measure::ItlP50Ms => "itl_p50_ms",
            Measure::ItlP99Ms => "itl_p99_ms",
            Measure::ColdStartS => "cold_start_s",
            Measure::PeakRssMib => "peak_rss_mib",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Measure::TotalTokensPerS => "total tok/s (prompt+output)",
            Measure::OutputTokensPerS => "output tok/s",
            Measure::TtftP50Ms => "TTFT p50 ms",
            Measure::TtftP99Ms => "TTFT p99 ms",
            Measure::ItlP50Ms => "ITL p50 ms",
            Measure::ItlP99Ms => "ITL p99 ms",
            Measure::ColdStartS => "cold start to /health s",
            Measure::PeakRssMib => "peak host RSS MiB",
        }
    }

    /// The cell summary field (`metrics::FIELDS`) a cell measure reports; `None`
    /// for the server measures.
    pub fn summary_field(self) -> Option<&'static str> {
        Some(match self {
            Measure::TotalTokensPerS => "total_token_throughput_tps",
            Measure::OutputTokensPerS => "output_token_throughput_tps",
            Measure::TtftP50Ms => "ttft_p50_ms",
            Measure::TtftP99Ms => "ttft_p99_ms",
            Measure::ItlP50Ms => "itl_p50_ms",
            Measure::ItlP99Ms => "itl_p99_ms",
            Measure::ColdStartS | Measure::PeakRssMib => return None,
        })
    }

    pub fn higher_is_better(self) -> bool {
        matches!(self, Measure::TotalTokensPerS | Measure::OutputTokensPerS)
    }
}

/// Which part of the comparison an observation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Noise,
    Round,
}

impl Phase {
    /// The name `compare.json` writes.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Noise => "noise",
            Phase::Round => "round",
        }
    }
}

/// One measured value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Obs {
    pub phase: Phase,
    /// Noise round or schedule block.
    pub round: u32,
    /// Noise: false for the first measurement (X.a), true for the second (X.b).
    pub second: bool,
    pub arm: String,
    /// A cell name, or `server` for cold start and RSS.
    pub key: String,
    pub measure: Measure,
    pub value: Option<f64>,
    /// Failed requests of the cell (0 for server measures).
    pub failed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseRatio {
    pub arm: String,
    pub round: u32,
    pub first: f64,
    pub second: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRatio {
    pub round: u32,
    pub reference: f64,
    pub candidate: f64,
    pub ratio: f64,
}

/// One line of the comparison table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub key: String,
    pub concurrency: Option<u32>,
    pub measure: Measure,
    pub reference_median: Option<f64>,
    pub candidate_median: Option<f64>,
    pub ratio_median: Option<f64>,
    pub ratio_min: Option<f64>,
    pub ratio_max: Option<f64>,
    pub rounds: Vec<RoundRatio>,
    pub noise_ratios: Vec<NoiseRatio>,
    /// Largest |noise ratio - 1|.
    pub noise_band: Option<f64>,
    pub failed: u64,
    pub verdict: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::FIELD_NAMES;

    #[test]
    fn each_cell_measure_names_a_summary_field_and_server_measures_none() {
        for m in Measure::CELL {
            let f = m.summary_field().unwrap_or_else(|| panic!("{m:?} has no field"));
            assert!(FIELD_NAMES.contains(&f), "{m:?}: {f} is not a CellSummary field");
        }
        assert!(Measure::SERVER.iter().all(|m| m.summary_field().is_none()));
    }

    #[test]
    fn names_are_what_compare_json_writes() {
        for m in Measure::CELL.into_iter().chain(Measure::SERVER) {
            assert_eq!(serde_json::to_value(m).unwrap(), m.name(), "{m:?}");
        }
        for p in [Phase::Noise, Phase::Round] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.name(), "{p:?}");
        }
        for st in [CompareStatus::ParityFailed, CompareStatus::Complete] {
            assert_eq!(serde_json::to_value(st).unwrap(), st.name(), "{st:?}");
        }
    }

    #[test]
    fn dialects_read_and_write_by_their_plan_names() {
        let d: Dialect = serde_json::from_str(r#"{"kind": "llama-cpp", "how": "plan"}"#).unwrap();
        assert_eq!(d.kind, ServerKind::LlamaCpp);
        assert_eq!(serde_json::to_value(&d).unwrap()["kind"], "llama-cpp");
        let bad = serde_json::from_str::<Dialect>(r#"{"kind": "LlamaCpp", "how": "plan"}"#).unwrap_err();
        assert!(bad.to_string().contains("unknown dialect"), "{bad}");
    }
}
