//! One timed request, recorded: sends the prepared body, stamps HTTP send, response
//! headers, every SSE event and `[DONE]` on the study clock, and classifies how it
//! failed. Zero retries. Owns the failure classes' boundaries (connect / before
//! headers / HTTP status / after headers / malformed stream / timeout / server died)
//! and the run-time checks of usage.prompt_tokens and forced output length; with
//! the light recorder (`RequestCtx::light`) only the first token-bearing event (and
//! the first content event, when reasoning came first) is kept, so that a cell pair can show what full recording costs. A session turn's
//! record (`turn` set) also keeps the reply's streamed text. Must not
//! schedule (the dispatcher decides when) and must not drop a partial timeline.

use std::time::Duration;

use axum::body::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use tokio::sync::watch;

use super::clock::StudyClock;
use super::sse::parse_chunk;
use crate::evidence::request_record::{Failure, RequestRecord, StreamEvent};

/// After a transport failure, how long to wait for news that the server died, so that
/// a reset caused by the death is classified as `ServerDied`.
pub const DEATH_GRACE: Duration = Duration::from_secs(1);
/// After `[DONE]`, how long the rest of the body (its end) may take to arrive; the
/// connection then returns to the pool. The record is already complete.
const TAIL: Duration = Duration::from_secs(1);
/// Most bytes of an error body kept in `Failure::HttpStatus`.
const ERROR_BODY: usize = 2048;
/// The header that carries a request's id (`request.request_id_prefix`), as vLLM
/// bench sends it and vLLM's server takes it.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Everything a request task needs besides its record and body.
#[derive(Clone)]
pub struct RequestCtx {
    pub client: reqwest::Client,
    /// Full URL of `/v1/completions` (or `/v1/chat/completions`, whose usage
    /// `prompt_tokens` include the server's chat template and are not checked).
    pub url: String,
    pub clock: StudyClock,
    pub timeout: Duration,
    /// `Some(description)` once the server process has exited (never, for external arms).
    pub server_exit: watch::Receiver<Option<String>>,
    /// `true` once the cell's drain timeout has passed.
    pub drain_expired: watch::Receiver<bool>,
    /// Check `usage.completion_tokens` (and streamed token IDs) reach the intended length.
    pub forced_output: bool,
    /// The light recorder (`recorder = "light"`): keep only the first token-bearing
    /// event (every event is still parsed, for usage, finish reason and errors).
    pub light: bool,
    /// Clients bound to other source addresses (`load::http_clients_from`): request
    /// i goes out through `source_clients[i mod n]`; empty: every request uses
    /// `client`. A loopback source address has one ephemeral port range per
    /// destination (`net.ipv4.ip_local_port_range`, 28,232 ports by default), so
    /// several 127.0.0.x sources hold more connections than one.
    pub source_clients: std::sync::Arc<[reqwest::Client]>,
}

impl RequestCtx {
    /// This context with request `index`'s client (see `source_clients`).
    pub fn for_request(&self, index: u64) -> RequestCtx {
        match self.source_clients.len() {
            0 => self.clone(),
            n => RequestCtx { client: self.source_clients[(index % n as u64) as usize].clone(), ..self.clone() },
        }
    }
}

