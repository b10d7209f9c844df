//! Arms that fail to start explain themselves, and arms behind a key, on the real
//! engine binary over HTTP: a mistyped engine flag (`--thread 1`) shows clap's own
//! message on stderr, the study stops after the arm's `max_start_failures`, and a
//! resume runs the failed units again (stopping again on the same typo; completing,
//! and replaying clean, once the cause is fixed); `plan check --probe` names the good and the bad arm; an arm whose server
//! requires an API key fails wholesale (exit 2) without `api_key_env` and passes
//! with it, and the key never reaches the evidence.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn typo_plan(model: &Path, blocks: u32) -> String {
    let good = serve_argv(model, &["--kv-format", "f16"], &[]);
    let bad = serve_argv(model, &["--kv-format", "f16"], &["--thread", "1"]);
    let plan = TestPlan { warmup_prompts: 0, blocks, ..TestPlan::new("typo", 3) };
    plan.arm("good", "control", &good).arm("bad", "candidate", &bad).closed("c", "confirmation", 1, 2).render()
}

#[test]
fn a_mistyped_engine_flag_is_explained_and_stops_the_study_after_max_start_failures() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, typo_plan(&model, 3)).expect("write plan");
    let out = tmp.path().join("evidence");
    let run = run_harness(&plan, &out);
    let (stdout, stderr) = text(&run);
    assert_eq!(run.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("unexpected argument '--thread'"), "clap's message on stderr:\n{stderr}");
    assert!(stderr.contains("raw/b0/bad/server.log"), "the log's path on stderr:\n{stderr}");
    assert!(stderr.contains("max_start_failures is 2") && stderr.contains("--resume"), "{stderr}");
    assert!(!stdout.contains("study complete"), "{stdout}");
    let outcome = read_json(&out.join("raw/b0/bad/arm_outcome.json"));
    assert_eq!(outcome["status"], "start_failed");
    assert!(outcome["detail"].as_str().unwrap_or("").contains("unexpected argument '--thread'"), "{outcome}");
    // Stopped after block 1's failure: block 2 never ran, the study is unfinished.
    assert!(out.join("raw/b1/bad/unit.json").is_file() && !out.join("raw/b2").exists());
    assert!(!out.join("manifest.json").exists());
    assert_eq!(read_json(&out.join("run.json"))["sessions"][0]["state"], "stopped");

    // Resumable: the units whose server failed to start measured nothing, so they are
    // moved aside and run again (the cause may be fixed by now). Here the typo is in
    // the plan itself: both fail again and the study stops again.
    let resumed = resume(&plan, &out);
    let (stdout, stderr) = text(&resumed);
    assert_eq!(resumed.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("resume: discarded b0/bad") && stdout.contains("resume: discarded b1/bad"), "{stdout}");
    assert!(stdout.contains("resume: b0/good verified"), "{stdout}");
    assert!(stderr.contains("max_start_failures is 2"), "{stderr}");
    assert!(out.join("discarded/1-b0-bad/raw/b0/bad/unit.json").is_file(), "moved aside with its record");
    assert!(!out.join("manifest.json").exists() && !out.join("raw/b2").exists());
    let sessions = read_json(&out.join("run.json"))["sessions"].clone();
    assert_eq!((sessions[0]["state"].as_str(), sessions[1]["state"].as_str()), (Some("stopped"), Some("stopped")));
    assert_eq!(sessions[0]["units_run"], serde_json::json!(["b0/good", "b1/good"]), "{sessions}");
    assert_eq!(sessions[1]["units_run"], serde_json::json!(["b0/bad", "b1/bad"]), "{sessions}");
}

fn resume(plan: &Path, out: &Path) -> Output {
    Command::new(harness_bin())
        .args(["run", "--quiet", "--resume"])
        .arg(out)
        .arg(plan)
        .current_dir(workspace())
        .output()
        .expect("resume")
}

#[test]
fn a_start_failure_fixed_before_resume_is_run_again_and_the_study_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    // The second arm's model is not there yet: its server cannot start.
    let later = tmp.path().join("later-model");
    let good = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let late = serve_argv(&later, &["--kv-format", "f16"], &[]);
    let text_plan = TestPlan { warmup_prompts: 0, blocks: 3, ..TestPlan::new("late", 5) }
        .arm("good", "control", &good)
        .arm("late", "candidate", &late)
        .closed("c", "confirmation", 1, 2)
        .render();
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, &text_plan).expect("write plan");
    let out = tmp.path().join("evidence");
    let run = run_harness(&plan, &out);
    let (stdout, stderr) = text(&run);
    assert_eq!(run.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(read_json(&out.join("raw/b1/late/unit.json"))["status"], "start_failed");
    assert!(!out.join("raw/b2").exists(), "stopped after max_start_failures");

    // The cause is fixed outside the plan; the resumed study runs the failed units.
    std::os::unix::fs::symlink(&model, &later).expect("the model in place");
    let resumed = resume(&plan, &out);
    let (stdout, stderr) = text(&resumed);
    assert!(resumed.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("resume: discarded b0/late") && stdout.contains("resume: discarded b1/late"), "{stdout}");
    assert!(stdout.contains("study complete: 6 server invocations, 0 failed requests"), "{stdout}");
    check_manifest(&out, text_plan.as_bytes());
    for unit in ["b0/late", "b1/late", "b2/late"] {
        let rec = read_json(&out.join(format!("raw/{unit}/unit.json")));
        assert_eq!((rec["status"].as_str(), rec["session"].as_u64()), (Some("completed"), Some(1)), "{unit}");
        assert_eq!(read_records(&out.join(format!("raw/{unit}/c.requests.jsonl"))).len(), 2, "{unit}");
    }
    let sessions = read_json(&out.join("run.json"))["sessions"].clone();
    assert_eq!(sessions[0]["units_run"], serde_json::json!(["b0/good", "b1/good"]), "{sessions}");
    assert_eq!(sessions[1]["units_run"], serde_json::json!(["b0/late", "b1/late", "b2/good", "b2/late"]));
    let discard = read_json(&out.join("discarded/1-b0-late/discard.json"));
    let reason = discard["discard"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("failed to start (start_failed) in session 0"), "{discard}");
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    assert!(report.contains("discarded b0/late"), "{report}");
    let replay = Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    assert!(replay.status.success(), "replay:\n{}", text(&replay).0);
}

