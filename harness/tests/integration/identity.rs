//! Arm identity checks end to end, over real HTTP: an engine arm named k16v8 but
//! started with f16 stops the study before it is timed (exit 2, the failed check
//! named, nothing of it measured); truthful claims pass in every block, show in
//! report.md, and `harness replay` judges them again (and catches a forged
//! verdict); `plan check --probe` runs the same checks, here against a vLLM-like
//! server that ignored the attention backend it was asked for.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::tamper::{copy_dir, reseal_unit, rewrite_manifest};
use common::*;

fn with_identity(mut plan: TestPlan, identity: &str) -> TestPlan {
    let last = plan.arms.last_mut().expect("an arm");
    last.push_str(&format!("identity = {identity}\n"));
    plan
}

fn engine_plan(model: &Path, name: &str, claim: &str) -> String {
    let f16 = serve_argv(model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { warmup_prompts: 1, blocks: 2, ..TestPlan::new("identity", 5) }.arm("f16", "control", &f16);
    let plan = with_identity(plan, r#"{ preset = "engine", kv_format = "f16" }"#);
    let scales = model.join("scales.json").display().to_string();
    let k16v8 = serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &scales], &[]);
    // The candidate's argv: k16v8 as its name says, or f16 under that name.
    let argv = if name == "k16v8-true" { k16v8 } else { f16 };
    let plan = with_identity(plan.arm("k16v8", "candidate", &argv), claim);
    plan.closed("c", "confirmation", 2, 4).render()
}

#[test]
fn an_arm_named_k16v8_started_with_f16_stops_the_study_before_it_is_timed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, engine_plan(&model, "mislabelled", r#"{ preset = "engine", kv_format = "k16v8" }"#))
        .expect("write plan");
    let out = tmp.path().join("evidence");
    let run = run_harness(&plan, &out);
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert_eq!(run.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("block 0 arm k16v8: the server is not what the arm claims"), "{stderr}");
    assert!(stderr.contains("startup line kv_format = k16v8") && stderr.contains("got f16"), "{stderr}");
    let unit = out.join("raw/b0/k16v8");
    let outcome = read_json(&unit.join("arm_outcome.json"));
    assert_eq!(outcome["status"], "identity_failed", "{outcome}");
    assert!(outcome["cells"].as_array().unwrap().iter().all(|c| c["status"] == "not_run"), "{outcome}");
    // Never warmed up or timed; the control before it in block 0 was.
    assert!(!unit.join("warmup.json").exists() && !unit.join("c.requests.jsonl").exists());
    assert!(out.join("raw/b0/f16/c.requests.jsonl").is_file());
    let startup = read_json(&unit.join("startup.json"));
    let checks = startup["identity_checks"].as_array().expect("verdicts recorded");
    let failed: Vec<_> = checks.iter().filter(|c| c["ok"] == false).collect();
    assert_eq!(failed.len(), 1, "{checks:#?}");
    assert_eq!((failed[0]["source"].as_str(), failed[0]["found"].as_str()), (Some("plan"), Some("f16")));
    assert!(startup["identity"]["log_bytes"].as_u64().unwrap() > 0, "{startup}");
    // Stopped: block 1 never ran, no manifest, the session says so.
    assert!(!out.join("raw/b1").exists() && !out.join("manifest.json").exists());
    assert_eq!(read_json(&out.join("run.json"))["sessions"][0]["state"], "stopped");

    // probe says the same before any study.
    let probe = probe_plan(&plan, tmp.path());
    let (stdout, stderr) = (String::from_utf8_lossy(&probe.stdout), String::from_utf8_lossy(&probe.stderr));
    assert_eq!(probe.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("probe: arm f16 (spawn): ok") && stdout.contains("identity checks passed"), "{stdout}");
    assert!(stdout.contains("probe: arm k16v8 (spawn): FAILED: arm k16v8 is not what it claims (1 identity check(s) failed): engine_startup_field (startup line kv_format = k16v8, from plan): got f16"), "{stdout}");
    assert!(stderr.contains("got f16"), "{stderr}");
}

