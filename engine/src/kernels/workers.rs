//! The threads the kernels run on. Owns `Workers`: a rayon pool (loaders,
//! row-wise ops) and a spinning `cpu::team::Team` of as many threads for the
//! short decode-time regions (quantized linear layers, attention), installed
//! together around a forward pass. Kernels never create threads themselves.

use super::cpu::dispatch::KernelError;
use super::cpu::team::Team;

/// The kernel threads a forward pass runs on.
pub struct Workers {
    pool: rayon::ThreadPool,
    team: Team,
}

impl Workers {
    /// `threads` kernel threads (at least 1).
    pub fn new(threads: usize) -> Result<Self, KernelError> {
        let threads = threads.max(1);
        let err = |reason: String| KernelError::Threads { threads, reason };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("engine-kernel-{i}"))
            .build()
            .map_err(|e| err(e.to_string()))?;
        let team = Team::new(threads).map_err(|e| err(e.to_string()))?;
        Ok(Workers { pool, team })
    }

    /// Runs `f` on the rayon pool with the team installed.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(|| self.team.install(f))
    }
}
