//! The recorder against an in-process axum fake: token counting per event shape, and
//! each failure class it must tell apart.

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::*;
use crate::evidence::request_record::{Failure, RequestRecord};

const USAGE: &str =
    r#"{"id":"cmpl-1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;

fn sse(chunks: &[&str], done: bool) -> impl IntoResponse + use<> {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    ([(header::CONTENT_TYPE, "text/event-stream")], body)
}

const ROLE: &str = r#"{"id":"cmpl-1","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#;
const EMPTY: &str = r#"{"id":"cmpl-1","choices":[{"index":0,"text":"","finish_reason":null}]}"#;
const MULTI: &str = r#"{"id":"cmpl-1","choices":[{"index":0,"text":"abc","token_ids":[1,2,3]}]}"#;
const LAST: &str = r#"{"id":"cmpl-1","choices":[{"index":0,"text":"d","token_ids":[4],"finish_reason":"length"}]}"#;

async fn fake() -> String {
    let app = Router::new()
        .route("/ok", post(|| async { sse(&[ROLE, EMPTY, MULTI, LAST, USAGE], true) }))
        .route("/cut", post(|| async { sse(&[ROLE, MULTI], false) }))
        .route("/malformed", post(|| async { sse(&[ROLE, "{not json"], true) }))
        .route("/http500", post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "kaput") }))
        .route(
            "/short",
            post(|| async {
                let usage = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}"#;
                sse(&[MULTI, usage], true)
            }),
        )
        .route(
            "/mismatch",
            post(|| async {
                let usage = r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}"#;
                sse(&[MULTI, LAST, usage], true)
            }),
        )
        .route(
            "/reset",
            post(|| async {
                let chunks =
                    futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(format!("data: {MULTI}\n\n")))])
                        .chain(futures_util::stream::once(async {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            Err(std::io::Error::other("reset"))
                        }));
                ([(header::CONTENT_TYPE, "text/event-stream")], axum::body::Body::from_stream(chunks))
            }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                sse(&[], true)
            }),
        )
        .route(
            "/echo-id",
            post(|headers: axum::http::HeaderMap| async move {
                // The response id names the request's `x-request-id`, as vLLM's does.
                let id = headers.get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("none").to_string();
                let chunk = MULTI.replace("cmpl-1", &format!("cmpl-{id}"));
                let last = LAST.replace("cmpl-1", &format!("cmpl-{id}"));
                sse(&[chunk.as_str(), last.as_str(), USAGE], true).into_response()
            }),
        )
        .route(
            "/30ms",
            post(|| async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                sse(&[ROLE, EMPTY, MULTI, LAST, USAGE], true)
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

struct Fixture {
    ctx: RequestCtx,
    _exit: watch::Sender<Option<String>>,
    _drain: watch::Sender<bool>,
}

fn fixture(url: String, timeout: Duration) -> Fixture {
    let (exit_tx, exit_rx) = watch::channel(None);
    let (drain_tx, drain_rx) = watch::channel(false);
    let ctx = RequestCtx {
        client: http_client().unwrap(),
        url,
        clock: StudyClock::start(),
        timeout,
        server_exit: exit_rx,
        drain_expired: drain_rx,
        forced_output: true,
        light: false,
        source_clients: Default::default(),
    };
    Fixture { ctx, _exit: exit_tx, _drain: drain_tx }
}

fn record() -> RequestRecord {
    let entry = crate::trace::TraceEntry { index: 0, offset_ns: 0, prompt: 0, input_length: None, output_length: None };
    let bodies =
        [PreparedRequest { body: Bytes::from_static(b"{}"), prompt_tokens: 3, max_tokens: 4, request_id: None }];
    let d = CellDrive {
        block: 0,
        arm: "a",
        cell: "c",
        entries: std::slice::from_ref(&entry),
        start_ns: 0,
        concurrency: None,
        bodies: &bodies,
        entry_bodies: None,
        sessions: None,
        drain_timeout: Duration::from_secs(1),
    };
    skeleton(&d, &entry)
}

async fn run(base: &str, path: &str, timeout: Duration) -> RequestRecord {
    let f = fixture(format!("{base}{path}"), timeout);
    let mut rec = record();
    execute(&mut rec, Bytes::from_static(b"{}"), None, &f.ctx).await;
    rec
}

#[tokio::test]
async fn complete_stream_counts_tokens_per_event() {
    let base = fake().await;
    let rec = run(&base, "/ok", Duration::from_secs(10)).await;
    assert_eq!(rec.failure, None);
    assert!(rec.is_valid());
    let tokens: Vec<u32> = rec.events.iter().map(|e| e.tokens).collect();
    assert_eq!(tokens, [0, 0, 3, 1, 0], "role-only, empty, multi-token, last, usage-only");
    assert_eq!(rec.events[2].token_ids.as_deref(), Some(&[1, 2, 3][..]));
    assert_eq!(rec.events[0].token_ids, None);
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
    assert_eq!(rec.server_request_id.as_deref(), Some("cmpl-1"));
    assert_eq!(rec.status, Some(200));
    assert_eq!(rec.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((3, 4)));
    let (send, headers, done) = (rec.send_ns.unwrap(), rec.headers_ns.unwrap(), rec.done_ns.unwrap());
    assert!(send <= headers && headers <= rec.events[0].t_ns && rec.events[4].t_ns <= done);
}

#[tokio::test]
async fn each_failure_class_is_told_apart() {
    let base = fake().await;
    let long = Duration::from_secs(10);
    let cut = run(&base, "/cut", long).await;
    assert!(matches!(cut.failure, Some(Failure::AfterHeaders { .. })), "{:?}", cut.failure);
    assert_eq!(cut.events.len(), 2, "the partial timeline is kept");
    let bad = run(&base, "/malformed", long).await;
    assert!(matches!(bad.failure, Some(Failure::MalformedStream { .. })), "{:?}", bad.failure);
    let e500 = run(&base, "/http500", long).await;
    assert_eq!(e500.failure, Some(Failure::HttpStatus { status: 500, body: "kaput".into() }));
    assert_eq!(e500.status, Some(500));
    let short = run(&base, "/short", long).await;
    assert_eq!(short.failure, Some(Failure::ShortOutput { expected: 4, got: 3 }));
    assert!(short.done_ns.is_some() && !short.is_valid());
    let mismatch = run(&base, "/mismatch", long).await;
    assert_eq!(mismatch.failure, Some(Failure::PromptLengthMismatch { expected: 3, got: 5 }));
    let slow = run(&base, "/slow", Duration::from_millis(200)).await;
    assert!(
        matches!(slow.failure, Some(Failure::Timeout { after_ns }) if after_ns >= 200_000_000),
        "{:?}",
        slow.failure
    );
}

#[tokio::test]
async fn refused_connection_is_connect() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let rec = run(&format!("http://127.0.0.1:{port}"), "/v1/completions", Duration::from_secs(5)).await;
    assert!(matches!(rec.failure, Some(Failure::Connect { .. })), "{:?}", rec.failure);
    assert_eq!(rec.headers_ns, None);
}

#[tokio::test]
async fn a_server_death_reclassifies_outstanding_requests() {
    let base = fake().await;
    let f = fixture(format!("{base}/slow"), Duration::from_secs(10));
    let mut rec = record();
    let exit = f._exit.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = exit.send(Some("server exited (signal 9)".into()));
    });
    execute(&mut rec, Bytes::from_static(b"{}"), None, &f.ctx).await;
    assert!(
        matches!(&rec.failure, Some(Failure::ServerDied { detail }) if detail.contains("signal 9")),
        "{:?}",
        rec.failure
    );
}

