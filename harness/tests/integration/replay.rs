//! `harness replay`: an untouched study (synthetic evidence, and a real `harness run`
//! against the engine) passes every check; one flipped byte in each kind of file (a
//! trace, the prompt panel, a request record, receipts, the plan, evidence.json) is
//! detected and the file named; a deleted and a duplicated request record are caught
//! by the completeness check even with the manifest rewritten to match; malformed
//! files give named failures or errors, never a panic. A tampered completion record
//! (`unit.json`) is named; a study killed mid-arm and resumed replays clean, its
//! discarded partial unit verified by the manifest only; a study with required
//! qualification replays clean, and one GSM answer rescored (behind a rewritten
//! manifest and completion record) or one bound of results/qualification.json
//! changed is named. Quality gates alone (`harness qualify`) replay clean with
//! every timing check skipped, and a rescored answer there is named too. A FIFO,
//! and links out of the directory (plan.toml, run.json, inputs/, manifest.json) are
//! named and never opened or followed, and a duplicated manifest entry fails.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tamper::*;
use harness::commands::replay::{ReplayOutcome, Status, replay_dir};
use harness::fixtures::synth::{SynthSpec, generate};

const MANIFEST: &str = "manifest: size and SHA-256 of every file";
const COMPLETE: &str = "completeness: every planned request exactly once";
const CATALOG: &str = "inputs: traces and prompt panel against catalog.json";

fn synth(tmp: &Path, name: &str, spec: &SynthSpec) -> PathBuf {
    let dir = tmp.join(name);
    generate(&dir, spec).expect("synthetic evidence");
    dir
}

fn replay(dir: &Path) -> ReplayOutcome {
    replay_dir(dir).unwrap_or_else(|e| panic!("replay {}: {e}", dir.display()))
}

fn assert_clean(o: &ReplayOutcome) {
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
}

/// The check fails and one of its mismatches names `file`.
fn assert_names(o: &ReplayOutcome, check: &str, file: &str) {
    let c = o.check(check).unwrap_or_else(|| panic!("no check {check:?}"));
    assert_eq!(c.status, Status::Fail, "{check} should fail:\n{}", o.render_table(10));
    assert!(c.mismatches.iter().any(|m| m.file == file), "{check} does not name {file}:\n{}", o.render_table(10));
}

#[test]
fn synthetic_study_replays_clean_and_every_flipped_byte_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = synth(tmp.path(), "clean", &SynthSpec::small());
    let o = replay(&clean);
    assert_clean(&o);
    assert_eq!(o.check("receipts: every client request admitted by the engine").unwrap().status, Status::Pass);
    assert!(!o.receipts.is_empty());

    // (file, a content check that must name it too)
    let cases: [(&str, usize, &str); 6] = [
        ("inputs/traces/open-near.trace.jsonl", 40, "inputs: traces and prompt panel against catalog.json"),
        ("inputs/prompts.jsonl", 80, "inputs: traces and prompt panel against catalog.json"),
        ("raw/b1/cand/closed-32.requests.jsonl", 400, MANIFEST),
        ("raw/b0/cand2/receipts.jsonl", 300, MANIFEST),
        ("plan.toml", 0, "plan hash: plan.toml, manifest, run.json, catalog, evidence.json"),
        ("results/evidence.json", 2000, "evidence.json: effects, sign tests, Holm, medians, intervals, claims"),
    ];
    for (i, (rel, from, content_check)) in cases.iter().enumerate() {
        let dir = tmp.path().join(format!("flip{i}"));
        copy_dir(&clean, &dir);
        if *rel == "plan.toml" {
            // A byte of the leading comment: the plan still parses, only its hash changes.
            flip(&dir, rel, 2, |b| b == b'S', |_| b's');
        } else {
            flip_digit(&dir, rel, *from);
        }
        let o = replay(&dir);
        assert!(!o.passed, "{rel}: a flipped byte passed");
        assert_names(&o, MANIFEST, rel);
        let expected_file = if *content_check == "plan hash: plan.toml, manifest, run.json, catalog, evidence.json" {
            "manifest.json"
        } else if content_check.starts_with("evidence.json") {
            "results/evidence.json"
        } else {
            rel
        };
        assert_names(&o, content_check, expected_file);
    }
}

