//! `harness run PLAN --resume DIR` on the real engine (synthetic model): a study whose
//! harness is killed with SIGKILL in the middle of an arm (block 1's first server
//! invocation, after its first cell) leaves no server behind (`PR_SET_PDEATHSIG`),
//! refuses to resume with a changed plan or a changed input file, then resumes:
//! the completed units are verified and kept, the partial one is moved aside to
//! `discarded/`, the rest run with fresh servers, the manifest covers everything,
//! `run.json` and report.md record the interruption, and the results equal those of
//! an uninterrupted run (same input bytes, same request counts, same output token
//! IDs: the synthetic model is deterministic under greedy decoding). A complete
//! study then refuses to resume.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn plan_text(model: &Path) -> String {
    let scales = model.join("scales.json").display().to_string();
    // 20 ms per engine step: each unit takes about a second, so the kill lands mid-arm.
    let slow = ["--debug-step-delay-us", "20000"];
    let f16 = serve_argv(model, &["--kv-format", "f16"], &slow);
    let k16v8 = serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &scales], &slow);
    let plan = TestPlan { documents: 3, settle_s: 0.3, ..TestPlan::new("resume-test", 13) };
    plan.arm("f16", "control", &f16)
        .arm("k16v8", "candidate", &k16v8)
        .closed("first", "confirmation", 2, 4)
        .closed("second", "confirmation", 2, 6)
        .render()
}

fn resume(plan: &Path, dir: &Path) -> Output {
    Command::new(harness_bin())
        .args(["run", "--quiet", "--resume"])
        .arg(dir)
        .arg(plan)
        .current_dir(workspace())
        .output()
        .expect("run harness --resume")
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A live (not zombie) process.
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|s| s != "Z" && s != "X")
}

