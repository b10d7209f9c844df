//! Admission, every check in one place (`admit`): each prompt must be able to
//! ever fit the scheduler (`sched::FitLimits`), and the bounded admission
//! queue (`--max-waiting N`) caps how many sequences may
//! wait for their first step. Each sequence a request adds holds a
//! `QueuePermit` until the scheduler first admits it or it ends; the permit
//! returns its place on drop. When the queue is full, the request is refused
//! with 503 before anything reaches the engine loop.
//!
//! Why 503 and not 429: 429 tells one client that *it* sends too fast (OpenAI
//! uses it for per-key rate limits); a full queue is the server's capacity,
//! the same for every client, which is what 503 Service Unavailable means
//! (OpenAI itself answers 503 "The engine is currently overloaded"). TGI's
//! 429 "Model is overloaded" is the other common choice; both make the OpenAI
//! SDKs retry with backoff. The answer carries `Retry-After: 1`.

use super::error::ApiError;
use crate::sched::FitLimits;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub struct AdmissionQueue {
    max_waiting: usize,
    queued: AtomicUsize,
}

/// One queued sequence's place; given back on drop.
#[derive(Debug)]
pub struct QueuePermit {
    queue: Arc<AdmissionQueue>,
}

impl Drop for QueuePermit {
    fn drop(&mut self) {
        self.queue.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AdmissionQueue {
    pub fn new(max_waiting: usize) -> Arc<Self> {
        Arc::new(AdmissionQueue { max_waiting, queued: AtomicUsize::new(0) })
    }

    /// Sequences queued now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Places for `n` sequences (all of one request), or 503 when they do not fit.
    pub fn try_admit(self: &Arc<Self>, n: usize) -> Result<Vec<QueuePermit>, ApiError> {
        let mut cur = self.queued.load(Ordering::SeqCst);
        loop {
            if cur + n > self.max_waiting {
                return Err(ApiError::Overloaded(format!(
                    "the server is overloaded: {cur} requests are waiting and the queue holds {} (--max-waiting); retry later",
                    self.max_waiting
                )));
            }
            match self.queued.compare_exchange(cur, cur + n, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok((0..n).map(|_| QueuePermit { queue: self.clone() }).collect()),
                Err(now) => cur = now,
            }
        }
    }
}

/// Admits a request of `prompts`, each to generate up to `max_tokens`: 400
/// naming `max_tokens` when one can never fit, 503 when the queue is full;
/// otherwise one queue place per prompt.
pub fn admit(
    queue: &Arc<AdmissionQueue>,
    fit: &FitLimits,
    prompts: &[Vec<u32>],
    max_tokens: usize,
) -> Result<Vec<QueuePermit>, ApiError> {
    for p in prompts {
        fit.check(p.len() + max_tokens).map_err(|m| ApiError::bad_param("max_tokens", m))?;
    }
    queue.try_admit(prompts.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_bounded_and_returned_on_drop() {
        let q = AdmissionQueue::new(3);
        let a = q.try_admit(2).unwrap();
        assert!(q.try_admit(2).is_err(), "2 + 2 > 3");
        let b = q.try_admit(1).unwrap();
        assert_eq!(q.queued(), 3);
        drop(a);
        assert_eq!(q.queued(), 1);
        drop(b);
        assert_eq!(q.queued(), 0);
        assert!(matches!(q.try_admit(4), Err(ApiError::Overloaded(_))));
    }
}
