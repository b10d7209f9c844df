//! HTTP of the acceptance suite: one request, a body read with a size cap, or an SSE
//! stream read event by event (optionally dropped after a few events, to act as a
//! disconnecting client). Every call is bounded in time (the suite timeout) and in
//! size or event count. Owns the timing of each call. Must not judge what came back.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::StreamExt;
use serde_json::Value;

/// Most bytes of one response body read.
const MAX_BODY: usize = 16 << 20;
/// How long a stream may stay open after `[DONE]` while we watch for extra events.
const TAIL: Duration = Duration::from_secs(2);

/// A finished request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub text: String,
    pub sent: Instant,
    pub done: Instant,
}

impl Reply {
    pub fn elapsed(&self) -> Duration {
        self.done.saturating_duration_since(self.sent)
    }

    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.text).ok()
    }
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// The server closed the connection.
    Closed,
    /// The server kept the connection open after `[DONE]` for `TAIL`.
    OpenAfterDone,
    /// We dropped it after the requested number of events.
    Dropped,
    Timeout,
    TooManyEvents,
    Transport(String),
    Malformed(String),
}

/// What one stream delivered.
#[derive(Debug, Clone)]
pub struct StreamRec {
    pub status: u16,
    /// The body of a non-2xx answer.
    pub error_body: Option<String>,
    /// `data` of every event, with its time since send.
    pub events: Vec<(Duration, String)>,
    pub end: StreamEnd,
    pub sent: Instant,
    pub done: Instant,
}

impl StreamRec {
    pub fn elapsed(&self) -> Duration {
        self.done.saturating_duration_since(self.sent)
    }
}

/// A client bound to one server.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    pub base: String,
    pub timeout: Duration,
}

pub fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}... ({} bytes in all)", &s[..i], s.len()),
        None => s.to_string(),
    }
}

impl Http {
    /// A fresh connection for every request (`load::Connections::Fresh`; untimed):
    /// servers that close idle keep-alive connections (llama.cpp's) would otherwise fail a request
    /// sent on a socket the server is closing, an artefact of the client.
    /// `headers` go on every request (the client headers, `accept::headers`).
    pub fn new(base: &str, timeout: Duration, headers: reqwest::header::HeaderMap) -> Result<Http, String> {
        let client =
            crate::load::http_client_for(headers, crate::load::Connections::Fresh).map_err(|e| e.to_string())?;
        Ok(Http { client, base: base.trim_end_matches('/').to_string(), timeout })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn read_capped(mut resp: reqwest::Response) -> Result<String, String> {
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("reading the body: {e}"))? {
            if buf.len() + chunk.len() > MAX_BODY {
                return Err(format!("the body exceeds {MAX_BODY} bytes"));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    async fn finish(&self, sent: Instant, req: reqwest::RequestBuilder) -> Result<Reply, String> {
        let call = async {
            let resp = req.send().await.map_err(|e| format!("no response: {e}"))?;
            let status = resp.status().as_u16();
            let text = Self::read_capped(resp).await?;
            Ok::<_, String>((status, text))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(format!("no complete answer within {:.1} s", self.timeout.as_secs_f64())),
            Ok(Err(e)) => Err(e),
            Ok(Ok((status, text))) => Ok(Reply { status, text, sent, done: Instant::now() }),
        }
    }

    pub async fn get(&self, path: &str) -> Result<Reply, String> {
        let sent = Instant::now();
        self.finish(sent, self.client.get(self.url(path))).await
    }

    pub async fn post(&self, path: &str, body: Bytes) -> Result<Reply, String> {
        let sent = Instant::now();
        let req = self.client.post(self.url(path)).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        self.finish(sent, req).await
    }

    /// Sends a streaming request and reads its events until the server closes the
    /// stream, `stop_after` events arrived (then drops the connection), `max_events`
    /// is exceeded, or the suite timeout passes. `Err` only when no response came.
    pub async fn stream(
        &self,
        path: &str,
        body: Bytes,
        stop_after: Option<usize>,
        max_events: usize,
    ) -> Result<StreamRec, String> {
        let sent = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let req = self.client.post(self.url(path)).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        let resp = match tokio::time::timeout_at(deadline, req.send()).await {
            Err(_) => return Err(format!("no response headers within {:.1} s", self.timeout.as_secs_f64())),
            Ok(Err(e)) => return Err(format!("no response: {e}")),
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        let mut rec =
            StreamRec { status, error_body: None, events: Vec::new(), end: StreamEnd::Closed, sent, done: sent };
        if !resp.status().is_success() {
            let text = tokio::time::timeout_at(deadline, Self::read_capped(resp)).await;
            rec.error_body = Some(match text {
                Ok(Ok(t)) => clip(&t, 2000),
                Ok(Err(e)) => e,
                Err(_) => "(no body within the timeout)".into(),
            });
            rec.done = Instant::now();
            return Ok(rec);
        }
        let mut events = resp.bytes_stream().eventsource();
        let mut tail_deadline: Option<tokio::time::Instant> = None;
        loop {
            let until = tail_deadline.map_or(deadline, |t| t.min(deadline));
            let next = match tokio::time::timeout_at(until, events.next()).await {
                Err(_) if tail_deadline.is_some() && tokio::time::Instant::now() < deadline => {
                    rec.end = StreamEnd::OpenAfterDone;
                    break;
                }
                Err(_) => {
                    rec.end = StreamEnd::Timeout;
                    break;
                }
                Ok(None) => break,
                Ok(Some(n)) => n,
            };
            match next {
                Ok(ev) => {
                    let is_done = ev.data.trim() == "[DONE]";
                    rec.events.push((sent.elapsed(), ev.data));
                    if is_done && tail_deadline.is_none() {
                        tail_deadline = Some(tokio::time::Instant::now() + TAIL);
                    }
                }
                Err(EventStreamError::Transport(e)) => {
                    rec.end = StreamEnd::Transport(e.to_string());
                    break;
                }
                Err(e) => {
                    rec.end = StreamEnd::Malformed(e.to_string());
                    break;
                }
            }
            if stop_after.is_some_and(|k| rec.events.len() >= k) {
                rec.end = StreamEnd::Dropped;
                break;
            }
            if rec.events.len() > max_events {
                rec.end = StreamEnd::TooManyEvents;
                break;
            }
        }
        drop(events); // closes the connection when the stream is not finished
        rec.done = Instant::now();
        Ok(rec)
    }
}
