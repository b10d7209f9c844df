//! The engine's one error enum. Every fallible engine function returns
//! `Result<T, EngineError>`; the CLI maps it to an exit code and the server (later)
//! to an HTTP status, each in one place.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid model config: {0}")]
    Config(String),
    #[error("invalid GGUF file: {0}")]
    Gguf(String),
    #[error("tensor {name}: unsupported tensor type {ty}")]
    UnsupportedTensorType { name: String, ty: String },
    #[error("missing tensor {0}")]
    MissingTensor(String),
    #[error("tensor {name}: expected shape {expected:?}, found {found:?}")]
    Shape { name: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("invalid safetensors file: {0}")]
    Safetensors(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("KV scales: {0}")]
    KvScales(String),
    #[error("KV cache: {0}")]
    Kv(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The device asked for cannot be used here (no driver, no GPU, an index
    /// out of range, too little memory, a build without the backend): bad
    /// input or assets, exit 2.
    #[error("{0}")]
    Device(String),
    /// The device backend itself failed (a kernel that does not compile, a
    /// CUDA call that fails): exit 1.
    #[error("{0}")]
    DeviceFailure(String),
}

impl EngineError {
    /// Whether the user (or the machine) can fix it: every variant but
    /// [`EngineError::DeviceFailure`]. The CLI exits 2 for these, 1 otherwise.
    pub fn is_input(&self) -> bool {
        !matches!(self, EngineError::DeviceFailure(_))
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io { path: path.into(), source }
    }
}

pub type Result<T> = std::result::Result<T, EngineError>;
