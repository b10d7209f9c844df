//! Continuous-batching scheduler with vLLM semantics. Owns the waiting and
//! running queues and decides, each step, which sequences compute which tokens:
//! running sequences first (decode, or the next prefill chunk), then fresh
//! admissions first come first served under `max_num_seqs` and the step's token
//! budget. When KV pages run out, the most recently admitted running sequence is
//! preempted by recompute (its pages freed, itself put back at the front of the
//! waiting queue) and nothing is admitted in that step. It does not run the
//! model, sample, or talk HTTP: the engine loop does.

pub mod scheduler;
pub mod sequence;

pub use scheduler::{FitLimits, ScheduledChunk, Scheduler, SchedulerConfig, StepPlan};
pub use sequence::{SeqId, Sequence, StopRules};
