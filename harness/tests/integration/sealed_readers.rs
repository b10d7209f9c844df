//! The reproductions of issue 52 that concern the readers of an evidence directory
//! (items 1-6, 10-12, 15, 17 and 18), each on a small synthetic study
//! (`harness::fixtures::synth`): before the evidence opener (`evidence::Sealed`)
//! each of them read tampered, unfinished or special-file evidence, gave a verdict
//! from it, or waited for ever. Each must now exit 2 before reading, naming the
//! file, and never hang (every run is killed after 30 s).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use harness::fixtures::synth::{SynthSpec, generate};

use crate::common::{harness_within, tamper::edit_lines};

fn study(tmp: &Path, spec: SynthSpec) -> PathBuf {
    let dir = tmp.join("study");
    generate(&dir, &SynthSpec { requests: 6, ..spec }).expect("synthetic study");
    dir
}

fn harness(tmp: &Path, args: &[&str]) -> (Option<i32>, String) {
    match harness_within(Some(tmp), args, Duration::from_secs(30)) {
        Ok(Output { status, stdout, stderr }) => {
            (status.code(), format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr)))
        }
        Err(e) => (None, e),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn mkfifo(path: &Path) {
    std::fs::remove_file(path).expect("remove before the FIFO");
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Asserts exit 2 and every one of `want` in the output.
fn refused(got: (Option<i32>, String), want: &[&str]) {
    let (code, text) = got;
    assert_eq!(code, Some(2), "{text}");
    for w in want {
        assert!(text.contains(w), "{w:?} not in:\n{text}");
    }
}

#[test]
fn item01_the_paired_gate_refuses_an_edited_sequential_json() {
    let tmp = tempfile::tempdir().unwrap();
    // The candidate 10% slower: honestly regressed.
    let dir = study(tmp.path(), SynthSpec { speeds_percent: [110, 100, 100], ..SynthSpec::sequential() });
    let (code, text) = harness(tmp.path(), &["gate", "--paired", s(&dir), "--json", "v.json"]);
    assert_eq!(code, Some(2), "untouched, the study regressed:\n{text}");
    assert!(text.contains("gate REGRESSED"), "{text}");
    let path = dir.join("sequential.json");
    let edited = std::fs::read_to_string(&path).unwrap().replace("\"state\": \"regressed\"", "\"state\": \"passed\"");
    std::fs::write(&path, edited).unwrap();
    let got = harness(tmp.path(), &["gate", "--paired", s(&dir), "--json", "v.json"]);
    assert!(!got.1.contains("gate PASSED"), "{}", got.1);
    // "passed" is shorter than "regressed": the size differs, the file is not even read.
    refused(got, &["sequential.json: 2885 bytes, sealed with 2891", "differ from manifest.json"]);
}

#[test]
fn item02_the_paired_gate_refuses_an_unfinished_study() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    let got = harness(tmp.path(), &["gate", "--paired", s(&dir), "--json", "v.json"]);
    refused(got, &["no manifest.json: the study did not finish"]);
    assert!(!tmp.path().join("v.json").exists(), "no verdict is written");
}

#[test]
fn item03_export_refuses_tampered_raw_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    let rel = "raw/b1/cand/closed-32.requests.jsonl";
    // Every event 5 s later in one record file (the TTFT mean grows by 5 s).
    edit_lines(&dir, rel, |lines| {
        for l in lines.iter_mut() {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for e in v["events"].as_array_mut().unwrap() {
                e["t_ns"] = (e["t_ns"].as_u64().unwrap() + 5_000_000_000).into();
            }
            *l = v.to_string();
        }
    });
    let got = harness(tmp.path(), &["export", s(&dir), "--format", "vllm-bench", "--out", "x.jsonl"]);
    refused(got, &[rel]);
    assert!(!tmp.path().join("x.jsonl").exists());
}

#[test]
fn item04_export_refuses_a_killed_study() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    let got = harness(tmp.path(), &["export", s(&dir), "--format", "guidellm", "--out", "x.json"]);
    refused(got, &["no manifest.json: the study did not finish"]);
}