#[test]
fn content_checks_catch_changes_behind_a_rewritten_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = synth(tmp.path(), "clean", &SynthSpec::small());
    let rel = "raw/b2/cand/closed-32.requests.jsonl";

    // A deleted record.
    let dir = tmp.path().join("deleted");
    copy_dir(&clean, &dir);
    edit_lines(&dir, rel, |l| {
        l.remove(3);
    });
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_eq!(o.check(MANIFEST).unwrap().status, Status::Pass, "{}", o.render_table(5));
    assert_names(&o, COMPLETE, rel);
    let c = o.check(COMPLETE).unwrap();
    assert!(c.mismatches.iter().any(|m| m.field == "request indices 3"), "{}", o.render_table(5));
    // The archived numbers no longer match the raw records either.
    assert_names(&o, "cell measures: matrix.csv", "results/matrix.csv");

    // A duplicated record.
    let dir = tmp.path().join("duplicated");
    copy_dir(&clean, &dir);
    edit_lines(&dir, rel, |l| {
        let again = l[5].clone();
        l.push(again);
    });
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_names(&o, COMPLETE, rel);
    let c = o.check(COMPLETE).unwrap();
    assert!(
        c.mismatches.iter().any(|m| m.field == "request index 5" && m.archived == "2 records"),
        "{}",
        o.render_table(5)
    );

    // A changed timestamp: only the recomputation can see it.
    let dir = tmp.path().join("retimed");
    copy_dir(&clean, &dir);
    bump_after(&dir, rel, "\"done_ns\":");
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_eq!(o.check(MANIFEST).unwrap().status, Status::Pass);
    assert!(!o.passed, "{}", o.render_table(5));

    // An unlisted file.
    let dir = tmp.path().join("unlisted");
    copy_dir(&clean, &dir);
    std::fs::write(dir.join("raw/b0/notes.txt"), "hello").unwrap();
    let o = replay(&dir);
    assert_names(&o, "manifest: no unlisted files", "raw/b0/notes.txt");
}

#[test]
fn malformed_files_are_named_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = synth(tmp.path(), "clean", &SynthSpec::small());
    let rel = "raw/b0/cand/open-low.requests.jsonl";

    // Truncated JSON in the middle of a record file.
    let dir = tmp.path().join("truncated");
    copy_dir(&clean, &dir);
    edit_lines(&dir, rel, |l| {
        let half = l[2].len() / 2;
        l[2].truncate(half);
    });
    let o = replay(&dir);
    let parse = o.check("raw records parse").unwrap();
    assert_eq!(parse.status, Status::Fail);
    assert!(
        parse.mismatches.iter().any(|m| m.file == rel && m.recomputed.starts_with("line 3:")),
        "{}",
        o.render_table(5)
    );

    // Wrong types, and bytes that are not UTF-8.
    let dir = tmp.path().join("types");
    copy_dir(&clean, &dir);
    edit_lines(&dir, rel, |l| l[0] = l[0].replacen("\"block\":0", "\"block\":\"zero\"", 1));
    let path = dir.join("raw/b0/cand/receipts.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.splice(0..0, b"{\"admitted\":[\"\xff\xfe\"],\"resumed\":[],\"preempted\":[]}\n".iter().copied());
    std::fs::write(&path, bytes).unwrap();
    std::fs::write(dir.join("results/evidence.json"), "{\"hypotheses\": 5, \"units\": \"x\"}").unwrap();
    std::fs::write(dir.join("results/matrix.csv"), "block,arm\n\"unterminated").unwrap();
    let o = replay(&dir);
    assert!(!o.passed);
    let parse = o.check("raw records parse").unwrap();
    assert!(parse.mismatches.iter().any(|m| m.file == rel && m.recomputed.starts_with("line 1:")));
    assert!(
        parse.mismatches.iter().any(|m| m.file == "raw/b0/cand/receipts.jsonl" && m.recomputed.starts_with("line 1:"))
    );
    assert_names(&o, "evidence.json: effects, sign tests, Holm, medians, intervals, claims", "results/evidence.json");
    assert_names(&o, "cell measures: matrix.csv", "results/matrix.csv");

    // A truncated manifest is an error naming it.
    let dir = tmp.path().join("manifest");
    copy_dir(&clean, &dir);
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    std::fs::write(dir.join("manifest.json"), &text[..text.len() / 2]).unwrap();
    let err = replay_dir(&dir).unwrap_err().to_string();
    assert!(err.contains("manifest.json") && err.contains("line"), "{err}");
    // And a broken plan is a named failure, not a panic.
    std::fs::write(dir.join("manifest.json"), text).unwrap();
    std::fs::write(dir.join("plan.toml"), "[study\nname = ").unwrap();
    let o = replay(&dir);
    assert_names(&o, "plan hash: plan.toml, manifest, run.json, catalog, evidence.json", "plan.toml");
}

