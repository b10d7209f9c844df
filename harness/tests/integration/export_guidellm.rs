//! `harness export --format guidellm` end to end: a study on the real engine
//! (synthetic model) over real HTTP with a closed-loop cell and a constant-rate
//! cell; the report loads in guidellm's own report model and every exported metric
//! equals what guidellm's `GenerativeMetrics.compile` computes from the exported
//! per-request timings (harness/tests/reference/guidellm_check.py; scripts/test
//! installs guidellm). No timed assertions.

use crate::common;

use common::*;

#[test]
fn a_study_exports_a_guidellm_report_that_guidellm_loads_and_recomputes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { prompt_tokens: 24, documents: 3, warmup_prompts: 2, blocks: 1, ..TestPlan::new("gdl", 3) };
    let text = plan
        .arm("f16", "control", &argv)
        .closed("closed-2", "confirmation", 2, 6)
        .tail("[[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 25.0\ncount = 5\n")
        .render();
    let (out, _) = run_study_ok(tmp.path(), &text);

    let report_path = tmp.path().join("benchmarks.json");
    let run = std::process::Command::new(harness_bin())
        .arg("export")
        .arg(&out)
        .args(["--format", "guidellm", "--out"])
        .arg(&report_path)
        .output()
        .expect("harness export");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report = read_json(&report_path);
    let benches = report["benchmarks"].as_array().expect("benchmarks");
    assert_eq!(benches.len(), 2);
    assert_eq!(report["config"]["spec"]["profile"]["kind"], "replay", "mixed loads: {}", report["config"]);
    for (b, cell) in benches.iter().zip(["closed-2", "c"]) {
        let s = read_json(&out.join(format!("results/cells/b0-f16-{cell}.summary.json")));
        assert_eq!(b["metrics"]["request_totals"]["successful"], s["completed"], "{cell}");
        // guidellm's median and ours are both the lower nearest rank of E2E = [DONE] - send.
        let median_ms = b["metrics"]["request_latency"]["successful"]["median"].as_f64().unwrap() * 1e3;
        assert!((median_ms - s["e2e_p50_ms"].as_f64().unwrap()).abs() < 1e-3, "{cell}: {median_ms} {s}");
    }
    assert_eq!(benches[0]["config"]["strategy"], serde_json::json!({"type_": "concurrent", "streams": 2}));
    assert_eq!(benches[1]["config"]["strategy"], serde_json::json!({"type_": "constant", "rate": 25.0}));

    let script = workspace().join("harness/tests/reference/guidellm_check.py");
    let check = std::process::Command::new("python3").arg(&script).arg(&report_path).output().expect("python3");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "guidellm check (run scripts/test):\n{stdout}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!((v["benchmarks"].as_u64(), v["requests"].as_u64()), (Some(2), Some(11)), "{v}");
}
