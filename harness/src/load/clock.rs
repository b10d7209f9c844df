//! The study's one monotonic clock: `std::time::Instant` captured once at study start;
//! every timestamp in the evidence is nanoseconds since it. Owns conversions between
//! study nanoseconds and instants, and precise waiting for an intended time. Must not
//! read wall-clock time (that is only ever recorded beside, never subtracted).

use std::time::{Duration, Instant};

/// How long before an intended time the dispatcher thread stops sleeping and spins.
/// `thread::sleep` wakes late by the kernel's timer slack (50 us by default) plus
/// scheduling; sleeping to this margin and then spinning lands within microseconds
/// on an idle core, at the cost of at most this much CPU per request.
pub const SPIN_NS: u64 = 300_000;

/// The longest single sleep of the dispatcher thread, so that it notices a dead
/// server or an abandoned cell within this time while waiting for a far arrival.
const MAX_SLEEP: Duration = Duration::from_millis(5);

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

    /// Blocks the calling OS thread until study time `ns` (sleep to `SPIN_NS` before
    /// it, then spin), or until `stop` returns `Some`, which it returns. `stop` is
    /// polled at least every `MAX_SLEEP` while sleeping and once after the spin.
    /// Never call this on an async runtime's worker thread.
    pub fn block_until<T>(&self, ns: u64, mut stop: impl FnMut() -> Option<T>) -> Option<T> {
        let target = self.instant(ns);
        let margin = Duration::from_nanos(SPIN_NS);
        loop {
            if let Some(s) = stop() {
                return Some(s);
            }
            let now = Instant::now();
            if now >= target {
                return None;
            }
            let left = target - now;
            if left <= margin {
                while Instant::now() < target {
                    std::hint::spin_loop();
                }
                return stop();
            }
            std::thread::sleep((left - margin).min(MAX_SLEEP));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_until_and_not_before() {
        let clock = StudyClock::start();
        let target = clock.now_ns() + 12_000_000;
        assert_eq!(clock.block_until(target, || None::<()>), None);
        assert!(clock.now_ns() >= target);
        // A past time returns at once.
        assert_eq!(clock.block_until(0, || None::<()>), None);
        assert_eq!(clock.ns_of(clock.instant(42)), 42);
    }

    #[test]
    fn a_stop_ends_the_wait_early() {
        let clock = StudyClock::start();
        let far = clock.now_ns() + 60_000_000_000;
        let mut polls = 0;
        let stopped = clock.block_until(far, || {
            polls += 1;
            (polls == 3).then_some("stop")
        });
        assert_eq!(stopped, Some("stop"));
        assert!(clock.now_ns() < 1_000_000_000, "stopped within a few sleeps, not at the far target");
    }
}
