//! A study whose server answers HTTP 500 to every request (`[limits]
//! max_error_rate = 1`, so the study completes): every cell's records are failures,
//! the per-request table's float columns hold no value in any row (written as
//! `NaN`), and `harness replay` of the untouched evidence passes. It once failed with
//! `requests.csv row ...#0 ttft_ms: archived NaN, recomputed null`. The server also
//! echoes the request's `Authorization` header in every error body (and in its
//! /metrics): the arm's key must still appear in no file of the evidence.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;

use common::*;

/// A loopback HTTP server: `/health` and `/v1/models` answer 200, everything else
/// 500 with a JSON error. One thread per connection, `Connection: close`.
fn failing_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    return;
                }
                let (mut length, mut auth) = (0usize, String::new());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line.to_ascii_lowercase().starts_with("authorization:") {
                        auth = line["authorization:".len()..].trim().to_string();
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let path = request_line.split_whitespace().nth(1).unwrap_or("");
                let (status, text) = match path {
                    "/health" => ("200 OK", "{}".to_string()),
                    "/v1/models" => ("200 OK", r#"{"object":"list","data":[{"id":"synth","object":"model"}]}"#.into()),
                    "/metrics" => ("200 OK", format!("# seen authorization {auth}\nvllm:num_requests_running 0\n")),
                    _ => (
                        "500 Internal Server Error",
                        format!(r#"{{"error":{{"message":"broken on purpose; you sent Authorization: {auth}"}}}}"#),
                    ),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{text}",
                    text.len()
                );
            });
        }
    });
    url
}

#[test]
fn a_study_where_every_request_failed_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = failing_server();
    let plan = TestPlan { blocks: 1, warmup_prompts: 0, timeout_s: 10.0, ..TestPlan::new("all-failed", 3) };
    let mut plan = plan.external_arm("broken", "control", &url);
    plan.arms[0].push_str("api_key_env = \"ALL_FAILED_TEST_KEY\"\n");
    let text = plan
        .closed("closed-2", "descriptive", 2, 4)
        .tail("[limits]\nmax_error_rate = 1.0\n")
        .render()
        .replace("[blocks]\ncount = 1\n", "[blocks]\ncount = 0\ndescriptive = 1\n");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    let key = format!("sk-all-failed-{nanos:x}");
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, &text).expect("write plan");
    let out = tmp.path().join("evidence");
    let run = Command::new(harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&plan_path)
        .env("ALL_FAILED_TEST_KEY", &key)
        .output()
        .expect("run harness");
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "max_error_rate = 1: {said}");
    let records = read_records(&out.join("raw/b0/broken/closed-2.requests.jsonl"));
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|r| r.failure.is_some()), "every request failed: {records:?}");
    let csv = std::fs::read_to_string(out.join("results/requests.csv")).expect("requests.csv");
    let row = csv.lines().nth(1).expect("a row");
    assert!(row.contains(",NaN,"), "a float column with no value in any row is NaN: {row}");
    let r = Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(r.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&r.stderr));

    // The echoed key is redacted everywhere: raw records, scrapes, warmup, run.json,
    // the report, the exports.
    let echoed = std::fs::read_to_string(out.join("raw/b0/broken/closed-2.requests.jsonl")).expect("records");
    assert!(echoed.contains("you sent Authorization: Bearer [redacted]"), "{echoed}");
    for rel in files(&out) {
        let bytes = std::fs::read(out.join(&rel)).expect("read evidence file");
        assert!(!bytes.windows(key.len()).any(|w| w == key.as_bytes()), "the key appears in {rel}");
    }
}
