//! The observer-effect cell pairs on the real engine binary (synthetic model): the
//! same arm and load recorded with the full recorder and with the light one (first
//! token, `[DONE]` and usage only), and sent with and without asking for token IDs.
//! The light records carry one token event and the flag, the records without IDs
//! carry none, the report compares each pair, and replay recomputes them cleanly.

use crate::common;

use common::TestPlan;
use harness::commands::replay::replay_dir;

#[test]
fn a_full_and_a_light_cell_of_the_same_load_are_compared_in_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let cell = |name: &str, extra: &str| {
        format!(
            "[[cells]]\nname = \"{name}\"\nkind = \"descriptive\"\nload = \"closed\"\nconcurrency = 2\ncount = 8\n{extra}\n"
        )
    };
    let text = TestPlan { output_tokens: 8, blocks: 0, descriptive_blocks: 2, ..TestPlan::new("observer-e2e", 15) }
        .arm("engine", "control", &common::serve_argv(&model, &["--kv-format", "f16"], &[]))
        .tail(&cell("full-c2", ""))
        .tail(&cell("light-c2", "recorder = \"light\""))
        .render();
    let (out, _) = common::run_study_ok(tmp.path(), &text);
    for block in [0, 1] {
        let light = common::read_records(&out.join(format!("raw/b{block}/engine/light-c2.requests.jsonl")));
        assert_eq!(light.len(), 8);
        for r in &light {
            assert!(r.light && r.is_valid(), "{r:?}");
            assert_eq!(r.events.iter().filter(|e| e.tokens > 0).count(), 1, "{r:?}");
            assert_eq!(r.usage.map(|u| u.completion_tokens), Some(8));
        }
        let full = common::read_records(&out.join(format!("raw/b{block}/engine/full-c2.requests.jsonl")));
        assert!(full.iter().all(|r| !r.light && r.events.iter().filter(|e| e.tokens > 0).count() == 8));
    }
    let md = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    assert!(md.contains("## Observer effect: full vs light recorder"), "{md}");
    assert!(md.contains("### full-c2 (full) vs light-c2 (light)"), "{md}");
    assert!(md.contains("| engine | E2E mean ms |"), "{md}");
    let o = replay_dir(&out).unwrap();
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
}

/// `request.token_ids = false`: the bodies vLLM bench sends (no `return_token_ids`),
/// tokens counted one per text event with the length from usage; the records, the
/// measures, replay and the vLLM export agree, and the export says how it counted.
#[test]
fn a_study_without_streamed_token_ids_counts_from_text_and_usage_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let text = TestPlan { output_tokens: 8, blocks: 0, descriptive_blocks: 1, ..TestPlan::new("no-ids", 16) }
        .arm("engine", "control", &common::serve_argv(&model, &["--kv-format", "f16"], &[]))
        .closed("c2", "descriptive", 2, 6)
        .render()
        .replace("output_tokens = 8\n", "output_tokens = 8\ntoken_ids = false\n");
    let (out, _) = common::run_study_ok(tmp.path(), &text);
    let records = common::read_records(&out.join("raw/b0/engine/c2.requests.jsonl"));
    assert_eq!(records.len(), 6);
    for r in &records {
        assert!(r.is_valid(), "{r:?}");
        assert!(r.events.iter().all(|e| e.token_ids.is_none()), "no IDs were asked for: {r:?}");
        assert_eq!(r.usage.map(|u| u.completion_tokens), Some(8));
    }
    let frozen = std::fs::read_to_string(out.join("plan.toml")).unwrap();
    assert!(frozen.contains("token_ids = false"));
    let o = replay_dir(&out).unwrap();
    assert!(o.passed, "{}", o.render_table(10));
    let export = tmp.path().join("vllm.jsonl");
    let run = std::process::Command::new(common::harness_bin())
        .arg("export")
        .arg(&out)
        .args(["--format", "vllm-bench", "--out"])
        .arg(&export)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let v: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&export).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(v["harness_token_ids"], "usage");
    assert_eq!(v["total_output_tokens"], 48);
}

/// The token-ID pair: one cell asks for `return_token_ids`, its twin does not (the
/// body vLLM bench sends); both bodies are frozen under their own keys in run.json,
/// replayed, and the report shows what asking costs.
#[test]
fn a_cell_pair_with_and_without_token_ids_is_compared_in_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let cell = |name: &str, extra: &str| {
        format!(
            "[[cells]]\nname = \"{name}\"\nkind = \"descriptive\"\nload = \"closed\"\nconcurrency = 2\ncount = 6\n{extra}\n"
        )
    };
    let text = TestPlan { output_tokens: 8, blocks: 0, descriptive_blocks: 2, ..TestPlan::new("ids-pair", 17) }
        .arm("engine", "control", &common::serve_argv(&model, &["--kv-format", "f16"], &[]))
        .tail(&cell("ids-c2", ""))
        .tail(&cell("no-ids-c2", "token_ids = false"))
        .render();
    let (out, _) = common::run_study_ok(tmp.path(), &text);
    for block in [0, 1] {
        let rec = |c: &str| common::read_records(&out.join(format!("raw/b{block}/engine/{c}.requests.jsonl")));
        assert!(rec("no-ids-c2").iter().all(|r| r.is_valid() && r.events.iter().all(|e| e.token_ids.is_none())));
        assert!(rec("ids-c2").iter().all(|r| r.is_valid() && r.events.iter().any(|e| e.token_ids.is_some())));
    }
    let run = common::read_json(&out.join("run.json"));
    let keys: Vec<&str> = run["request_body_sha256"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["completions", "completions-no-token-ids"]);
    let md = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    assert!(md.contains("## Observer effect: asking for token IDs"), "{md}");
    assert!(md.contains("### ids-c2 (with IDs) vs no-ids-c2 (without)"), "{md}");
    assert!(!md.contains("full vs light recorder"), "{md}");
    let o = replay_dir(&out).unwrap();
    assert!(o.passed, "{}", o.render_table(10));
}