#[test]
fn a_faulted_unit_is_reported_as_faulted_not_as_missing_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SynthSpec { fault: Some((2, 1)), ..SynthSpec::small() };
    let dir = synth(tmp.path(), "faulted", &spec);
    let o = replay(&dir);
    assert_clean(&o);
    let c = o.check(COMPLETE).unwrap();
    assert!(c.detail.contains("b2/cand2 server_died"), "{}", c.detail);
}

fn plan_text(model: &Path) -> String {
    let argv = common::toml_array(&common::serve_argv(model, &["--kv-format", "f16"], &[]));
    let (p1, p2) = (common::free_port(), common::free_port());
    format!(
        "[study]\nname = \"replay-test\"\nseed = 5\n\n[request]\nmodel = \"synth\"\noutput_tokens = 4\n\n\
         [prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\nlengths = [16]\ndocuments = 2\n\n\
         [warmup]\nprompts = 2\n\n[timing]\nsettle_s = 0.1\nrequest_timeout_s = 60.0\ndrain_timeout_s = 60.0\n\n\
         [blocks]\ncount = 2\narm_order = \"alternate\"\ncell_order = \"alternate\"\n\n\
         [[arms]]\nname = \"base\"\nrole = \"control\"\nargv = {argv}\nport = {p1}\nstartup_timeout_s = 60.0\n\
         receipts = \"{{arm_dir}}/receipts.jsonl\"\n\n\
         [[arms]]\nname = \"same\"\nrole = \"candidate\"\nargv = {argv}\nport = {p2}\nstartup_timeout_s = 60.0\n\
         receipts = \"{{arm_dir}}/receipts.jsonl\"\n\n\
         [[cells]]\nname = \"closed-2\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 2\ncount = 4\n\n\
         [[cells]]\nname = \"open\"\nkind = \"confirmation\"\nload = \"open\"\nrate = 20.0\ncount = 4\n\n\
         [analysis]\nalpha = 0.05\n\n[[hypotheses]]\nname = \"tput\"\nmetric = \"throughput_rps\"\ncell = \"closed-2\"\n\
         candidate = \"same\"\ncontrol = \"base\"\nthreshold = 0.01\n"
    )
}