/// Waits until the watch holds `Some`; pending forever if the sender is gone first.
pub async fn exited(mut rx: watch::Receiver<Option<String>>) -> String {
    loop {
        if let Some(d) = rx.borrow_and_update().clone() {
            return d;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

async fn expired(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|&v| v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// An error and every cause below it, joined by `: ` (reqwest's own message omits
/// the cause, e.g. "Connection refused").
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

fn transport(f: &Failure) -> bool {
    matches!(f, Failure::Connect { .. } | Failure::BeforeHeaders { .. } | Failure::AfterHeaders { .. })
}

fn detail_of(f: &Failure) -> String {
    match f {
        Failure::Connect { detail } | Failure::BeforeHeaders { detail } | Failure::AfterHeaders { detail } => {
            format!("{}: {detail}", f.class())
        }
        other => other.class().to_string(),
    }
}

/// Sends one request and fills `rec` (whose intended/dispatch/admission stamps are
/// set); `request_id`, when given, goes out as its `x-request-id` header (it
/// replaces an arm header of that name, as vLLM bench's request id replaces its
/// `--header`). Always returns with either `done_ns` or a failure (or both, when a
/// check fails after a complete stream).
pub async fn execute(rec: &mut RequestRecord, body: Bytes, request_id: Option<HeaderValue>, ctx: &RequestCtx) {
    let clock = ctx.clock;
    let send = clock.now_ns();
    rec.send_ns = Some(send);
    rec.light = ctx.light;
    let deadline = tokio::time::Instant::from_std(clock.instant(send) + ctx.timeout);
    let result = {
        let transfer = transfer(rec, body, request_id, ctx);
        tokio::pin!(transfer);
        tokio::select! {
            r = &mut transfer => r,
            _ = tokio::time::sleep_until(deadline) => Err(Failure::Timeout { after_ns: clock.now_ns() - send }),
            _ = expired(ctx.drain_expired.clone()) => Err(Failure::Timeout { after_ns: clock.now_ns() - send }),
            d = exited(ctx.server_exit.clone()) => Err(Failure::ServerDied { detail: format!("{d} while the request was outstanding") }),
        }
    };
    rec.failure = match result {
        Ok(()) => check(rec, ctx.forced_output, ctx.url.ends_with(crate::protocol::routes::CHAT_COMPLETIONS_PATH)),
        Err(f) if transport(&f) => match tokio::time::timeout(DEATH_GRACE, exited(ctx.server_exit.clone())).await {
            Ok(d) => Some(Failure::ServerDied { detail: format!("{d}; the request saw {}", detail_of(&f)) }),
            Err(_) => Some(f),
        },
        Err(f) => Some(f),
    };
}

/// The run-time checks of a complete stream.
fn check(rec: &RequestRecord, forced_output: bool, chat: bool) -> Option<Failure> {
    let Some(usage) = rec.usage else {
        return Some(Failure::MalformedStream { detail: "the stream ended without a usage chunk".into() });
    };
    // On the chat endpoint the server's template adds tokens the panel cannot know.
    if usage.prompt_tokens != rec.prompt_tokens_intended && !chat {
        return Some(Failure::PromptLengthMismatch { expected: rec.prompt_tokens_intended, got: usage.prompt_tokens });
    }
    if forced_output && rec.light {
        // One event kept: usage is the only count of the output.
        if usage.completion_tokens < rec.output_tokens_intended {
            return Some(Failure::ShortOutput { expected: rec.output_tokens_intended, got: usage.completion_tokens });
        }
    } else if forced_output {
        let bearing = rec.events.iter().filter(|e| e.tokens > 0);
        let all_ids = bearing.clone().all(|e| e.token_ids.is_some());
        let streamed: u32 = bearing.map(|e| e.tokens).sum();
        let got = if all_ids { usage.completion_tokens.min(streamed) } else { usage.completion_tokens };
        if got < rec.output_tokens_intended {
            return Some(Failure::ShortOutput { expected: rec.output_tokens_intended, got });
        }
    }
    None
}

async fn transfer(
    rec: &mut RequestRecord,
    body: Bytes,
    request_id: Option<HeaderValue>,
    ctx: &RequestCtx,
) -> Result<(), Failure> {
    let clock = ctx.clock;
    let mut req = ctx
        .client
        .post(&ctx.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(id) = request_id {
        req = req.header(REQUEST_ID, id);
    }
    let sent = req.body(body).send().await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Err(Failure::Connect { detail: chain(&e) }),
        Err(e) => return Err(Failure::BeforeHeaders { detail: chain(&e) }),
    };
    rec.headers_ns = Some(clock.now_ns());
    let status = resp.status();
    rec.status = Some(status.as_u16());
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        let body = match text.char_indices().nth(ERROR_BODY) {
            Some((i, _)) => text[..i].to_string(),
            None => text,
        };
        return Err(Failure::HttpStatus { status: status.as_u16(), body });
    }
    let mut stream = resp.bytes_stream().eventsource();
    while let Some(item) = stream.next().await {
        let t_ns = clock.now_ns();
        let ev = match item {
            Ok(ev) => ev,
            Err(EventStreamError::Transport(e)) => return Err(Failure::AfterHeaders { detail: chain(&e) }),
            Err(e) => return Err(Failure::MalformedStream { detail: e.to_string() }),
        };
        if ev.data.trim() == "[DONE]" {
            rec.done_ns = Some(t_ns);
            let _ = tokio::time::timeout(TAIL, async { while stream.next().await.is_some() {} }).await;
            return Ok(());
        }
        let chunk = parse_chunk(&ev.data).map_err(|detail| Failure::MalformedStream { detail })?;
        if rec.server_request_id.is_none() {
            rec.server_request_id = chunk.id.clone();
        }
        if let Some(err) = chunk.error {
            rec.events.push(StreamEvent { t_ns, tokens: 0, token_ids: None, reasoning: 0 });
            return Err(Failure::AfterHeaders { detail: format!("the server sent an error event: {err}") });
        }
        if chunk.finish_reason.is_some() {
            rec.finish_reason = chunk.finish_reason;
        }
        if chunk.usage.is_some() {
            rec.usage = chunk.usage;
        }
        // A session turn keeps its reply's text: the next turn sends it back.
        if let Some(turn) = rec.turn.as_mut()
            && !chunk.text.is_empty()
        {
            turn.reply.get_or_insert_with(String::new).push_str(&chunk.text);
        }
        let first_token = chunk.tokens > 0 && !rec.events.iter().any(|e| e.tokens > 0);
        // ... and the first content event after reasoning (time to first content token).
        let first_content = chunk.tokens > chunk.reasoning_tokens && !rec.events.iter().any(|e| e.tokens > e.reasoning);
        if !rec.light || first_token || first_content {
            rec.events.push(StreamEvent {
                t_ns,
                tokens: chunk.tokens,
                token_ids: chunk.token_ids,
                reasoning: chunk.reasoning_tokens,
            });
        }
    }
    Err(Failure::AfterHeaders { detail: "the stream ended before [DONE]".into() })
}
