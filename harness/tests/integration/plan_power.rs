//! `harness plan power` and the plan warnings, on synthetic evidence written in-test
//! by `harness::fixtures::synth` (no server runs): an A/A study (every arm at the same
//! speed, differing only in their random draws) gives the noise; the CLI's SDs are
//! checked against ones computed here from `results/evidence.json`, the curve for
//! monotonicity, and the JSON for the recorded seed and draws. Also: a 4-block study
//! whose Holm family can never reach alpha gets the warning in `harness plan check`
//! and in `report.md`, and the 6-block one does not.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use harness::fixtures::synth::{SynthSpec, generate};
use serde_json::Value;

fn aa_spec(blocks: u32) -> SynthSpec {
    SynthSpec {
        study: format!("synth-aa-{blocks}"),
        blocks,
        failures: false,
        speeds_percent: [100, 100, 100],
        ..SynthSpec::small()
    }
}

fn harness(args: &[&str], dir: &Path) -> Output {
    Command::new(common::harness_bin()).args(args).current_dir(dir).output().expect("run harness")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Sample SD (n - 1) of ln(candidate / control) over a hypothesis's blocks in evidence.json.
fn sd_from_evidence(evidence: &Value, name: &str) -> (f64, usize) {
    let h = evidence["hypotheses"].as_array().unwrap().iter().find(|h| h["name"] == name).unwrap();
    let x: Vec<f64> = h["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["candidate"].as_f64().unwrap() / b["control"].as_f64().unwrap()).ln())
        .collect();
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (x.len() - 1) as f64;
    (var.sqrt(), x.len())
}

#[test]
fn plan_power_from_an_aa_study() {
    let tmp = tempfile::tempdir().unwrap();
    let aa = tmp.path().join("aa");
    generate(&aa, &aa_spec(6)).unwrap();
    let json = tmp.path().join("power.json");
    let out = harness(
        &[
            "plan",
            "power",
            "aa/plan.toml",
            "--noise",
            "aa",
            "--json",
            "power.json",
            "--target-effect",
            "0.05",
            "--draws",
            "1500",
        ],
        tmp.path(),
    );
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    for want in [
        "6 confirmation blocks, a Holm family of 3 at alpha 0.05",
        "blocks are independent",
        "additive on the log scale",
        "seed 7 and 1500 draws",
        "needs at least 6 wins of 6",
        "smallest effect supported with 80% probability at the estimated SD",
        "smallest effect supported with 95% probability at the SD's 90% upper bound",
        "blocks for +5.0% with 80% probability",
    ] {
        assert!(printed.contains(want), "missing {want:?} in:\n{printed}");
    }
    let report: Value = common::read_json(&json);
    assert_eq!(report["format"], "harness-power/1");
    assert_eq!((report["seed"].as_u64(), report["draws"].as_u64()), (Some(7), Some(1500)));
    let evidence = common::read_json(&aa.join("results/evidence.json"));
    let hyps = report["hypotheses"].as_array().unwrap();
    assert_eq!(hyps.len(), 3);
    for h in hyps {
        let name = h["name"].as_str().unwrap();
        // Each hypothesis takes the noise of its own pair (same name) in the A/A study.
        assert_eq!(h["noise"]["source"], name);
        let (sd, blocks) = sd_from_evidence(&evidence, name);
        let got = h["noise"]["sd"].as_f64().unwrap();
        assert!(sd > 0.0 && (got - sd).abs() < 1e-12, "{name}: {got} vs {sd}");
        assert_eq!(h["noise"]["blocks"].as_array().unwrap().len(), blocks);
        assert!(h["noise"]["sd_upper"].as_f64().unwrap() > got);
        assert_eq!(h["level"].as_f64(), Some(0.05 / 3.0));
        let curve = h["curve"].as_array().unwrap();
        assert!(curve.iter().any(|p| p["effect"] == 0.05), "the target effect is on the curve");
        for key in ["p_win", "sign_test_exact", "rule_simulated"] {
            let ys: Vec<f64> = curve.iter().map(|p| p[key].as_f64().unwrap()).collect();
            assert!(ys.windows(2).all(|w| w[0] <= w[1]), "{name} {key} not monotone: {ys:?}");
        }
        // The full rule adds the median screen to the sign test: never more power,
        // beyond Monte-Carlo error (the others-null Holm bonus is below it here).
        for p in curve {
            let (exact, sim, se) = (
                p["sign_test_exact"].as_f64().unwrap(),
                p["rule_simulated"].as_f64().unwrap(),
                p["rule_se"].as_f64().unwrap(),
            );
            assert!(sim <= exact + 4.0 * se + 0.01, "{name}: {p}");
        }
        let d = &h["detectable"].as_array().unwrap()[0];
        assert_eq!(d["probability"].as_f64(), Some(0.8));
        assert!(d["sign_test_exact"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn plan_power_names_a_missing_noise_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let aa = tmp.path().join("aa");
    generate(&aa, &aa_spec(6)).unwrap();
    let plan = std::fs::read_to_string(aa.join("plan.toml")).unwrap().replace("\"e2e_p95_intended\"", "\"ttft_p95\"");
    std::fs::write(tmp.path().join("ttft.toml"), plan).unwrap();
    let out = harness(&["plan", "power", "ttft.toml", "--noise", "aa", "--draws", "10"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("hypothesis near-e2e (ttft_p95 in open-near): the noise evidence has no pair on ttft_p95")
    );
}

#[test]
fn a_family_that_can_never_reach_alpha_is_warned_in_check_and_report() {
    let tmp = tempfile::tempdir().unwrap();
    let (four, six) = (tmp.path().join("four"), tmp.path().join("six"));
    generate(&four, &aa_spec(4)).unwrap();
    generate(&six, &aa_spec(6)).unwrap();
    let want = "blocks.count: the Holm family of 3 hypotheses can never reach alpha 0.05 with 4 blocks";
    let report = std::fs::read_to_string(four.join("results/report.md")).unwrap();
    assert!(report.contains("## Plan warnings") && report.contains(want), "{report}");
    let check = harness(&["plan", "check", "four/plan.toml"], tmp.path());
    assert!(text(&check).contains(&format!("warning: {want}")), "{}", text(&check));
    assert!(text(&check).contains("needs at least 6 blocks"));
    // 3 x 2^-6 = 0.047 <= 0.05: no warning.
    let report = std::fs::read_to_string(six.join("results/report.md")).unwrap();
    assert!(!report.contains("## Plan warnings"), "{report}");
    assert!(!text(&harness(&["plan", "check", "six/plan.toml"], tmp.path())).contains("warning: blocks.count"));
}
