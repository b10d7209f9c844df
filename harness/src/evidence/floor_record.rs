//! The measurement floor a session found (`run.json` `sessions[].measurement_floor`):
//! how exact this client's clock readings were on this machine when the session
//! started, measured against an in-process mock whose write times are known
//! (`load::floor` measures it). Owns the record's fields and the rule that says
//! when a latency threshold is too close to the floor. Must not measure anything.

use serde::{Deserialize, Serialize};

/// Nearest-rank p50, p99 and max of a sample, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// A threshold within this factor of the floor's p99 draws a warning: the client's
/// own error could then decide the claim.
pub const FLOOR_MARGIN: f64 = 10.0;

/// The floor a session measured (about two seconds, before its first unit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasurementFloor {
    /// `clock_getres(CLOCK_MONOTONIC)`, nanoseconds.
    pub clock_resolution_ns: u64,
    /// The smallest non-zero step between consecutive clock readings, nanoseconds
    /// (what a timestamp can resolve in practice).
    pub clock_step_ns: u64,
    /// A plain 1 ms sleep's wake-up, late by (kernel timer slack and scheduling).
    pub sleep_lateness: Spread,
    /// The dispatcher's wait (sleep, then spin: `StudyClock::block_until`), late by:
    /// what an intended arrival can be missed by before any request work.
    pub dispatch_lateness: Spread,
    /// The open-loop rate the overhead was measured at: the study's highest planned
    /// rate (100 req/s when it plans none: closed loops and traces).
    pub rate_rps: f64,
    pub requests: u64,
    pub failed: u64,
    /// Client TTFT minus the mock's true TTFT (first token written minus request
    /// arrival), per request: the send-to-first-byte overhead (connect, request
    /// write, parse, first read) this client adds to every TTFT.
    pub ttft_overhead: Spread,
    /// The same for E2E (`[DONE]`).
    pub e2e_overhead: Spread,
    /// Wall seconds the measurement took.
    pub wall_s: f64,
    /// The 1-minute load average when it ran.
    pub loadavg_1m: Option<f64>,
}

impl MeasurementFloor {
    /// The floor in one number: the p99 of the TTFT overhead, microseconds.
    pub fn p99_us(&self) -> f64 {
        self.ttft_overhead.p99_us
    }

    /// Whether a latency threshold of `threshold_ms` lies within `FLOOR_MARGIN`
    /// times the floor.
    pub fn too_close(&self, threshold_ms: f64) -> bool {
        threshold_ms * 1e3 < FLOOR_MARGIN * self.p99_us()
    }

    /// Inconsistencies a reader should refuse: non-finite or negative numbers, an
    /// order that is not p50 <= p99 <= max, counts that do not add up.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, s) in [
            ("sleep_lateness", &self.sleep_lateness),
            ("dispatch_lateness", &self.dispatch_lateness),
            ("ttft_overhead", &self.ttft_overhead),
            ("e2e_overhead", &self.e2e_overhead),
        ] {
            let finite = [s.p50_us, s.p99_us, s.max_us].iter().all(|v| v.is_finite());
            if !(finite && s.p50_us <= s.p99_us && s.p99_us <= s.max_us) {
                out.push(format!("{name}: p50 {} <= p99 {} <= max {} does not hold", s.p50_us, s.p99_us, s.max_us));
            }
            if s.samples == 0 {
                out.push(format!("{name}: no sample"));
            }
        }
        if !(self.rate_rps.is_finite() && self.rate_rps > 0.0) {
            out.push(format!("rate_rps {} is not a positive rate", self.rate_rps));
        }
        if self.failed > self.requests || self.ttft_overhead.samples > self.requests {
            out.push(format!(
                "{} failed and {} measured of {} requests",
                self.failed, self.ttft_overhead.samples, self.requests
            ));
        }
        if self.clock_resolution_ns == 0 || self.clock_step_ns == 0 {
            out.push("a clock resolution of 0 ns".into());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn floor(p99_us: f64) -> MeasurementFloor {
        let s = Spread { samples: 10, p50_us: p99_us / 2.0, p99_us, max_us: p99_us * 2.0 };
        MeasurementFloor {
            clock_resolution_ns: 1,
            clock_step_ns: 20,
            sleep_lateness: s,
            dispatch_lateness: s,
            rate_rps: 100.0,
            requests: 10,
            failed: 0,
            ttft_overhead: s,
            e2e_overhead: s,
            wall_s: 2.0,
            loadavg_1m: Some(0.5),
        }
    }

    #[test]
    fn thresholds_within_ten_floors_are_too_close() {
        let f = floor(150.0);
        assert!(f.too_close(1.0), "1 ms < 10 x 150 us");
        assert!(!f.too_close(1.5) && !f.too_close(50.0));
        assert!(f.problems().is_empty());
        let mut bad = floor(100.0);
        bad.ttft_overhead.p50_us = 500.0;
        bad.failed = 11;
        let p = bad.problems();
        assert_eq!(p.len(), 2, "{p:?}");
    }
}
