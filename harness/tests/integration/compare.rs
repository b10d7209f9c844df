//! `harness compare` end to end on the real engine binary over real HTTP, with a
//! synthetic model: engine against engine passes parity and yields the ladder table
//! with a noise band beside every ratio, all evidence under a manifest; an engine
//! against an engine with different weights fails parity, names the prompt and the
//! first differing position, and reports no speed at all. Tiny ladders (1 and 2) so
//! each runs in seconds. No timed assertions.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::plan::compare_plan;
use common::{check_manifest, read_records, synth_model};
use harness::commands::compare::{CompareArgs, Measure, run_blocking};

/// A copy of a synthetic model with the final RMSNorm weight negated. Random-weight
/// models with tied embeddings echo the last prompt token whatever their seed; with
/// the sign flipped, greedy decoding picks other tokens from the first position.
fn negated_final_norm(model: &Path, out: &Path) -> PathBuf {
    std::fs::create_dir_all(out).unwrap();
    for e in std::fs::read_dir(model).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, out.join(p.file_name().unwrap())).unwrap();
        }
    }
    let path = out.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let t = &header["model.norm.weight"];
    assert!(matches!(t["dtype"].as_str(), Some("BF16" | "F16")), "{t}");
    let (start, end) =
        (t["data_offsets"][0].as_u64().unwrap() as usize, t["data_offsets"][1].as_u64().unwrap() as usize);
    for i in (8 + n + start..8 + n + end).step_by(2) {
        bytes[i + 1] ^= 0x80; // the sign bit of a little-endian 16-bit float
    }
    std::fs::write(&path, bytes).unwrap();
    out.to_path_buf()
}

#[test]
fn engine_against_itself_passes_parity_and_gives_the_ladder_with_a_noise_band() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    let text = compare_plan("cmp-same", &model, &model);
    std::fs::write(&plan, &text).unwrap();
    let out = tmp.path().join("evidence");
    let args = CompareArgs { plan, out: Some(out.clone()), force: false, quiet: true };
    let outcome = run_blocking(args).expect("compare runs");
    let r = &outcome.report;
    assert!(outcome.parity_passed(), "{}", outcome.markdown());
    assert_eq!(r.status, harness::evidence::CompareStatus::Complete);
    assert!(r.parity.mismatches.is_empty() && r.parity.prefix_tokens.is_none());
    assert_eq!(outcome.failed_requests(), 0, "{}", outcome.markdown());
    // Parity (2) + noise A, A' (2) + 2 rounds x 2 arms: 8 fresh servers.
    let phases: Vec<&str> = r.units.iter().map(|u| u.phase.as_str()).collect();
    assert_eq!(phases, ["parity", "parity", "noise", "noise", "round", "round", "round", "round"]);
    let rounds: Vec<(u32, &str)> = r.units[4..].iter().map(|u| (u.round, u.arm.as_str())).collect();
    assert_eq!(rounds, [(0, "cand"), (0, "ref"), (1, "ref"), (1, "cand")], "arm order alternates");
    for u in &r.units {
        assert!(u.startup_s.is_some_and(|s| s > 0.0) && u.peak_rss_bytes.is_some_and(|b| b > 0), "{u:?}");
        assert_eq!(u.status, harness::evidence::UnitStatus::Completed);
    }
    // Every cell measure and both server measures, each with a band and two round ratios.
    assert_eq!(r.rows.len(), 2 * Measure::CELL.len() + Measure::SERVER.len());
    for row in &r.rows {
        assert_eq!(row.rounds.len(), 2, "{row:?}");
        assert_eq!(row.noise_ratios.len(), 1, "{row:?}");
        assert!(row.noise_band.is_some() && row.ratio_median.is_some(), "{row:?}");
        assert!(!row.verdict.starts_with("blocked") && !row.verdict.starts_with("no "), "{row:?}");
    }
    let c2 = r.rows.iter().find(|x| x.key == "c2" && x.measure == Measure::OutputTokensPerS).unwrap();
    assert_eq!(c2.concurrency, Some(2));
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    for want in ["## 1. Parity: PASS", "## 2. Noise band, measured before any delta", "| 2 | output tok/s |", "±"] {
        assert!(md.contains(want), "{want:?} in\n{md}");
    }
    // Raw evidence: parity answers, noise and round records, memory samples.
    let parity = std::fs::read_to_string(out.join("raw/parity/ref/parity.jsonl")).unwrap();
    assert_eq!(parity.lines().count(), 4);
    for (dir, arm) in [("raw/noise0/ref.a", "ref.a"), ("raw/noise0/ref.b", "ref.b"), ("raw/b1/cand", "cand")] {
        let recs = read_records(&out.join(dir).join("c2.requests.jsonl"));
        assert_eq!(recs.len(), 4);
        assert!(recs.iter().all(|x| x.is_valid() && x.arm == arm), "{dir}");
        assert!(out.join(dir).join("startup.json").is_file() && out.join(dir).join("unit.json").is_file());
        assert!(out.join(dir).join("receipts.jsonl").is_file(), "{dir}: engine receipts kept");
    }
    check_manifest(&out, text.as_bytes());
}

#[test]
fn different_weights_fail_parity_name_the_difference_and_report_no_speed() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let other = negated_final_norm(&model, &tmp.path().join("other"));
    let plan = tmp.path().join("plan.toml");
    let text = compare_plan("cmp-differ", &other, &model);
    std::fs::write(&plan, &text).unwrap();
    let out = tmp.path().join("evidence");
    // Through the CLI: it prints the table and exits 2.
    let cli = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["compare", "--quiet", "--out"])
        .arg(&out)
        .arg(&plan)
        .output()
        .expect("run harness compare");
    let stdout = String::from_utf8_lossy(&cli.stdout);
    assert_eq!(cli.status.code(), Some(2), "{stdout}\n{}", String::from_utf8_lossy(&cli.stderr));
    assert!(stdout.contains("## 1. Parity: FAIL") && stdout.contains("no speed is reported"), "{stdout}");
    assert!(!stdout.contains("Noise band") && !stdout.contains("tok/s"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    assert_eq!(v["status"], "parity_failed");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(0), "no ratios");
    assert_eq!(v["observations"].as_array().map(Vec::len), Some(0), "no speed measured");
    let mismatches = v["parity"]["mismatches"].as_array().expect("mismatches");
    assert!(!mismatches.is_empty());
    let m = &mismatches[0];
    assert!(m["prompt"].is_u64() && m["first_difference"].is_u64(), "{m}");
    assert!(!m["reference_window"].as_array().unwrap().is_empty(), "{m}");
    assert!(!m["candidate_window"].as_array().unwrap().is_empty(), "{m}");
    assert!(!out.join("raw/noise0").exists() && !out.join("raw/b0").exists(), "nothing timed after a parity failure");
    check_manifest(&out, text.as_bytes());
}
