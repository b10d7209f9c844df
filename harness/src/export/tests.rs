//! Export tests on hand-built records, every expected number worked out by hand.

use super::CellRecords;
use super::vllm::{VLLM_BENCH_KEYS, vllm_bench_results, vllm_date};
use crate::evidence::request_record::{Failure, RequestRecord, StreamEvent, Usage};

const MS: u64 = 1_000_000;

fn plan(slo: &str) -> crate::plan::Plan {
    crate::plan::parse(&plan_text(slo)).unwrap()
}

/// The export tests' plan, `tail` appended (an `[slo]` table, another cell).
fn plan_text(tail: &str) -> String {
    format!(
        "[study]\nname = \"x\"\nseed = 1\n\n[request]\nmodel = \"m\"\noutput_tokens = 3\n\n\
         [prompts]\nsource = \"random\"\nlengths = [8]\ndocuments = 2\nmin_token_id = 0\nmax_token_id = 9\n\n\
         [warmup]\nprompts = 0\n\n[timing]\nsettle_s = 0\nrequest_timeout_s = 5\ndrain_timeout_s = 5\n\n\
         [blocks]\ncount = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
         [[arms]]\nname = \"a\"\nrole = \"control\"\nargv = [\"srv\", \"{{port}}\"]\nport = 9000\n\n\
         [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 2\ncount = 3\n{tail}"
    )
}

/// Request `i` intended at i * 500 ms, sent 1 ms later; token events at the given
/// ms after send, [DONE] at `done` ms after send, usage 3 tokens.
fn rec(i: u64, tokens_at: &[u64], done: u64) -> RequestRecord {
    let t0 = i * 500 * MS;
    let send = t0 + MS;
    RequestRecord {
        id: format!("c/b0/a/{i}"),
        cell: "c".into(),
        block: 0,
        arm: "a".into(),
        index: i,
        prompt: i % 2,
        prompt_tokens_intended: 8,
        output_tokens_intended: 3,
        intended_ns: t0,
        dispatch_ns: Some(t0),
        admitted_ns: Some(t0),
        send_ns: Some(send),
        headers_ns: Some(send),
        events: tokens_at
            .iter()
            .map(|&t| StreamEvent { t_ns: send + t * MS, tokens: 1, token_ids: None, reasoning: 0 })
            .collect(),
        done_ns: Some(send + done * MS),
        status: Some(200),
        failure: None,
        usage: Some(Usage { prompt_tokens: 8, completion_tokens: 3, total_tokens: 11, reasoning_tokens: None }),
        finish_reason: Some("length".into()),
        server_request_id: None,
        light: false,
        turn: None,
        round: None,
    }
}

fn cells() -> Vec<CellRecords> {
    let mut failed = rec(2, &[], 0);
    failed.done_ns = None;
    failed.events.clear();
    failed.failure = Some(Failure::Timeout { after_ns: 99 * MS });
    // Request 0: TTFT 10 ms, gaps 10 and 20 ms, E2E 50 ms. Request 1: TTFT 30, gaps
    // 10, 10, E2E 60. Request 2 timed out 99 ms after its send.
    vec![CellRecords {
        block: 0,
        arm: "a".into(),
        cell: "c".into(),
        records: vec![rec(0, &[10, 20, 40], 50), rec(1, &[30, 40, 50], 60), failed],
    }]
}

#[test]
fn every_key_of_vllm_bench_serve_is_written_in_order() {
    let out = vllm_bench_results(&plan(""), &cells(), Some(1_764_612_225_000));
    let v = serde_json::to_value(&out[0]).unwrap();
    let text = serde_json::to_string(&out[0]).unwrap();
    // Struct order = vLLM's order.
    let mut at = 0;
    for k in VLLM_BENCH_KEYS {
        let pos = text[at..].find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("{k} missing or out of order"));
        at += pos;
    }
    assert_eq!(v.as_object().unwrap().len(), VLLM_BENCH_KEYS.len());
    assert_eq!(v["date"], "20251201-180345");
    assert_eq!(v["request_goodput"], serde_json::Value::Null);
}