/// `n` trace entries of prompt 0, `gap_ns` apart from the cell start.
fn spaced(n: u64, gap_ns: u64) -> Vec<crate::trace::TraceEntry> {
    (0..n)
        .map(|i| crate::trace::TraceEntry {
            index: i,
            offset_ns: i * gap_ns,
            prompt: 0,
            input_length: None,
            output_length: None,
        })
        .collect()
}

#[tokio::test]
async fn closed_loop_admits_in_order_and_open_loop_dispatches_on_time() {
    let base = fake().await;
    let f = fixture(format!("{base}/ok"), Duration::from_secs(10));
    let bodies =
        [PreparedRequest { body: Bytes::from_static(b"{}"), prompt_tokens: 3, max_tokens: 4, request_id: None }];
    let entries = spaced(6, 0);
    let start_ns = f.ctx.clock.now_ns() + 2_000_000;
    let d = CellDrive {
        block: 1,
        arm: "a",
        cell: "c",
        entries: &entries,
        start_ns,
        concurrency: Some(2),
        bodies: &bodies,
        entry_bodies: None,
        sessions: None,
        drain_timeout: Duration::from_secs(10),
    };
    let counters = std::sync::Arc::new(Counters::default());
    let recs = drive_cell(&d, &f.ctx, &counters).await.unwrap();
    assert_eq!(recs.len(), 6);
    assert_eq!(counters.snapshot(), (6, 6, 0));
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.index, i as u64);
        assert!(r.is_valid(), "{r:?}");
        assert!(r.intended_ns <= r.dispatch_ns.unwrap() && r.dispatch_ns <= r.admitted_ns);
        assert!(r.admitted_ns <= r.send_ns);
    }
    let admitted: Vec<u64> = recs.iter().map(|r| r.admitted_ns.unwrap()).collect();
    assert!(admitted.windows(2).all(|w| w[0] <= w[1]), "admission follows index order: {admitted:?}");

    let open = spaced(4, 20_000_000);
    let start_ns = f.ctx.clock.now_ns() + 2_000_000;
    let d = CellDrive { entries: &open, start_ns, concurrency: None, ..d };
    let recs = drive_cell(&d, &f.ctx, &counters).await.unwrap();
    for r in &recs {
        assert_eq!(r.dispatch_ns, r.admitted_ns);
        assert!(r.dispatch_ns.unwrap() >= r.intended_ns, "never early");
    }
}

