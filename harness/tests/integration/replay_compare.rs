//! `harness replay` on evidence written by `harness compare` (engine against engine
//! on the synthetic model, a tiny ladder, seconds): it replays clean through the
//! CLI, the run-specific checks (unit records, sessions, discarded) are skipped as
//! the compare layout, and the compare check recomputes compare.json. A changed
//! observation, a changed parity answer, a changed cell summary and a deleted
//! request file, each behind a manifest rewritten to match, are named by it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::plan::compare_plan;
use common::synth_model;
use common::tamper::{copy_dir, rewrite_manifest};
use harness::commands::compare::{CompareArgs, run_blocking};
use harness::commands::replay::{ReplayOutcome, Status, replay_dir};

const COMPARE: &str = "compare.json: per-cell measures recomputed";
const MANIFEST: &str = "manifest: size and SHA-256 of every file";
const SKIPPED: [&str; 3] = [
    "unit records: unit.json of every unit against its files",
    "sessions: run.json, unit.json and arm_outcome.json agree",
    "discarded: partial units kept aside (manifest only, not evidence)",
];

fn replay(dir: &Path) -> ReplayOutcome {
    replay_dir(dir).unwrap_or_else(|e| panic!("replay {}: {e}", dir.display()))
}

fn edit_json(dir: &Path, rel: &str, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(rel)).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(dir.join(rel), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// A copy of `clean` changed by `f`, the manifest rewritten to match.
fn tampered(clean: &Path, name: &str, f: impl FnOnce(&Path)) -> PathBuf {
    let dir = clean.with_file_name(name);
    copy_dir(clean, &dir);
    f(&dir);
    rewrite_manifest(&dir);
    dir
}

/// The manifest still passes and the compare check fails with a mismatch in
/// `file` whose field contains `field`.
fn assert_compare_names(o: &ReplayOutcome, file: &str, field: &str) {
    let table = o.render_table(20);
    assert_eq!(o.check(MANIFEST).unwrap().status, Status::Pass, "{table}");
    let c = o.check(COMPARE).unwrap_or_else(|| panic!("no check {COMPARE:?}:\n{table}"));
    assert_eq!(c.status, Status::Fail, "{table}");
    assert!(c.mismatches.iter().any(|m| m.file == file && m.field.contains(field)), "{file} {field}:\n{table}");
}

#[test]
fn compare_evidence_replays_clean_and_a_changed_number_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, compare_plan("cmp-replay", &model, &model)).unwrap();
    let clean = tmp.path().join("evidence");
    let outcome =
        run_blocking(CompareArgs { plan, out: Some(clean.clone()), force: false, quiet: true }).expect("compare runs");
    assert!(outcome.parity_passed(), "{}", outcome.markdown());

    // Through the CLI: exit 0.
    let cli = Command::new(common::harness_bin()).arg("replay").arg(&clean).output().expect("run harness replay");
    let text = format!("{}{}", String::from_utf8_lossy(&cli.stdout), String::from_utf8_lossy(&cli.stderr));
    assert_eq!(cli.status.code(), Some(0), "{text}");
    let o = replay(&clean);
    assert!(o.passed, "{}", o.render_table(20));
    let c = o.check(COMPARE).expect("the compare check");
    assert_eq!(c.status, Status::Pass);
    // Noise (ref.a, ref.b) and 2 rounds x 2 arms, 2 cells each; 6 servers.
    assert!(c.detail.contains("parity recounted from 4 prompts") && c.detail.contains("12 cells"), "{}", c.detail);
    assert!(c.detail.contains("6 servers") && c.detail.contains("84 observations compared"), "{}", c.detail);
    for name in SKIPPED {
        let s = o.check(name).unwrap();
        assert_eq!(s.status, Status::Skip, "{name}");
        assert!(s.detail.contains("compare evidence layout"), "{name}: {}", s.detail);
    }

    // One observation changed in compare.json.
    let dir = tampered(&clean, "obs", |d| {
        edit_json(d, "compare.json", |v| {
            let obs = v["observations"].as_array_mut().unwrap();
            let o = obs
                .iter_mut()
                .filter(|o| o["phase"] == "round")
                .find(|o| o["round"] == 1 && o["arm"] == "cand" && o["key"] == "c2" && o["measure"] == "itl_p99_ms")
                .expect("an observation");
            o["value"] = serde_json::json!(o["value"].as_f64().unwrap() * 1.001);
        })
    });
    assert_compare_names(&replay(&dir), "compare.json", "round1 cand c2 itl_p99_ms");

    // A failure count changed.
    let dir = tampered(&clean, "failed", |d| {
        edit_json(d, "compare.json", |v| {
            let o = v["observations"].as_array_mut().unwrap().iter_mut().find(|o| o["key"] == "c1").unwrap();
            o["failed"] = serde_json::json!(1);
        })
    });
    assert_compare_names(&replay(&dir), "compare.json", "failed");

    // One token of one parity answer changed: the recounted verdict differs.
    let dir = tampered(&clean, "parity", |d| {
        let rel = d.join("raw/parity/cand/parity.jsonl");
        let mut lines: Vec<String> = std::fs::read_to_string(&rel).unwrap().lines().map(str::to_string).collect();
        let mut a: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
        a["tokens"][3] = serde_json::json!(a["tokens"][3].as_u64().unwrap() + 1);
        lines[2] = a.to_string();
        std::fs::write(&rel, lines.join("\n") + "\n").unwrap();
    });
    assert_compare_names(&replay(&dir), "compare.json", "parity.pass");

    // A key added to one server record of compare.json (it is not in that
    // server's unit.json), and one removed: each is named by the key.
    let dir = tampered(&clean, "unit-keys", |d| {
        edit_json(d, "compare.json", |v| {
            let u = v["units"][1].as_object_mut().unwrap();
            u.insert("extra".into(), serde_json::json!(1));
            u.remove("pid");
        })
    });
    let o = replay(&dir);
    assert_compare_names(&o, "compare.json", "units[1].extra");
    assert_compare_names(&o, "compare.json", "units[1].pid");

    // A stored per-cell summary changed.
    let summary = "results/cells/noise0-ref.b-c1.summary.json";
    let dir = tampered(&clean, "summary", |d| {
        edit_json(d, summary, |v| v["output_token_throughput_tps"] = serde_json::json!(1.5))
    });
    assert_compare_names(&replay(&dir), summary, "output_token_throughput_tps");

    // A request file deleted.
    let records = "raw/noise0/ref.a/c2.requests.jsonl";
    let dir = tampered(&clean, "deleted", |d| std::fs::remove_file(d.join(records)).unwrap());
    assert_compare_names(&replay(&dir), records, "records");
}
