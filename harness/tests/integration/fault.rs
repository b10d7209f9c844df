//! Fault: a server killed (SIGKILL) while a cell runs. Its outstanding requests must
//! be recorded as `server_died` failures (not connection errors), its remaining cell
//! not run, the invocation marked `server_died`, and the study must go on through the
//! other arm and the next block, ending with complete evidence and exit code 2.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn plan_text(model: &std::path::Path) -> String {
    // 100 ms per engine step: 16 output tokens keep a request busy for well over a second.
    let victim = serve_argv(model, &["--kv-format", "f16"], &["--debug-step-delay-us", "100000"]);
    let steady = serve_argv(model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { output_tokens: 16, warmup_prompts: 0, timeout_s: 120.0, ..TestPlan::new("fault-test", 3) };
    plan.arm("victim", "candidate", &victim)
        .arm("steady", "control", &steady)
        .closed("long", "confirmation", 2, 4)
        .closed("after", "confirmation", 2, 2)
        .render()
}

#[test]
fn a_server_killed_mid_cell_is_recorded_and_the_study_goes_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text = plan_text(&model);
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, &text).expect("write plan");
    let out = tmp.path().join("evidence");
    let mut child = Command::new(harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&plan_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn harness");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    // Wait for the victim's first cell of block 0 to start, then kill its server.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = lines.next().expect("harness output ended before the cell started").expect("line");
        seen.push(line.clone());
        if line == "b0 victim long: start" {
            break;
        }
        assert!(Instant::now() < deadline, "the cell did not start: {seen:?}");
    }
    let startup = read_json(&out.join("raw/b0/victim/startup.json"));
    let pid = i32::try_from(startup["pid"].as_u64().expect("pid")).expect("pid fits");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the PID of the server this test's harness started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill the victim server");
    seen.extend(lines.map_while(Result::ok));
    let status = child.wait().expect("wait harness");
    assert_eq!(status.code(), Some(2), "completed with an arm fault:\n{}", seen.join("\n"));

    check_manifest(&out, text.as_bytes());
    let victim = read_json(&out.join("raw/b0/victim/arm_outcome.json"));
    assert_eq!(victim["status"], "server_died", "{victim}");
    assert!(victim["detail"].as_str().expect("detail").contains("signal 9"), "{victim}");
    assert_eq!(victim["cells"][0]["status"], "interrupted");
    assert_eq!(victim["cells"][1]["status"], "not_run");
    assert_eq!(victim["stop"]["how"], "already_exited");
    assert!(!out.join("raw/b0/victim/after.requests.jsonl").exists(), "a cell that never ran has no records");

    let records = read_records(&out.join("raw/b0/victim/long.requests.jsonl"));
    assert_eq!(records.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 2, 3], "every planned request once");
    let classes: Vec<&str> = records.iter().filter_map(|r| r.failure.as_ref()).map(|f| f.class()).collect();
    assert!(!classes.is_empty(), "requests were outstanding when the server died");
    assert!(classes.iter().all(|&c| c == "server_died"), "classes: {classes:?}");
    assert!(records.iter().all(|r| r.failure.is_some() || r.is_valid()));
    // Nothing is admitted once the death is known (only the dying server's permits
    // could free a slot, and they are released after the harness learns of it).
    let exit_ns = victim["stop"]["exit"]["t_ns"].as_u64().expect("exit t_ns");
    assert!(records.iter().filter_map(|r| r.admitted_ns).all(|a| a < exit_ns), "{records:?}");

    for unit in ["b0/steady", "b1/victim", "b1/steady"] {
        let outcome = read_json(&out.join(format!("raw/{unit}/arm_outcome.json")));
        assert_eq!(outcome["status"], "completed", "{unit}: {outcome}");
        for cell in ["long", "after"] {
            let recs = read_records(&out.join(format!("raw/{unit}/{cell}.requests.jsonl")));
            assert!(recs.iter().all(|r| r.is_valid()), "{unit} {cell}");
        }
    }
    let b0 = read_json(&out.join("raw/b0/victim/startup.json"))["pid"].as_u64();
    let b1 = read_json(&out.join("raw/b1/victim/startup.json"))["pid"].as_u64();
    assert_ne!(b0, b1, "block 1 starts a fresh victim server");
}
