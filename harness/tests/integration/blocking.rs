//! `analysis.blocking` end to end on synthetic evidence (no server): one timeout in
//! the candidate's `closed-32` cell of block 0. Study-level blocking (the default,
//! the reference method) blocks every claim of the family; cell-level blocking only
//! the hypotheses of that cell and arm. Replay recomputes the claims under the
//! plan's rule and names an evidence.json that used the other one.

use crate::common;

use std::path::{Path, PathBuf};

use common::tamper::{copy_dir, rewrite_manifest};
use harness::commands::replay::{Status, replay_dir};
use harness::fixtures::synth::{SynthSpec, generate};
use serde_json::Value;

const EVIDENCE: &str = "evidence.json: effects, sign tests, Holm, medians, intervals, claims";

fn study(tmp: &Path, name: &str, blocking: Option<&'static str>) -> PathBuf {
    let spec = SynthSpec {
        study: format!("synth-{name}"),
        failures: false,
        blocking,
        confirmation_failure: Some((0, 0, "closed-32")),
        ..SynthSpec::small()
    };
    let dir = tmp.join(name);
    generate(&dir, &spec).expect("synthetic evidence");
    dir
}

fn evidence(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("results/evidence.json")).unwrap()).unwrap()
}

fn claims(ev: &Value) -> Vec<(String, String)> {
    ev["hypotheses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["name"].as_str().unwrap().to_string(), h["claim"]["claim"].as_str().unwrap().to_string()))
        .collect()
}

fn claim_of<'a>(claims: &'a [(String, String)], name: &str) -> &'a str {
    &claims.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1
}

#[test]
fn study_level_blocks_every_claim_cell_level_only_the_failing_cells_and_replay_agrees() {
    let tmp = tempfile::tempdir().unwrap();

    let study_dir = study(tmp.path(), "study", None);
    let o = replay_dir(&study_dir).unwrap();
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let ev = evidence(&study_dir);
    assert_eq!(ev["blocking"], "study");
    let c = claims(&ev);
    assert_eq!(c.len(), 3);
    assert!(c.iter().all(|(_, claim)| claim == "blocked"), "{c:?}");
    // The hypothesis in another cell names the failure elsewhere.
    let near = ev["hypotheses"].as_array().unwrap().iter().find(|h| h["name"] == "near-e2e").unwrap();
    assert_eq!(near["failed_requests"], 0);
    let reasons = near["claim"]["reasons"].to_string();
    assert!(reasons.contains("study-level") && reasons.contains("1 in cell closed-32 arm cand"), "{reasons}");
    let md = std::fs::read_to_string(study_dir.join("results/report.md")).unwrap();
    assert!(md.contains("Blocking: study level"), "{md}");

    let cell_dir = study(tmp.path(), "cell", Some("cell"));
    let o = replay_dir(&cell_dir).unwrap();
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let ev_cell = evidence(&cell_dir);
    assert_eq!(ev_cell["blocking"], "cell");
    let c = claims(&ev_cell);
    // The failure is in closed-32 of arm cand: only the hypothesis on (closed-32,
    // cand vs base) is blocked; cand2's hypothesis in the same cell and cand's in
    // another cell stand.
    assert_eq!(claim_of(&c, "closed-throughput"), "blocked");
    assert_ne!(claim_of(&c, "near-e2e"), "blocked", "{c:?}");
    assert_ne!(claim_of(&c, "cand2-closed-throughput"), "blocked", "{c:?}");
    let md = std::fs::read_to_string(cell_dir.join("results/report.md")).unwrap();
    assert!(md.contains("Blocking: cell level"), "{md}");

    // evidence.json written under the other rule: replay recomputes under the plan's
    // rule and names the field and the claim.
    let dir = tmp.path().join("tampered");
    copy_dir(&study_dir, &dir);
    let mut v = evidence(&dir);
    v["blocking"] = "cell".into();
    let cell_near = ev_cell["hypotheses"].as_array().unwrap().iter().find(|h| h["name"] == "near-e2e").unwrap();
    for h in v["hypotheses"].as_array_mut().unwrap() {
        if h["name"] == "near-e2e" {
            h["claim"] = cell_near["claim"].clone();
        }
    }
    std::fs::write(dir.join("results/evidence.json"), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).unwrap();
    let check = o.check(EVIDENCE).unwrap();
    assert_eq!(check.status, Status::Fail, "{}", o.render_table(10));
    for field in ["blocking", "hypotheses[near-e2e].claim"] {
        assert!(check.mismatches.iter().any(|m| m.field == field), "{field} not named:\n{}", o.render_table(10));
    }

    // An evidence.json from before the key (no `blocking`) was decided cell-level:
    // replay checks it under that rule, so the cell-level claims pass and the
    // study-level ones are named.
    for (from, clean) in [(&cell_dir, true), (&study_dir, false)] {
        let dir = tmp.path().join(format!("old-{clean}"));
        copy_dir(from, &dir);
        let mut v = evidence(&dir);
        v.as_object_mut().unwrap().remove("blocking");
        std::fs::write(dir.join("results/evidence.json"), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        rewrite_manifest(&dir);
        let o = replay_dir(&dir).unwrap();
        let check = o.check(EVIDENCE).unwrap();
        assert!(check.detail.contains("predates analysis.blocking"), "{}", check.detail);
        assert_eq!(check.status == Status::Pass, clean, "{}", o.render_table(10));
    }
}
