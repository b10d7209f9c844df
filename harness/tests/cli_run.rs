//! `harness run` refusals that need no server: an underived plan, and an evidence
//! directory that is not empty (without --force).

mod common;

use std::process::Command;

use common::*;

const PLAN: &str = r#"[study]
name = "refusals"
seed = 1

[request]
model = "m"
output_tokens = 4

[prompts]
source = "random"
max_token_id = 99
lengths = [8]
documents = 2

[warmup]
prompts = 0

[timing]
settle_s = 0.0
request_timeout_s = 5.0
drain_timeout_s = 5.0

[blocks]
count = 1
arm_order = "fixed"
cell_order = "fixed"

[[arms]]
name = "ext"
role = "control"
url = "http://127.0.0.1:9"
startup_timeout_s = 1.0

[[cells]]
name = "open"
kind = "confirmation"
load = "open"
rate = "derived:near"
count = 2

[derive]
pilot_rates = [5.0]
near_fraction = 0.9
"#;

fn harness(args: &[&str], plan: &std::path::Path) -> std::process::Output {
    Command::new(harness_bin()).arg("run").args(args).arg(plan).output().expect("run harness")
}

#[test]
fn an_underived_plan_is_refused_before_any_evidence() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, PLAN).expect("write");
    let out = tmp.path().join("ev");
    let run = harness(&["--quiet", "--out", out.to_str().expect("utf-8")], &plan);
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("not derived yet"), "{err}");
    assert!(!out.exists(), "no evidence directory for a refused plan");
}

#[test]
fn a_non_empty_evidence_directory_is_refused_without_force() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, format!("{PLAN}\n[derived]\nnear = 4.5\n")).expect("write");
    let out = tmp.path().join("ev");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("notes.txt"), "mine").expect("write");
    let run = harness(&["--quiet", "--out", out.to_str().expect("utf-8")], &plan);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("not empty"));
    let forced = harness(&["--quiet", "--force", "--out", out.to_str().expect("utf-8")], &plan);
    assert_eq!(forced.status.code(), Some(1), "--force never deletes a directory that holds no study");
    assert_eq!(std::fs::read_to_string(out.join("notes.txt")).expect("kept"), "mine");
}
