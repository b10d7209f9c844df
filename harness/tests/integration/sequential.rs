//! A sequential study (`[sequential]`) against the real engine binary over real
//! HTTP: the candidate is the same build with a 20 ms delay per engine step, so
//! the rule must call it regressed at the first look and stop there: only the
//! first 3 of the 5 planned blocks run, `sequential.json` records the look, the
//! report has its section, `harness replay` recomputes it clean, `harness gate
//! --paired` exits 2 and names the hypothesis; a tampered verdict is caught by
//! replay; `--simulate` replays the rule on the recorded noise; a directory that
//! is not a sequential study is an error (exit 1).

use crate::common;

use std::process::Command;

use common::tamper::{copy_dir, rewrite_manifest};
use common::{TestPlan, harness_bin, read_json, run_study_ok, serve_argv, synth_model};

#[test]
fn a_clear_slowdown_stops_the_study_at_the_first_look_and_the_paired_gate_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let fast = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let slow = serve_argv(&model, &["--kv-format", "f16"], &["--debug-step-delay-us", "20000"]);
    let plan = TestPlan {
        documents: 3,
        warmup_prompts: 1,
        arm_order: "alternate",
        rounds: 2,
        blocks: 5,
        ..TestPlan::new("sequential-test", 41)
    };
    let text = plan
        .arm("baseline", "control", &fast)
        .arm("candidate", "candidate", &slow)
        .closed("closed", "confirmation", 2, 6)
        .tail(
            "[sequential]\nlooks = [3, 5]\nmargin = 0.05\n\n[analysis]\nalpha = 0.05\n\n[[hypotheses]]\n\
             name = \"closed-throughput\"\nmetric = \"throughput_rps\"\ncell = \"closed\"\ncandidate = \"candidate\"\n\
             control = \"baseline\"\nthreshold = 0.0\n",
        )
        .render();
    let (out, stdout) = run_study_ok(tmp.path(), &text);
    assert!(stdout.contains("sequential: regressed after 3 of 5 blocks"), "{stdout}");
    let seq = read_json(&out.join("sequential.json"));
    assert_eq!(
        (seq["state"].as_str(), seq["blocks"].as_u64(), seq["reason"].as_str()),
        (Some("regressed"), Some(3), Some("decided"))
    );
    let look = &seq["looks"][0];
    assert_eq!(look["blocks"].as_u64(), Some(3));
    let h = &look["hypotheses"][0];
    assert_eq!(h["blocks"], serde_json::json!([0, 1, 2]));
    assert!(h["change"].as_f64().unwrap() > 0.5, "a 20 ms step delay slows the synthetic model a lot: {h}");
    // Only the first three blocks ran; the report and the matrix say 3 blocks.
    assert!(out.join("raw/b2/candidate").is_dir() && !out.join("raw/b3").exists());
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report");
    assert!(
        report.contains("## Sequential gate") && report.contains("**regressed** after 3 blocks of at most 5"),
        "{report}"
    );
    let replay = Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    let text_out = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{text_out}");
    assert!(text_out.contains("sequential.json: looks"), "{text_out}");

    // The paired gate: exit 2, the hypothesis named, the JSON and Markdown beside.
    let json = tmp.path().join("verdict.json");
    let md = tmp.path().join("summary.md");
    let gate = Command::new(harness_bin())
        .args(["gate", "--paired"])
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .arg("--summary-md")
        .arg(&md)
        .arg("--record-history")
        .arg(tmp.path().join("history"))
        .output()
        .expect("gate");
    let g = String::from_utf8_lossy(&gate.stdout);
    assert_eq!(gate.status.code(), Some(2), "{g}");
    assert!(g.contains("closed-throughput") && g.contains("regressed") && g.contains("gate REGRESSED"), "{g}");
    let v = read_json(&json);
    assert_eq!(
        (v["verdict"].as_str(), v["exit_code"].as_u64(), v["blocks"].as_u64(), v["cap"].as_u64()),
        (Some("regressed"), Some(2), Some(3), Some(5))
    );
    assert_eq!(v["arms"].as_array().map(Vec::len), Some(2));
    assert!(v["arms"][0]["program_sha256"].as_str().is_some_and(|s| s.len() == 64), "{v}");
    assert!(std::fs::read_to_string(&md).unwrap().contains("REGRESSED"));

    // The history store: one Parquet file per gate; a second gate appends another.
    let again = Command::new(harness_bin())
        .args(["gate", "--paired"])
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .arg("--record-history")
        .arg(tmp.path().join("history"))
        .output()
        .expect("gate");
    assert_eq!(again.status.code(), Some(2));
    let hist = Command::new(harness_bin())
        .args(["gate", "--history"])
        .arg(tmp.path().join("history"))
        .output()
        .expect("history");
    let h = String::from_utf8_lossy(&hist.stdout);
    assert!(hist.status.success(), "{h}{}", String::from_utf8_lossy(&hist.stderr));
    assert!(h.contains("gate history: 2 gates") && h.contains("closed-throughput (2 gates"), "{h}");

    // The rule simulated on this study's recorded noise (its own mean removed):
    // the table of outcomes per slowdown, the rule of its plan.
    let sim = Command::new(harness_bin())
        .args(["gate", "--draws", "200", "--simulate"])
        .arg(&out)
        .output()
        .expect("simulate");
    let s = String::from_utf8_lossy(&sim.stdout);
    assert!(sim.status.success(), "{s}{}", String::from_utf8_lossy(&sim.stderr));
    assert!(
        s.contains("3 recorded blocks from 1 studies") && s.contains("looks [3, 5]") && s.contains("mean blocks"),
        "{s}"
    );

    // A verdict rewritten to "within" (manifest resealed) is caught by replay.
    let forged = tmp.path().join("forged");
    copy_dir(&out, &forged);
    let path = forged.join("sequential.json");
    let text =
        std::fs::read_to_string(&path).unwrap().replacen("\"verdict\": \"regressed\"", "\"verdict\": \"within\"", 1);
    std::fs::write(&path, text).unwrap();
    rewrite_manifest(&forged);
    let replay = Command::new(harness_bin()).arg("replay").arg(&forged).output().expect("replay");
    let r = String::from_utf8_lossy(&replay.stdout);
    assert!(!replay.status.success(), "{r}");
    assert!(r.contains("looks[0].hypotheses[0].verdict"), "{r}");

    // Not an evidence directory: refused (2), nothing decided.
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(plain.join("results")).unwrap();
    let gate = Command::new(harness_bin()).args(["gate", "--paired"]).arg(&plain).output().expect("gate");
    let err = String::from_utf8_lossy(&gate.stderr);
    assert_eq!(gate.status.code(), Some(2), "{err}");
    assert!(err.contains("not an evidence directory"), "{err}");
}