#[test]
fn truthful_claims_pass_in_every_block_show_in_the_report_and_replay_judges_them_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let claim = r#"{ preset = "engine", kv_format = "k16v8", served_model = "synth", log_has = ["ready"] }"#;
    let (out, _) = run_study_ok(tmp.path(), &engine_plan(&model, "k16v8-true", claim));
    for b in 0..2 {
        let s = read_json(&out.join(format!("raw/b{b}/k16v8/startup.json")));
        let checks = s["identity_checks"].as_array().expect("verdicts");
        assert!(checks.iter().all(|c| c["ok"] == true), "{checks:#?}");
        let sources: Vec<_> = checks.iter().filter_map(|c| c["source"].as_str()).collect();
        assert!(sources.contains(&"argv --kv-format") && sources.contains(&"preset engine"), "{sources:?}");
    }
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report");
    assert!(report.contains("identity checks in 2 server start(s): all passed"), "{report}");
    let replay = Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{text}");
    assert!(text.contains("arm identity"), "{text}");

    // A forged verdict (a failed check recorded as passed), re-sealed: replay
    // judges the check again from the recorded observations.
    let forged = tmp.path().join("forged");
    copy_dir(&out, &forged);
    let rel = "raw/b1/k16v8/startup.json";
    let mut s = read_json(&forged.join(rel));
    s["identity"]["models"]["data"][0]["id"] = "other".into();
    std::fs::write(forged.join(rel), serde_json::to_vec_pretty(&s).unwrap()).unwrap();
    reseal_unit(&forged, "raw/b1/k16v8/unit.json");
    rewrite_manifest(&forged);
    let replay = Command::new(harness_bin()).arg("replay").arg(&forged).output().expect("replay");
    let text = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(2), "{text}");
    assert!(text.contains("arm identity") && text.contains("identity_checks["), "{text}");

    // A server log cut shorter than the checks read (re-sealed): named, not re-judged.
    let cut = tmp.path().join("cut");
    copy_dir(&out, &cut);
    std::fs::write(cut.join("raw/b0/k16v8/server.log"), b"").unwrap();
    reseal_unit(&cut, "raw/b0/k16v8/unit.json");
    rewrite_manifest(&cut);
    let replay = Command::new(harness_bin()).arg("replay").arg(&cut).output().expect("replay");
    let text = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(2), "{text}");
    assert!(text.contains("raw/b0/k16v8/server.log") && text.contains("fewer than the"), "{text}");
}

#[test]
fn probe_catches_a_vllm_like_server_that_ignored_its_attention_backend() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_vllm.py").display().to_string();
    let argv = |backend: &str| -> Vec<String> {
        ["python3", &fake, "m", "--served-model-name", "{model}", "--host", "{host}", "--port", "{port}"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--max-model-len".into(), "2048".into(), "--attention-backend".into(), backend.into()])
            .collect()
    };
    let vllm = r#"{ preset = "vllm", version = "0.34" }"#;
    let plan = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new("fake-vllm", 5) };
    let plan = with_identity(plan.arm("fa", "control", &argv("FLASH_ATTN")), vllm);
    let plan = with_identity(plan.arm("flashinfer", "candidate", &argv("FLASHINFER")), vllm);
    let mut text = plan.closed("c", "confirmation", 1, 1).render();
    // The candidate's server ignores what it was asked for (as vLLM 0.34 ignores
    // VLLM_ATTENTION_BACKEND), saying so in its log.
    text = text.replacen(
        "[[arms]]\nname = \"flashinfer\"",
        "[[arms]]\nname = \"flashinfer\"\nenv = { FAKE_VLLM_IGNORES_BACKEND = \"1\" }",
        1,
    );
    let path = tmp.path().join("plan.toml");
    std::fs::write(&path, &text).unwrap();
    let probe = probe_plan(&path, tmp.path());
    let (stdout, stderr) = (String::from_utf8_lossy(&probe.stdout), String::from_utf8_lossy(&probe.stderr));
    assert_eq!(probe.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("probe: arm fa (spawn): ok") && stdout.contains("identity checks passed"), "{stdout}");
    // The study's own body, streamed once: 16 token IDs and the usage vLLM sends.
    assert!(
        stdout.contains("one streamed request with the study's body: 16 prompt + 6 output tokens (token IDs streamed)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("probe: arm flashinfer (spawn): FAILED: arm flashinfer is not what it claims (2 identity check(s) failed): log_lacks"),
        "{stdout}"
    );
    let want = "log_has (the log has \"Using FLASHINFER attention backend\", from argv --attention-backend): got no \
                such line";
    assert!(stderr.contains(want), "{stderr}");
    assert!(stderr.contains("Unknown vLLM environment variable detected"), "{stderr}");
}

#[test]
fn probe_sends_the_studys_own_request_and_fails_an_arm_that_refuses_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    // 16 prompt + 6 output tokens do not fit a context of 16: the server is itself,
    // but it cannot serve the study's requests.
    let mut short = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let at = short.iter().position(|a| a == "--max-model-len").unwrap();
    short[at + 1] = "16".into();
    let plan = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new("short", 5) };
    let plan = with_identity(plan.arm("short", "control", &short), r#"{ preset = "engine" }"#);
    let path = tmp.path().join("plan.toml");
    std::fs::write(&path, plan.closed("c", "confirmation", 1, 1).render()).unwrap();
    let probe = probe_plan(&path, tmp.path());
    let (stdout, stderr) = (String::from_utf8_lossy(&probe.stdout), String::from_utf8_lossy(&probe.stderr));
    assert_eq!(probe.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let want = "probe: arm short (spawn): FAILED: test request: the study's request body (panel entry 0) failed: \
                HttpStatus { status: 400";
    assert!(stdout.contains(want), "{stdout}");
}
