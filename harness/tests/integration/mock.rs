//! `harness mock` end to end: the mock's ground truth against what `harness run`
//! records, request by request (joined by the server request id), the session's
//! measurement floor in run.json, the report and replay, and the reasoning measures
//! against the mock's reasoning mode with and without token IDs.
//!
//! Timing bounds: the per-request TTFT and E2E errors are bracketed by causality,
//! not by a timing guess: the client stamps its send before the mock can see the
//! request (send <= arrival) and cannot read a frame before the mock handed it to
//! its connection (yielded <= received), so the client's TTFT is at least the
//! mock's first token (handed over) minus arrival, exactly, on any machine however
//! loaded. The upper side has no such law; a 1 s bound only catches a join of the
//! wrong requests (a loaded CI machine can stall a process for tens of
//! milliseconds; the fidelity study, docs/fidelity.md, measures the real error).

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use harness::evidence::request_record::RequestRecord;
use harness::mock::truth::{EventKind, TruthRecord};

use crate::common::{TestPlan, harness_bin, read_json, read_records, run_study_ok};

/// A running `harness mock` and its base URL; stopped (SIGTERM) on drop.
struct MockProc {
    child: Child,
    url: String,
}

impl MockProc {
    fn start(args: &[&str]) -> MockProc {
        let mut child = Command::new(harness_bin())
            .arg("mock")
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start harness mock");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
        let url = line.trim().rsplit(' ').next().expect("address").to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        MockProc { child, url }
    }

    /// SIGTERM, then wait: the ground truth is complete once it exits.
    fn stop(mut self) {
        // SAFETY: kill(2) on the child's own pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "harness mock exited {status}");
    }
}

impl Drop for MockProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn truth_by_id(path: &Path) -> HashMap<String, TruthRecord> {
    let (_, records) = harness::mock::read_truth(path).expect("ground truth");
    records.into_iter().map(|r| (r.id.clone(), r)).collect()
}

fn records_of(dir: &Path) -> Vec<RequestRecord> {
    let mut out = Vec::new();
    for arm_dir in std::fs::read_dir(dir.join("raw/b0")).expect("raw/b0") {
        for f in std::fs::read_dir(arm_dir.expect("entry").path()).expect("arm dir") {
            let p = f.expect("file").path();
            if p.to_string_lossy().ends_with(".requests.jsonl") {
                out.extend(read_records(&p));
            }
        }
    }
    out
}

fn replay_ok(dir: &Path) -> String {
    let out = Command::new(harness_bin()).arg("replay").arg(dir).output().expect("replay");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "replay failed:\n{text}");
    text
}

#[test]
fn the_mocks_ground_truth_brackets_what_the_harness_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let truth = tmp.path().join("truth.jsonl");
    let summary = tmp.path().join("summary.json");
    let mock = MockProc::start(&[
        "--ttft-ms",
        "4",
        "--itl-ms",
        "1.5",
        "--ground-truth",
        truth.to_str().unwrap(),
        "--summary",
        summary.to_str().unwrap(),
    ]);
    let plan = TestPlan { blocks: 1, ..TestPlan::new("mock-truth", 5) }
        .external_arm("mock", "control", &mock.url)
        .open("open-40", "confirmation", 40.0, 30)
        .closed("closed-4", "confirmation", 4, 12)
        .render();
    let (dir, stdout) = run_study_ok(tmp.path(), &plan);
    mock.stop();

    let truth = truth_by_id(&truth);
    let records = records_of(&dir);
    assert_eq!(records.len(), 42);
    let (mut ttft_err, mut e2e_err) = (Vec::new(), Vec::new());
    for r in &records {
        assert!(r.is_valid(), "{r:?}");
        let id = r.server_request_id.as_deref().expect("server request id");
        let t = truth.get(id).unwrap_or_else(|| panic!("{id} is not in the ground truth"));
        assert_eq!((t.status, t.outcome.as_str(), t.stream), (200, "complete", true), "{t:?}");
        // The same answer, event for event: 6 token events (ids as streamed), then usage.
        let tokens: Vec<u32> = r.events.iter().map(|e| e.tokens).collect();
        let true_tokens: Vec<u32> = t.events.iter().filter(|e| e.kind != EventKind::Done).map(|e| e.tokens).collect();
        assert_eq!(tokens, true_tokens, "{id}");
        let send = r.send_ns.unwrap();
        let first = r.events.iter().find(|e| e.tokens > 0).unwrap().t_ns;
        let true_first = t.events.iter().find(|e| e.tokens > 0).unwrap();
        let done = t.events.iter().find(|e| e.kind == EventKind::Done).unwrap();
        // Causality: client TTFT >= handed over - arrival (and so for E2E).
        let client_ttft = (first - send) as i64;
        let client_e2e = (r.done_ns.unwrap() - send) as i64;
        assert!(client_ttft >= (true_first.yielded_ns - t.arrival_ns) as i64, "{id}: TTFT below causality");
        assert!(client_e2e >= (done.yielded_ns - t.arrival_ns) as i64, "{id}: E2E below causality");
        // Every event was written (the write log attributes each one).
        assert!(t.events.iter().all(|e| e.written_ns.is_some_and(|w| w >= e.yielded_ns)), "{t:?}");
        let err = |client: i64, written: u64| client - (written - t.arrival_ns) as i64;
        ttft_err.push(err(client_ttft, true_first.written_ns.unwrap()));
        e2e_err.push(err(client_e2e, done.written_ns.unwrap()));
    }
    // Keep-alive: the 42 timed requests rode on far fewer connections (each cell's
    // warmed before its first send; one per request before issue 53).
    let conns: std::collections::BTreeSet<&str> =
        records.iter().map(|r| truth[r.server_request_id.as_deref().unwrap()].peer.as_str()).collect();
    assert!(conns.len() <= 21, "{} connections for 42 timed requests", conns.len());
    for (name, errs) in [("TTFT", &mut ttft_err), ("E2E", &mut e2e_err)] {
        errs.sort_unstable();
        eprintln!(
            "client minus truth, {name}: median {} us, max {} us",
            errs[errs.len() / 2] / 1000,
            errs[errs.len() - 1] / 1000
        );
        assert!(*errs.last().unwrap() < 1_000_000_000, "{name}: a join of the wrong requests?");
    }
    // The mock reported its own lateness against its schedule.
    let s = read_json(&summary);
    assert!(s["lateness"]["requests"].as_u64().unwrap() >= 42, "{s}"); // and the warmup's
    assert!(s["lateness"]["p99_us"].as_f64().is_some(), "{s}");

    // The session's floor is in run.json, stated in the report, and replay checks it.
    let run = read_json(&dir.join("run.json"));
    let floor = &run["sessions"][0]["measurement_floor"];
    assert_eq!(floor["rate_rps"].as_f64(), Some(40.0), "{floor}");
    assert!(floor["ttft_overhead"]["samples"].as_u64().unwrap() >= 20, "{floor}");
    let report = std::fs::read_to_string(dir.join("results/report.md")).unwrap();
    assert!(report.contains("This client's measurement floor here: p99 "), "{report}");
    assert!(stdout.contains("study complete"), "{stdout}");
    let replay = replay_ok(&dir);
    assert!(replay.contains("measurement floor"), "{replay}");
}

