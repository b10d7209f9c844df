//! CPU kernels: the batch-invariant linear layer (`matmul`), row-wise
//! normalisation and activations (`ops`), rotary embeddings (`rope`) and paged
//! attention over the KV cache (`attention`). Threads come from the rayon pool the
//! caller installs; kernels never create pools themselves.

pub mod attention;
pub mod matmul;
pub mod ops;
pub mod quant;
pub mod rope;