/// `request.request_id_prefix`: each request carries its prepared `x-request-id`
/// (its panel entry's, on every entry that sends that prompt), which replaces an arm
/// header of the same name; without one, none is sent.
#[tokio::test]
async fn each_request_sends_its_prepared_request_id() {
    let base = fake().await;
    let f = fixture(format!("{base}/echo-id"), Duration::from_secs(10));
    let prepared = |id: Option<&str>| PreparedRequest {
        body: Bytes::from_static(b"{}"),
        prompt_tokens: 3,
        max_tokens: 4,
        request_id: id.map(|i| reqwest::header::HeaderValue::from_str(i).unwrap()),
    };
    let bodies = [prepared(Some("bench-0a1b2c3d-0")), prepared(Some("bench-0a1b2c3d-1"))];
    let mut entries = spaced(3, 0);
    entries[2].prompt = 1;
    entries[1].prompt = 1;
    let d = CellDrive {
        block: 0,
        arm: "a",
        cell: "c",
        entries: &entries,
        start_ns: f.ctx.clock.now_ns(),
        concurrency: Some(1),
        bodies: &bodies,
        entry_bodies: None,
        sessions: None,
        drain_timeout: Duration::from_secs(10),
    };
    let counters = std::sync::Arc::new(Counters::default());
    let recs = drive_cell(&d, &f.ctx, &counters).await.unwrap();
    let ids: Vec<Option<&str>> = recs.iter().map(|r| r.server_request_id.as_deref()).collect();
    assert_eq!(ids, [Some("cmpl-bench-0a1b2c3d-0"), Some("cmpl-bench-0a1b2c3d-1"), Some("cmpl-bench-0a1b2c3d-1")]);
    // An arm's own `x-request-id` header is replaced by the request's, and sent as
    // given when the plan names no requests.
    let mut arm = reqwest::header::HeaderMap::new();
    arm.insert("x-request-id", reqwest::header::HeaderValue::from_static("arm"));
    let ctx = RequestCtx { client: http_client_for(arm, Connections::KeepAlive).unwrap(), ..f.ctx.clone() };
    let mut rec = record();
    execute(&mut rec, Bytes::from_static(b"{}"), bodies[0].request_id.clone(), &ctx).await;
    assert_eq!(rec.server_request_id.as_deref(), Some("cmpl-bench-0a1b2c3d-0"));
    let mut rec = record();
    execute(&mut rec, Bytes::from_static(b"{}"), None, &ctx).await;
    assert_eq!(rec.server_request_id.as_deref(), Some("cmpl-arm"));
    let mut rec = record();
    execute(&mut rec, Bytes::from_static(b"{}"), None, &f.ctx).await;
    assert_eq!(rec.server_request_id.as_deref(), Some("cmpl-none"));
}

