//! Compute kernels. `cpu/` holds the CPU backend; every kernel there is
//! batch-invariant by construction: a row's result depends only on that row's
//! inputs (and the weights), never on how many other rows share the call, so that
//! greedy output does not depend on batch composition, chunking or preemption.

pub mod cpu;