/// Starts the study, kills the harness with SIGKILL once block 1's first unit has
/// finished its first cell, and returns the pid of that unit's server.
fn start_and_kill(plan: &Path, out: &Path) -> i32 {
    let mut child = Command::new(harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(out)
        .arg(plan)
        .current_dir(workspace())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn harness");
    // The cell's summary is written after its raw records: waiting for the summary
    // means the kill lands after the first cell is wholly on disk.
    let marker = out.join("results/cells/b1-f16-first.summary.json");
    let deadline = Instant::now() + Duration::from_secs(180);
    while !marker.is_file() {
        assert!(Instant::now() < deadline, "block 1 never reached its second cell");
        assert!(child.try_wait().expect("try_wait").is_none(), "the harness ended before the kill");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL the harness");
    child.wait().expect("wait harness");
    let startup = read_json(&out.join("raw/b1/f16/startup.json"));
    i32::try_from(startup["pid"].as_u64().expect("pid")).expect("pid fits")
}

#[test]
fn a_study_killed_mid_arm_resumes_and_equals_an_uninterrupted_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text_plan = plan_text(&model);
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, &text_plan).expect("write plan");
    let out = tmp.path().join("evidence");

    let server = start_and_kill(&plan, &out);
    // The orphaned server dies with the harness (PR_SET_PDEATHSIG).
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(server) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survived = alive(server);
    if survived {
        // SAFETY: kill(2) on the server this test's harness started.
        unsafe { libc::kill(server, libc::SIGKILL) };
    }
    assert!(!survived, "the server outlived the harness killed with SIGKILL");
    assert!(!out.join("manifest.json").exists() && !out.join("raw/b1/f16/unit.json").exists());
    assert!(out.join("raw/b0/k16v8/unit.json").is_file(), "block 0 completed before the kill");
    let run_json = std::fs::read(out.join("run.json")).expect("run.json written at the session start");

    // A changed plan refuses, and touches nothing.
    let changed = tmp.path().join("changed.toml");
    std::fs::write(&changed, format!("{text_plan}\n# one more line\n")).unwrap();
    let r = resume(&changed, &out);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("the plan changed"), "{}", text(&r));
    // A changed input file refuses.
    let trace = out.join("inputs/traces/second.trace.jsonl");
    let original = std::fs::read(&trace).unwrap();
    let mut flipped = original.clone();
    let i = flipped.iter().position(|b| b.is_ascii_digit()).expect("a digit");
    flipped[i] = if flipped[i] == b'9' { b'8' } else { flipped[i] + 1 };
    std::fs::write(&trace, &flipped).unwrap();
    let r = resume(&plan, &out);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("inputs/") && text(&r).contains("second.trace.jsonl"), "{}", text(&r));
    std::fs::write(&trace, &original).unwrap();
    // A run.json of another format (another harness wrote the completed units) refuses.
    let older = String::from_utf8(run_json.clone()).unwrap().replace(harness::evidence::RUN_FORMAT, "harness-run/2");
    std::fs::write(out.join("run.json"), &older).unwrap();
    let r = resume(&plan, &out);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("run.json is harness-run/2"), "{}", text(&r));
    std::fs::write(out.join("run.json"), &run_json).unwrap();
    assert_eq!(std::fs::read(out.join("run.json")).unwrap(), run_json, "a refusal changes nothing");
    assert!(!out.join("discarded").exists(), "a refusal discards nothing");

    // Resume.
    let r = resume(&plan, &out);
    assert!(r.status.success(), "resume failed:\n{}", text(&r));
    let said = text(&r);
    assert!(said.contains("resume: b0/f16 verified") && said.contains("resume: discarded b1/f16"), "{said}");
    check_manifest(&out, text_plan.as_bytes());
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["format"], harness::evidence::RUN_FORMAT);
    let sessions = run["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{run}");
    assert_eq!(sessions[0]["state"], "interrupted");
    assert_eq!(sessions[0]["units_run"], serde_json::json!(["b0/f16", "b0/k16v8"]));
    assert_eq!(sessions[1]["state"], "finished");
    assert_eq!(sessions[1]["resumed"], true);
    assert_eq!(sessions[1]["units_run"], serde_json::json!(["b1/f16", "b1/k16v8"]));
    let discard = &sessions[1]["discarded"][0];
    assert_eq!((discard["unit"].as_str(), discard["dir"].as_str()), (Some("b1/f16"), Some("discarded/1-b1-f16")));
    let kept = out.join("discarded/1-b1-f16");
    assert!(kept.join("discard.json").is_file() && kept.join("raw/b1/f16/first.requests.jsonl").is_file());
    assert!(kept.join("results/cells/b1-f16-first.summary.json").is_file());
    for (unit, session) in [("b0/f16", 0), ("b0/k16v8", 0), ("b1/f16", 1), ("b1/k16v8", 1)] {
        let rec = read_json(&out.join(format!("raw/{unit}/unit.json")));
        assert_eq!(rec["session"], session, "{unit}: {rec}");
        assert_eq!(read_json(&out.join(format!("raw/{unit}/arm_outcome.json")))["session"], session);
    }
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    assert!(report.contains("### Sessions") && report.contains("- session 0: interrupted"), "{report}");
    assert!(report.contains("- session 1 (resumed): finished"), "{report}");
    assert!(report.contains("discarded b1/f16") && report.contains("`discarded/1-b1-f16/`"), "{report}");

    // A complete study refuses to resume.
    let r = resume(&plan, &out);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("the study is complete"), "{}", text(&r));

    // The same plan, uninterrupted.
    let whole = tmp.path().join("whole");
    let r = run_harness(&plan, &whole);
    assert!(r.status.success(), "{}", text(&r));
    let inputs = files(&out.join("inputs"));
    assert_eq!(inputs, files(&whole.join("inputs")));
    for f in &inputs {
        assert_eq!(
            std::fs::read(out.join("inputs").join(f)).unwrap(),
            std::fs::read(whole.join("inputs").join(f)).unwrap(),
            "{f}"
        );
    }
    for unit in ["b0/f16", "b0/k16v8", "b1/f16", "b1/k16v8"] {
        for cell in ["first", "second"] {
            let path = format!("raw/{unit}/{cell}.requests.jsonl");
            let (a, b) = (read_records(&out.join(&path)), read_records(&whole.join(&path)));
            assert_eq!(a.len(), b.len(), "{path}");
            for (x, y) in a.iter().zip(&b) {
                assert!(x.is_valid() && y.is_valid(), "{path}");
                let ids = |r: &harness::evidence::request_record::RequestRecord| -> Vec<u32> {
                    r.events.iter().filter_map(|e| e.token_ids.clone()).flatten().collect()
                };
                assert_eq!((x.index, x.prompt), (y.index, y.prompt), "{path}");
                assert_eq!(ids(x), ids(y), "{path} request {}", x.index);
                assert_eq!(ids(x).len(), 6, "{path}");
            }
        }
    }
}
