//! HTTP routes: `POST /v1/completions`, `POST /v1/chat/completions`,
//! `GET /v1/models`, `GET /health`, `GET /metrics`. Handlers validate, hand
//! requests to the engine loop over its command channel, and turn the events
//! that come back into JSON responses or SSE streams. A dropped stream drops the
//! event receiver, which the engine loop notices and aborts at its next step.

use super::admission::{self, AdmissionQueue};
use super::api::{ChatRequest, CompletionRequest, GenerationSpec, Limits};
use super::choice::{ChoiceState, Delta};
use super::engine_loop::{Command, Event, NewRequest};
use super::error::ApiError;
use super::extras;
use super::format::{chat_logprobs, completion_logprobs, prompt_logprobs_json, usage, usage_json};
use super::metrics::Metrics;
use crate::sched::FitLimits;
use crate::tokenizer::Tokenizer;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Set once the model is loaded.
pub struct Ready {
    pub tokenizer: Arc<Tokenizer>,
    pub vocab_size: usize,
    pub max_model_len: usize,
    /// What a request must fit to ever be scheduled.
    pub fit: FitLimits,
}

pub struct AppState {
    pub served_model_name: String,
    pub ready: OnceLock<Ready>,
    pub commands: Mutex<std::sync::mpsc::Sender<Command>>,
    pub metrics: Arc<Metrics>,
    pub api_key: Option<String>,
    pub body_limit: usize,
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

    fn send(&self, cmd: Command) -> Result<(), ApiError> {
        let tx = self.commands.lock().map_err(|_| ApiError::Internal("engine channel poisoned".into()))?;
        tx.send(cmd).map_err(|_| ApiError::Unavailable("the engine loop has stopped".into()))
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(extras::model))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .merge(api)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/version", get(extras::version))
        .route("/tokenize", post(extras::tokenize))
        .route("/detokenize", post(extras::detokenize))
        .fallback(extras::not_found)
        .method_not_allowed_fallback(extras::method_not_allowed)
        .with_state(state)
}

async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| v == key);
        if !ok {
            return ApiError::Unauthorized.into_response();
        }
    }
    next.run(req).await
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.ready() {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(e) => e.into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    Json(json!({"object": "list", "data": [model_card(&state)]})).into_response()
}

/// The served model as `/v1/models` lists it.
pub fn model_card(state: &AppState) -> Value {
    let max_len = state.ready.get().map(|r| r.max_model_len);
    json!({"id": state.served_model_name, "object": "model", "created": unix_now(), "owned_by": "engine", "max_model_len": max_len})
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub async fn read_body(state: &AppState, body: Body) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, state.body_limit)
        .await
        .map_err(|_| ApiError::TooLarge(format!("the request body exceeds {} bytes", state.body_limit)))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Completions,
    Chat,
}

