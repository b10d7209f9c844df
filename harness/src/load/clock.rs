//! The study's one monotonic clock: `std::time::Instant` captured once at study start;
//! every timestamp in the evidence is nanoseconds since it. Owns conversions between
//! study nanoseconds and instants, and precise waiting for an intended time. Must not
//! read wall-clock time (that is only ever recorded beside, never subtracted).

use std::time::{Duration, Instant};

/// How long before an intended time the dispatcher stops sleeping and spins. Tokio's
/// timer has a 1 ms granularity, so a plain `sleep_until` is late by up to ~1 ms;
/// sleeping to this margin and then spinning (yielding between checks) lands within
/// microseconds at the cost of at most this much CPU per request.
pub const SPIN_NS: u64 = 2_000_000;

#[derive(Debug, Clone, Copy)]
pub struct StudyClock {
    start: Instant,
}

impl StudyClock {
    /// Zero is now.
    pub fn start() -> StudyClock {
        StudyClock { start: Instant::now() }
    }

    /// A clock with the given zero (tests).
    pub fn from_instant(start: Instant) -> StudyClock {
        StudyClock { start }
    }

    pub fn zero(&self) -> Instant {
        self.start
    }

    /// Nanoseconds since study start.
    pub fn now_ns(&self) -> u64 {
        self.ns_of(Instant::now())
    }

    /// Study nanoseconds of an instant (0 for instants before the start).
    pub fn ns_of(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` after study start.
    pub fn instant(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }

    /// Waits until study time `ns`: tokio sleep to `SPIN_NS` before it, then spin with
    /// `yield_now` until it has passed. Returns at once if `ns` is already past.
    pub async fn wait_until(&self, ns: u64) {
        let target = self.instant(ns);
        if let Some(coarse) = target.checked_sub(Duration::from_nanos(SPIN_NS))
            && coarse > Instant::now()
        {
            tokio::time::sleep_until(tokio::time::Instant::from_std(coarse)).await;
        }
        while Instant::now() < target {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_until_and_not_before() {
        let clock = StudyClock::start();
        let target = clock.now_ns() + 5_000_000;
        clock.wait_until(target).await;
        assert!(clock.now_ns() >= target);
        // A past time returns at once.
        clock.wait_until(0).await;
        assert_eq!(clock.ns_of(clock.instant(42)), 42);
    }
}
