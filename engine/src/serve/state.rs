//! The state every HTTP handler shares (`AppState`: the served name, the loaded
//! model's facts once ready, the engine loop's command channel, metrics, the API
//! key, body limits, admission) and what the handlers of `routes`, `extras` and
//! `stream` all need: reading a JSON body, the model card, the endpoint kind and a
//! response's metadata. Owns no route. Must not run the engine or answer a
//! request itself.

use super::admission::AdmissionQueue;
use super::engine_loop::Command;
use super::error::ApiError;
use super::metrics::Metrics;
use crate::sched::FitLimits;
use crate::tokenizer::Tokenizer;
use axum::body::Body;
use axum::http::{HeaderMap, header};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Set once the model is loaded.
pub struct Ready {
    pub tokenizer: Arc<Tokenizer>,
    pub vocab_size: usize,
    pub max_model_len: usize,
    /// What a request must fit to ever be scheduled.
    pub fit: FitLimits,
}

/// The key clients must send as `Authorization: Bearer KEY`. Its Debug never
/// shows it, and a presented key is compared in time that does not depend on
/// where it differs.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        ApiKey(key)
    }

    pub(super) fn admits(&self, presented: &str) -> bool {
        let (want, got) = (self.0.as_bytes(), presented.as_bytes());
        want.len() == got.len() && want.iter().zip(got).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

pub struct AppState {
    pub served_model_name: String,
    pub ready: OnceLock<Ready>,
    pub commands: Mutex<std::sync::mpsc::Sender<Command>>,
    pub metrics: Arc<Metrics>,
    pub api_key: Option<ApiKey>,
    pub body_limit: usize,
    /// Time a request body may take to arrive once its head is in.
    pub body_read_timeout: Duration,
    pub stream_interval: usize,
    pub accepting: AtomicBool,
    pub next_id: AtomicU64,
    pub admission: Arc<AdmissionQueue>,
}

impl AppState {
    pub fn ready(&self) -> Result<&Ready, ApiError> {
        if !self.accepting.load(Ordering::SeqCst) {
            return Err(ApiError::Unavailable("the server is shutting down".into()));
        }
        self.ready.get().ok_or_else(|| ApiError::Unavailable("the model is still loading".into()))
    }

    pub(super) fn send(&self, cmd: Command) -> Result<(), ApiError> {
        let tx = self.commands.lock().map_err(|_| ApiError::Internal("engine channel poisoned".into()))?;
        tx.send(cmd).map_err(|_| ApiError::Unavailable("the engine loop has stopped".into()))
    }
}

#[derive(serde::Serialize)]
pub struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    max_model_len: Option<usize>,
}

/// The served model as `/v1/models` lists it.
pub fn model_card(state: &AppState) -> ModelCard<'_> {
    ModelCard {
        id: &state.served_model_name,
        object: "model",
        created: unix_now(),
        owned_by: "engine",
        max_model_len: state.ready.get().map(|r| r.max_model_len),
    }
}

/// Seconds since the Unix epoch (the `created` of cards and responses).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Reads a whole JSON request body: 400 for a Content-Type other than JSON
/// (`json_content_type`), 413 past `--max-body`, 408 when it has not all
/// arrived within `--body-read-timeout-s` (a client that sends its head and
/// stalls would otherwise hold the connection forever).
pub async fn read_body(state: &AppState, headers: &HeaderMap, body: Body) -> Result<axum::body::Bytes, ApiError> {
    json_content_type(headers)?;
    let read = axum::body::to_bytes(body, state.body_limit);
    match tokio::time::timeout(state.body_read_timeout, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(ApiError::TooLarge(format!("the request body exceeds {} bytes", state.body_limit))),
        Err(_) => Err(ApiError::Timeout(format!(
            "the request body did not arrive within {} s (--body-read-timeout-s)",
            state.body_read_timeout.as_secs_f64()
        ))),
    }
}

/// A body is JSON when its Content-Type is absent, `application/json` or
/// `application/*+json` (FastAPI's rule, so vLLM's); anything else is 400.
fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let value = String::from_utf8_lossy(value.as_bytes());
    let mime = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let json = mime.strip_prefix("application/").is_some_and(|sub| sub == "json" || sub.ends_with("+json"));
    if json {
        return Ok(());
    }
    let got: String = mime.chars().take(64).collect();
    Err(ApiError::bad(format!("Content-Type must be application/json, got {got:?}")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// Everything a response needs besides the choices.
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub return_token_ids: bool,
    pub logprobs: Option<usize>,
    pub stream_interval: usize,
}