/// An open loop capped in flight (`cells[].max_concurrency`): arrivals keep their
/// schedule, and one that finds the cap reached waits from its dispatch to the
/// admission that follows the end of a request in flight.
#[tokio::test]
async fn a_capped_open_loop_dispatches_on_time_and_admits_one_when_one_ends() {
    let base = fake().await;
    let f = fixture(format!("{base}/30ms"), Duration::from_secs(10));
    let bodies =
        [PreparedRequest { body: Bytes::from_static(b"{}"), prompt_tokens: 3, max_tokens: 4, request_id: None }];
    // Arrivals 2 ms apart, each request 30 ms: without the cap all 5 overlap.
    let entries = spaced(5, 2_000_000);
    let d = CellDrive {
        block: 0,
        arm: "a",
        cell: "capped",
        entries: &entries,
        start_ns: f.ctx.clock.now_ns() + 2_000_000,
        concurrency: Some(1),
        bodies: &bodies,
        entry_bodies: None,
        sessions: None,
        drain_timeout: Duration::from_secs(10),
    };
    let recs = drive_cell(&d, &f.ctx, &std::sync::Arc::new(Counters::default())).await.unwrap();
    assert!(recs.iter().all(|r| r.is_valid()), "{recs:?}");
    for w in recs.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!(b.admitted_ns.unwrap() >= a.done_ns.unwrap(), "one in flight at a time: {a:?} {b:?}");
        assert!(b.dispatch_ns.unwrap() < a.done_ns.unwrap(), "dispatched on its schedule, not after the wait");
    }
    let waited = recs.iter().filter(|r| r.admitted_ns.unwrap() > r.dispatch_ns.unwrap() + 10_000_000).count();
    assert!(waited >= 3, "later arrivals wait for the slot: {recs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_death_nothing_more_is_admitted() {
    for path in ["/slow", "/reset"] {
        nothing_more_is_admitted(path).await;
    }
}

async fn nothing_more_is_admitted(path: &str) {
    let base = fake().await;
    let f = fixture(format!("{base}{path}"), Duration::from_secs(10));
    let bodies =
        [PreparedRequest { body: Bytes::from_static(b"{}"), prompt_tokens: 3, max_tokens: 4, request_id: None }];
    let entries = spaced(4, 0);
    let d = CellDrive {
        block: 0,
        arm: "a",
        cell: "c",
        entries: &entries,
        start_ns: f.ctx.clock.now_ns(),
        concurrency: Some(1),
        bodies: &bodies,
        entry_bodies: None,
        sessions: None,
        drain_timeout: Duration::from_secs(10),
    };
    let exit = f._exit.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = exit.send(Some("server killed by signal 9".into()));
    });
    let counters = std::sync::Arc::new(Counters::default());
    let recs = drive_cell(&d, &f.ctx, &counters).await.unwrap();
    assert!(recs.iter().all(|r| matches!(r.failure, Some(Failure::ServerDied { .. }))), "{recs:?}");
    assert!(recs[0].send_ns.is_some());
    if path == "/reset" {
        let detail = match &recs[0].failure {
            Some(Failure::ServerDied { detail }) => detail.clone(),
            other => panic!("{other:?}"),
        };
        assert!(detail.contains("the request saw after_headers"), "{detail}");
    }
    assert!(recs[1..].iter().all(|r| r.admitted_ns.is_none() && r.send_ns.is_none()), "{recs:#?}");
}

