//! CPU kernels: the batch-invariant linear layer (`matmul`, over f32 weights or
//! 16-bit ones widened exactly: `half`), linear layers over
//! GGUF block-quantized weights (`quant`: exact, f32 activations; `q8`:
//! activations quantized to 8 bits per block, integer dot products), row-wise
//! normalisation and activations (`ops`), rotary embeddings (`rope`) and paged
//! attention over the KV cache (`attention`). `dispatch` detects the CPU's
//! features once and names the code paths (`scalar`, `avx2`, `avx512`, `amx`) the linear layers
//! take; the caller passes the path down. Threads come from the pool the caller
//! installs: the decode-time regions (quantized linear layers, attention) run on
//! an installed `team::Team` (spinning workers, low per-region overhead), else
//! on the installed rayon pool; kernels never create pools themselves.

#[cfg(target_arch = "x86_64")]
pub mod amx;
pub mod attention;
pub mod dispatch;
pub mod expf;
pub mod half;
pub mod matmul;
pub mod ops;
pub mod q8;
pub mod q8_pack;
pub mod quant;
pub mod rope;
pub mod team;
