//! The engine's integration tests, one binary (each file a module): the crate and its
//! dependencies are linked once, not once per file. Run one file's tests with
//! `cargo test -p engine --test integration <file>::`.

mod common;

mod cli_errors;
#[cfg(feature = "cuda")]
mod cuda_kernels_compile;
mod dequant_gguf_py;
mod dequantize;
mod gguf_real;
mod q8_real;
mod real_model;
mod requantized_real;
mod server_api;
mod server_http;
mod server_reliability;
mod synthetic_model;
mod tokenizer_real;
