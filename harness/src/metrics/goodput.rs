//! Goodput against the plan's `[slo]` targets, with `vllm bench serve --goodput`
//! semantics (vllm/benchmarks/serve.py, `calculate_metrics`): a valid completed
//! request is good when every target set is met, inclusively (value <= target):
//! - `ttft_ms`: first token-bearing event minus HTTP send (the harness's TTFT);
//! - `tpot_ms`: vLLM's goodput TPOT, (E2E - TTFT) / (output tokens - 1), and 0 for
//!   a request with at most one output token (vLLM: "we regard tpot as 0 for
//!   goodput"); it ends at `[DONE]`, unlike the harness's own TPOT, which ends at
//!   the last token-bearing event;
//! - `e2e_ms`: `[DONE]` minus HTTP send.
//!
//! A valid request without any token-bearing event has no TTFT and fails a TTFT or
//! TPOT target (vLLM would count its TTFT as 0). Per cell: `slo_met_requests`,
//! `slo_attainment` = met / valid completed requests (`None` with none), and
//! `goodput_rps` = met / the observation interval (vLLM divides by its benchmark
//! duration, the same role). Owns these definitions. Must not read the plan file
//! or decide anything.

use super::request::RequestMeasures;
use crate::plan::Slo;

/// Whether one valid request meets every target of `slo`.
pub fn request_meets_slo(m: &RequestMeasures, slo: &Slo) -> bool {
    let within = |value_ns: f64, target_ms: Option<f64>| target_ms.is_none_or(|t| value_ns <= t * 1e6);
    let e2e = m.e2e_ns as f64;
    let ttft = m.ttft_ns.map(|t| t as f64);
    let tpot = match (ttft, m.output_tokens) {
        (_, 0 | 1) => Some(0.0),
        (Some(t), n) => Some((e2e - t) / (n - 1) as f64),
        (None, _) => None,
    };
    let ok = |v: Option<f64>, target: Option<f64>| match v {
        Some(v) => within(v, target),
        None => target.is_none(),
    };
    ok(ttft, slo.ttft_ms) && ok(tpot, slo.tpot_ms) && within(e2e, slo.e2e_ms)
}

/// `(slo_met_requests, slo_attainment, goodput_rps)` of a cell's valid requests.
pub fn goodput(valid: &[RequestMeasures], slo: &Slo, duration_s: f64) -> (u64, Option<f64>, f64) {
    let met = valid.iter().filter(|m| request_meets_slo(m, slo)).count() as u64;
    let share = (!valid.is_empty()).then(|| met as f64 / valid.len() as f64);
    (met, share, met as f64 / duration_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::OutputTokenSource;

    const MS: u64 = 1_000_000;

    /// A valid request: TTFT and E2E in ms from send, `out` output tokens.
    fn req(index: u64, ttft_ms: Option<u64>, e2e_ms: u64, out: u64) -> RequestMeasures {
        RequestMeasures {
            index,
            prompt_tokens: 8,
            output_tokens: out,
            output_tokens_source: OutputTokenSource::Usage,
            event_tokens: out,
            ttft_ns: ttft_ms.map(|t| t * MS),
            ttft_intended_ns: ttft_ms.map(|t| t * MS),
            tpot_ns: None,
            e2e_ns: e2e_ms * MS,
            e2e_intended_ns: e2e_ms * MS,
            gaps_ns: vec![],
            events: out,
            empty_events: 0,
            multi_token_events: 0,
            dispatch_lag_ns: 0,
            light: false,
            ttfc_ns: None,
            reasoning_tokens: 0,
        }
    }

    #[test]
    fn every_target_must_hold_inclusively() {
        let slo = Slo { ttft_ms: Some(100.0), tpot_ms: Some(10.0), e2e_ms: Some(500.0) };
        // TTFT 100, E2E 190, 10 tokens: vLLM TPOT (190 - 100) / 9 = 10 ms: good (inclusive).
        assert!(request_meets_slo(&req(0, Some(100), 190, 10), &slo));
        assert!(!request_meets_slo(&req(0, Some(101), 190, 10), &slo));
        // TPOT (200 - 100) / 9 = 11.1 ms > 10.
        assert!(!request_meets_slo(&req(0, Some(100), 200, 10), &slo));
        // One output token: TPOT counts as 0 (vLLM), only TTFT and E2E matter.
        assert!(request_meets_slo(&req(0, Some(90), 450, 1), &slo));
        assert!(!request_meets_slo(&req(0, Some(90), 501, 1), &slo));
        // No token event: fails a TTFT target, passes an E2E-only target.
        assert!(!request_meets_slo(&req(0, None, 50, 3), &slo));
        let e2e_only = Slo { ttft_ms: None, tpot_ms: None, e2e_ms: Some(50.0) };
        assert!(request_meets_slo(&req(0, None, 50, 3), &e2e_only));
    }

    #[test]
    fn goodput_divides_by_the_observation_interval() {
        let slo = Slo { ttft_ms: Some(100.0), tpot_ms: None, e2e_ms: None };
        let valid = [req(0, Some(50), 300, 4), req(1, Some(150), 300, 4), req(2, Some(100), 900, 4)];
        // 2 of 3 meet TTFT <= 100 ms; a 4 s interval gives 0.5 good requests/s.
        assert_eq!(goodput(&valid, &slo, 4.0), (2, Some(2.0 / 3.0), 0.5));
        assert_eq!(goodput(&[], &slo, 4.0), (0, None, 0.0));
    }
}