#[test]
fn a_real_engine_study_replays_clean_through_the_cli_and_a_flipped_record_fails_it() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, plan_text(&model)).unwrap();
    let out = tmp.path().join("study");
    let run = common::run_harness(&plan, &out);
    assert!(run.status.success(), "harness run failed:\n{}", String::from_utf8_lossy(&run.stderr));

    let replay_cli = |dir: &Path, json: bool| {
        let mut cmd = Command::new(common::harness_bin());
        cmd.arg("replay").arg(dir);
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("run harness replay")
    };
    let clean = replay_cli(&out, false);
    let text = String::from_utf8_lossy(&clean.stdout);
    assert_eq!(clean.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&clean.stderr));
    assert!(text.contains("replay PASSED"), "{text}");
    let o = replay(&out);
    let receipts = o.check("receipts: every client request admitted by the engine").unwrap();
    assert_eq!(receipts.status, Status::Pass, "{}", o.render_table(5));
    assert_eq!(o.receipts.iter().map(|r| r.requests).sum::<u64>(), 32);
    assert!(o.receipts.iter().all(|r| r.fresh_admissions == r.requests && r.without_admission == 0));

    // Both arms keep receipts: every cell summary carries the engine's decode
    // measures, and replay recomputes them from the receipts, so an edited
    // engine_tpot_ms (behind a resealed unit and a rewritten manifest) is named.
    let rel = "results/cells/b0-base-closed-2.summary.json";
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join(rel)).unwrap()).unwrap();
    assert!(summary["engine_decode_steps"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["engine_tpot_ms"].as_f64().unwrap() > 0.0, "{summary}");
    let forged = tmp.path().join("forged-engine-tpot");
    copy_dir(&out, &forged);
    edit_json(&forged, rel, |v| v["engine_tpot_ms"] = (v["engine_tpot_ms"].as_f64().unwrap() * 0.9).into());
    reseal_unit(&forged, "raw/b0/base/unit.json");
    rewrite_manifest(&forged);
    let o = replay(&forged);
    assert!(!o.passed);
    // Named with replay's own value from the receipts: the archived one before the edit.
    let original = summary["engine_tpot_ms"].as_f64().unwrap();
    let named = o.checks.iter().any(|c| {
        c.status == Status::Fail
            && c.mismatches.iter().any(|m| {
                m.file == rel
                    && m.field.contains("engine_tpot_ms")
                    && m.recomputed.parse::<f64>().is_ok_and(|v| (v - original).abs() <= 1e-9 * original)
            })
    });
    assert!(named, "{}", o.render_table(10));

    bump_after(&out, "raw/b1/same/open.requests.jsonl", "\"send_ns\":");
    let bad = replay_cli(&out, true);
    assert_eq!(bad.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&bad.stdout).expect("--json prints one JSON object");
    assert_eq!(v["passed"], false);
    let named = v["checks"].as_array().unwrap().iter().any(|c| {
        c["status"] == "fail"
            && c["mismatches"].as_array().unwrap().iter().any(|m| m["file"] == "raw/b1/same/open.requests.jsonl")
    });
    assert!(named, "{v:#}");
    let missing = Command::new(common::harness_bin()).arg("replay").arg(tmp.path().join("nope")).output().unwrap();
    assert_eq!(missing.status.code(), Some(2), "evidence that cannot be read fails its audit");
    // A manifest that is a symbolic link, or truncated: exit 2 too (both exited 1).
    let linked = tmp.path().join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink(out.join("manifest.json"), linked.join("manifest.json")).unwrap();
    let truncated = tmp.path().join("truncated");
    std::fs::create_dir_all(&truncated).unwrap();
    let manifest = std::fs::read(out.join("manifest.json")).unwrap();
    std::fs::write(truncated.join("manifest.json"), &manifest[..manifest.len() / 2]).unwrap();
    for (dir, want) in [(&linked, "symbolic link"), (&truncated, "manifest.json")] {
        let o = Command::new(common::harness_bin()).arg("replay").arg(dir).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{want:?} not in {err}");
    }
}

const UNITS: &str = "unit records: unit.json of every unit against its files";
const SESSIONS: &str = "sessions: run.json, unit.json and arm_outcome.json agree";
const DISCARDED: &str = "discarded: partial units kept aside (manifest only, not evidence)";
const QUALITY: &str = "quality gates: rescored answers, scores, bounds, verdicts";

