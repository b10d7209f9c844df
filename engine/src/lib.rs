//! The engine library: model loading, CPU kernels, the paged KV cache and serial
//! generation. The `engine` binary (main.rs) is a thin CLI over these modules; the
//! HTTP server and the scheduler build on the same `Model` and `KvCache` so that
//! the serial path and the batched path run exactly the same kernels.

pub mod commands;
pub mod error;
pub mod finish;
pub mod gguf;
pub mod kernels;
pub mod kv;
pub mod model;
pub mod runtime;
pub mod sched;
pub mod serve;
pub mod synth;
pub mod tokenizer;