#[test]
fn reasoning_deltas_count_and_split_first_token_from_first_content() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = tmp.path().join("spec.toml");
    std::fs::write(&spec, "[ttft]\ndist = \"fixed\"\nvalue = 2.0\n[itl]\ndist = \"fixed\"\nvalue = 3.0\n[reasoning]\ntokens = 3\nfield = \"reasoning\"\n")
        .unwrap();
    let truth = tmp.path().join("truth.jsonl");
    let mock = MockProc::start(&["--spec", spec.to_str().unwrap(), "--ground-truth", truth.to_str().unwrap()]);
    let tokenizer = tmp.path().join("tokenizer.json");
    std::fs::write(
        &tokenizer,
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"who":0,"is":1,"there":2,"[UNK]":3},"unk_token":"[UNK]"}}"#,
    )
    .unwrap();
    let data = tmp.path().join("chat.jsonl");
    std::fs::write(
        &data,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"who is there\"}], \"output_tokens\": 6}\n".repeat(2),
    )
    .unwrap();
    let base = TestPlan { blocks: 1, warmup_prompts: 1, ..TestPlan::new("mock-reasoning", 9) }
        .external_arm("mock", "control", &mock.url)
        .closed("c2", "confirmation", 2, 6)
        .render();
    let old = "output_tokens = 6\n\n[prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\n\
               lengths = [16]\ndocuments = 2\n";
    assert!(base.contains(old), "{base}");
    // `token_ids = false`: vLLM bench's own body, no token IDs in the stream.
    let new = format!(
        "output_tokens = 6\ntoken_ids = false\nendpoint = \"chat\"\n\n[prompts]\nsource = \"requests\"\npath = {:?}\n\
         tokenizer = {:?}\nnum_requests = 2\n",
        data.display().to_string(),
        tokenizer.display().to_string()
    );
    let (dir, _) = run_study_ok(tmp.path(), &base.replace(old, &new));
    mock.stop();
    let truth = truth_by_id(&truth);
    for r in records_of(&dir) {
        let reasoning: Vec<u32> = r.events.iter().map(|e| e.reasoning).collect();
        let tokens: Vec<u32> = r.events.iter().map(|e| e.tokens).collect();
        // Role chunk, 3 reasoning deltas (one token each, never zero), 3 content deltas, usage.
        assert_eq!(tokens, [0, 1, 1, 1, 1, 1, 1, 0], "{r:?}");
        assert_eq!(reasoning, [0, 1, 1, 1, 0, 0, 0, 0], "{r:?}");
        assert_eq!(r.usage.unwrap().reasoning_tokens, Some(3));
        let m = harness::metrics::measure_request(&r).unwrap();
        assert_eq!((m.output_tokens, m.reasoning_tokens), (6, 3));
        // Time to first content: after the first token, and by causality no earlier
        // than the mock handed the first content delta over (minus its arrival).
        let t = &truth[r.server_request_id.as_deref().unwrap()];
        let content = t.events.iter().find(|e| e.kind == EventKind::Content).unwrap();
        let reasoning = t.events.iter().find(|e| e.kind == EventKind::Reasoning).unwrap();
        assert!(m.ttfc_ns.unwrap() > m.ttft_ns.unwrap(), "{m:?}");
        assert!(m.ttfc_ns.unwrap() >= content.yielded_ns - t.arrival_ns, "{m:?}");
        assert!(m.ttft_ns.unwrap() >= reasoning.yielded_ns - t.arrival_ns, "{m:?}");
    }
    let summary = read_json(&dir.join("results/cells/b0-mock-c2.summary.json"));
    assert_eq!(summary["reasoning_requests"].as_u64(), Some(6), "{summary}");
    assert_eq!(summary["total_reasoning_tokens"].as_u64(), Some(18), "{summary}");
    assert_eq!(summary["total_content_tokens"].as_u64(), Some(18), "{summary}");
    assert!(summary["ttfc_p50_ms"].as_f64().unwrap() > summary["ttft_p50_ms"].as_f64().unwrap(), "{summary}");
    replay_ok(&dir);
}

