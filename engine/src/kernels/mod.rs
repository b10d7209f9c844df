//! Compute kernels. `backend` is the seam the model calls (`Kernels`: the CPU
//! path and the quantized-matmul mode, passed down as a value); `cpu/` holds the
//! CPU backend. Every kernel there is batch-invariant by construction: a row's
//! result depends only on that row's inputs (and the weights), never on how many
//! other rows share the call, so that greedy output does not depend on batch
//! composition, chunking or preemption.
//!
//! Linear layers over GGUF Q4_0/Q4_1/Q8_0 weights default to the activation-quantized
//! path (`cpu::q8`, llama.cpp's numerics); `--exact-quant-matmul` (or
//! `ENGINE_QUANT_MATMUL=exact`) selects the exact path (`cpu::quant`),
//! bit-identical to f32 references. `--cpu-path scalar|avx2|avx512|amx` (or
//! `ENGINE_CPU_PATH`) forces a lower CPU path.

//!
//! Outside this module, code names only what is re-exported here: the seam
//! (`Kernels`, `Workers`), the data types its calls take (weight matrices, the
//! RoPE table, attention geometry) and the host-side ops on logits (`argmax`,
//! `log_softmax`: logits always come back to the host), and `device`
//! (`--device cpu | cuda[:N]`). `cpu/` is the CPU backend's inside;
//! `scripts/import-graph` fails a production import of it from anywhere else.
//! `cuda/` (cargo feature `cuda`; docs/engine-cuda.md) is the CUDA backend: its
//! ops over device buffers are the seam of the model's GPU forward pass.

pub mod backend;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod workers;

pub use backend::{Kernels, QUANT_MATMUL_ENV, QuantMatmul};
pub use cpu::attention::{AttnSeq, AttnShape};
pub use cpu::dispatch::{CPU_PATH_ENV, CpuFeatures, CpuPath, KernelError};
pub use cpu::half::HalfMatrix;
pub use cpu::ops::{argmax, log_softmax};
pub use cpu::quant::{QK, QuantKind, QuantMatrix};
pub use cpu::rope::RopeTable;
pub use device::{Device, DeviceSpec, GpuWeights};
pub use workers::Workers;
