//! vLLM's extra routes: `GET /version`, `POST /tokenize`, `POST /detokenize`,
//! and OpenAI's `GET /v1/models/{id}`; plus the OpenAI-shaped answers for an
//! unknown route (404) and a known route with the wrong method (405).
//! Request and response shapes follow vLLM's `TokenizeCompletionRequest` /
//! `TokenizeChatRequest` (`{model?, prompt, add_special_tokens = true}` or
//! `{model?, messages, add_generation_prompt = true, add_special_tokens =
//! false}`) -> `{count, max_model_len, tokens, token_strs}`, and
//! `{model?, tokens}` -> `{prompt}`.

use super::api::{ChatMessageIn, chat_prompt_ids};
use super::error::{ApiError, fields, parse_object};
use super::state::{AppState, read_body};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Serialize)]
struct Version {
    version: &'static str,
}

pub async fn version() -> Response {
    Json(Version { version: env!("CARGO_PKG_VERSION") }).into_response()
}

#[derive(Deserialize)]
struct TokenizeRequest {
    model: Option<String>,
    prompt: Option<String>,
    messages: Option<Vec<ChatMessageIn>>,
    add_special_tokens: Option<bool>,
    #[serde(default = "yes")]
    add_generation_prompt: bool,
    #[serde(default)]
    return_token_strs: bool,
}

fn yes() -> bool {
    true
}

#[derive(Serialize)]
struct TokenizeResponse {
    count: usize,
    max_model_len: usize,
    tokens: Vec<u32>,
    token_strs: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    model: Option<String>,
    tokens: Vec<u32>,
}

#[derive(Serialize)]
struct DetokenizeResponse {
    prompt: String,
}

fn check_model(state: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(m) if *m != state.served_model_name => Err(ApiError::ModelNotFound(m.clone())),
        _ => Ok(()),
    }
}

pub async fn tokenize(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = async {
        let bytes = read_body(&state, &headers, body).await?;
        let ready = state.ready()?;
        let req: TokenizeRequest = fields(&parse_object(&bytes)?)?;
        check_model(&state, &req.model)?;
        let tok = &ready.tokenizer;
        let tokens = match (&req.prompt, &req.messages) {
            (Some(p), None) => tok
                .encode(p, req.add_special_tokens.unwrap_or(true))
                .map_err(|e| ApiError::bad_param("prompt", e.to_string()))?,
            (None, Some(m)) => chat_prompt_ids(m, req.add_generation_prompt, tok)?,
            _ => return Err(ApiError::bad("send exactly one of prompt or messages")),
        };
        let token_strs = req
            .return_token_strs
            .then(|| tokens.iter().map(|&t| tok.decode(&[t], false).unwrap_or_default()).collect::<Vec<String>>());
        Ok(Json(TokenizeResponse { count: tokens.len(), max_model_len: ready.max_model_len, tokens, token_strs }))
    }
    .await;
    r.map(IntoResponse::into_response).unwrap_or_else(|e| e.into_response())
}

pub async fn detokenize(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let r = async {
        let bytes = read_body(&state, &headers, body).await?;
        let ready = state.ready()?;
        let req: DetokenizeRequest = fields(&parse_object(&bytes)?)?;
        check_model(&state, &req.model)?;
        if let Some(&t) = req.tokens.iter().find(|&&t| t as usize >= ready.vocab_size) {
            return Err(ApiError::bad_param(
                "tokens",
                format!("token id {t} is outside the vocabulary (size {})", ready.vocab_size),
            ));
        }
        let prompt =
            ready.tokenizer.decode(&req.tokens, false).map_err(|e| ApiError::bad_param("tokens", e.to_string()))?;
        Ok(Json(DetokenizeResponse { prompt }))
    }
    .await;
    r.map(IntoResponse::into_response).unwrap_or_else(|e| e.into_response())
}

pub async fn model(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    if id != state.served_model_name {
        return ApiError::ModelNotFound(id).into_response();
    }
    Json(super::state::model_card(&state)).into_response()
}

pub async fn not_found(uri: Uri) -> Response {
    ApiError::NotFound(format!("no route for {}", uri.path())).into_response()
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path())).into_response()
}
