//! Models: configuration, weight loading (HF safetensors directories and GGUF
//! files) and the decoder forward pass. Owns the mapping from checkpoint tensors
//! to the structs of `qwen3.rs`; does not own the KV cache or scheduling.

pub mod config;
pub mod gguf;
pub mod tensor;