fn edit_json(dir: &Path, rel: &str, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(rel)).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(dir.join(rel), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn replay_cli(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(common::harness_bin()).arg("replay").arg(dir).output().expect("run harness replay");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn unit_records_and_sessions_name_a_tampered_unit() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = synth(tmp.path(), "clean", &SynthSpec::small());
    let o = replay(&clean);
    assert_clean(&o);
    assert_eq!(o.check(UNITS).unwrap().status, Status::Pass);
    assert_eq!(o.check(SESSIONS).unwrap().status, Status::Pass);
    let rel = "raw/b1/cand/closed-32.requests.jsonl";
    let record = "raw/b1/cand/unit.json";

    // A changed request record behind a rewritten manifest: its unit's record names it.
    let dir = tmp.path().join("changed");
    copy_dir(&clean, &dir);
    bump_after(&dir, rel, "\"done_ns\":");
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_eq!(o.check(MANIFEST).unwrap().status, Status::Pass);
    assert_names(&o, UNITS, rel);
    let c = o.check(UNITS).unwrap();
    assert!(c.mismatches.iter().any(|m| m.field == format!("sha256 ({record})")), "{}", o.render_table(5));

    // A record that claims another session.
    let dir = tmp.path().join("session");
    copy_dir(&clean, &dir);
    edit_json(&dir, record, |v| v["session"] = 1.into());
    rewrite_manifest(&dir);
    assert_names(&replay(&dir), SESSIONS, record);

    // A file left out of a record, and a record deleted.
    let dir = tmp.path().join("dropped");
    copy_dir(&clean, &dir);
    let summary = "results/cells/b1-cand-closed-32.summary.json";
    edit_json(&dir, record, |v| v["files"].as_array_mut().unwrap().retain(|f| f["path"] != summary));
    std::fs::remove_file(dir.join("raw/b2/base/unit.json")).unwrap();
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_names(&o, UNITS, summary);
    assert_names(&o, UNITS, "raw/b2/base/unit.json");
}

#[test]
fn a_resumed_study_replays_clean_and_its_discarded_bytes_are_still_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, common::studies::resume_plan(&model)).unwrap();
    let out = tmp.path().join("study");
    common::studies::run_killed_and_resumed(&plan, &out);
    assert!(out.join("discarded/1-b1-f16/raw/b1/f16/first.requests.jsonl").is_file());

    let (code, text) = replay_cli(&out);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("replay PASSED"), "{text}");
    // (A kill during an atomic write can leave a stray half file too: a second discard.)
    assert!(text.contains("discarded partial unit") && text.contains("discarded/1-b1-f16 (partial b1/f16"), "{text}");
    let o = replay(&out);
    assert!(o.check(SESSIONS).unwrap().detail.starts_with("2 sessions (1 resumed)"), "{}", o.render_table(5));
    assert_eq!(o.check(UNITS).unwrap().status, Status::Pass);
    // 40 planned, 40 counted: the discarded half unit's records are not evidence.
    assert!(o.check(COMPLETE).unwrap().detail.starts_with("40 planned requests in 8 cells, 40 records"));

    // One flipped byte of a discarded file: the manifest names it; nothing reads it as evidence.
    let rel = "discarded/1-b1-f16/raw/b1/f16/first.requests.jsonl";
    flip_digit(&out, rel, 0);
    let (code, text) = replay_cli(&out);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains(rel), "{text}");
    let o = replay(&out);
    assert_names(&o, MANIFEST, rel);
    for check in [COMPLETE, UNITS, SESSIONS, DISCARDED] {
        assert_eq!(o.check(check).unwrap().status, Status::Pass, "{check}:\n{}", o.render_table(5));
    }
    // A discarded directory that no session names.
    copy_dir(&out.join("discarded/1-b1-f16"), &out.join("discarded/2-b1-f16"));
    assert_names(&replay(&out), DISCARDED, "discarded/2-b1-f16");
}

/// A copy of `clean` in `dir` where the first answer in `rel` (a GSM responses
/// file) is made right, its stored score left as it was.
fn copy_with_first_answer_right(clean: &Path, dir: &Path, rel: &str) {
    copy_dir(clean, dir);
    edit_lines(dir, rel, |l| {
        let mut v: serde_json::Value = serde_json::from_str(&l[0]).unwrap();
        v["text"] = format!("#### {}", v["gold"].as_str().unwrap()).into();
        l[0] = v.to_string();
    });
}