#[test]
fn metric_percentiles_add_vllms_keys_with_numpys_interpolation() {
    let out = crate::export::vllm_bench_results_with(&plan(""), &cells(), None, &[50.0, 99.0, 99.9, 25.0]);
    let v = serde_json::to_value(&out[0]).unwrap();
    let keys = v.as_object().unwrap().len();
    assert_eq!(keys, VLLM_BENCH_KEYS.len() + 3 * 4, "p25, p50 and p99.9 of four metrics; p99 is there anyway");
    // TTFTs 10 and 30 ms: np.percentile([10, 30], 25) = 15, 50 -> 20, 99.9 -> 29.98.
    assert!(close(&v["p25_ttft_ms"], 15.0), "{}", v["p25_ttft_ms"]);
    assert!(close(&v["p50_ttft_ms"], 20.0), "{}", v["p50_ttft_ms"]);
    assert!((v["p99.9_ttft_ms"].as_f64().unwrap() - 29.98).abs() < 1e-9, "{}", v["p99.9_ttft_ms"]);
    // E2E 50 and 60 ms.
    assert!(close(&v["p50_e2el_ms"], 55.0), "{}", v["p50_e2el_ms"]);
    for k in ["p50_tpot_ms", "p50_itl_ms", "p99.9_e2el_ms"] {
        assert!(v[k].is_f64(), "{k}");
    }
    assert_eq!(crate::metrics::percentile_word(99.0), "99");
    assert_eq!(crate::metrics::percentile_word(99.9), "99.9");
    assert_eq!(
        v,
        serde_json::to_value(
            &crate::export::vllm_bench_results_with(&plan(""), &cells(), None, &[25.0, 50.0, 99.9])[0]
        )
        .unwrap(),
        "99 listed or not: p99 is there"
    );
}

