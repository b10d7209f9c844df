//! Reliability of the server over real HTTP (issue 12): stop strings finish as
//! `stop` everywhere, a failed forward pass is a server error (HTTP 500 or an
//! error event) counted apart from successes, a full admission queue answers
//! 503, half-sent or idle connections are closed, a stalled request body gets
//! 408 within `--body-read-timeout-s`, and connections past
//! `--max-connections` are closed at once.

use crate::common;

use common::server::Server;
use engine::synth::{SynthSpec, SynthTokenizer, write_model};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::Duration;

fn synth() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, seed: 11, ..SynthSpec::default() };
    write_model(&spec, dir.path()).unwrap();
    dir
}

async fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(s.url(path)).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// SSE `data:` payloads of a whole stream, in order.
async fn stream(s: &Server, path: &str, body: Value) -> Vec<String> {
    let r = reqwest::Client::new().post(s.url(path)).json(&body).send().await.unwrap();
    let text = r.text().await.unwrap();
    text.split("\n\n").filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")).map(String::from)).collect()
}

/// `vllm:request_success_total{...,finished_reason="REASON"}`, 0 when absent.
async fn finished(s: &Server, reason: &str) -> f64 {
    let text = reqwest::get(s.url("/metrics")).await.unwrap().text().await.unwrap();
    let label = format!("finished_reason=\"{reason}\"");
    text.lines()
        .find(|l| l.starts_with("vllm:request_success_total{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn greedy(prompt: &str, max_tokens: usize) -> Value {
    json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true, "return_token_ids": true})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_string_finishes_as_stop_in_the_response_metrics_and_receipts() {
    let dir = synth();
    let receipts = dir.path().join("receipts.jsonl");
    let s = Server::start(dir.path(), &["--threads", "2", "--receipts", receipts.to_str().unwrap()]);
    let (_, plain) = post(&s, "/v1/completions", greedy("the wizard", 24)).await;
    let full = plain["choices"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 8, "the synthetic model's text is long enough: {full:?}");
    let stop: String = chars[4..7].iter().collect();
    let want = &full[..full.find(&stop).unwrap()];

    let mut body = greedy("the wizard", 24);
    body["stop"] = json!([stop]);
    let (status, v) = post(&s, "/v1/completions", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!((c["finish_reason"].as_str(), c["stop_reason"].as_str()), (Some("stop"), Some(stop.as_str())), "{v}");
    assert_eq!(c["text"], want);
    let used = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(used < 24, "generation ends at the stop string, not at max_tokens");
    assert_eq!(c["token_ids"].as_array().unwrap().len() as u64, used);

    body["stream"] = json!(true);
    let events = stream(&s, "/v1/completions", body).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let text: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap_or_default()).collect();
    assert_eq!(text, want);
    let last = &chunks.last().unwrap()["choices"][0];
    assert_eq!((last["finish_reason"].as_str(), last["stop_reason"].as_str()), (Some("stop"), Some(stop.as_str())));

    assert_eq!(finished(&s, "stop").await, 2.0, "both stop-string requests count as stop");
    assert_eq!(finished(&s, "abort").await, 0.0, "a stop string is not an abort");
    assert_eq!(finished(&s, "length").await, 1.0);
    drop(s);
    let lines: Vec<Value> =
        std::fs::read_to_string(&receipts).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let reasons: Vec<&str> =
        lines.iter().flat_map(|l| l["finish_reasons"].as_array().unwrap()).map(|r| r.as_str().unwrap()).collect();
    assert_eq!(reasons, ["length", "stop", "stop"], "receipts record each finish with its reason");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_token_sets_stop_reason_to_its_id_and_length_leaves_it_null() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "2"]);
    let (_, plain) = post(&s, "/v1/completions", greedy("abc", 12)).await;
    assert!(plain["choices"][0]["stop_reason"].is_null(), "{plain}");
    let ids: Vec<u64> =
        plain["choices"][0]["token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let stop_id = ids[5];
    let first = ids.iter().position(|&t| t == stop_id).unwrap();
    let mut body = greedy("abc", 12);
    body["stop_token_ids"] = json!([stop_id]);
    let (_, v) = post(&s, "/v1/completions", body).await;
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(c["stop_reason"], json!(stop_id));
    assert_eq!(c["token_ids"].as_array().unwrap().len(), first + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_forward_pass_is_a_server_error_not_an_abort() {
    let dir = synth();
    // The first forward pass fails, once.
    let s = Server::start(dir.path(), &["--threads", "1", "--debug-fail-forward-after", "0"]);
    let (status, v) = post(&s, "/v1/completions", greedy("abc", 4)).await;
    assert_eq!(status, 500, "{v}");
    assert_eq!(v["error"]["type"], "server_error", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("injected failure"), "{v}");
    let (status, v) = post(&s, "/v1/completions", greedy("abc", 4)).await;
    assert_eq!(status, 200, "the server keeps serving: {v}");
    assert_eq!(finished(&s, "error").await, 1.0);
    assert_eq!(finished(&s, "abort").await, 0.0);
    assert_eq!(finished(&s, "length").await, 1.0);

    let s = Server::start(dir.path(), &["--threads", "1", "--debug-fail-forward-after", "0"]);
    let mut body = greedy("abc", 4);
    body["stream"] = json!(true);
    let events = stream(&s, "/v1/completions", body).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(error["error"]["type"], "server_error", "{events:?}");
    assert!(events.iter().all(|e| !e.contains("\"abort\"")), "{events:?}");
    assert_eq!(finished(&s, "error").await, 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_admission_queue_answers_503_with_an_openai_error() {
    let dir = synth();
    let args = ["--threads", "1", "--max-num-seqs", "1", "--max-waiting", "2", "--debug-step-delay-us", "20000"];
    let s = Server::start(dir.path(), &args);
    let burst = (0..12).map(|i| post(&s, "/v1/completions", greedy(&format!("request {i}"), 20)));
    let answers = futures_util::future::join_all(burst).await;
    let refused: Vec<&Value> = answers.iter().filter(|(st, _)| *st == 503).map(|(_, v)| v).collect();
    let served = answers.iter().filter(|(st, _)| *st == 200).count();
    assert_eq!(refused.len() + served, 12, "{answers:?}");
    assert!(!refused.is_empty(), "one running and two waiting leave no room for twelve");
    assert!(served >= 2, "the first two find the queue empty");
    for v in refused {
        assert_eq!(v["error"]["code"], "service_unavailable", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("max-waiting"), "{v}");
    }
    let (status, _) = post(&s, "/v1/completions", greedy("after", 2)).await;
    assert_eq!(status, 200, "the queue drains");
}

/// Reads until the server closes the connection; panics if it is still open
/// after `bound` (a bound against hanging, not a speed assertion).
fn read_until_closed(stream: &mut std::net::TcpStream, bound: Duration) -> String {
    stream.set_read_timeout(Some(bound)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return String::from_utf8_lossy(&got).into_owned();
            }
            Err(e) => {
                panic!("connection still open after {bound:?} ({e}); read so far: {:?}", String::from_utf8_lossy(&got))
            }
        }
    }
}

#[test]
fn half_sent_headers_and_idle_connections_are_closed() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--header-read-timeout-s", "1", "--keep-alive-timeout-s", "1"]);
    let mut half = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app").unwrap();
    let got = read_until_closed(&mut half, Duration::from_secs(30));
    assert!(!got.contains("200 OK"), "{got}");

    // A keep-alive connection that goes idle after a request.
    let s = Server::start(dir.path(), &["--header-read-timeout-s", "60", "--keep-alive-timeout-s", "1"]);
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let got = read_until_closed(&mut idle, Duration::from_secs(30));
    assert!(got.starts_with("HTTP/1.1 200"), "the request is answered first: {got}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_in_flight_request_outlives_the_keep_alive_timeout() {
    let dir = synth();
    // 30 steps of at least 100 ms: about 3 s without a byte on the connection.
    let args = ["--threads", "1", "--keep-alive-timeout-s", "1", "--debug-step-delay-us", "100000"];
    let s = Server::start(dir.path(), &args);
    let (status, v) = post(&s, "/v1/completions", greedy("abc", 30)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 30);
}

/// Sends the head of a POST with `Content-Length: 100` and only 9 body bytes.
fn stalled_body(port: u16, path: &str) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"prompt\""
    );
    c.write_all(head.as_bytes()).unwrap();
    c
}

