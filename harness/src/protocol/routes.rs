//! The HTTP routes every server dialect shares (vLLM-style servers, llama.cpp's
//! `llama-server`, this project's engine): the OpenAI routes timed requests go to,
//! the health default, metrics, model list, version and llama.cpp's properties.
//! The ground floor: `plan`, `load`, `arm`, the commands and the fake servers of the
//! tests name a route only through these. Owns the paths and the dialects' names
//! (`ServerKind`). Must not know how dialects differ (`arm::dialect` does).

/// Health path of an arm that does not set `health` (vLLM, llama-server and the engine).
pub const DEFAULT_HEALTH_PATH: &str = "/health";
/// Prometheus text exposition (llama-server needs `--metrics`).
pub const METRICS_PATH: &str = "/metrics";
/// Where warmup and timed requests go, in every dialect.
pub const COMPLETIONS_PATH: &str = "/v1/completions";
/// Where timed requests go instead with `request.endpoint = "chat"`.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
/// The model list (`owned_by`, vLLM's `max_model_len`).
pub const MODELS_PATH: &str = "/v1/models";
/// The server's version (vLLM and this engine: `{"version": ...}`).
pub const VERSION_PATH: &str = "/version";
/// llama.cpp's server properties (`default_generation_settings`, `n_ctx`).
pub const PROPS_PATH: &str = "/props";

/// The dialect a server speaks (how it is detected and how its bodies differ:
/// `arm::dialect`). Serialised as in `compare.json` (`"OpenAiVllm"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ServerKind {
    OpenAiVllm,
    LlamaCpp,
}

impl ServerKind {
    /// The dialect's name in plans and flags (`openai-vllm`, `llama-cpp`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::OpenAiVllm => "openai-vllm",
            ServerKind::LlamaCpp => "llama-cpp",
        }
    }
}
