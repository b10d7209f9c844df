//! `harness accept` end to end: against the real engine (synthetic model, real HTTP)
//! every case passes; against small axum fakes that misbehave in one way each, the
//! case that checks that behaviour fails with the specific reason while the others
//! keep passing; an honest fake passes (the control for the fakes); `--plan --arm`
//! starts, accepts and stops the engine; a server behind an API key passes with the
//! key from `--api-key-env` or a `--header`, fails without it, and the key is never
//! written. No timed assertions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use harness::commands::accept::{AcceptArgs, AcceptOutcome, Verdict};
use serde_json::{Value, json};

use crate::common;
use common::engine_bin;

fn synth_model(dir: &Path) -> PathBuf {
    let model = dir.join("synth");
    let out = Command::new(engine_bin())
        .args(["synth", "--tokenizer", "byte", "--out"])
        .arg(&model)
        .output()
        .expect("run engine synth");
    assert!(out.status.success(), "engine synth failed: {}", String::from_utf8_lossy(&out.stderr));
    model
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn serve_argv(model: &Path, port: &str) -> Vec<String> {
    let mut argv = vec![engine_bin().display().to_string(), "serve".into(), "--model".into()];
    argv.push(model.display().to_string());
    for a in ["--host", "127.0.0.1", "--port", port, "--threads", "2", "--max-model-len", "512"] {
        argv.push(a.into());
    }
    argv
}

/// A running `engine serve`; SIGTERM (via `kill`) on drop, SIGKILL if it lingers.
struct Engine {
    child: Child,
    url: String,
}

impl Engine {
    async fn start(model: &Path) -> Engine {
        Engine::start_with(model, &[]).await
    }

    /// With `extra` flags after the usual ones (e.g. `--api-key KEY`).
    async fn start_with(model: &Path, extra: &[&str]) -> Engine {
        let port = free_port();
        let mut argv = serve_argv(model, &port.to_string());
        argv.extend(extra.iter().map(|s| s.to_string()));
        let log = std::fs::File::create(model.with_extension("log")).expect("log file");
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn engine serve");
        let mut e = Engine { child, url: format!("http://127.0.0.1:{port}") };
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(e.child.try_wait().expect("try_wait").is_none(), "engine serve exited before /health");
            let ok = client.get(format!("{}/health", e.url)).send().await.is_ok_and(|r| r.status() == 200);
            if ok {
                return e;
            }
            assert!(Instant::now() < deadline, "engine serve not healthy within 120 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then wait (at most 30 s); true when it exited on the SIGTERM.
    fn stop(&mut self) -> bool {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        for _ in 0..300 {
            if self.child.try_wait().ok().flatten().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

fn args(url: &str, extra: &[&str]) -> AcceptArgs {
    let mut flags = vec!["--url", url, "--timeout-s", "120"];
    flags.extend_from_slice(extra);
    AcceptArgs::try_parse_from(flags).expect("flags parse")
}

fn verdicts(o: &AcceptOutcome) -> BTreeMap<String, Verdict> {
    o.cases.iter().map(|c| (c.name.clone(), c.verdict)).collect()
}

const ALL: [&str; 12] = [
    "single",
    "concurrent_2",
    "concurrent_4",
    "concurrent_8",
    "isolation",
    "long_short",
    "streams",
    "chat_streams",
    "disconnect",
    "validation",
    "metrics_format",
    "metrics_idle",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_passes_every_case() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let mut engine = Engine::start(&model).await;
    let (json_path, md_path) = (tmp.path().join("accept.json"), tmp.path().join("accept.md"));
    let a = args(&engine.url, &["--json", json_path.to_str().expect("utf8"), "--md", md_path.to_str().expect("utf8")]);
    let outcome = harness::commands::accept::run(a).await.expect("the suite runs");
    println!("{}", outcome.markdown());
    let names: Vec<&str> = outcome.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ALL, "every case ran, in order");
    for c in &outcome.cases {
        assert_eq!(c.verdict, Verdict::Pass, "{}: {:?} {:?}", c.name, c.reason, c.failures);
    }
    assert!(!outcome.failed());
    assert_eq!(outcome.server.kind, "openai-vllm");
    assert_eq!(outcome.server.max_context, Some(512));
    assert_eq!(outcome.server.model, "synth");
    let c8 = outcome.case("concurrent_8").expect("level 8");
    assert_eq!(c8.counts["completion_tokens"], 8 * 16, "every request reached its budget");
    assert_eq!(outcome.case("isolation").expect("isolation").counts["pairs_compared"], 14);
    assert!(outcome.case("isolation").expect("isolation").findings[0].contains("token ids"));
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("parses");
    assert_eq!(record["cases"].as_array().map(Vec::len), Some(ALL.len()));
    assert_eq!(record["failed"], 0);
    let md = std::fs::read_to_string(&md_path).expect("md");
    assert!(md.contains("| case | verdict |") && md.contains("| streams | pass |"), "{md}");
    assert!(engine.stop(), "the engine exits on SIGTERM");

    // Another server with the same model name and context gets byte-identical
    // payloads (the fake has no chat route: it is sent fewer of them).
    let fake = Fake::start(Mode::Honest).await;
    let again = harness::commands::accept::run(args(&fake, &["--model", "synth"])).await.expect("runs");
    let engine_sent: BTreeMap<&str, &str> =
        outcome.payloads.iter().map(|p| (p.name.as_str(), p.sha256.as_str())).collect();
    for p in &again.payloads {
        assert_eq!(engine_sent.get(p.name.as_str()), Some(&p.sha256.as_str()), "payload {} differs", p.name);
    }
    assert_eq!(again.payloads.len() + 3, outcome.payloads.len(), "all but 3 chat bodies compared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_arm_is_started_accepted_and_stopped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let argv = serve_argv(&model, "{port}");
    let quoted: Vec<String> = argv.iter().map(|s| format!("{s:?}")).collect();
    let plan = format!(
        "[study]\nname = \"accept-test\"\nseed = 1\n\n[request]\nmodel = \"synth\"\noutput_tokens = 4\n\n\
         [prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\nlengths = [8]\ndocuments = 2\n\n\
         [warmup]\nprompts = 1\n\n[timing]\nsettle_s = 0.1\nrequest_timeout_s = 60.0\ndrain_timeout_s = 60.0\n\n\
         [blocks]\ncount = 1\narm_order = \"alternate\"\ncell_order = \"alternate\"\n\n\
         [[arms]]\nname = \"engine\"\nrole = \"control\"\nargv = [{}]\nport = {}\nstartup_timeout_s = 120.0\n\n\
         [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 2\n",
        quoted.join(", "),
        free_port()
    );
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, plan).expect("write plan");
    let p = plan_path.to_str().expect("utf8");
    let logs = tmp.path().join("logs");
    let flags = ["--plan", p, "--arm", "engine", "--only", "single,validation,metrics", "--log-dir"];
    let mut flags: Vec<&str> = flags.to_vec();
    flags.push(logs.to_str().expect("utf8"));
    let outcome =
        harness::commands::accept::run(AcceptArgs::try_parse_from(flags).expect("flags")).await.expect("runs");
    println!("{}", outcome.markdown());
    let v = verdicts(&outcome);
    assert_eq!(
        v.keys().map(String::as_str).collect::<Vec<_>>(),
        ["metrics_format", "metrics_idle", "single", "validation"]
    );
    assert!(v.values().all(|&x| x == Verdict::Pass), "{v:?}: {:#?}", outcome.cases);
    assert_eq!(outcome.server.arm.as_deref(), Some("engine"));
    assert_eq!(outcome.server.model, "synth", "the plan's request.model is sent");
    assert_eq!(outcome.server.stop.as_deref(), Some("exited_on_sigterm"));
    let log = outcome.server.server_log.clone().expect("a server log");
    assert!(Path::new(&log).is_file(), "{log}");

    let err =
        harness::commands::accept::run(AcceptArgs::try_parse_from(["--plan", p, "--arm", "nope"]).expect("flags"))
            .await;
    let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("no arm \"nope\"") && msg.contains("engine"), "{msg}");
}

/// `harness accept --url URL --only single` with `flags`, the key variable set to
/// `key` (or unset).
fn accept_cli(url: &str, flags: &[&str], key: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harness"));
    cmd.args(["accept", "--url", url, "--model", "synth", "--only", "single", "--timeout-s", "120"]).args(flags);
    match key {
        Some(k) => cmd.env("HARNESS_ACCEPT_TEST_KEY", k),
        None => cmd.env_remove("HARNESS_ACCEPT_TEST_KEY"),
    };
    cmd.output().expect("run harness accept")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_behind_a_key_passes_with_the_key_from_a_variable_or_a_header() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let engine = Engine::start_with(&model, &["--api-key", "s3cret-accept-key"]).await;
    let out = |o: &std::process::Output| {
        format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };

    // Without the key the server refuses: the case fails with its 401.
    let refused = accept_cli(&engine.url, &[], None);
    assert_eq!(refused.status.code(), Some(2), "{}", out(&refused));
    assert!(out(&refused).contains("401"), "{}", out(&refused));

    // The key from the named variable, and an extra header, on every request.
    let json = tmp.path().join("accept.json");
    let flags = ["--api-key-env", "HARNESS_ACCEPT_TEST_KEY", "--header", "X-Tenant: blue", "--json"];
    let mut flags: Vec<&str> = flags.to_vec();
    flags.push(json.to_str().expect("utf8"));
    let ok = accept_cli(&engine.url, &flags, Some("s3cret-accept-key"));
    assert!(ok.status.success(), "{}", out(&ok));
    assert!(out(&ok).contains("| single | pass |"), "{}", out(&ok));
    let record = std::fs::read_to_string(&json).expect("the JSON record");
    assert!(record.contains("HARNESS_ACCEPT_TEST_KEY") && record.contains("X-Tenant: (value not recorded)"));
    assert!(!record.contains("s3cret") && !out(&ok).contains("s3cret"), "the key is never written");

    // The variable named but unset: bad input, nothing sent.
    let unset = accept_cli(&engine.url, &["--api-key-env", "HARNESS_ACCEPT_TEST_KEY"], None);
    assert_eq!(unset.status.code(), Some(2), "{}", out(&unset));
    assert!(out(&unset).contains("HARNESS_ACCEPT_TEST_KEY") && out(&unset).contains("not set"), "{}", out(&unset));

    // A literal header reaches the server on every request too.
    let header = accept_cli(&engine.url, &["--header", "Authorization: Bearer s3cret-accept-key"], None);
    assert!(header.status.success(), "{}", out(&header));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_fake_passes_and_skips_what_it_lacks() {
    let url = Fake::start(Mode::Honest).await;
    let o = harness::commands::accept::run(args(&url, &[])).await.expect("runs");
    println!("{}", o.markdown());
    let v = verdicts(&o);
    for name in ALL {
        let want = if ["chat_streams", "metrics_format", "metrics_idle"].contains(&name) {
            Verdict::Skipped
        } else {
            Verdict::Pass
        };
        assert_eq!(v.get(name), Some(&want), "{name}: {:?}", o.case(name).map(|c| &c.failures));
    }
    assert!(!o.failed());
    assert!(o.markdown().contains("| metrics_format | skipped (not exposed) |"));
}

/// Runs the suite against a fake in `mode`; asserts that exactly `failing` fails,
/// with a reason containing `why`, and that every other exposed case passes.
async fn only_failure(mode: Mode, failing: &str, why: &str) -> AcceptOutcome {
    let url = Fake::start(mode).await;
    let o = harness::commands::accept::run(args(&url, &[])).await.expect("runs");
    println!("{}", o.markdown());
    assert!(o.failed(), "a misbehaving server must fail the suite");
    for c in &o.cases {
        if c.name == failing {
            assert_eq!(c.verdict, Verdict::Fail, "{}", c.name);
            let reason = c.reason.clone().unwrap_or_default();
            assert!(reason.contains(why), "{}: reason {reason:?} lacks {why:?}", c.name);
        } else if c.verdict != Verdict::Skipped {
            assert_eq!(c.verdict, Verdict::Pass, "{} should be unaffected: {:?}", c.name, c.failures);
        }
    }
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_streams_fail_the_streams_case() {
    let o = only_failure(Mode::MixStreams, "streams", "streams mixed").await;
    let c = o.case("streams").expect("streams");
    assert!(c.reason.as_deref().is_some_and(|r| r.contains("different response ids")), "{:?}", c.reason);
    assert!(c.failures.iter().any(|f| f.contains("non-streamed greedy answer")), "{:?}", c.failures);
    assert!(c.evidence.contains_key("offending_stream") && c.evidence.contains_key("offending_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_done_fails_the_streams_case() {
    let o = only_failure(Mode::NoDone, "streams", "no [DONE]").await;
    assert_eq!(o.case("disconnect").map(|c| c.verdict), Some(Verdict::Pass));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_eos_fails_the_budget_checks() {
    let url = Fake::start(Mode::EarlyEos).await;
    let o = harness::commands::accept::run(args(&url, &["--only", "single,concurrent"])).await.expect("runs");
    for name in ["single", "concurrent_2", "concurrent_4", "concurrent_8"] {
        let c = o.case(name).expect("ran");
        assert_eq!(c.verdict, Verdict::Fail, "{name}");
        assert!(c.reason.as_deref().is_some_and(|r| r.contains("!= the fixed budget 16")), "{:?}", c.reason);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_answers_fail_isolation() {
    only_failure(Mode::MixAnswers, "isolation", "cross-request mixing").await;
}

// ---------------------------------------------------------------- the fake server

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Honest,
    /// Every stream's odd chunks carry another live stream's id and token.
    MixStreams,
    /// Streams end without `data: [DONE]`.
    NoDone,
    /// Non-streamed answers stop at half the budget with finish_reason stop.
    EarlyEos,
    /// A non-streamed request that overlaps another gets the other's answer.
    MixAnswers,
}

struct Fake {
    mode: Mode,
    next: AtomicU64,
    inflight: Mutex<Vec<(u64, Vec<u32>)>>,
    streams: Mutex<Vec<(String, Vec<u32>)>>,
}

type Shared = State<Arc<Fake>>;

/// The fake model: a deterministic function of the prompt.
fn answer(prompt: &[u32], n: usize) -> Vec<u32> {
    let sum: u64 = prompt.iter().map(|&t| u64::from(t)).sum();
    let last = u64::from(prompt.last().copied().unwrap_or(0));
    (0..n as u64).map(|k| 100 + ((sum + last * 7 + k * 13) % 150) as u32).collect()
}

fn text(ids: &[u32]) -> String {
    ids.iter().map(|t| format!("<{t}>")).collect()
}

fn bad_request(m: &str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"error": {"message": m, "type": "invalid_request_error"}})))
        .into_response()
}

const FAKE_CONTEXT: usize = 512;

impl Fake {
    /// Serves on a free loopback port; returns its base URL.
    async fn start(mode: Mode) -> String {
        let fake =
            Arc::new(Fake { mode, next: AtomicU64::new(1), inflight: Mutex::default(), streams: Mutex::default() });
        let models = json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "fake", "max_model_len": FAKE_CONTEXT}]});
        let app = Router::new()
            .route("/v1/models", get(move || std::future::ready(axum::Json(models.clone()))))
            .route("/v1/completions", post(completions))
            .with_state(fake);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }
}

async fn completions(State(fake): Shared, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else { return bad_request("malformed JSON") };
    let Some(prompt) = req["prompt"]
        .as_array()
        .and_then(|a| a.iter().map(|x| x.as_u64().map(|v| v as u32)).collect::<Option<Vec<u32>>>())
    else {
        return bad_request("prompt must be token ids");
    };
    let n = req["max_tokens"].as_u64().unwrap_or(16) as usize;
    if prompt.len() + n > FAKE_CONTEXT {
        return bad_request("longer than the context");
    }
    let id = fake.next.fetch_add(1, Ordering::SeqCst);
    let rid = format!("cmpl-{id}");
    let mut ids = answer(&prompt, n);
    if req["stream"].as_bool() == Some(true) {
        return stream(fake, rid, ids);
    }
    fake.inflight.lock().expect("lock").push((id, prompt.clone()));
    tokio::time::sleep(Duration::from_millis(40)).await;
    let other = fake.inflight.lock().expect("lock").iter().find(|(j, _)| *j != id).map(|(_, p)| p.clone());
    fake.inflight.lock().expect("lock").retain(|(j, _)| *j != id);
    let mut finish = "length";
    match (fake.mode, other) {
        (Mode::MixAnswers, Some(p)) => ids = answer(&p, n),
        (Mode::EarlyEos, _) => {
            ids.truncate(n / 2);
            finish = "stop";
        }
        _ => {}
    }
    let (p, c) = (prompt.len(), ids.len());
    axum::Json(json!({
        "id": rid, "object": "text_completion", "model": "fake-model",
        "choices": [{"index": 0, "text": text(&ids), "token_ids": ids, "finish_reason": finish}],
        "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    }))
    .into_response()
}

fn stream(fake: Arc<Fake>, rid: String, ids: Vec<u32>) -> Response {
    fake.streams.lock().expect("lock").push((rid.clone(), ids.clone()));
    let n = ids.len();
    let events = futures_util::stream::unfold(0usize, move |k| {
        let (fake, rid, ids) = (fake.clone(), rid.clone(), ids.clone());
        async move {
            if k > n || (k == n && fake.mode == Mode::NoDone) {
                return None;
            }
            if k == n {
                return Some((Ok::<_, std::convert::Infallible>(Event::default().data("[DONE]")), k + 1));
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
            let (mut cid, mut tok) = (rid.clone(), ids[k]);
            if fake.mode == Mode::MixStreams && k % 2 == 1 {
                let streams = fake.streams.lock().expect("lock");
                if let Some((o, t)) = streams.iter().rev().find(|(o, _)| *o != rid) {
                    (cid, tok) = (o.clone(), t.get(k).copied().unwrap_or(tok));
                }
            }
            let finish = if k + 1 == n { json!("length") } else { Value::Null };
            let chunk = json!({"id": cid, "object": "text_completion", "model": "fake-model",
                "choices": [{"index": 0, "text": text(&[tok]), "token_ids": [tok], "finish_reason": finish}]});
            Some((Ok(Event::default().data(chunk.to_string())), k + 1))
        }
    });
    Sse::new(events).into_response()
}
