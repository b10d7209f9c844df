//! Replay's own goodput rule (written from the definition in docs/plan.md `[slo]`,
//! without calling `metrics`): a valid request is good when, for every target set,
//! TTFT (first token event minus send) is at most `ttft_ms`, TPOT = (E2E - TTFT) /
//! (output - 1), or 0 with at most one output token, is at most `tpot_ms`, and E2E
//! ([DONE] minus send) is at most `e2e_ms`; without a token event, a TTFT or TPOT
//! target is failed. Must not read files.

use crate::plan::Slo;

/// Whether one valid request (TTFT and E2E in ns from send, output tokens) is good.
pub fn good(slo: &Slo, ttft_ns: Option<u64>, e2e_ns: u64, output: u64) -> bool {
    let ms = |ns: f64| ns / 1e6;
    let e2e = ms(e2e_ns as f64);
    let ttft = ttft_ns.map(|t| ms(t as f64));
    let tpot = if output <= 1 { Some(0.0) } else { ttft.map(|t| (e2e - t) / (output - 1) as f64) };
    let meets = |v: Option<f64>, target: Option<f64>| match (target, v) {
        (None, _) => true,
        (Some(t), Some(v)) => v <= t,
        (Some(_), None) => false,
    };
    meets(ttft, slo.ttft_ms) && meets(tpot, slo.tpot_ms) && meets(Some(e2e), slo.e2e_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_inclusive_and_all_must_hold() {
        let slo = Slo { ttft_ms: Some(100.0), tpot_ms: Some(10.0), e2e_ms: None };
        // TTFT 100 ms, E2E 190 ms, 10 tokens: TPOT (190 - 100) / 9 = 10 ms.
        assert!(good(&slo, Some(100_000_000), 190_000_000, 10));
        assert!(!good(&slo, Some(100_000_001), 190_000_000, 10));
        assert!(!good(&slo, Some(100_000_000), 191_000_000, 10));
        assert!(good(&slo, Some(50_000_000), 5_000_000_000, 1));
        assert!(!good(&slo, None, 50_000_000, 1));
        assert!(good(&Slo { ttft_ms: None, tpot_ms: None, e2e_ms: Some(50.0) }, None, 50_000_000, 1));
    }
}