#[test]
fn a_qualified_study_replays_clean_and_a_rescored_answer_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, common::studies::qualification_plan(&model)).unwrap();
    let clean = tmp.path().join("study");
    let run = common::run_harness(&plan, &clean);
    assert!(run.status.success(), "harness run failed:\n{}", String::from_utf8_lossy(&run.stderr));
    let o = replay(&clean);
    assert_clean(&o);
    let q = o.check(QUALITY).unwrap();
    assert!(q.status == Status::Pass && q.detail.contains("7 (arm, gate) answer files"), "{}", o.render_table(5));

    // One GSM answer's text made right (its stored score left as it was), behind a
    // rewritten manifest and completion record: only the rescoring can see it.
    let rel = "qualification/f16/gsm.responses.jsonl";
    let dir = tmp.path().join("answer");
    copy_with_first_answer_right(&clean, &dir, rel);
    reseal_unit(&dir, "qualification/unit.json");
    rewrite_manifest(&dir);
    let o = replay(&dir);
    for check in [MANIFEST, UNITS] {
        assert_eq!(o.check(check).unwrap().status, Status::Pass, "{check}:\n{}", o.render_table(5));
    }
    assert_names(&o, QUALITY, rel);
    let c = o.check(QUALITY).unwrap();
    assert!(
        c.mismatches.iter().any(|m| m.field == "line 1 correct" && m.recomputed == "true"),
        "{}",
        o.render_table(9)
    );

    // A bound of the outcome the report reads.
    let dir = tmp.path().join("outcome");
    copy_dir(&clean, &dir);
    edit_json(&dir, "results/qualification.json", |v| {
        let nll = v["comparisons"].as_array_mut().unwrap().iter_mut().find(|c| c["gate"] == "nll").unwrap();
        nll["nll"]["upper"] = (nll["nll"]["upper"].as_f64().unwrap() + 1e-3).into();
    });
    reseal_unit(&dir, "qualification/unit.json");
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_names(&o, QUALITY, "results/qualification.json");
    let c = o.check(QUALITY).unwrap();
    assert!(c.mismatches.iter().any(|m| m.field.ends_with("nll.upper")), "{}", o.render_table(9));
}

#[test]
fn quality_gates_alone_replay_clean_with_timing_skipped_and_a_rescored_answer_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, common::studies::qualification_plan(&model)).unwrap();
    let clean = tmp.path().join("gates");
    let run = Command::new(common::harness_bin())
        .args(["qualify", "--quiet", "--out"])
        .arg(&clean)
        .arg(&plan)
        .current_dir(common::workspace())
        .output()
        .expect("run harness qualify");
    let said = format!("{}\n{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    // Exit 2: an arm failed a gate (this random-weight model's k16v8 NLL may); the
    // evidence is complete either way.
    let code = run.status.code();
    assert!(
        code == Some(0) || (code == Some(2) && said.contains("NOT QUALIFIED")),
        "harness qualify ({code:?}):\n{said}"
    );
    assert!(!clean.join("run.json").exists() && !clean.join("inputs").exists() && !clean.join("raw").exists());
    let o = replay(&clean);
    assert_clean(&o);
    let q = o.check(QUALITY).unwrap();
    assert!(q.status == Status::Pass && q.detail.contains("7 (arm, gate) answer files"), "{}", o.render_table(5));
    for check in [MANIFEST, "plan hash: plan.toml, manifest, run.json, catalog, evidence.json"] {
        assert_eq!(o.check(check).unwrap().status, Status::Pass, "{check}:\n{}", o.render_table(5));
    }
    for check in [CATALOG, COMPLETE, UNITS, SESSIONS, DISCARDED] {
        let c = o.check(check).unwrap_or_else(|| panic!("no check {check:?}"));
        assert!(c.status == Status::Skip && c.detail.contains("qualification-only"), "{check}: {}", c.detail);
    }

    // One GSM answer's text made right behind a rewritten manifest: the rescoring names it.
    let rel = "qualification/k16v8/gsm.responses.jsonl";
    let dir = tmp.path().join("answer");
    copy_with_first_answer_right(&clean, &dir, rel);
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_eq!(o.check(MANIFEST).unwrap().status, Status::Pass, "{}", o.render_table(5));
    assert_names(&o, QUALITY, rel);

    // Files of a timing study beside the gates: audited as a study, so its missing
    // inputs fail instead of being skipped.
    let dir = tmp.path().join("mixed");
    copy_dir(&clean, &dir);
    std::fs::create_dir_all(dir.join("results")).unwrap();
    std::fs::write(dir.join("results/matrix.csv"), "block,arm,cell\n").unwrap();
    rewrite_manifest(&dir);
    let o = replay(&dir);
    assert_names(&o, CATALOG, "inputs/catalog.json");
}