async fn completions(State(state): State<Arc<AppState>>, _h: HeaderMap, body: Body) -> Response {
    let r = async {
        let bytes = read_body(&state, body).await?;
        let ready = state.ready()?;
        let req = CompletionRequest::parse(&bytes)?;
        let spec = req.validate(&limits(&state, ready))?;
        start(&state, ready, spec, Endpoint::Completions, "cmpl").await
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

async fn chat_completions(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let r = async {
        let bytes = read_body(&state, body).await?;
        let ready = state.ready()?;
        let req = ChatRequest::parse(&bytes)?;
        let spec = req.validate(&limits(&state, ready))?;
        start(&state, ready, spec, Endpoint::Chat, "chatcmpl").await
    }
    .await;
    r.unwrap_or_else(|e| e.into_response())
}

fn limits<'a>(state: &'a AppState, ready: &'a Ready) -> Limits<'a> {
    Limits {
        served_model_name: &state.served_model_name,
        vocab_size: ready.vocab_size,
        max_model_len: ready.max_model_len,
        tokenizer: &ready.tokenizer,
    }
}

/// Everything a response needs besides the choices.
struct Meta {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
    include_usage: bool,
    continuous_usage: bool,
    return_token_ids: bool,
    logprobs: Option<usize>,
    stream_interval: usize,
}

async fn start(
    state: &Arc<AppState>,
    ready: &Ready,
    spec: GenerationSpec,
    endpoint: Endpoint,
    prefix: &str,
) -> Result<Response, ApiError> {
    let mut permits =
        admission::admit(&state.admission, &ready.fit, &spec.prompts, spec.params.max_tokens)?.into_iter();
    let n = state.next_id.fetch_add(1, Ordering::SeqCst);
    let id = format!("{prefix}-{n}");
    let (tx, rx) = unbounded_channel();
    let mut choices = Vec::with_capacity(spec.prompts.len());
    let arrived = Instant::now();
    let many = spec.prompts.len() > 1;
    for (i, prompt) in spec.prompts.iter().enumerate() {
        let req_id = if many { format!("{id}-{i}") } else { id.clone() };
        choices.push(ChoiceState::new(req_id.clone(), prompt.clone(), spec.stop.clone()));
        let seed =
            spec.seed.map(|s| s.wrapping_add(i as u64)).unwrap_or(n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64);
        state.send(Command::Add(Box::new(NewRequest {
            id: req_id,
            prompt: prompt.clone(),
            params: spec.params.clone(),
            stop: spec.stop.clone(),
            seed,
            events: tx.clone(),
            tag: i,
            arrived,
            permit: permits.next(),
        })))?;
    }
    drop(tx);
    let meta = Meta {
        id,
        created: unix_now(),
        model: state.served_model_name.clone(),
        endpoint,
        include_usage: spec.include_usage,
        continuous_usage: spec.continuous_usage,
        return_token_ids: spec.return_token_ids,
        logprobs: spec.params.logprobs,
        stream_interval: state.stream_interval.max(1),
    };
    let tok = ready.tokenizer.clone();
    if spec.stream {
        Ok(stream_response(meta, choices, rx, tok).into_response())
    } else {
        Ok(collect_response(meta, choices, rx, &tok).await)
    }
}

async fn collect_response(
    meta: Meta,
    mut choices: Vec<ChoiceState>,
    mut rx: UnboundedReceiver<(usize, Event)>,
    tok: &Tokenizer,
) -> Response {
    let mut deltas: Vec<Delta> = vec![Delta::default(); choices.len()];
    while choices.iter().any(|c| !c.is_finished()) {
        let Some((i, ev)) = rx.recv().await else {
            break;
        };
        let d = choices[i].on_event(ev);
        deltas[i].merge(d);
    }
    if let Some(message) = choices.iter().find_map(|c| c.error.clone()) {
        return ApiError::Internal(message).into_response();
    }
    let mut out = Vec::new();
    for (i, (c, d)) in choices.iter().zip(&deltas).enumerate() {
        let finish = c.finish.as_ref().map(|f| f.as_str()).unwrap_or("abort");
        let stop_reason = c.finish.as_ref().map(|f| f.stop_reason()).unwrap_or(Value::Null);
        let mut choice = match meta.endpoint {
            Endpoint::Completions => json!({
                "index": i, "text": c.text, "finish_reason": finish, "stop_reason": stop_reason,
                "logprobs": meta.logprobs.map(|_| completion_logprobs(&d.logprobs, tok, 0)),
            }),
            Endpoint::Chat => json!({
                "index": i, "message": {"role": "assistant", "content": c.text},
                "finish_reason": finish, "stop_reason": stop_reason,
                "logprobs": meta.logprobs.map(|_| chat_logprobs(&d.logprobs, tok)),
            }),
        };
        if meta.return_token_ids {
            choice["token_ids"] = json!(d.token_ids);
            choice["prompt_token_ids"] = json!(c.prompt_ids);
        }
        if let Some(lp) = &c.prompt_logprobs {
            choice["prompt_logprobs"] = prompt_logprobs_json(lp, tok);
        }
        out.push(choice);
    }
    let object = match meta.endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Chat => "chat.completion",
    };
    Json(json!({
        "id": meta.id, "object": object, "created": meta.created, "model": meta.model,
        "choices": out, "usage": usage(&choices),
    }))
    .into_response()
}

struct StreamState {
    meta: Meta,
    choices: Vec<ChoiceState>,
    buffered: Vec<Delta>,
    rx: UnboundedReceiver<(usize, Event)>,
    tok: Arc<Tokenizer>,
    started: bool,
    done: bool,
}

fn sse(v: Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

impl StreamState {
    fn chunk(&self, index: usize, d: &Delta, first: bool) -> Value {
        let finish = d.finish.as_ref().map(|f| f.as_str());
        let stop_reason = d.finish.as_ref().map(|f| f.stop_reason()).unwrap_or(Value::Null);
        let tok = &*self.tok;
        let mut choice = match self.meta.endpoint {
            Endpoint::Completions => json!({
                "index": index, "text": d.text, "finish_reason": finish, "stop_reason": stop_reason,
                "logprobs": self.meta.logprobs.map(|_| completion_logprobs(&d.logprobs, tok, self.choices[index].text.len() - d.text.len())),
            }),
            Endpoint::Chat => {
                let delta =
                    if d.text.is_empty() && d.finish.is_some() { json!({}) } else { json!({"content": d.text}) };
                json!({"index": index, "delta": delta, "finish_reason": finish, "stop_reason": stop_reason,
                       "logprobs": self.meta.logprobs.map(|_| chat_logprobs(&d.logprobs, tok))})
            }
        };
        if self.meta.return_token_ids {
            choice["token_ids"] = json!(d.token_ids);
            if first {
                choice["prompt_token_ids"] = json!(self.choices[index].prompt_ids);
            }
        }
        if first && let Some(lp) = &self.choices[index].prompt_logprobs {
            choice["prompt_logprobs"] = prompt_logprobs_json(lp, tok);
        }
        let mut chunk = self.envelope(vec![choice]);
        self.add_continuous_usage(&mut chunk, index);
        chunk
    }

    /// vLLM's `continuous_usage_stats`: the choice's usage so far on every chunk.
    fn add_continuous_usage(&self, chunk: &mut Value, index: usize) {
        if self.meta.continuous_usage {
            let c = &self.choices[index];
            chunk["usage"] = usage_json(c.prompt_ids.len(), c.completion_tokens, c.cached_tokens);
        }
    }

    fn envelope(&self, choices: Vec<Value>) -> Value {
        let object = match self.meta.endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat => "chat.completion.chunk",
        };
        json!({"id": self.meta.id, "object": object, "created": self.meta.created, "model": self.meta.model, "choices": choices})
    }

    /// The SSE events that follow the next engine event (possibly none).
    async fn next_events(&mut self) -> Option<Vec<SseEvent>> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            if self.meta.endpoint == Endpoint::Chat {
                for i in 0..self.choices.len() {
                    let c = json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
                    let mut chunk = self.envelope(vec![c]);
                    self.add_continuous_usage(&mut chunk, i);
                    out.push(sse(chunk));
                }
                return Some(out);
            }
        }
        if self.choices.iter().all(|c| c.is_finished()) {
            if self.meta.include_usage {
                let mut u = self.envelope(vec![]);
                u["usage"] = usage(&self.choices);
                out.push(sse(u));
            }
            out.push(SseEvent::default().data("[DONE]"));
            self.done = true;
            return Some(out);
        }
        let Some((i, ev)) = self.rx.recv().await else {
            // The engine dropped the request: end the stream without [DONE].
            self.done = true;
            return Some(out);
        };
        let first_for_choice = self.buffered[i].token_ids.is_empty() && self.choices[i].completion_tokens == 0;
        let d = self.choices[i].on_event(ev);
        if let Some(message) = self.choices[i].error.clone() {
            // As vLLM: an OpenAI-shaped error event, then [DONE], then the end.
            out.push(sse(ApiError::Internal(message).body()));
            out.push(SseEvent::default().data("[DONE]"));
            self.done = true;
            return Some(out);
        }
        self.buffered[i].merge(d);
        let b = &self.buffered[i];
        if b.finish.is_some() || b.token_ids.len() >= self.meta.stream_interval {
            let d = std::mem::take(&mut self.buffered[i]);
            let first = first_for_choice || self.choices[i].completion_tokens == d.token_ids.len();
            out.push(sse(self.chunk(i, &d, first)));
        }
        Some(out)
    }
}

fn stream_response(
    meta: Meta,
    choices: Vec<ChoiceState>,
    rx: UnboundedReceiver<(usize, Event)>,
    tok: Arc<Tokenizer>,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let n = choices.len();
    let st = StreamState { meta, choices, buffered: vec![Delta::default(); n], rx, tok, started: false, done: false };
    let stream = futures_util::stream::unfold(st, |mut st| async move { st.next_events().await.map(|evs| (evs, st)) })
        .flat_map(|evs| futures_util::stream::iter(evs.into_iter().map(Ok)));
    Sse::new(stream)
}
