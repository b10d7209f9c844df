//! `harness run` with `[qualification] required = true` on the real engine
//! (synthetic model): the gates run first, each arm on a fresh server, into
//! `qualification/` and `results/qualification.json`, all covered by the manifest;
//! a deliberately broken candidate (k16v8 with its value scales multiplied by 1e6,
//! as in tests/quality.rs) fails the NLL gate, is reported as not qualified, its
//! timing claim is blocked, and its timing cells still run.

use crate::common;

use std::path::Path;

use common::*;

fn plan_text(model: &Path, broken_scales: &Path) -> String {
    let engine = engine_bin();
    let f16 = serve_argv(model, &["--kv-format", "f16"], &[]);
    let b = broken_scales.display().to_string();
    let broken = serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &b], &[]);
    let reference: Vec<String> = [
        engine.display().to_string(),
        "generate".into(),
        "--model".into(),
        model.display().to_string(),
        "--kv-format".into(),
        "f16".into(),
        "--threads".into(),
        "1".into(),
        "--json".into(),
    ]
    .into();
    let plan = TestPlan { output_tokens: 4, warmup_prompts: 0, blocks: 1, ..TestPlan::new("run-qualify-test", 5) };
    plan.arm("f16", "control", &f16)
        .arm("broken", "candidate", &broken)
        .closed("closed-2", "confirmation", 2, 4)
        .tail(&format!(
            r#"[analysis]
alpha = 0.05

[[hypotheses]]
metric = "output_tokens_per_s"
cell = "closed-2"
candidate = "broken"
control = "f16"
threshold = 0.01

[qualification]
required = true
tokenizer = {tok:?}
texts = "assets/texts"
pattern = "*_gut.txt"
concurrency = 4

[qualification.nll]
documents = 4
tokens = 64

[qualification.parity]
prompts = 4
input_tokens = 16
output_tokens = 6
concurrency = 4

[qualification.parity.reference]
f16 = {reference}
"#,
            tok = model.join("tokenizer.json").display().to_string(),
            reference = toml_array(&reference),
        ))
        .render()
}

#[test]
fn run_qualifies_first_and_blocks_the_unqualified_arm() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let broken = tmp.path().join("broken-scales.json");
    scaled_scales(&model.join("scales.json"), &broken, 1e6);
    let text = plan_text(&model, &broken);
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, &text).expect("write plan");
    let out = tmp.path().join("evidence");
    let run = run_harness(&plan_path, &out);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "harness run failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("qualification: arm broken (candidate): NOT qualified"), "{stdout}");
    assert!(stdout.contains("qualification: arm f16 (control): qualified"), "{stdout}");
    check_manifest(&out, text.as_bytes());

    let q = read_json(&out.join("results/qualification.json"));
    assert_eq!(q["required"], true);
    let arm = |name: &str| q["arms"].as_array().unwrap().iter().find(|a| a["arm"] == name).cloned().expect(name);
    assert_eq!(arm("f16")["qualified"], true, "{q}");
    assert_eq!(arm("broken")["qualified"], false, "{q}");
    assert!(arm("broken")["reasons"][0].as_str().unwrap().starts_with("nll vs f16"), "{q}");
    assert!(q["parity"][0]["pass"] == true, "{q}");
    assert_eq!(q, read_json(&out.join("qualification/qualification.json")), "the same outcome in both places");
    for f in ["inputs/nll.items.jsonl", "f16/server.log", "broken/nll.responses.jsonl", "f16/parity.scores.json"] {
        assert!(out.join("qualification").join(f).is_file(), "{f}");
    }
    let record = read_json(&out.join("qualification/unit.json"));
    let listed: Vec<&str> = record["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(listed.contains(&"results/qualification.json") && listed.contains(&"qualification/f16/server.log"));

    // Before any timing: the gates' outcome is older than the first timed server.
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).expect("mtime");
    assert!(modified(&out.join("results/qualification.json")) <= modified(&out.join("raw/b0/f16/startup.json")));

    // The unqualified arm's timing still ran; its claim is blocked.
    for arm in ["f16", "broken"] {
        let outcome = read_json(&out.join(format!("raw/b0/{arm}/arm_outcome.json")));
        assert_eq!(outcome["status"], "completed", "{outcome}");
        assert_eq!(read_records(&out.join(format!("raw/b0/{arm}/closed-2.requests.jsonl"))).len(), 4);
    }
    let evidence = read_json(&out.join("results/evidence.json"));
    let claim = evidence["hypotheses"][0]["claim"].to_string();
    assert!(claim.contains("not qualified"), "{claim}");
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    assert!(report.contains("## Qualification"), "{report}");
    assert!(report.contains("arm **broken**: NOT qualified: its timing claims are blocked"), "{report}");
}
