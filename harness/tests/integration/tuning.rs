//! A tuning study on the real engine binary (synthetic model) over real HTTP: a
//! baseline that sleeps 10 ms after every engine step (`--debug-step-delay-us`)
//! against a "slower" configuration (30 ms) and a "faster" one (no delay), over a
//! constant-rate profile of two rates in counterbalanced blocks with fresh servers.
//! The report must lead with the tuning table and recommend "faster"; "slower" must
//! not be supported; replay must pass, and a changed recommendation in
//! evidence.json must be named.

use crate::common;

use common::TestPlan;
use common::tamper::{copy_dir, rewrite_manifest};
use harness::commands::replay::{Status, replay_dir};

const TUNING_CHECK: &str = "evidence.json: tuning recommendation";

fn plan(model: &std::path::Path) -> String {
    let delay = |us: &str| common::serve_argv(model, &["--kv-format", "f16"], &["--debug-step-delay-us", us]);
    let tail = "[analysis]\nalpha = 0.1\n\n[tuning]\nbaseline = \"baseline\"\nthreshold = 0.05\n\
                selection = \"test: one slower and one faster step time around the baseline\"\n";
    TestPlan {
        output_tokens: 8,
        warmup_prompts: 1,
        blocks: 6,
        arm_order: "latin",
        cell_order: "alternate",
        ..TestPlan::new("tuning-e2e", 14)
    }
    .arm("baseline", "control", &delay("10000"))
    .arm("slower", "candidate", &delay("30000"))
    .arm("faster", "candidate", &common::serve_argv(model, &["--kv-format", "f16"], &[]))
    .tail(
        "[[cells]]\nname = \"profile\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = [2.0, 4.0]\ncount = 6\n\n",
    )
    .tail(tail)
    .render()
}

#[test]
fn a_tuning_study_recommends_the_configuration_without_the_injected_delay() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let text = plan(&model);
    std::fs::write(tmp.path().join("check.toml"), &text).unwrap();
    let check = std::process::Command::new(common::harness_bin())
        .args(["plan", "check", "check.toml"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&check.stdout);
    assert!(
        printed.contains("tuning: baseline baseline vs 2 configurations (slower, faster) over 2 cells"),
        "{printed}"
    );
    assert!(printed.contains("selection: test: one slower"), "{printed}");

    let (out, stdout) = common::run_study_ok(tmp.path(), &text);
    assert!(stdout.contains("tuning: recommended configuration: faster (against baseline, on e2e_mean"), "{stdout}");
    let ev = common::read_json(&out.join("results/evidence.json"));
    assert_eq!(ev["tuning"]["recommended"], "faster", "{}", ev["tuning"]);
    let names: Vec<&str> = ev["hypotheses"].as_array().unwrap().iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "tuning:e2e_mean:profile-r2:slower",
            "tuning:e2e_mean:profile-r2:faster",
            "tuning:e2e_mean:profile-r4:slower",
            "tuning:e2e_mean:profile-r4:faster"
        ]
    );
    for h in ev["hypotheses"].as_array().unwrap() {
        let want = if h["candidate"] == "faster" { "supported" } else { "not_supported" };
        assert_eq!(h["claim"]["claim"], want, "{h}");
    }
    let md = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    let tuning_at = md.find("## Tuning: recommended configuration").expect("tuning section");
    assert!(tuning_at < md.find("## What was run").unwrap(), "the report leads with the tuning section");
    assert!(md.contains("**Recommended configuration: faster**"), "{md}");
    assert!(md.contains("- Rate 2 req/s (profile-r2): baseline "), "{md}");
    assert!(md.contains("x faster) ["), "{md}");
    assert!(md.contains("x slower) ["), "{md}");
    assert!(md.contains("test: one slower and one faster step time"), "{md}");

    let o = replay_dir(&out).unwrap();
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    assert_eq!(o.check(TUNING_CHECK).unwrap().status, Status::Pass);

    // A recommendation changed behind a rewritten manifest is named.
    let dir = tmp.path().join("tampered");
    copy_dir(&out, &dir);
    let path = dir.join("results/evidence.json");
    let mut v = common::read_json(&path);
    v["tuning"]["recommended"] = "slower".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).unwrap();
    let c = o.check(TUNING_CHECK).unwrap();
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
    assert!(c.mismatches.iter().any(|m| m.field == "tuning.recommended"), "{}", o.render_table(10));
}
