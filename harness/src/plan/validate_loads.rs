//! Validation of the trace-file load (`load = "trace"`): its `trace` path (a
//! relative `.jsonl` Mooncake or `.csv` Azure trace), `time_scale` and
//! `trace_lengths`; and of `[slo]` (goodput targets). Owns those keys' rules. Must not touch files: whether the file
//! exists and parses is checked by `trace::check_trace_files` (`harness plan check`,
//! `harness run`), so a plan validates the same anywhere.

use super::schema::{CellFile, SloFile};
use super::types::{Hypothesis, Load, Metric, Slo};
use super::validate::Checker;

/// The `Load::Trace` of cell file `f` (at key prefix `k`), or issues.
pub(super) fn trace_load(c: &mut Checker, k: &str, f: &CellFile) -> Option<Load> {
    let key = |name: &str| format!("{k}.{name}");
    let Some(path) = f.trace.clone() else {
        c.err(key("trace"), "required for a trace cell: a Mooncake .jsonl or Azure .csv trace file");
        return None;
    };
    if !(path.ends_with(".jsonl") || path.ends_with(".csv")) {
        c.err(key("trace"), format!("{path:?}: use a Mooncake trace (.jsonl) or an Azure LLM inference trace (.csv)"));
        return None;
    }
    let time_scale = c.positive(&key("time_scale"), f.time_scale.unwrap_or(1.0), false)?;
    Some(Load::Trace { path, time_scale, lengths: f.trace_lengths.unwrap_or(false) })
}

/// `[slo]`: at least one target, each finite and >= 0 ms (vLLM: non-negative); a
/// `goodput_rps` hypothesis needs it.
pub(super) fn slo(c: &mut Checker, f: Option<SloFile>, hypotheses: &[Hypothesis]) -> Option<Slo> {
    let Some(f) = f else {
        for (i, h) in hypotheses.iter().enumerate().filter(|(_, h)| h.metric == Metric::GoodputRps) {
            c.err(
                format!("hypotheses[{i}].metric"),
                format!("{:?} tests goodput_rps, which needs an [slo] table", h.name),
            );
        }
        return None;
    };
    let mut target = |name: &str, v: Option<f64>| v.and_then(|v| c.positive(&format!("slo.{name}"), v, true));
    let slo = Slo {
        ttft_ms: target("ttft_ms", f.ttft_ms),
        tpot_ms: target("tpot_ms", f.tpot_ms),
        e2e_ms: target("e2e_ms", f.e2e_ms),
    };
    if f.ttft_ms.is_none() && f.tpot_ms.is_none() && f.e2e_ms.is_none() {
        c.err("slo", "set at least one of ttft_ms, tpot_ms, e2e_ms");
    }
    Some(slo)
}
