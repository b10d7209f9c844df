//! Models: configuration, weight loading (HF safetensors directories and GGUF
//! files) and the decoder forward pass. Owns the mapping from checkpoint tensors
//! to the structs of `qwen3.rs`; does not own the KV cache or scheduling.

pub mod config;
mod gguf_load;
#[cfg(test)]
mod gguf_load_tests;
#[cfg(feature = "cuda")]
mod gpu;
pub mod loader;
pub mod qwen3;
pub mod safetensors_dir;
pub mod tensor;

pub use config::{Arch, ModelConfig};
pub use loader::{LoadedModel, load};
pub use qwen3::{LogitsWanted, Model, SeqInput};
