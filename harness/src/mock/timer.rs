//! The mock's clock and its timer: CLOCK_MONOTONIC nanoseconds (`mono_ns`, the clock
//! of the ground truth; on Linux `std::time::Instant` reads the same clock), and one
//! OS thread that wakes each waiting answer at its scheduled time. Tokio's own timer
//! rounds to whole milliseconds, too coarse for token gaps of a few: this thread
//! sleeps on a condition variable with a 1 ns timer slack (Linux `PR_SET_TIMERSLACK`)
//! until `spin` before the earliest deadline, spins the rest, and fires every due
//! deadline. Owns the deadline heap. Must not touch sockets or the ground truth.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct it is given; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Entry {
    at: u64,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's top is the earliest deadline.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Heap {
    entries: BinaryHeap<Entry>,
    seq: u64,
    stop: bool,
}

struct Shared {
    heap: Mutex<Heap>,
    wake: Condvar,
}

/// The timer thread's handle; dropping the last one stops the thread.
#[derive(Clone)]
pub struct Timer {
    shared: Arc<Shared>,
    _guard: Arc<StopOnDrop>,
}

struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Ok(mut h) = self.0.heap.lock() {
            h.stop = true;
        }
        self.0.wake.notify_all();
    }
}

impl Timer {
    /// Starts the thread (named `mock-timer`); `spin` is how long before a deadline it
    /// stops sleeping and spins (0: never spins, for a timer sharing one core).
    pub fn start(spin: Duration) -> std::io::Result<Timer> {
        let shared = Arc::new(Shared { heap: Mutex::new(Heap::default()), wake: Condvar::new() });
        let thread_shared = shared.clone();
        let spin_ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
        std::thread::Builder::new().name("mock-timer".into()).spawn(move || {
            fine_timer_slack();
            run(&thread_shared, spin_ns)
        })?;
        Ok(Timer { _guard: Arc::new(StopOnDrop(shared.clone())), shared })
    }

    /// Resolves at CLOCK_MONOTONIC `at_ns` (at once when it has passed).
    pub async fn at(&self, at_ns: u64) {
        if mono_ns() >= at_ns {
            return;
        }
        let (tx, rx) = oneshot::channel();
        {
            let Ok(mut h) = self.shared.heap.lock() else { return };
            h.seq += 1;
            let seq = h.seq;
            let earliest = h.entries.peek().is_none_or(|e| at_ns < e.at);
            h.entries.push(Entry { at: at_ns, seq, tx });
            if earliest {
                self.shared.wake.notify_one();
            }
        }
        let _ = rx.await;
    }
}

/// 1 ns of timer slack for this thread, so that sleeps end when asked (Linux's
/// default slack is 50 us).
fn fine_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_TIMERSLACK only changes this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

fn run(shared: &Shared, spin_ns: u64) {
    let Ok(mut h) = shared.heap.lock() else { return };
    loop {
        if h.stop {
            return;
        }
        let now = mono_ns();
        let Some(next) = h.entries.peek().map(|e| e.at) else {
            h = match shared.wake.wait(h) {
                Ok(h) => h,
                Err(_) => return,
            };
            continue;
        };
        if next <= now {
            while h.entries.peek().is_some_and(|e| e.at <= now) {
                if let Some(e) = h.entries.pop() {
                    let _ = e.tx.send(());
                }
            }
            continue;
        }
        let left = next - now;
        if left > spin_ns {
            h = match shared.wake.wait_timeout(h, Duration::from_nanos(left - spin_ns)) {
                Ok((h, _)) => h,
                Err(_) => return,
            };
            continue;
        }
        // Spin without the lock, so that new deadlines can be added meanwhile.
        drop(h);
        while mono_ns() < next {
            std::hint::spin_loop();
        }
        h = match shared.heap.lock() {
            Ok(h) => h,
            Err(_) => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_fire_in_order_and_not_before() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let timer = Timer::start(Duration::ZERO).unwrap();
        rt.block_on(async {
            let start = mono_ns();
            let mut set = tokio::task::JoinSet::new();
            for k in [5u64, 1, 3] {
                let t = timer.clone();
                set.spawn(async move {
                    t.at(start + k * 2_000_000).await;
                    (k, mono_ns())
                });
            }
            let mut fired = Vec::new();
            while let Some(r) = set.join_next().await {
                fired.push(r.unwrap());
            }
            fired.sort_by_key(|f| f.1);
            assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 3, 5]);
            for (k, t) in fired {
                assert!(t >= start + k * 2_000_000, "fired early");
            }
            // A past deadline resolves at once.
            timer.at(0).await;
        });
    }
}