/// `harness bench-loadgen --target` against the mock, with `extra` flags; returns
/// the ground truth's streamed completions (in arrival order) and the report.
fn loadgen_against_mock(tmp: &Path, extra: &[&str]) -> (Vec<TruthRecord>, serde_json::Value) {
    let truth = tmp.join("truth.jsonl");
    let report = tmp.join("loadgen.json");
    let mock = MockProc::start(&["--ttft-ms", "2", "--itl-ms", "1", "--ground-truth", truth.to_str().unwrap()]);
    let out = Command::new(harness_bin())
        .args(["bench-loadgen", "--target", &mock.url, "--rate", "200", "--num-prompts", "60", "--warmup-s", "0"])
        .args(["--chunks", "4", "--arrival", "constant", "--client-threads", "1"])
        .args(["--out", report.to_str().unwrap()])
        .args(extra)
        .output()
        .expect("bench-loadgen");
    assert!(out.status.success(), "bench-loadgen: {}", String::from_utf8_lossy(&out.stderr));
    mock.stop();
    let (_, mut records) = harness::mock::read_truth(&truth).expect("ground truth");
    records.retain(|t| t.stream && t.route == "/v1/completions");
    records.sort_by_key(|t| t.arrival_ns);
    let report = read_json(&report);
    std::fs::remove_file(&truth).unwrap();
    (records, report)
}

fn peers(truth: &[TruthRecord]) -> std::collections::BTreeSet<&str> {
    truth.iter().map(|t| t.peer.as_str()).collect()
}

#[test]
fn timed_requests_reuse_connections_warmed_before_the_first_send_from_every_source_address() {
    // Issue 53: every request used to open a fresh connection, its connect inside
    // its TTFT. The mock's ground truth names each request's connection (the
    // client's address and port, and when the mock accepted it).
    let tmp = tempfile::tempdir().expect("tempdir");
    let sources = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    let (truth, report) = loadgen_against_mock(tmp.path(), &["--source-addresses", &sources.join(",")]);
    assert_eq!(truth.len(), 60);
    assert!(truth.iter().all(|t| t.outcome == "complete"), "{truth:?}");
    let rate = &report["rates"][0];
    assert_eq!((rate["completed"].as_u64(), rate["failed"].as_u64()), (Some(60), Some(0)), "{rate}");
    // 200 req/s, constant gaps: the arrivals of the first 0.1 s (0, 5, ..., 100 ms).
    assert_eq!(rate["warm_connections"].as_u64(), Some(21), "{rate}");
    assert_eq!(report["connections"], "keep-alive");
    // Reuse: far fewer connections than requests (one each, before).
    let used = peers(&truth);
    assert!(used.len() <= 30, "{} connections for 60 requests: {used:?}", used.len());
    // Each source address sent its third of the requests (request i through i mod 3).
    for ip in sources {
        let n = truth.iter().filter(|t| t.peer.starts_with(&format!("{ip}:"))).count();
        assert_eq!(n, 20, "{ip}: {n} requests");
    }
    // Pre-warmed: the first timed request's connection was open well before it
    // arrived (bench-loadgen starts its schedule 50 ms after the warming; a
    // connection opened for the request itself is accepted microseconds before).
    let first = &truth[0];
    assert!(
        first.arrival_ns - first.accepted_ns >= 20_000_000,
        "first request's connection accepted {} us before it arrived",
        (first.arrival_ns - first.accepted_ns) / 1000
    );

    // `--connections fresh` is the old behaviour: one connection per request.
    let (truth, report) = loadgen_against_mock(tmp.path(), &["--connections", "fresh"]);
    assert_eq!(report["rates"][0]["warm_connections"].as_u64(), Some(0));
    assert_eq!(peers(&truth).len(), 60);
}
