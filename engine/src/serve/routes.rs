//! HTTP routes: `POST /v1/completions`, `POST /v1/chat/completions`,
//! `GET /v1/models`, `GET /health`, `GET /metrics` (and vLLM's extras, in
//! `extras`). Handlers validate, admit (`admission`), hand requests to the
//! engine loop over its command channel, and turn the events that come back
//! into a typed JSON response (`response`) or an SSE stream (`stream`). Owns the
//! request's id: `cmpl-<n>` (`chatcmpl-<n>`), or with a client's `X-Request-Id`
//! `cmpl-<X-Request-Id>-<n>` (`request_id`).

use super::admission;
use super::api::{ChatRequest, CompletionRequest, GenerationSpec, Limits};
use super::choice::{ChoiceState, Delta};
use super::engine_loop::{Command, Event, NewRequest};
use super::error::ApiError;
use super::extras;
use super::response::{
    ChatChoice, ChoiceExtras, CompletionChoice, Envelope, Message, Usage, chat_logprobs, completion_logprobs,
    finish_fields, prompt_logprobs,
};
use super::state::{AppState, Endpoint, Meta, ModelCard, Ready, model_card, read_body, unix_now};
use super::stream::stream_response;
use crate::tokenizer::Tokenizer;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/completions", post(generate::<CompletionRequest>))
        .route("/v1/chat/completions", post(generate::<ChatRequest>))
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
            .is_some_and(|v| key.admits(v));
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

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    use super::metrics::{OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE, wants_openmetrics};
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if wants_openmetrics(accept) {
        ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], state.metrics.encode()).into_response()
    } else {
        ([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], state.metrics.encode_prometheus()).into_response()
    }
}

#[derive(serde::Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelCard<'a>>,
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    Json(ModelList { object: "list", data: vec![model_card(&state)] }).into_response()
}

/// What the two generation routes share: a body parsed and validated into one
/// `GenerationSpec`, then admitted and started alike; they differ in the request
/// type, the endpoint the response is shaped for and the id prefix.
trait GenerationRoute: Sized {
    const ENDPOINT: Endpoint;
    const ID_PREFIX: &'static str;
    fn parse(body: &[u8]) -> Result<Self, ApiError>;
    fn validate(&self, limits: &Limits<'_>) -> Result<GenerationSpec, ApiError>;
}

impl GenerationRoute for CompletionRequest {
    const ENDPOINT: Endpoint = Endpoint::Completions;
    const ID_PREFIX: &'static str = "cmpl";
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        CompletionRequest::parse(body)
    }
    fn validate(&self, limits: &Limits<'_>) -> Result<GenerationSpec, ApiError> {
        CompletionRequest::validate(self, limits)
    }
}

impl GenerationRoute for ChatRequest {
    const ENDPOINT: Endpoint = Endpoint::Chat;
    const ID_PREFIX: &'static str = "chatcmpl";
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        ChatRequest::parse(body)
    }
    fn validate(&self, limits: &Limits<'_>) -> Result<GenerationSpec, ApiError> {
        ChatRequest::validate(self, limits)
    }
}

/// Longest client `X-Request-Id` the engine names a request after (longer ones,
/// and values that are not visible ASCII, are not used).
const MAX_CLIENT_REQUEST_ID: usize = 256;

/// The id of the `n`-th request the server started, on a route whose ids begin
/// `prefix`: `<prefix>-<n>`, or with a client's `X-Request-Id` (vLLM bench's
/// `--request-id-prefix` sends one) `<prefix>-<X-Request-Id>-<n>`. vLLM answers
/// `<prefix>-<X-Request-Id>` and keeps the id unique inside with a random suffix;
/// here the response id is the id the engine keeps (receipts, logs), so the
/// server's count stays in it: a client may send one id twice.
fn request_id(prefix: &str, client: Option<&str>, n: u64) -> String {
    match client.filter(|c| !c.is_empty() && c.len() <= MAX_CLIENT_REQUEST_ID) {
        Some(c) => format!("{prefix}-{c}-{n}"),
        None => format!("{prefix}-{n}"),
    }
}

