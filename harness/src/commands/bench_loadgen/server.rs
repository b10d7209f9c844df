//! The fake streaming endpoint of `harness bench-client`: an axum server on loopback
//! that answers every `POST /v1/completions` (and `/v1/chat/completions`) with N SSE
//! chunks at a fixed interval, each carrying one token (`token_ids` of length 1),
//! then a usage-only chunk and `[DONE]`, without reading the prompt (with
//! `from_body`: as many chunks as the request's `max_tokens`, and its prompt's
//! length as `usage.prompt_tokens`, for variable-length workloads). Purpose-built to
//! be cheaper than any real server, so that what a benchmark measures is the client.
//! Owns the fake's wire format. Must not bind anything but 127.0.0.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::stream;
use tokio::sync::oneshot;

use super::BenchError;

/// What every streamed answer looks like.
#[derive(Debug, Clone, Copy)]
pub struct FakeConfig {
    /// Token chunks per answer.
    pub chunks: u32,
    /// Pause before each token chunk (the first one too).
    pub interval: Duration,
    /// `usage.prompt_tokens` reported (the fake never reads the prompt).
    pub prompt_tokens: u32,
    /// Read each request's `max_tokens` (chunks streamed) and prompt length (usage)
    /// from its body instead (`--sharegpt`: the panel's own lengths).
    pub from_body: bool,
}

/// What `from_body` reads of a request.
#[derive(serde::Deserialize)]
struct Lengths {
    max_tokens: Option<u32>,
    prompt: Option<Vec<u32>>,
}

struct Shared {
    cfg: FakeConfig,
    next_id: AtomicU64,
}

#[derive(Clone, Copy)]
enum Flavor {
    Completions,
    Chat,
}

/// A running fake endpoint; dropping it leaves the server running until its runtime
/// stops, `shutdown` stops it.
pub struct FakeServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl FakeServer {
    pub fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Binds 127.0.0.1:`port` (0 = ephemeral) and serves on the current runtime.
pub async fn start(cfg: FakeConfig, port: u16) -> Result<FakeServer, BenchError> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .map_err(|e| BenchError::Bind { port, error: e.to_string() })?;
    let addr = listener.local_addr().map_err(|e| BenchError::Bind { port, error: e.to_string() })?;
    // Without TCP_NODELAY each small chunk written while the previous one is unacked
    // waits for the client's delayed ACK (~40 ms on Linux): Nagle + delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let shared = Arc::new(Shared { cfg, next_id: AtomicU64::new(0) });
    let app = Router::new()
        .route(
            crate::protocol::routes::COMPLETIONS_PATH,
            post(|s: State<Arc<Shared>>, b: Bytes| answer(s, b, Flavor::Completions)),
        )
        .route("/v1/chat/completions", post(|s: State<Arc<Shared>>, b: Bytes| answer(s, b, Flavor::Chat)))
        .route(crate::protocol::routes::MODELS_PATH, get(models))
        .route("/health", get(|| async { "ok" }))
        .with_state(shared);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = served.await {
            eprintln!("bench-client: fake endpoint stopped: {e}");
        }
    });
    Ok(FakeServer { addr, stop: Some(stop) })
}

async fn models() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"object":"list","data":[{"id":"fake","object":"model","created":0,"owned_by":"bench-client"}]}"#,
    )
}

fn frame(json: String) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

fn token_chunk(flavor: Flavor, id: u64, finish: Option<&str>) -> Bytes {
    let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    frame(match flavor {
        Flavor::Completions => format!(
            r#"{{"id":"cmpl-{id}","object":"text_completion","created":0,"model":"fake","choices":[{{"index":0,"text":" x","token_ids":[42],"logprobs":null,"finish_reason":{finish}}}]}}"#
        ),
        Flavor::Chat => format!(
            r#"{{"id":"chatcmpl-{id}","object":"chat.completion.chunk","created":0,"model":"fake","choices":[{{"index":0,"delta":{{"content":" x"}},"finish_reason":{finish}}}]}}"#
        ),
    })
}

fn tail(flavor: Flavor, id: u64, cfg: &FakeConfig) -> Bytes {
    let (p, c) = (cfg.prompt_tokens, cfg.chunks);
    let (prefix, object) = match flavor {
        Flavor::Completions => ("cmpl", "text_completion"),
        Flavor::Chat => ("chatcmpl", "chat.completion.chunk"),
    };
    let usage = frame(format!(
        r#"{{"id":"{prefix}-{id}","object":"{object}","created":0,"model":"fake","choices":[],"usage":{{"prompt_tokens":{p},"completion_tokens":{c},"total_tokens":{}}}}}"#,
        p + c
    ));
    let mut both = Vec::with_capacity(usage.len() + 16);
    both.extend_from_slice(&usage);
    both.extend_from_slice(b"data: [DONE]\n\n");
    Bytes::from(both)
}

async fn answer(State(shared): State<Arc<Shared>>, body: Bytes, flavor: Flavor) -> Response {
    let mut cfg = shared.cfg;
    if cfg.from_body
        && let Ok(l) = serde_json::from_slice::<Lengths>(&body)
    {
        cfg.chunks = l.max_tokens.unwrap_or(cfg.chunks).max(1);
        cfg.prompt_tokens = l.prompt.map_or(cfg.prompt_tokens, |p| p.len() as u32);
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    // Item k < chunks: sleep, then token chunk k (the last one finishes); item
    // `chunks`: usage-only chunk and [DONE], without a pause.
    let frames = stream::unfold(0u32, move |k| async move {
        if k > cfg.chunks {
            return None;
        }
        if k == cfg.chunks {
            return Some((Ok::<Bytes, Infallible>(tail(flavor, id, &cfg)), k + 1));
        }
        tokio::time::sleep(cfg.interval).await;
        let finish = (k + 1 == cfg.chunks).then_some("length");
        Some((Ok(token_chunk(flavor, id, finish)), k + 1))
    });
    let mut resp = Response::new(Body::from_stream(frames));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache"));
    resp
}
