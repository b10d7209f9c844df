//! End to end: `harness run` on the real engine (synthetic model) over real HTTP,
//! two arms (f16 control, k16v8 candidate), two counterbalanced blocks, one
//! closed-loop and one open-loop cell. Checks the evidence, not the speed: fresh
//! servers, planned order, every request once with a complete timeline, hashes,
//! scrapes, receipts and summaries. No timed assertions.

mod common;

use std::collections::BTreeSet;

use common::*;
use harness::metrics::CellSummary;

fn plan_text(model: &std::path::Path) -> String {
    let scales = model.join("scales.json").display().to_string();
    let f16 = serve_argv(model, &["--kv-format", "f16"], &[]);
    let k16v8 = serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &scales], &[]);
    let plan = TestPlan {
        prompt_tokens: 24,
        documents: 3,
        warmup_prompts: 3,
        settle_s: 0.2,
        arm_order: "alternate",
        cell_order: "alternate",
        ..TestPlan::new("e2e-test", 11)
    };
    plan.arm("f16", "control", &f16)
        .arm_with_receipts("k16v8", "candidate", &k16v8, "engine-receipts.jsonl")
        .closed("closed-3", "confirmation", 3, 7)
        .open("open", "confirmation", 25.0, 6)
        .render()
}

#[test]
fn e2e_study_writes_complete_evidence() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text = plan_text(&model);
    let (out, _) = run_study_ok(tmp.path(), &text);
    let plan = harness::plan::parse(&text).expect("plan");

    // Frozen plan and manifest.
    assert_eq!(std::fs::read(out.join("plan.toml")).expect("plan.toml"), text.as_bytes());
    check_manifest(&out, text.as_bytes());
    harness::trace::verify_catalog(&out.join("inputs")).expect("catalog");

    // Fresh server per arm per block, started in the planned order.
    let schedule = plan.schedule();
    let mut pids = BTreeSet::new();
    let mut starts = Vec::new();
    for block in &schedule.blocks {
        for arm in &block.arms {
            let unit = out.join(format!("raw/b{}/{arm}", block.index));
            let startup = read_json(&unit.join("startup.json"));
            assert_eq!(startup["ok"], true, "{startup}");
            // What the healthy server said it is, asked before the warmup.
            let identity = &startup["identity"];
            assert!(identity["version"]["version"].is_string(), "{identity}");
            assert_eq!(identity["models"]["data"][0]["id"], plan.request.model.as_str(), "{identity}");
            pids.insert(startup["pid"].as_u64().expect("pid"));
            starts.push((startup["spawned_ns"].as_u64().expect("spawned_ns"), block.index, arm.clone()));
            let outcome = read_json(&unit.join("arm_outcome.json"));
            assert_eq!(outcome["status"], "completed", "{outcome}");
            assert_eq!(outcome["stop"]["how"], "exited_on_sigterm", "{outcome}");
            assert_eq!(outcome["receipts_kept"], true);
            let warm = read_json(&unit.join("warmup.json"));
            assert_eq!(warm["ok"], true, "{warm}");
        }
    }
    assert_eq!(pids.len(), 4, "a distinct server process per arm per block");
    let planned: Vec<(u32, String)> =
        schedule.blocks.iter().flat_map(|b| b.arms.iter().map(move |a| (b.index, a.clone()))).collect();
    starts.sort();
    let actual: Vec<(u32, String)> = starts.into_iter().map(|(_, b, a)| (b, a)).collect();
    assert_eq!(actual, planned, "servers started in the counterbalanced order");
    assert_eq!(planned[0].1, "f16");
    assert_eq!(planned[2].1, "k16v8", "block 1 reverses the arm order");

    let trace_of = |cell: &str| harness::trace::read_trace(&out.join("inputs"), cell).expect("trace").entries;
    for block in &schedule.blocks {
        let mut cell_starts = Vec::new();
        for arm in &block.arms {
            let unit = out.join(format!("raw/b{}/{arm}", block.index));
            let receipts = std::fs::read_to_string(unit.join("receipts.jsonl")).expect("receipts");
            assert!(!receipts.is_empty(), "receipts kept");
            let scrapes = std::fs::read_to_string(unit.join("scrapes.jsonl")).expect("scrapes");
            let mut answered = 0;
            for line in scrapes.lines() {
                let v: serde_json::Value = serde_json::from_str(line).expect("scrape line");
                assert!(v["t_ns"].is_u64() && v["phase"].is_string(), "{line}");
                if v["status"] == 200 {
                    assert!(v["text"].as_str().expect("text").contains("vllm:num_requests_running"));
                    answered += 1;
                } else {
                    assert!(v["error"].is_string() || v["status"].is_u64(), "{line}");
                }
            }
            assert!(answered >= 1, "at least one /metrics scrape answered");
            let memory = std::fs::read_to_string(unit.join("memory.jsonl")).expect("memory");
            let first: serde_json::Value = serde_json::from_str(memory.lines().next().expect("a sample")).unwrap();
            assert!(first["rss_bytes"].as_u64().expect("rss") > 0);
            let mut starts = Vec::new();
            for cell in &block.cells {
                let records = read_records(&unit.join(format!("{cell}.requests.jsonl")));
                let entries = trace_of(cell);
                assert_eq!(records.len(), entries.len(), "{cell}: every planned request once");
                let t0 = records[0].intended_ns;
                starts.push(t0);
                let ids: BTreeSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
                assert_eq!(ids.len(), records.len());
                for (r, e) in records.iter().zip(&entries) {
                    assert_eq!((r.index, r.prompt, r.intended_ns - t0), (e.index, e.prompt, e.offset_ns));
                    assert_eq!((r.block, r.arm.as_str(), r.cell.as_str()), (block.index, arm.as_str(), cell.as_str()));
                    assert!(r.is_valid(), "{r:?}");
                    let first = r.events.iter().find(|ev| ev.tokens > 0).expect("a token-bearing event").t_ns;
                    let chain = [
                        r.intended_ns,
                        r.dispatch_ns.unwrap(),
                        r.admitted_ns.unwrap(),
                        r.send_ns.unwrap(),
                        r.headers_ns.unwrap(),
                        first,
                        r.done_ns.unwrap(),
                    ];
                    assert!(chain.windows(2).all(|w| w[0] <= w[1]), "timeline out of order: {chain:?}");
                    let usage = r.usage.expect("usage");
                    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (24, 6));
                    let sid = r.server_request_id.as_deref().expect("server id");
                    assert!(receipts.contains(&format!("\"{sid}\"")), "{sid} is in the receipts");
                }
                let summary: CellSummary = serde_json::from_value(read_json(
                    &out.join(format!("results/cells/b{}-{arm}-{cell}.summary.json", block.index)),
                ))
                .expect("summary");
                assert_eq!(
                    (summary.requests, summary.completed, summary.failed),
                    (records.len() as u64, records.len() as u64, 0)
                );
            }
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "cells ran in the block's order");
            cell_starts.push(starts);
        }
        let expected: Vec<&str> = if block.index == 0 { vec!["closed-3", "open"] } else { vec!["open", "closed-3"] };
        assert_eq!(block.cells, expected, "cell order alternates");
    }
    let summaries = read_json(&out.join("results/summaries.json"));
    assert_eq!(summaries.as_array().expect("array").len(), 8);
    // Identical bodies for every arm: one warmup body hash across all invocations.
    let warm: BTreeSet<String> = planned
        .iter()
        .map(|(b, a)| read_json(&out.join(format!("raw/b{b}/{a}/warmup.json")))["body_sha256"].to_string())
        .collect();
    assert_eq!(warm.len(), 1);
    let run_json = read_json(&out.join("run.json"));
    assert_eq!(run_json["request_body_sha256"]["completions"].as_array().expect("hashes").len(), 3);
}