/// A FIFO at `path` with a writer thread that, once some reader opens it, writes
/// `bytes` and closes. The flag turns true only when a reader opened the FIFO: replay
/// must never do that (on the old code the read blocked until this writer came).
fn guarded_fifo(path: &Path, bytes: Vec<u8>) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path inside this test's temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
    let opened = std::sync::Arc::new(AtomicBool::new(false));
    let flag = opened.clone();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        // Blocks until a reader opens the FIFO (for the whole test when none does).
        if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&path) {
            flag.store(true, Ordering::SeqCst);
            let _ = std::io::Write::write_all(&mut w, &bytes);
        }
    });
    opened
}

/// Some failing check has a mismatch naming `file` whose text contains `why`.
fn assert_named_with(o: &ReplayOutcome, file: &str, why: &str) {
    let hit = o.checks.iter().filter(|c| c.status == Status::Fail).any(|c| {
        c.mismatches.iter().any(|m| m.file == file && format!("{} {}", m.archived, m.recomputed).contains(why))
    });
    assert!(hit, "no failing row names {file} with {why:?}:\n{}", o.render_table(20));
}

#[test]
fn links_fifos_and_duplicated_manifest_entries_fail_without_blocking_or_leaving_the_directory() {
    use std::os::unix::fs::symlink;
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let clean = synth(tmp.path(), "clean", &SynthSpec::small());
    let outside = tmp.path().join("outside");
    copy_dir(&clean, &outside);

    // plan.toml is a FIFO: replay returns, names it, and never opens it.
    let dir = tmp.path().join("fifo-plan");
    copy_dir(&clean, &dir);
    std::fs::remove_file(dir.join("plan.toml")).unwrap();
    let opened = guarded_fifo(&dir.join("plan.toml"), std::fs::read(clean.join("plan.toml")).unwrap());
    let o = replay(&dir);
    assert!(!opened.load(Ordering::SeqCst), "replay opened the FIFO plan.toml");
    assert!(!o.passed);
    assert_named_with(&o, "plan.toml", "FIFO");

    // inputs/ is a link to a copy outside whose catalog is a FIFO: never opened.
    let dir = tmp.path().join("linked-inputs");
    copy_dir(&clean, &dir);
    std::fs::remove_dir_all(dir.join("inputs")).unwrap();
    let away = tmp.path().join("away-inputs");
    copy_dir(&clean.join("inputs"), &away);
    std::fs::remove_file(away.join("catalog.json")).unwrap();
    let opened = guarded_fifo(&away.join("catalog.json"), std::fs::read(clean.join("inputs/catalog.json")).unwrap());
    symlink(&away, dir.join("inputs")).unwrap();
    let o = replay(&dir);
    assert!(!opened.load(Ordering::SeqCst), "replay read inputs/catalog.json through a link out of the directory");
    assert!(!o.passed);
    assert_named_with(&o, "inputs", "symbolic link");

    // run.json and plan.toml are links to faithful copies outside: named as links.
    for rel in ["run.json", "plan.toml"] {
        let dir = tmp.path().join(format!("linked-{rel}"));
        copy_dir(&clean, &dir);
        std::fs::remove_file(dir.join(rel)).unwrap();
        symlink(outside.join(rel), dir.join(rel)).unwrap();
        let o = replay(&dir);
        assert!(!o.passed, "{rel} through a link passed");
        assert_named_with(&o, rel, "symbolic link");
    }

    // manifest.json is a link to a faithful copy outside: an error naming it, never a pass.
    let dir = tmp.path().join("linked-manifest");
    copy_dir(&clean, &dir);
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    symlink(outside.join("manifest.json"), dir.join("manifest.json")).unwrap();
    match replay_dir(&dir) {
        Ok(o) => panic!("a linked manifest.json was read:\n{}", o.render_table(10)),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("manifest.json") && e.contains("symbolic link"), "{e}");
        }
    }
    // Through the command line: a failure exit, never 0.
    let (code, text) = replay_cli(&dir);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("symbolic link"), "{text}");

    // One manifest entry listed twice (same size and hash): named.
    let dir = tmp.path().join("duplicated-entry");
    copy_dir(&clean, &dir);
    edit_json(&dir, "manifest.json", |m| {
        let files = m["files"].as_array_mut().unwrap();
        let first = files[0].clone();
        files.insert(1, first);
    });
    let o = replay(&dir);
    let first = serde_json::from_slice::<serde_json::Value>(&std::fs::read(clean.join("manifest.json")).unwrap())
        .unwrap()["files"][0]["path"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!o.passed, "a duplicated manifest entry passed");
    assert_named_with(&o, &first, "listed 2 times");
}

