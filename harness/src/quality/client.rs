//! HTTP of the gates: non-streaming `POST /v1/completions` calls with token-ID
//! prompts, at most `concurrency` in flight, each bounded in time and body size,
//! answers kept in item order. Loopback only. Owns the shape of one answer
//! (`Completion`). Must not judge answers: the gates score them.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::QualityError;

/// Most bytes of one answer read.
const MAX_BODY: usize = 64 << 20;

/// One answer, as recorded in `<gate>.responses.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub index: u64,
    pub status: Option<u16>,
    pub text: String,
    pub token_ids: Vec<u32>,
    pub finish_reason: Option<String>,
    /// Why the call failed (transport, timeout, non-200, malformed JSON).
    pub error: Option<String>,
    pub elapsed_s: f64,
    /// `choices[0].prompt_logprobs` when asked for (NLL gate); parsed, then dropped
    /// from the record in favour of the per-token values.
    #[serde(skip)]
    pub prompt_logprobs: Option<Value>,
}

/// Refuses anything but plain HTTP to a loopback host.
pub fn require_loopback(url: &str) -> Result<(), QualityError> {
    let err = || QualityError::NotLoopback(url.to_string());
    let parsed = reqwest::Url::parse(url).map_err(|_| err())?;
    let host = parsed.host_str().unwrap_or("").trim_start_matches('[').trim_end_matches(']');
    let ok =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if ok && parsed.scheme() == "http" { Ok(()) } else { Err(err()) }
}

#[derive(Clone)]
pub struct GateClient {
    client: reqwest::Client,
    url: String,
    timeout: Duration,
}

impl GateClient {
    /// `headers` go on every request: the arm's key and extra headers
    /// (`arm::arm_headers`), as on the arm's timed requests.
    pub fn new(base_url: &str, timeout: Duration, headers: HeaderMap) -> Result<GateClient, QualityError> {
        require_loopback(base_url)?;
        // A fresh connection per request (untimed; llama.cpp's server closes idle
        // keep-alive sockets).
        let client = crate::load::http_client_for(headers, crate::load::Connections::Fresh)
            .map_err(|e| QualityError::Client(e.to_string()))?;
        let url = format!("{}{}", base_url.trim_end_matches('/'), crate::protocol::routes::COMPLETIONS_PATH);
        Ok(GateClient { client, url, timeout })
    }

    async fn call(&self, body: &Value) -> Result<(u16, String), String> {
        let call = async {
            let mut resp =
                self.client.post(&self.url).json(body).send().await.map_err(|e| format!("no response: {e}"))?;
            let status = resp.status().as_u16();
            let mut buf: Vec<u8> = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| format!("reading the body: {e}"))? {
                if buf.len() + chunk.len() > MAX_BODY {
                    return Err(format!("the body exceeds {MAX_BODY} bytes"));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok((status, String::from_utf8_lossy(&buf).into_owned()))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(format!("no answer within {:.0} s", self.timeout.as_secs_f64())),
            Ok(r) => r,
        }
    }

    /// One completion for `body` (item `index`).
    pub async fn complete(&self, index: u64, body: &Value) -> Completion {
        let t0 = Instant::now();
        let mut c = Completion {
            index,
            status: None,
            text: String::new(),
            token_ids: Vec::new(),
            finish_reason: None,
            error: None,
            elapsed_s: 0.0,
            prompt_logprobs: None,
        };
        match self.call(body).await {
            Err(e) => c.error = Some(e),
            Ok((status, text)) => {
                c.status = Some(status);
                let v: Option<Value> = serde_json::from_str(&text).ok();
                let choice = v.as_ref().and_then(|v| v.get("choices")).and_then(|c| c.get(0));
                match (status, choice) {
                    (200, Some(ch)) => {
                        c.text = ch.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
                        c.finish_reason = ch.get("finish_reason").and_then(Value::as_str).map(str::to_string);
                        c.token_ids = ch
                            .get("token_ids")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter_map(|x| x.as_u64().map(|i| i as u32)).collect())
                            .unwrap_or_default();
                        c.prompt_logprobs = ch.get("prompt_logprobs").cloned();
                    }
                    _ => {
                        let head: String = text.chars().take(300).collect();
                        c.error = Some(format!("HTTP {status}: {head}"));
                    }
                }
            }
        }
        c.elapsed_s = t0.elapsed().as_secs_f64();
        c
    }

    /// Every body, at most `concurrency` in flight; answers in item order.
    /// `progress` is called after each answer with the number done.
    pub async fn complete_all(
        &self,
        bodies: &[Value],
        concurrency: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Vec<Completion> {
        let mut out = Vec::with_capacity(bodies.len());
        let mut stream = futures_util::stream::iter(bodies.iter().enumerate())
            .map(|(i, b)| self.complete(i as u64, b))
            .buffered(concurrency.max(1));
        while let Some(c) = stream.next().await {
            out.push(c);
            progress(out.len());
        }
        out
    }
}

/// A completions body with token-ID prompt, greedy.
pub fn body(model: &str, prompt: &[u32], max_tokens: u32, extra: Value) -> Value {
    let mut b = serde_json::json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "return_token_ids": true,
        "stream": false,
    });
    if let (Some(m), Value::Object(e)) = (b.as_object_mut(), extra) {
        m.extend(e);
    }
    b
}

#[cfg(test)]
mod header_tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers one request with an empty completion and returns its head.
    async fn one_request_head(listener: tokio::net::TcpListener) -> String {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed before the head");
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = r#"{"choices":[{"text":"","finish_reason":"length"}]}"#;
        let resp = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
        sock.write_all(resp.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&buf).to_lowercase()
    }

    #[tokio::test]
    async fn gate_requests_carry_the_arms_key_and_headers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(one_request_head(listener));
        let mut headers = HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, "Bearer sk-test".parse().unwrap());
        headers.insert("x-tenant", "study".parse().unwrap());
        let client = GateClient::new(&url, Duration::from_secs(10), headers).unwrap();
        let c = client.complete(0, &serde_json::json!({"prompt": [1]})).await;
        assert_eq!(c.status, Some(200), "{:?}", c.error);
        let head = server.await.unwrap();
        assert!(head.contains("authorization: bearer sk-test"), "{head}");
        assert!(head.contains("x-tenant: study"), "{head}");
    }
}