#[test]
fn stalled_request_bodies_get_408_within_the_body_read_timeout() {
    let dir = synth();
    let s = Server::start(dir.path(), &["--threads", "1", "--body-read-timeout-s", "1"]);
    let paths = ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/v1/completions"];
    let mut stalled: Vec<_> = paths.iter().map(|p| stalled_body(s.port, p)).collect();
    for (c, path) in stalled.iter_mut().zip(paths) {
        // Bounds against hanging (the body would never come), not speed.
        let got = read_until_closed(c, Duration::from_secs(30));
        assert!(got.starts_with("HTTP/1.1 408"), "{path}: {got}");
        assert!(got.contains("request_timeout") && got.contains("--body-read-timeout-s"), "{path}: {got}");
    }
    let h = health_on(&mut std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap());
    assert!(h.starts_with("HTTP/1.1 200"), "the server keeps serving: {h}");
}

/// Sends `GET /health` on a kept-alive connection and reads one answer; what
/// arrived before the server closed the connection when it refuses it.
fn health_on(c: &mut std::net::TcpStream) -> String {
    let _ = c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\nok") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A connection the server keeps: retried until one is answered (the startup
/// health check's connection may still hold its place for a moment).
fn held_connection(port: u16) -> std::net::TcpStream {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let got = health_on(&mut c);
        if got.starts_with("HTTP/1.1 200") {
            return c;
        }
        assert!(std::time::Instant::now() < deadline, "no connection was kept: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn connections_past_max_connections_are_closed_and_the_server_serves_once_they_go() {
    let dir = synth();
    let args = ["--max-connections", "4", "--header-read-timeout-s", "120", "--keep-alive-timeout-s", "120"];
    let s = Server::start(dir.path(), &args);
    let held: Vec<_> = (0..4).map(|_| held_connection(s.port)).collect();
    let mut fifth = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let _ = fifth.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let got = read_until_closed(&mut fifth, Duration::from_secs(30));
    assert!(got.is_empty(), "the fifth connection is closed unanswered: {got}");
    drop(held);
    // Their places come back once the server sees them closed.
    let again = held_connection(s.port);
    drop(again);
}