/// The raw fields of one CSV line (quotes kept), split at commas outside quotes.
fn csv_fields(line: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&line[start..]);
    out
}

/// Evidence written before the engine's decode measures (`run.json`
/// `harness-run/2`: no `engine_*` summary fields, matrix columns or medians)
/// replays clean; the same evidence labelled `harness-run/3` is named as missing them.
#[test]
fn evidence_from_before_the_engine_measures_replays_clean() {
    const ENGINE: [&str; 2] = ["engine_decode_steps", "engine_tpot_ms"];
    let tmp = tempfile::tempdir().unwrap();
    let clean = synth(tmp.path(), "clean", &SynthSpec::small());
    let dir = tmp.path().join("run2");
    copy_dir(&clean, &dir);
    let strip = |v: &mut serde_json::Value| {
        for k in ENGINE {
            v.as_object_mut().unwrap().remove(k);
        }
    };
    let mut stripped = 0;
    for e in std::fs::read_dir(dir.join("results/cells")).unwrap() {
        let rel = format!("results/cells/{}", e.unwrap().file_name().to_string_lossy());
        edit_json(&dir, &rel, |v| {
            stripped += usize::from(v.get(ENGINE[0]).is_some());
            strip(v)
        });
    }
    assert!(stripped > 0, "the synthetic arms with receipts carry the engine's fields");
    edit_json(&dir, "results/summaries.json", |v| v.as_array_mut().unwrap().iter_mut().for_each(strip));
    edit_json(&dir, "results/evidence.json", |v| {
        for k in ["confirmation_cells", "descriptive_cells"] {
            for c in v[k].as_array_mut().into_iter().flatten() {
                strip(&mut c["medians"]);
            }
        }
        strip(&mut v["median_units"]);
    });
    let matrix = std::fs::read_to_string(dir.join("results/matrix.csv")).unwrap();
    let header = csv_fields(matrix.lines().next().unwrap());
    let drop: Vec<usize> = header.iter().enumerate().filter(|(_, h)| ENGINE.contains(h)).map(|(i, _)| i).collect();
    assert_eq!(drop.len(), 2, "{header:?}");
    let lines: Vec<String> = matrix
        .lines()
        .map(|l| {
            let kept: Vec<&str> =
                csv_fields(l).into_iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, f)| f).collect();
            kept.join(",")
        })
        .collect();
    std::fs::write(dir.join("results/matrix.csv"), lines.join("\n") + "\n").unwrap();
    for b in std::fs::read_dir(dir.join("raw")).unwrap() {
        for u in std::fs::read_dir(b.unwrap().path()).unwrap() {
            let unit = u.unwrap().path().join("unit.json");
            if unit.is_file() {
                reseal_unit(&dir, unit.strip_prefix(&dir).unwrap().to_str().unwrap());
            }
        }
    }
    rewrite_manifest(&dir);
    // Still labelled harness-run/3: the engine's columns and medians are missing.
    let o = replay(&dir);
    assert_names(&o, "cell measures: matrix.csv", "results/matrix.csv");
    // Labelled as what it is: clean.
    let run = std::fs::read_to_string(dir.join("run.json")).unwrap();
    assert!(run.contains(harness::evidence::RUN_FORMAT));
    std::fs::write(dir.join("run.json"), run.replace(harness::evidence::RUN_FORMAT, "harness-run/2")).unwrap();
    rewrite_manifest(&dir);
    assert_clean(&replay(&dir));
}