/// `POST /v1/completions` and `POST /v1/chat/completions`.
async fn generate<R: GenerationRoute>(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = async {
        let bytes = read_body(&state, &headers, body).await?;
        let ready = state.ready()?;
        let req = R::parse(&bytes)?;
        let spec = req.validate(&limits(&state, ready))?;
        // `to_str` takes visible ASCII only.
        let client_id = headers.get("x-request-id").and_then(|v| v.to_str().ok());
        start(&state, ready, spec, R::ENDPOINT, R::ID_PREFIX, client_id).await
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

async fn start(
    state: &Arc<AppState>,
    ready: &Ready,
    spec: GenerationSpec,
    endpoint: Endpoint,
    prefix: &str,
    client_id: Option<&str>,
) -> Result<Response, ApiError> {
    let mut permits =
        admission::admit(&state.admission, &ready.fit, &spec.prompts, spec.params.max_tokens)?.into_iter();
    let n = state.next_id.fetch_add(1, Ordering::SeqCst);
    let id = request_id(prefix, client_id, n);
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
        Ok(collect_response(meta, choices, rx, tok).await)
    }
}

async fn collect_response(
    meta: Meta,
    mut choices: Vec<ChoiceState>,
    mut rx: UnboundedReceiver<(usize, Event)>,
    tok: Arc<Tokenizer>,
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
    let tok = &*tok;
    let usage = Some(Usage::of(&choices));
    let extras = |c: &ChoiceState, d: &Delta| ChoiceExtras {
        token_ids: meta.return_token_ids.then(|| d.token_ids.clone()),
        prompt_token_ids: meta.return_token_ids.then(|| c.prompt_ids.clone()),
        prompt_logprobs: c.prompt_logprobs.as_ref().map(|lp| prompt_logprobs(lp, tok)),
    };
    let fields = |c: &ChoiceState| {
        let (finish, stop) = finish_fields(c.finish.as_ref());
        (Some(finish.unwrap_or("abort")), stop)
    };
    let (id, created, model) = (meta.id.as_str(), meta.created, meta.model.as_str());
    match meta.endpoint {
        Endpoint::Completions => {
            let choices = choices
                .iter()
                .zip(&deltas)
                .enumerate()
                .map(|(index, (c, d))| {
                    let (finish_reason, stop_reason) = fields(c);
                    CompletionChoice {
                        index,
                        text: c.text.clone(),
                        finish_reason,
                        stop_reason,
                        logprobs: meta.logprobs.map(|_| completion_logprobs(&d.logprobs, tok, 0)),
                        extras: extras(c, d),
                    }
                })
                .collect();
            Json(Envelope { id, object: "text_completion", created, model, choices, usage }).into_response()
        }
        Endpoint::Chat => {
            let choices = choices
                .iter()
                .zip(&deltas)
                .enumerate()
                .map(|(index, (c, d))| {
                    let (finish_reason, stop_reason) = fields(c);
                    ChatChoice {
                        index,
                        message: Message { role: "assistant", content: c.text.clone() },
                        finish_reason,
                        stop_reason,
                        logprobs: meta.logprobs.map(|_| chat_logprobs(&d.logprobs, tok)),
                        extras: extras(c, d),
                    }
                })
                .collect();
            Json(Envelope { id, object: "chat.completion", created, model, choices, usage }).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::request_id;

    #[test]
    fn a_client_request_id_names_the_request_and_the_count_keeps_it_unique() {
        assert_eq!(request_id("cmpl", None, 7), "cmpl-7");
        assert_eq!(request_id("cmpl", Some("bench-0a1b2c3d-3"), 7), "cmpl-bench-0a1b2c3d-3-7");
        assert_eq!(request_id("chatcmpl", Some("r"), 8), "chatcmpl-r-8");
        // Empty or overlong: the server's own id.
        assert_eq!(request_id("cmpl", Some(""), 9), "cmpl-9");
        assert_eq!(request_id("cmpl", Some(&"x".repeat(257)), 9), "cmpl-9");
        assert_eq!(request_id("cmpl", Some(&"x".repeat(256)), 9), format!("cmpl-{}-9", "x".repeat(256)));
    }
}
