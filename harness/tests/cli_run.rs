//! `harness run` refusals that need no server: an underived plan, and an evidence
//! directory that is not empty (without --force); bad input (a malformed,
//! unreadable or invalid plan, bad arguments) exits 2 like the engine.

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
    assert_eq!(run.status.code(), Some(2), "bad input");
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

/// Bad input exits 2 (as the engine does and as clap does for bad usage), with the
/// message naming the problem; nothing is written.
#[test]
fn bad_input_exits_2_naming_the_problem() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("ev");
    let derived = format!("{PLAN}\n[derived]\nnear = 4.5\n");
    let cases: [(&str, String, &str); 4] = [
        ("malformed", "[study\nname = ".to_string(), "does not parse"),
        ("missing-key", derived.replacen("model = \"m\"\n", "", 1), "missing field `model`"),
        ("invalid-value", derived.replacen("count = 2\n", "count = 0\n", 1), "cells[0].count"),
        ("underived", PLAN.to_string(), "not derived yet"),
    ];
    for (name, text, want) in cases {
        let plan = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&plan, text).expect("write");
        for args in [vec!["run", "--quiet", "--out", out.to_str().expect("utf-8")], vec!["plan", "check"]] {
            if args[0] == "plan" && name == "underived" {
                continue; // `plan check` accepts a valid plan that is not ready to run
            }
            let o = Command::new(harness_bin()).args(&args).arg(&plan).output().expect("run harness");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {err}");
            assert!(err.contains(want), "{name} {args:?}: {want:?} not in {err}");
        }
        assert!(!out.exists(), "{name}: no evidence directory for bad input");
    }
    // An unreadable plan, and bad usage (clap).
    let o = Command::new(harness_bin()).args(["plan", "check"]).arg(tmp.path().join("nowhere.toml")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(harness_bin()).args(["run", "--no-such-flag"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}
