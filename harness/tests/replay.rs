//! `harness replay`: an untouched study (synthetic evidence, and a real `harness run`
//! against the engine) passes every check; one flipped byte in each kind of file (a
//! trace, the prompt panel, a request record, receipts, the plan, evidence.json) is
//! detected and the file named; a deleted and a duplicated request record are caught
//! by the completeness check even with the manifest rewritten to match; malformed
//! files give named failures or errors, never a panic.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::evidence::{GitInfo, write_manifest};
use harness::replay::synth::{SynthSpec, generate};
use harness::replay::{ReplayOutcome, Status, replay_dir};

const MANIFEST: &str = "manifest: size and SHA-256 of every file";
const COMPLETE: &str = "completeness: every planned request exactly once";

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

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Flips one byte of `rel`: the first byte at or after `from` that `pick` accepts
/// becomes `to(byte)`.
fn flip(dir: &Path, rel: &str, from: usize, pick: impl Fn(u8) -> bool, to: impl Fn(u8) -> u8) {
    let path = dir.join(rel);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = (from..bytes.len()).find(|&i| pick(bytes[i])).unwrap_or_else(|| panic!("{rel}: nothing to flip"));
    bytes[at] = to(bytes[at]);
    std::fs::write(&path, bytes).unwrap();
}

/// Changes the 4th-last digit (tens of microseconds) of the first number after `key`.
fn bump_after(dir: &Path, rel: &str, key: &str) {
    let path = dir.join(rel);
    let mut bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let start = text.find(key).unwrap_or_else(|| panic!("{rel}: no {key}")) + key.len();
    let end = start + text[start..].find(|c: char| !c.is_ascii_digit()).unwrap();
    let at = end - 4;
    bytes[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    std::fs::write(&path, bytes).unwrap();
}

fn flip_digit(dir: &Path, rel: &str, from: usize) {
    flip(dir, rel, from, |b| b.is_ascii_digit(), |b| if b == b'9' { b'8' } else { b + 1 });
}

/// Rewrites the manifest so that only content checks can see a change.
fn rewrite_manifest(dir: &Path) {
    let m: harness::evidence::Manifest =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    write_manifest(dir, &m.study, &m.plan_sha256, GitInfo { revision: "synthetic".into(), dirty: None }).unwrap();
}

fn edit_lines(dir: &Path, rel: &str, f: impl FnOnce(&mut Vec<String>)) {
    let path = dir.join(rel);
    let mut lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();
    f(&mut lines);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
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
    assert_eq!(missing.status.code(), Some(1));
}