fn close(a: &serde_json::Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn numbers_follow_vllm_definitions_and_units() {
    let out = vllm_bench_results(&plan("\n[slo]\nttft_ms = 20\n"), &cells(), None);
    let v = serde_json::to_value(&out[0]).unwrap();
    assert_eq!((v["completed"].as_u64(), v["failed"].as_u64()), (Some(2), Some(1)));
    // Observation interval: intended 0 to the timeout at 1000 + 1 + 99 ms = 1.1 s.
    assert!(close(&v["duration"], 1.1), "{}", v["duration"]);
    assert!(close(&v["request_throughput"], 2.0 / 1.1));
    // Only request 0 has TTFT <= 20 ms.
    assert!(close(&v["request_goodput"], 1.0 / 1.1));
    assert_eq!(v["total_input_tokens"], 16);
    assert_eq!(v["total_output_tokens"], 6);
    assert!(close(&v["total_token_throughput"], 22.0 / 1.1));
    assert_eq!(v["input_lens"], serde_json::json!([8, 8, 8]));
    assert_eq!(v["output_lens"], serde_json::json!([3, 3, 0]));
    assert_eq!(v["ttfts"], serde_json::json!([0.01, 0.03, 0.0]));
    assert_eq!(v["itls"], serde_json::json!([[0.01, 0.02], [0.01, 0.01], []]));
    assert_eq!(v["errors"][0], "");
    assert!(v["errors"][2].as_str().unwrap().starts_with("timeout"));
    assert_eq!(v["generated_texts"], serde_json::json!(["", "", ""]));
    // TTFT 10, 30 ms: mean 20, median 20, std 10, p99 = 10 + 0.99 * 20 = 29.8.
    assert!(close(&v["mean_ttft_ms"], 20.0) && close(&v["std_ttft_ms"], 10.0) && close(&v["p99_ttft_ms"], 29.8));
    // vLLM TPOT: (50 - 10) / 2 = 20 and (60 - 30) / 2 = 15 ms.
    assert!(close(&v["mean_tpot_ms"], 17.5) && close(&v["median_tpot_ms"], 17.5));
    // ITL: 10, 20, 10, 10: mean 12.5, median 10, p99 = 10 + (0.99 * 3 - 2) * 10 = 19.7.
    assert!(close(&v["mean_itl_ms"], 12.5) && close(&v["median_itl_ms"], 10.0) && close(&v["p99_itl_ms"], 19.7));
    assert!(close(&v["mean_e2el_ms"], 55.0) && close(&v["p99_e2el_ms"], 59.9));
    // Constant arrivals: vLLM's evenly spaced limit is burstiness inf.
    assert_eq!((v["request_rate"].as_f64(), v["burstiness"].as_str()), (Some(2.0), Some("inf")));
    assert_eq!(v["max_concurrency"], serde_json::Value::Null);
    // One token event per bucket-second: all 6 fall in second 0 (sends at 1 and 501 ms).
    assert_eq!(v["max_output_tokens_per_s"], 6.0);
    assert_eq!(v["max_concurrent_requests"], 2);
    // vLLM 0.34's per-request lists: E2E (0.0 for the failed one), the send on the
    // study clock, and send - arrival (1 ms each: the failed one was sent too).
    let floats = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
    let near = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
    assert!(near(&floats("latencies"), &[0.05, 0.06, 0.0]), "{}", v["latencies"]);
    assert!(near(&floats("start_times"), &[0.001, 0.501, 1.001]), "{}", v["start_times"]);
    assert!(near(&floats("queue_times"), &[0.001, 0.001, 0.001]), "{}", v["queue_times"]);
    assert_eq!(v["rtfx"], 0.0);
}

/// Each export names the route of each cell: vLLM's `openai` / `openai-chat`
/// (`endpoint_type`, `backend`), guidellm's `text_completions` / `chat_completions`
/// (the benchmark's `backend.request_type`).
#[test]
fn exports_name_each_cells_endpoint() {
    let text = plan_text("\n[[cells]]\nname = \"t\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 2\ncount = 3\nendpoint = \"chat\"\n")
        .replace(
            "source = \"random\"\nlengths = [8]\ndocuments = 2\nmin_token_id = 0\nmax_token_id = 9\n",
            "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 2\n",
        );
    let plan = crate::plan::parse(&text).unwrap();
    let mut cells = cells();
    cells.push(CellRecords { block: 0, arm: "a".into(), cell: "t".into(), records: cells[0].records.clone() });
    let out = vllm_bench_results(&plan, &cells, None);
    let route = |i: usize| {
        let v = serde_json::to_value(&out[i]).unwrap();
        (v["harness_cell"].as_str().unwrap().to_string(), v["endpoint_type"].clone(), v["backend"].clone())
    };
    assert_eq!(route(0), ("c".into(), "openai".into(), "openai".into()));
    assert_eq!(route(1), ("t".into(), "openai-chat".into(), "openai-chat".into()));
    let report = super::guidellm_report(&plan, "abc", &cells, None);
    let types: Vec<&serde_json::Value> =
        report["benchmarks"].as_array().unwrap().iter().map(|b| &b["config"]["backend"]["request_type"]).collect();
    assert_eq!(types, ["text_completions", "chat_completions"]);
}

#[test]
fn dates_are_utc() {
    assert_eq!(vllm_date(0), "19700101-000000");
    assert_eq!(vllm_date(951_868_800_000 + 3_723_000), "20000301-010203");
}

/// Runs guidellm's own report model and metric compiler on a report
/// (harness/tests/reference/guidellm_check.py; scripts/test installs guidellm).
pub fn guidellm_check(report: &std::path::Path) -> serde_json::Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/guidellm_check.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(report)
        .output()
        .expect("python3 (scripts/test installs the references)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "guidellm check failed (guidellm missing? run scripts/test):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("checker prints one JSON line")
}

#[test]
fn guidellm_report_loads_in_guidellm_and_matches_its_own_metrics() {
    let mut cells = cells();
    // A second cell with a request that streamed two tokens in one event.
    let mut multi = rec(0, &[10, 30], 40);
    multi.events[1].tokens = 2;
    cells.push(CellRecords { block: 1, arm: "a".into(), cell: "c".into(), records: vec![multi, rec(1, &[5], 9)] });
    let report = super::guidellm_report(&plan("\n[slo]\nttft_ms = 20\n"), "abc", &cells, Some(1_764_612_225_000));
    let b = &report["benchmarks"][0];
    // Unix seconds as f64 near 1.76e9 resolve about 0.24 us (as guidellm's own).
    let near = |a: &serde_json::Value, b: f64| a.as_f64().is_some_and(|a| (a - b).abs() < 1e-3);
    assert_eq!(
        b["metrics"]["request_totals"],
        serde_json::json!({"successful": 2, "incomplete": 0, "errored": 1, "total": 3})
    );
    // guidellm's TTFT (ms from send): 10 and 30; its TPOT includes TTFT: 40 / 3, 50 / 3.
    let ttft = &b["metrics"]["time_to_first_token_ms"]["successful"];
    assert!(near(&ttft["mean"], 20.0) && near(&ttft["median"], 10.0), "{ttft}");
    let tpot = &b["metrics"]["time_per_output_token_ms"]["successful"];
    assert!(near(&tpot["mean"], 15.0), "{tpot}");
    // Its ITL is our TPOT: (40 - 10) / 2 = 15 and (50 - 30) / 2 = 10, weighted by 2 each.
    assert!(near(&b["metrics"]["inter_token_latency_ms"]["successful"]["mean"], 12.5));
    assert_eq!(b["requests"]["errored"][0]["info"]["status"], "errored");
    // guidellm's goodput: TTFT <= 20 ms met by request 0 only; the errored request
    // counts against attainment: 1 of 3.
    assert_eq!(b["config"]["slo"], serde_json::json!({"ttft_ms": 20.0, "tpot_ms": null, "e2el_ms": null}));
    assert!(close(&b["metrics"]["slo_attainment"], 1.0 / 3.0), "{}", b["metrics"]["slo_attainment"]);
    assert_eq!(b["metrics"]["slo_determined_requests"], 3);
    assert_eq!(b["metrics"]["request_goodput"]["successful"]["count"], 1);
    assert!(near(&b["requests"]["successful"][0]["info"]["timings"]["request_start"], 1_764_612_225.001));
    assert_eq!(report["benchmarks"][1]["config"]["id_"], "x/b1/a/c");
    assert_eq!(b["config"]["strategy"], serde_json::json!({"type_": "constant", "rate": 2.0}));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("benchmarks.json");
    std::fs::write(&path, serde_json::to_string(&report).unwrap()).unwrap();
    let checked = guidellm_check(&path);
    assert_eq!(checked["benchmarks"], 2, "{checked}");
    assert_eq!(checked["requests"], 5, "{checked}");
    assert!(checked["metrics_compared"].as_u64().unwrap() >= 2 * 20, "{checked}");

    // The check can fail: a changed metric and a misspelt key are each named.
    let mut bad = report.clone();
    bad["benchmarks"][0]["metrics"]["request_latency"]["successful"]["median"] = serde_json::json!(1.0);
    bad["benchmarks"][0]["scheduler_metrics"]["measure_end_tme"] = serde_json::json!(1.0);
    std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/guidellm_check.py");
    let out = std::process::Command::new("python3").arg(&script).arg(&path).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(!out.status.success(), "{v}");
    let errors = v["errors"].to_string();
    assert!(errors.contains("request_latency.successful.median") && errors.contains("measure_end_tme"), "{errors}");
}

#[test]
fn guidellm_report_leaves_out_light_recorder_cells() {
    let mut cells = cells();
    // A light record keeps only the first token event: guidellm would read ITL 0.
    let mut light = rec(0, &[10], 50);
    light.light = true;
    cells.push(CellRecords { block: 0, arm: "a".into(), cell: "c".into(), records: vec![light] });
    let report = super::guidellm_report(&plan(""), "abc", &cells, None);
    let benchmarks = report["benchmarks"].as_array().unwrap();
    assert_eq!(benchmarks.len(), 1, "{report}");
    assert_eq!(benchmarks[0]["metrics"]["request_totals"]["total"], 3);
}

/// Two sessions of two turns (session 1's turn 0 times out, so its turn 1 was never
/// sent): guidellm's per-request turn fields, the per-turn metrics and the
/// first-turn dispatch delays, checked by hand and by guidellm's own compiler.
#[test]
fn guidellm_report_fills_the_multi_turn_fields_guidellm_has() {
    use crate::evidence::request_record::TurnRecord;
    let turn = |mut r: RequestRecord, session: u64, k: u32| {
        r.turn = Some(TurnRecord { session, turn: k, body_sha256: None, reply: None });
        r
    };
    let s0t0 = turn(rec(0, &[10, 20, 40], 50), 0, 0);
    // Turn 1 of session 0: due at turn 0's [DONE] (51 ms), sent 1 ms later.
    let mut s0t1 = turn(rec(0, &[20, 25, 30], 40), 0, 1);
    let shift = s0t0.done_ns.unwrap() - s0t1.intended_ns;
    s0t1.intended_ns += shift;
    s0t1.dispatch_ns = s0t1.dispatch_ns.map(|t| t + shift);
    s0t1.send_ns = s0t1.send_ns.map(|t| t + shift);
    s0t1.headers_ns = s0t1.headers_ns.map(|t| t + shift);
    s0t1.done_ns = s0t1.done_ns.map(|t| t + shift);
    s0t1.events.iter_mut().for_each(|e| e.t_ns += shift);
    s0t1.usage = Some(Usage { prompt_tokens: 20, completion_tokens: 3, total_tokens: 23, reasoning_tokens: None });
    s0t1.index = 1;
    let mut s1t0 = turn(rec(2, &[], 0), 1, 0);
    s1t0.done_ns = None;
    s1t0.failure = Some(Failure::Timeout { after_ns: 99 * MS });
    let mut s1t1 = turn(rec(2, &[], 0), 1, 1);
    (s1t1.dispatch_ns, s1t1.admitted_ns, s1t1.send_ns, s1t1.headers_ns, s1t1.done_ns) = (None, None, None, None, None);
    s1t1.usage = None;
    s1t1.failure = Some(Failure::SessionEnded { failed_turn: 0 });
    s1t1.index = 3;
    let records = vec![s0t0, s0t1, s1t0, s1t1];
    let sessions = vec![CellRecords { block: 0, arm: "a".into(), cell: "c".into(), records }];
    let report = super::guidellm_report(&plan(""), "abc", &sessions, Some(1_764_612_225_000));
    let b = &report["benchmarks"][0];

    let ok = &b["requests"]["successful"];
    assert_eq!(ok[1]["info"]["conversation_id"], "s0");
    assert_eq!((ok[1]["info"]["turn_index"].as_u64(), ok[1]["info"]["preceding_nodes"].as_u64()), (Some(1), Some(1)));
    assert_eq!(ok[1]["info"]["history_len"], 2);
    // Turn 1's predecessor ended at turn 0's [DONE]: 1 + 50 ms after the start.
    let pred = ok[1]["info"]["timings"]["predecessor_completed"].as_f64().unwrap();
    assert!((pred - 1_764_612_225.051).abs() < 1e-3, "{pred}");
    assert_eq!(ok[0]["info"]["turn_index"], 0);
    assert!(ok[0]["info"]["timings"]["predecessor_completed"].is_null());
    let errored = &b["requests"]["errored"];
    assert_eq!(
        (errored[1]["info"]["conversation_id"].as_str(), errored[1]["info"]["turn_index"].as_u64()),
        (Some("s1"), Some(1))
    );

    let turns = b["metrics"]["turns"].as_array().expect("per-turn metrics");
    assert_eq!(turns.len(), 2);
    assert_eq!(
        turns[0]["request_totals"],
        serde_json::json!({"successful": 1, "incomplete": 0, "errored": 1, "total": 2})
    );
    assert_eq!(
        turns[1]["request_totals"],
        serde_json::json!({"successful": 1, "incomplete": 0, "errored": 1, "total": 2})
    );
    // Turn 1's TTFT from send: 20 ms (Unix seconds near 1.76e9 resolve about 0.24 us);
    // its prompt held the history: 20 tokens.
    let ttft = turns[1]["time_to_first_token_ms"]["successful"]["median"].as_f64().unwrap();
    assert!((ttft - 20.0).abs() < 1e-3, "{}", turns[1]);
    assert!(close(&turns[1]["prompt_token_count"]["successful"]["mean"], 20.0));
    // First turns only: both sent 1 ms after their targeted start.
    let root = &b["metrics"]["root_dispatch_delay"];
    assert_eq!(root["count"], 2, "{root}");
    assert!((root["mean"].as_f64().unwrap() - 0.001).abs() < 1e-6, "{root}");

    // guidellm loads it and its own compile (compile_by_turn included) agrees.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("benchmarks.json");
    std::fs::write(&path, serde_json::to_string(&report).unwrap()).unwrap();
    let checked = guidellm_check(&path);
    assert_eq!(checked["requests"], 4, "{checked}");

    // A cell without sessions: every request at turn 0, so no per-turn metrics.
    let plain = super::guidellm_report(&plan(""), "abc", &cells(), None);
    assert!(plain["benchmarks"][0]["metrics"]["turns"].is_null());
    assert!(plain["benchmarks"][0]["requests"]["successful"][0]["info"].get("turn_index").is_none());
}
