//! The HTTP layer's one error enum: API errors, OpenAI-shaped
//! (`{"error": {"message", "type", "param", "code"}}`), each mapped to its HTTP
//! status here and nowhere else.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// 400: malformed JSON, wrong types, values out of range.
    #[error("{message}")]
    BadRequest { message: String, param: Option<String> },
    /// 401: missing or wrong API key.
    #[error("missing or invalid API key")]
    Unauthorized,
    /// 404: unknown model.
    #[error("the model {0:?} does not exist")]
    ModelNotFound(String),
    /// 404: unknown route.
    #[error("{0}")]
    NotFound(String),
    /// 405: a route that exists, with another method.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 408: the request body did not arrive in time; the connection closes.
    #[error("{0}")]
    Timeout(String),
    /// 413: body over the size limit.
    #[error("{0}")]
    TooLarge(String),
    /// 503: still loading, shutting down, or the engine loop stopped.
    #[error("{0}")]
    Unavailable(String),
    /// 503 with `Retry-After`: the admission queue is full (see `admission`).
    #[error("{0}")]
    Overloaded(String),
    /// 500: the engine failed.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad(message: impl Into<String>) -> Self {
        ApiError::BadRequest { message: message.into(), param: None }
    }

    pub fn bad_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::BadRequest { message: message.into(), param: Some(param.into()) }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::ModelNotFound(_) | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unavailable(_) | ApiError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        let (message, ty, param, code) = match self {
            ApiError::BadRequest { message, param } => (message.clone(), "invalid_request_error", param.clone(), None),
            ApiError::Unauthorized => (
                "missing or invalid API key (send Authorization: Bearer <key>)".to_string(),
                "authentication_error",
                None,
                Some("invalid_api_key"),
            ),
            ApiError::ModelNotFound(m) => (
                format!("the model {m:?} does not exist"),
                "invalid_request_error",
                Some("model".into()),
                Some("model_not_found"),
            ),
            ApiError::NotFound(m) => (m.clone(), "invalid_request_error", None, Some("not_found")),
            ApiError::MethodNotAllowed(m) => (m.clone(), "invalid_request_error", None, Some("method_not_allowed")),
            ApiError::Timeout(m) => (m.clone(), "invalid_request_error", None, Some("request_timeout")),
            ApiError::TooLarge(m) => (m.clone(), "invalid_request_error", None, Some("request_too_large")),
            ApiError::Unavailable(m) | ApiError::Overloaded(m) => {
                (m.clone(), "server_error", None, Some("service_unavailable"))
            }
            ApiError::Internal(m) => (m.clone(), "server_error", None, None),
        };
        serde_json::json!({"error": {"message": message, "type": ty, "param": param, "code": code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        use axum::http::header::{CONNECTION, RETRY_AFTER};
        match self {
            ApiError::Overloaded(_) => (self.status(), [(RETRY_AFTER, "1")], Json(self.body())).into_response(),
            // The rest of the body may never come: the connection cannot be reused.
            ApiError::Timeout(_) => (self.status(), [(CONNECTION, "close")], Json(self.body())).into_response(),
            _ => (self.status(), Json(self.body())).into_response(),
        }
    }
}

/// Parses a request body as a JSON object.
pub fn parse_object(body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad("the request body must be a JSON object"));
    }
    Ok(v)
}

/// Reads typed fields out of a parsed body, naming the offending field on error.
pub fn fields<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ApiError::bad(format!("invalid request: {inner}"))
        } else {
            ApiError::bad_param(path.clone(), format!("invalid value for {path}: {inner}"))
        }
    })
}
