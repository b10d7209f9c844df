//! End to end: `harness run` on the real engine (synthetic model) over real HTTP,
//! two arms (f16 control, k16v8 candidate), two counterbalanced blocks, one
//! closed-loop and one open-loop cell. Checks the evidence, not the speed: fresh
//! servers, planned order, every request once with a complete timeline, hashes,
//! scrapes, receipts and summaries. No timed assertions.

use crate::common;

use std::collections::BTreeSet;

use common::tamper::*;
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
    // The report does not speak of a log or a cold start it never saw.
    assert!(report.contains("health answered after (s), per block:") && report.contains("no cold start"), "{report}");
    assert!(!report.contains("cold start to healthy") && !report.contains("no version line in server.log"), "{report}");
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

/// Interleaved blocks (`blocks.rounds = 3`): both servers of a block are up
/// together, each cell runs in three rounds that alternate the arms (ABA... in
/// block order, reversed every other round), every record carries its round, a
/// round's intended arrivals start at the round, the summary's duration is the sum
/// of the arm's own round spans, and replay recomputes it all; a record moved to
/// another round is caught.
#[test]
fn interleaved_blocks_alternate_the_arms_round_by_round_and_replay_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let f16 = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan {
        documents: 3,
        warmup_prompts: 1,
        arm_order: "alternate",
        rounds: 3,
        ..TestPlan::new("interleave-test", 12)
    };
    let text = plan
        .arm("a", "control", &f16)
        .arm("b", "candidate", &f16)
        .closed("closed", "confirmation", 2, 7)
        .open("open", "confirmation", 40.0, 6)
        .render()
        .replacen("rounds = 3\n", "rounds = 3\nrandomize_setup = true\n", 1)
        + "\n[analysis]\nalpha = 0.05\nnoise = [\"throughput_rps\", \"e2e_p95_intended\"]\n";
    let (out, _) = run_study_ok(tmp.path(), &text);
    let plan = harness::plan::parse(&text).expect("plan");
    assert_eq!((plan.blocks.rounds, plan.blocks.randomize_setup), (3, true));
    // Each server's environment carries its own setup pad, by the seed rule.
    let mut pads = std::collections::BTreeSet::new();
    for block in &plan.schedule().blocks {
        for arm in &block.arms {
            let env = &read_json(&out.join(format!("raw/b{}/{arm}/startup.json", block.index)))["env"];
            let pad = env["HARNESS_SETUP_PAD"].as_str().expect("a pad");
            assert_eq!(pad.len(), harness::plan::seed::setup_pad_len(plan.study.seed, block.index, arm));
            pads.insert(pad.len());
        }
    }
    assert!(pads.len() > 1, "the pads differ between units: {pads:?}");
    for block in &plan.schedule().blocks {
        let unit = |arm: &str| out.join(format!("raw/b{}/{arm}", block.index));
        // Both servers were up before either sent its first request.
        let healthy = |arm: &str| read_json(&unit(arm).join("startup.json"))["healthy_ns"].as_u64().expect("healthy");
        let mut spans = Vec::new();
        for cell in ["closed", "open"] {
            let trace = harness::trace::read_trace(&out.join("inputs"), cell).expect("trace").entries;
            for arm in ["a", "b"] {
                let records = read_records(&unit(arm).join(format!("{cell}.requests.jsonl")));
                assert_eq!(records.len(), trace.len(), "every entry once, {cell} {arm}");
                let first_send = records.iter().filter_map(|r| r.send_ns).min().expect("sent");
                assert!(healthy("a").max(healthy("b")) < first_send, "both servers up first");
                let mut total = 0u64;
                for k in 0..3u32 {
                    let lo = trace.len() * k as usize / 3;
                    let hi = trace.len() * (k as usize + 1) / 3;
                    let round: Vec<_> = records.iter().filter(|r| r.round == Some(k)).collect();
                    let idx: Vec<u64> = round.iter().map(|r| r.index).collect();
                    assert_eq!(idx, (lo as u64..hi as u64).collect::<Vec<_>>(), "{cell} {arm} round {k}");
                    // The round's arrivals keep the trace's gaps from its own start.
                    let start = round[0].intended_ns;
                    for r in &round {
                        let e = &trace[r.index as usize];
                        assert_eq!(r.intended_ns - start, e.offset_ns - trace[lo].offset_ns);
                    }
                    let from = round.iter().map(|r| r.intended_ns).min().unwrap();
                    let to = round.iter().map(|r| harness::metrics::last_seen_ns(r)).max().unwrap();
                    total += to - from;
                    spans.push((from, to, k, arm));
                }
                let summary: CellSummary = serde_json::from_value(read_json(
                    &out.join(format!("results/cells/b{}-{arm}-{cell}.summary.json", block.index)),
                ))
                .expect("summary");
                assert!((summary.duration_s - total as f64 / 1e9).abs() < 1e-9, "{cell} {arm}: sum of rounds");
                // Both arms keep receipts: the engine's own decode time per token
                // (the idle time between rounds is excluded by definition, and
                // unit-tested in metrics::engine_steps).
                assert!(summary.engine_decode_steps.unwrap() > 0, "{cell} {arm}: decode steps");
                assert!(summary.engine_tpot_ms.expect("engine TPOT") > 0.0, "{cell} {arm}");
            }
        }
        // In time, the rounds alternate: block order in even rounds, reversed in odd.
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "rounds never overlap: {w:?}");
        }
        let order: Vec<&str> = spans.iter().map(|s| s.3).collect();
        let (x, y) = (block.arms[0].as_str(), block.arms[1].as_str());
        assert_eq!(order, [x, y, y, x, x, y, x, y, y, x, x, y], "block {}: ABBA by round", block.index);
    }
    let replay = std::process::Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stdout));

    // `harness noise` on this A/A (two identical arms): the closed cell's servers'
    // variance is the within-block spread of ln(throughput), by hand from the summaries.
    let json = tmp.path().join("noise.json");
    let o = std::process::Command::new(harness_bin())
        .arg("noise")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("noise");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("blocks.rounds = 3"));
    let noise = read_json(&json);
    // The report gives the same decomposition (analysis.noise), and replay recomputed it.
    let ev = read_json(&out.join("results/evidence.json"));
    assert_eq!(ev["noise"]["groups"], noise["groups"], "report.md and `harness noise` give one decomposition");
    let md = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    assert!(
        md.contains("## Where this study's noise comes from (`analysis.noise`)") && md.contains("paired log-ratio"),
        "{md}"
    );
    assert!(
        String::from_utf8_lossy(&replay.stdout).contains("evidence.json: the noise decomposition (analysis.noise)")
    );
    let groups = noise["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 4, "two cells of different shapes x two metrics: {noise}");
    let g = &groups[0];
    assert_eq!((g["cells"].clone(), g["metric"].as_str()), (serde_json::json!(["closed"]), Some("throughput_rps")));
    let d = &g["decomposition"];
    assert_eq!((d["blocks"].as_u64(), d["servers"].as_u64(), d["repeats"].as_u64()), (Some(2), Some(2), Some(1)));
    let rate = |b: u32, arm: &str| {
        read_json(&out.join(format!("results/cells/b{b}-{arm}-closed.summary.json")))["request_throughput_rps"]
            .as_f64()
            .unwrap()
            .ln()
    };
    let ms: f64 = (0..2).map(|b| (rate(b, "a") - rate(b, "b")).powi(2) / 2.0).sum::<f64>() / 2.0;
    let server = d["components"].as_array().unwrap().iter().find(|c| c["level"] == "server").expect("server");
    assert!((server["mean_square"].as_f64().unwrap() - ms).abs() < 1e-12, "{server} vs {ms}");
    assert!(d["components"].as_array().unwrap().iter().all(|c| c["level"] != "repeat"), "one cell: no repeat level");
    let o = std::process::Command::new(harness_bin()).arg("noise").arg(tmp.path().join("nothing")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));

    // A record moved to another round: replay names it.
    let bad = tmp.path().join("bad");
    copy_dir(&out, &bad);
    edit_lines(&bad, "raw/b0/a/closed.requests.jsonl", |lines| {
        lines[0] = lines[0].replace("\"round\":0", "\"round\":1");
    });
    reseal_unit(&bad, "raw/b0/a/unit.json");
    rewrite_manifest(&bad);
    let replay = std::process::Command::new(harness_bin()).arg("replay").arg(&bad).output().expect("replay");
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(!replay.status.success() && text.contains("request 0 round"), "{text}");

    // A changed component of the decomposition: replay names it.
    let bad = tmp.path().join("bad-noise");
    copy_dir(&out, &bad);
    let path = bad.join("results/evidence.json");
    let mut v = read_json(&path);
    let sd = v["noise"]["groups"][0]["decomposition"]["components"][0]["sd"].as_f64().unwrap();
    v["noise"]["groups"][0]["decomposition"]["components"][0]["sd"] = (sd * 1.01 + 1e-6).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    rewrite_manifest(&bad);
    let replay = std::process::Command::new(harness_bin()).arg("replay").arg(&bad).output().expect("replay");
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(!replay.status.success() && text.contains("noise.groups[0].decomposition.components[0].sd"), "{text}");

    // A server whose setup pad is not the rule's: replay names it.
    let bad = tmp.path().join("bad-pad");
    copy_dir(&out, &bad);
    let startup = bad.join("raw/b1/b/startup.json");
    let mut v = read_json(&startup);
    let pad = v["env"]["HARNESS_SETUP_PAD"].as_str().unwrap().to_string() + "x";
    v["env"]["HARNESS_SETUP_PAD"] = pad.into();
    std::fs::write(&startup, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    reseal_unit(&bad, "raw/b1/b/unit.json");
    rewrite_manifest(&bad);
    let replay = std::process::Command::new(harness_bin()).arg("replay").arg(&bad).output().expect("replay");
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(!replay.status.success() && text.contains("env.HARNESS_SETUP_PAD"), "{text}");
}