/// Kills the server this test started, even when an assertion fails.
struct Killer(std::process::Child);

impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_external_arm_is_checked_but_never_started_or_stopped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let port = free_port();
    let server = std::process::Command::new(engine_bin())
        .args(["serve", "--served-model-name", "synth", "--threads", "1", "--kv-budget", "64MiB", "--model"])
        .arg(&model)
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start engine");
    let _server = Killer(server);
    let plan = TestPlan { output_tokens: 4, prompt_tokens: 12, blocks: 1, ..TestPlan::new("external", 5) };
    let text = plan
        .external_arm("ext", "control", &format!("http://127.0.0.1:{port}"))
        .closed("closed", "confirmation", 2, 3)
        .render();
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, &text).expect("write plan");
    let out = tmp.path().join("evidence");
    let run = run_harness(&plan_path, &out);
    assert!(run.status.success(), "{}\n{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    check_manifest(&out, text.as_bytes());
    let unit = out.join("raw/b0/ext");
    let startup = read_json(&unit.join("startup.json"));
    assert_eq!((startup["kind"].as_str(), startup["ok"].as_bool()), (Some("external"), Some(true)));
    assert!(startup["pid"].is_null());
    // An external server says what it is too, and the report repeats it.
    let version = startup["identity"]["version"]["version"].as_str().expect("the engine answers /version");
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    let said = format!("server says (block 0): /version `{version}`; /v1/models synth (max_model_len ");
    assert!(report.contains(&said), "{said:?} not in report.md:\n{report}");
    let outcome = read_json(&unit.join("arm_outcome.json"));
    assert_eq!(outcome["status"], "completed");
    assert!(outcome["stop"].is_null(), "an external server is never stopped");
    assert!(!unit.join("memory.jsonl").exists() && !unit.join("server.log").exists());
    assert!(unit.join("scrapes.jsonl").is_file());
    let records = read_records(&unit.join("closed.requests.jsonl"));
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.is_valid()), "{records:?}");
    // The server is still up after the study.
    let health = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(health.is_ok(), "the external server was left running");
}