#[test]
fn item05_export_refuses_a_deleted_or_fifo_requests_file_instead_of_dropping_its_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    let rel = "raw/b2/base/open-near.requests.jsonl";
    std::fs::remove_file(dir.join(rel)).unwrap();
    let got = harness(tmp.path(), &["export", s(&dir), "--format", "vllm-bench", "--out", "x.jsonl"]);
    refused(got, &[&format!("{rel}: listed in manifest.json, missing")]);
    std::fs::write(dir.join(rel), "").unwrap();
    mkfifo(&dir.join(rel));
    let got = harness(tmp.path(), &["export", s(&dir), "--format", "vllm-bench", "--out", "x.jsonl"]);
    refused(got, &[&format!("{rel}: listed in manifest.json, a FIFO")]);
}

#[test]
fn item06_noise_refuses_tampered_summaries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    let rel = "results/cells/b0-cand-closed-32.summary.json";
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(rel)).unwrap()).unwrap();
    v["request_throughput_rps"] = (v["request_throughput_rps"].as_f64().unwrap() * 100.0).into();
    std::fs::write(dir.join(rel), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    refused(harness(tmp.path(), &["noise", s(&dir)]), &[rel]);
}

#[test]
fn item10_the_paired_gate_never_waits_on_a_fifo() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    for rel in ["sequential.json", "raw/b0/cand/startup.json"] {
        let copy = tmp.path().join(format!("copy-{}", rel.replace('/', "-")));
        crate::common::tamper::copy_dir(&dir, &copy);
        mkfifo(&copy.join(rel));
        refused(harness(tmp.path(), &["gate", "--paired", s(&copy), "--json", "v.json"]), &[rel, "FIFO"]);
    }
}

#[test]
fn item11_export_never_waits_on_a_fifo() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    for rel in ["run.json", "plan.toml"] {
        let copy = tmp.path().join(format!("copy-{rel}"));
        crate::common::tamper::copy_dir(&dir, &copy);
        mkfifo(&copy.join(rel));
        let got = harness(tmp.path(), &["export", s(&copy), "--format", "vllm-bench", "--out", "x.jsonl"]);
        refused(got, &[rel, "FIFO"]);
    }
}

#[test]
fn item12_report_never_waits_on_a_fifo_and_checks_raw_files_before_rewriting() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    let rel = "raw/b3/cand2/open-low.requests.jsonl";
    let matrix = std::fs::read(dir.join("results/matrix.csv")).unwrap();
    mkfifo(&dir.join(rel));
    refused(harness(tmp.path(), &["report", s(&dir)]), &[rel, "FIFO"]);
    assert_eq!(std::fs::read(dir.join("results/matrix.csv")).unwrap(), matrix, "nothing was rewritten");
}

#[test]
fn item15_simulate_refuses_zero_draws() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    let (code, text) = harness(tmp.path(), &["gate", "--simulate", s(&dir), "--draws", "0"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--draws") && text.contains("at least 1"), "{text}");
    assert!(!text.contains("regressed"), "no table from no draws:\n{text}");
}

#[test]
fn item17_record_history_into_a_file_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    std::fs::write(tmp.path().join("store"), "not a store").unwrap();
    let (code, text) =
        harness(tmp.path(), &["gate", "--paired", s(&dir), "--json", "v.json", "--record-history", "store"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("store is a regular file, not a directory") && !text.contains("os error"), "{text}");
    assert!(!tmp.path().join("v.json").exists(), "refused before the gate ran");
}

#[test]
fn item18_a_plan_given_as_the_paired_study_is_not_an_evidence_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = study(tmp.path(), SynthSpec::sequential());
    let (code, text) = harness(tmp.path(), &["gate", "--paired", s(&dir.join("plan.toml"))]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("plan.toml: not an evidence directory: a regular file"), "{text}");
    assert!(!text.contains("expected value"), "{text}");
}