#[test]
fn plan_check_probe_starts_each_arm_once_and_names_the_failing_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, typo_plan(&model, 1)).expect("write plan");
    let probe = probe_plan(&plan, tmp.path());
    let (stdout, stderr) = text(&probe);
    assert_eq!(probe.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("probe: arm good (spawn): ok"), "{stdout}");
    assert!(stdout.contains("probe: arm bad (spawn): FAILED: the server exited before it was healthy"), "{stdout}");
    assert!(stderr.contains("unexpected argument '--thread'") && stderr.contains("server.log"), "{stderr}");

    let good = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let only_good = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new("good", 3) }
        .arm("good", "control", &good)
        .closed("c", "confirmation", 1, 2)
        .render();
    std::fs::write(&plan, only_good).expect("write plan");
    let probe = probe_plan(&plan, tmp.path());
    let (stdout, stderr) = text(&probe);
    assert_eq!(probe.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("probe: every arm started, answered its health path, passed its identity checks and served the study's request"),
        "{stdout}"
    );
}

/// An engine that requires `Authorization: Bearer $HARNESS_TEST_API_KEY` (read by a
/// shell from the harness's environment, so the plan holds no key).
fn keyed_plan(model: &Path, name: &str, api_key_env: Option<&str>) -> String {
    let mut argv: Vec<String> =
        ["/bin/sh", "-c", "exec \"$0\" \"$@\" --api-key \"$HARNESS_TEST_API_KEY\""].map(String::from).into();
    argv.extend(serve_argv(model, &["--kv-format", "f16"], &[]));
    let mut plan = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new(name, 3) }.arm("keyed", "control", &argv);
    if let Some(var) = api_key_env {
        plan.arms[0].push_str(&format!("api_key_env = {var:?}\nheaders = {{ \"X-Harness-Test\" = \"1\" }}\n"));
    }
    plan.closed("c", "confirmation", 2, 4).render()
}

fn run_with_key(plan: &Path, out: &Path, key: Option<&str>) -> Output {
    let mut cmd = Command::new(harness_bin());
    cmd.args(["run", "--quiet", "--out"]).arg(out).arg(plan).current_dir(workspace());
    match key {
        Some(k) => cmd.env("HARNESS_TEST_API_KEY", k),
        None => cmd.env_remove("HARNESS_TEST_API_KEY"),
    };
    cmd.output().expect("run harness")
}

#[test]
fn an_arm_behind_a_key_fails_wholesale_without_it_and_passes_with_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    let key = format!("sk-harness-test-{nanos:x}");

    let without = tmp.path().join("without.toml");
    std::fs::write(&without, keyed_plan(&model, "nokey", None)).expect("write plan");
    let out_without = tmp.path().join("ev-without");
    let run = run_with_key(&without, &out_without, Some(&key));
    let (stdout, stderr) = text(&run);
    assert_eq!(run.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("error rate: block 0 arm keyed cell c: 4 of 4 requests failed"), "{stdout}");
    assert!(out_without.join("manifest.json").is_file(), "the study is still written");
    let records = read_records(&out_without.join("raw/b0/keyed/c.requests.jsonl"));
    assert!(records.iter().all(|r| r.status == Some(401)), "{records:?}");

    let with = tmp.path().join("with.toml");
    std::fs::write(&with, keyed_plan(&model, "withkey", Some("HARNESS_TEST_API_KEY"))).expect("write plan");
    let out_with = tmp.path().join("ev-with");
    let run = run_with_key(&with, &out_with, Some(&key));
    let (stdout, stderr) = text(&run);
    assert_eq!(run.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("study complete: 1 server invocations, 0 failed requests"), "{stdout}");
    let replay = Command::new(harness_bin()).arg("replay").arg(&out_with).output().expect("replay");
    assert!(replay.status.success(), "replay:\n{}", text(&replay).0);

    for dir in [&out_without, &out_with] {
        for rel in files(dir) {
            let bytes = std::fs::read(dir.join(&rel)).expect("read evidence file");
            let found = bytes.windows(key.len()).any(|w| w == key.as_bytes());
            assert!(!found, "the key appears in {}", dir.join(rel).display());
        }
    }

    // The variable unset: bad input, refused before anything is written.
    let out_unset = tmp.path().join("ev-unset");
    let run = run_with_key(&with, &out_unset, None);
    let (stdout, stderr) = text(&run);
    assert_eq!(run.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("HARNESS_TEST_API_KEY") && stderr.contains("not set"), "{stderr}");
    assert!(!out_unset.exists());
}