#[tokio::test]
async fn a_short_output_fails_only_when_forced() {
    let base = fake().await;
    let mut f = fixture(format!("{base}/short"), Duration::from_secs(10));
    let mut forced = record();
    execute(&mut forced, Bytes::from_static(b"{}"), None, &f.ctx).await;
    assert_eq!(forced.failure, Some(Failure::ShortOutput { expected: 4, got: 3 }));
    // Natural output: EOS may end the request before max_tokens; the same stream is valid.
    f.ctx.forced_output = false;
    let mut natural = record();
    execute(&mut natural, Bytes::from_static(b"{}"), None, &f.ctx).await;
    assert_eq!(natural.failure, None);
    assert!(natural.is_valid());
    assert_eq!(natural.usage.map(|u| u.completion_tokens), Some(3));
}

#[test]
fn each_record_intends_its_own_entrys_max_tokens() {
    let bodies = [
        PreparedRequest { body: Bytes::from_static(b"{}"), prompt_tokens: 3, max_tokens: 4, request_id: None },
        PreparedRequest { body: Bytes::from_static(b"{}"), prompt_tokens: 9, max_tokens: 17, request_id: None },
    ];
    let entries = [
        crate::trace::TraceEntry { index: 0, offset_ns: 0, prompt: 1, input_length: None, output_length: None },
        crate::trace::TraceEntry { index: 1, offset_ns: 0, prompt: 0, input_length: None, output_length: None },
    ];
    let d = CellDrive {
        block: 0,
        arm: "a",
        cell: "c",
        entries: &entries,
        start_ns: 0,
        concurrency: None,
        bodies: &bodies,
        entry_bodies: None,
        sessions: None,
        drain_timeout: Duration::from_secs(1),
    };
    let got: Vec<(u32, u32)> =
        entries.iter().map(|e| skeleton(&d, e)).map(|r| (r.prompt_tokens_intended, r.output_tokens_intended)).collect();
    assert_eq!(got, [(9, 17), (3, 4)]);
}

#[tokio::test]
async fn the_light_recorder_keeps_only_the_first_token_event() {
    let base = fake().await;
    for (path, want_failure) in [("/ok", None), ("/short", Some(Failure::ShortOutput { expected: 4, got: 3 }))] {
        let mut f = fixture(format!("{base}{path}"), Duration::from_secs(10));
        f.ctx.light = true;
        let mut rec = record();
        execute(&mut rec, Bytes::from_static(b"{}"), None, &f.ctx).await;
        assert!(rec.light);
        assert_eq!(rec.failure, want_failure, "{path}");
        // Role-only, empty, the later token event and usage-only are parsed, not kept.
        let tokens: Vec<u32> = rec.events.iter().map(|e| e.tokens).collect();
        assert_eq!(tokens, [3], "{path}");
        assert!(rec.done_ns.is_some() && rec.usage.is_some(), "{path}");
    }
    let f = fixture(format!("{base}/ok"), Duration::from_secs(10));
    let mut full = record();
    execute(&mut full, Bytes::from_static(b"{}"), None, &f.ctx).await;
    assert!(!full.light && full.events.len() == 5);
    // The flag is written only when set: full records keep their bytes.
    assert!(!serde_json::to_string(&full).unwrap().contains("light"));
}
