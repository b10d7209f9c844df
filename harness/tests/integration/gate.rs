//! `harness gate` on hand-built evidence directories: `results/matrix.csv` with the
//! real column set (`harness::report::FIELDS`), `results/evidence.json` carrying a
//! real `QualifyOutcome` (parity results, an NLL comparison from `mean_gate`), and a
//! manifest. The rules are the shipped example `plans/gate-ci.toml`. A candidate
//! inside the rules passes (exit 0, JSON beside the candidate, candidate untouched);
//! each rule violated alone fails with exactly its row named (exit 2); a missing
//! cell fails the rows that need it; a baseline file exported from a directory gates
//! exactly like the directory; errors exit 1 and name what is wrong, and a side
//! that is not sealed, complete evidence is refused (exit 2).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harness::commands::gate::{self, GateArgs, GateOutcome, GateReport};
use harness::metrics::FIELDS;
use harness::quality::paired::mean_gate;
use harness::quality::{ArmQualification, Comparison, Mismatch, ParityResult, QUALIFICATION_FORMAT, QualifyOutcome};
use serde_json::{Value, json};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn rules_file() -> PathBuf {
    workspace().join("plans/gate-ci.toml")
}

const ROW_TPUT: &str = "closed-4 throughput";
const ROW_TPS: &str = "closed-4 output tokens/s";
const ROW_TTFT: &str = "open-near p95 TTFT";
const ROW_E2E: &str = "open-near p95 e2e";
const ROW_FAILED: &str = "no failed requests";
const ROW_PARITY: &str = "serial parity";
const ROW_NLL: &str = "NLL bound";
const ALL_ROWS: [&str; 7] = [ROW_TPUT, ROW_TPS, ROW_TTFT, ROW_E2E, ROW_FAILED, ROW_PARITY, ROW_NLL];

/// What one hand-built study holds: the candidate arm's (`k16v8`) medians; the
/// control (`f16`) is fixed. Block b scales the candidate's measures by
/// [1.00, 0.99, 1.01][b % 3], so with 1 or 3 blocks the median is the value here.
#[derive(Clone)]
struct Study {
    blocks: u32,
    cells: Vec<&'static str>,
    request_tput: f64,
    output_tps: f64,
    ttft_p95: f64,
    e2e_p95: f64,
    /// Failed requests of the candidate in block 0, cell open-near.
    failed: u64,
    parity_pass: bool,
    /// Paired NLL differences (candidate - control) over the document panel.
    nll_diffs: Vec<f64>,
    qualification: bool,
}

impl Study {
    fn baseline() -> Study {
        Study {
            blocks: 3,
            cells: vec!["closed-4", "open-near"],
            request_tput: 40.0,
            output_tps: 320.0,
            ttft_p95: 20.0,
            e2e_p95: 60.0,
            failed: 0,
            parity_pass: true,
            nll_diffs: vec![0.0005, -0.0004, 0.0002, 0.0001, -0.0003, 0.0004],
            qualification: true,
        }
    }

    /// A quick single-block candidate, inside every limit: throughput 2% lower,
    /// p95 TTFT 4% higher, p95 e2e 3% lower.
    fn quick_candidate() -> Study {
        Study { blocks: 1, request_tput: 39.2, output_tps: 316.0, ttft_p95: 20.8, e2e_p95: 58.2, ..Study::baseline() }
    }
}

fn load_of(cell: &str) -> (&'static str, &'static str, &'static str) {
    match cell {
        "closed-4" => ("closed-loop concurrency 4", "", "4"),
        _ => ("open-loop 9 req/s poisson", "9.0", ""),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

fn matrix_csv(s: &Study) -> String {
    let mut header: Vec<String> = [
        "block",
        "arm",
        "role",
        "cell",
        "kind",
        "load",
        "offered_rate_rps",
        "concurrency",
        "unit_status",
        "status",
        "summary_error",
        "percentile_method",
    ]
    .map(String::from)
    .to_vec();
    header.extend(FIELDS.iter().map(|(n, _)| n.to_string()));
    header.push("failed_before_headers".into());
    let mut out = header.join(",") + "\n";
    for block in 0..s.blocks {
        for (arm, role) in [("f16", "control"), ("k16v8", "candidate")] {
            for cell in &s.cells {
                let f = [1.0, 0.99, 1.01][block as usize % 3];
                let cand = role == "candidate";
                let failed = if cand && block == 0 && *cell == "open-near" { s.failed } else { 0 };
                let mut v: BTreeMap<&str, String> = BTreeMap::new();
                let (tput, tps, ttft, e2e) = if cand {
                    (s.request_tput, s.output_tps, s.ttft_p95, s.e2e_p95)
                } else {
                    (41.0, 328.0, 19.0, 59.0)
                };
                v.insert("request_throughput_rps", format!("{}", tput * f));
                v.insert("output_token_throughput_tps", format!("{}", tps * f));
                v.insert("ttft_p95_ms", format!("{}", ttft * (2.0 - f)));
                v.insert("e2e_p95_ms", format!("{}", e2e * (2.0 - f)));
                v.insert("requests", "16".into());
                v.insert("completed", format!("{}", 16 - failed));
                v.insert("failed", failed.to_string());
                let (load, rate, conc) = load_of(cell);
                let mut fields: Vec<String> = vec![
                    block.to_string(),
                    arm.into(),
                    role.into(),
                    cell.to_string(),
                    "confirmation".into(),
                    csv_field(load),
                    rate.into(),
                    conc.into(),
                    "completed".into(),
                    "measured".into(),
                    String::new(),
                    "nearest_rank".into(),
                ];
                for (name, _) in FIELDS {
                    fields.push(v.get(name).cloned().unwrap_or_else(|| "1.5".into()));
                }
                fields.push(failed.to_string());
                out.push_str(&(fields.join(",") + "\n"));
            }
        }
    }
    out
}

fn qualification(s: &Study) -> QualifyOutcome {
    let nll = mean_gate(&s.nll_diffs, 0.95, 1.01f64.ln()).expect("NLL gate");
    let mismatches = if s.parity_pass {
        Vec::new()
    } else {
        vec![Mismatch {
            prompt: 3,
            order: "forward".into(),
            first_difference: Some(5),
            http_tokens: 16,
            reference_tokens: 16,
            detail: "token 5 differs".into(),
        }]
    };
    let mut reasons = Vec::new();
    if !s.parity_pass {
        reasons.push("parity: 1 mismatches (prompt 3 forward: token 5 differs)".to_string());
    }
    if !nll.pass {
        reasons.push(format!("nll vs f16: {}", nll.interval));
    }
    QualifyOutcome {
        format: QUALIFICATION_FORMAT.into(),
        study: "ci".into(),
        required: true,
        confidence: 0.95,
        gsm_set: None,
        arms: vec![
            ArmQualification {
                arm: "f16".into(),
                role: "control".into(),
                qualified: true,
                reasons: vec![],
                startup_s: Some(0.5),
                error: None,
                scores: BTreeMap::new(),
            },
            ArmQualification {
                arm: "k16v8".into(),
                role: "candidate".into(),
                qualified: reasons.is_empty(),
                reasons,
                startup_s: Some(0.5),
                error: None,
                scores: BTreeMap::new(),
            },
        ],
        comparisons: vec![Comparison {
            gate: "nll".into(),
            candidate: "k16v8".into(),
            control: "f16".into(),
            pass: nll.pass,
            loss: None,
            detail: nll.interval.clone(),
            nll: Some(nll),
        }],
        parity: vec![ParityResult {
            arm: "k16v8".into(),
            prompts: 8,
            input_tokens: 32,
            output_tokens: 16,
            concurrency: 4,
            reference_argv: vec!["engine".into(), "generate".into()],
            pass: s.parity_pass,
            mismatches,
            rule: "HTTP outputs equal serial outputs token for token, forward and reversed".into(),
        }],
        notes: vec![],
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Writes the study's evidence files under `dir`.
fn write_study(dir: &Path, name: &str, s: &Study) -> PathBuf {
    write(&dir.join("results/matrix.csv"), matrix_csv(s).as_bytes());
    let mut evidence = json!({
        "format": "harness-report-evidence/1",
        "study": name,
        "plan_sha256": "ab".repeat(32),
        "git": { "revision": "0123456789abcdef0123456789abcdef01234567", "dirty": false },
        "percentile_method": "nearest_rank",
    });
    if s.qualification {
        evidence["qualification"] = serde_json::to_value(qualification(s)).unwrap();
    }
    write(&dir.join("results/evidence.json"), serde_json::to_vec_pretty(&evidence).unwrap().as_slice());
    seal(dir, name);
    dir.to_path_buf()
}

/// Writes `dir/manifest.json` over the files there: a finished study, as the gate reads only those.
fn seal(dir: &Path, name: &str) {
    let git =
        harness::evidence::GitInfo { revision: "0123456789abcdef0123456789abcdef01234567".into(), dirty: Some(false) };
    harness::evidence::write_manifest(dir, name, &"ab".repeat(32), git).unwrap();
}

fn args(baseline: &Path, candidate: &Path, json_out: &Path) -> GateArgs {
    GateArgs {
        baseline: Some(baseline.to_path_buf()),
        candidate: Some(candidate.to_path_buf()),
        rules: Some(rules_file()),
        qualification: None,
        json_out: Some(json_out.to_path_buf()),
        export_baseline: None,
        out: None,
        paired: None,
        summary_md: None,
        simulate: Vec::new(),
        draws: 4000,
        seed: 1,
        shift_only: Vec::new(),
        record_history: None,
        history: None,
        plan: None,
    }
}

fn gate_lib(baseline: &Path, candidate: &Path, json_out: &Path) -> GateReport {
    match gate::run(&args(baseline, candidate, json_out)).expect("gate runs") {
        GateOutcome::Gated(r) => r,
        other => panic!("{other:?}"),
    }
}

fn harness(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness")).arg("gate").args(args).output().expect("run harness gate")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn candidate_inside_the_rules_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let base = write_study(&tmp.path().join("base"), "ci-main", &Study::baseline());
    let cand = write_study(&tmp.path().join("cand"), "ci-pr", &Study::quick_candidate());
    let before = snapshot(&cand);
    let o = harness(&[
        "--baseline".as_ref(),
        base.as_os_str(),
        "--candidate".as_ref(),
        cand.as_os_str(),
        "--rules".as_ref(),
        rules_file().as_os_str(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("gate PASSED: 7 rules"), "{out}");
    for row in ALL_ROWS {
        assert!(out.contains(row), "table lacks {row}:\n{out}");
    }
    // The verdict lies beside the candidate, never inside it.
    assert_eq!(snapshot(&cand), before, "the gate changed the candidate directory");
    let json_path = tmp.path().join("cand.gate.json");
    let v: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("default JSON beside the candidate")).unwrap();
    assert_eq!(v["format"], "harness-gate/1");
    assert_eq!(v["passed"], true);
    assert_eq!(v["violations"], 0);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    let tput = rows.iter().find(|r| r["name"] == ROW_TPUT).unwrap();
    assert!((tput["baseline"].as_f64().unwrap() - 40.0).abs() < 1e-9, "{tput}");
    assert!((tput["candidate"].as_f64().unwrap() - 39.2).abs() < 1e-9, "{tput}");
    assert!((tput["regression_pct"].as_f64().unwrap() - 2.0).abs() < 1e-9, "{tput}");
    let ttft = rows.iter().find(|r| r["name"] == ROW_TTFT).unwrap();
    assert!((ttft["regression_pct"].as_f64().unwrap() - 4.0).abs() < 1e-9, "{ttft}");
    assert_eq!(rows.iter().find(|r| r["name"] == ROW_PARITY).unwrap()["candidate"], "pass");
    assert_eq!(v["candidate"]["study"], "ci-pr");
    assert_eq!(v["baseline"]["qualification"], "results/evidence.json#qualification");
}

/// (case, how the candidate differs from the quick candidate, the one row that must fail)
fn violations() -> Vec<(&'static str, Study, &'static str)> {
    let ok = Study::quick_candidate();
    vec![
        ("throughput 4% lower", Study { request_tput: 38.4, ..ok.clone() }, ROW_TPUT),
        ("output tokens/s 5% lower", Study { output_tps: 304.0, ..ok.clone() }, ROW_TPS),
        ("p95 TTFT 6% higher", Study { ttft_p95: 21.2, ..ok.clone() }, ROW_TTFT),
        ("p95 e2e 10% higher", Study { e2e_p95: 66.0, ..ok.clone() }, ROW_E2E),
        ("one failed request", Study { failed: 1, ..ok.clone() }, ROW_FAILED),
        ("parity failed", Study { parity_pass: false, ..ok.clone() }, ROW_PARITY),
        (
            "NLL bound above ln(1.01)",
            Study { nll_diffs: vec![0.011, 0.012, 0.010, 0.013, 0.011, 0.012], ..ok },
            ROW_NLL,
        ),
    ]
}

#[test]
fn each_rule_violated_alone_fails_with_its_row_named() {
    let tmp = tempfile::tempdir().unwrap();
    let base = write_study(&tmp.path().join("base"), "ci-main", &Study::baseline());
    for (i, (case, study, row)) in violations().into_iter().enumerate() {
        let cand = write_study(&tmp.path().join(format!("cand{i}")), "ci-pr", &study);
        let r = gate_lib(&base, &cand, &tmp.path().join(format!("cand{i}.json")));
        assert!(!r.passed, "{case}: passed");
        assert_eq!(r.failed(), vec![row], "{case}: {:#?}", r.rows);
        assert_eq!(r.violations, 1, "{case}");
        let failed = r.row(row).unwrap();
        assert!(!failed.detail.is_empty(), "{case}: a failed row says why");
        let text = GateOutcome::Gated(r.clone()).render_text();
        assert!(text.contains(&format!("FAIL {row}: ")), "{case}:\n{text}");
        assert!(text.contains("gate FAILED: 1 of 7 rules violated"), "{case}:\n{text}");
    }
}

#[test]
fn a_violation_exits_2_and_names_the_row() {
    let tmp = tempfile::tempdir().unwrap();
    let base = write_study(&tmp.path().join("base"), "ci-main", &Study::baseline());
    let study = Study { request_tput: 38.4, ..Study::quick_candidate() };
    let cand = write_study(&tmp.path().join("cand"), "ci-pr", &study);
    let json_out = tmp.path().join("out/verdict.json");
    let o = harness(&[
        "--baseline".as_ref(),
        base.as_os_str(),
        "--candidate".as_ref(),
        cand.as_os_str(),
        "--rules".as_ref(),
        rules_file().as_os_str(),
        "--json".as_ref(),
        json_out.as_os_str(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("FAIL closed-4 throughput: 4.00% lower than the baseline, above the 3% limit"), "{out}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json_out).unwrap()).unwrap();
    assert_eq!((v["passed"].as_bool(), v["violations"].as_u64()), (Some(false), Some(1)));
    let row = v["rows"].as_array().unwrap().iter().find(|r| r["pass"] == false).unwrap();
    assert_eq!(row["name"], ROW_TPUT);
}

#[test]
fn a_missing_cell_or_qualification_fails_the_rows_that_need_it() {
    let tmp = tempfile::tempdir().unwrap();
    let base = write_study(&tmp.path().join("base"), "ci-main", &Study::baseline());
    let study = Study { cells: vec!["closed-4"], ..Study::quick_candidate() };
    let cand = write_study(&tmp.path().join("cand"), "ci-pr", &study);
    let r = gate_lib(&base, &cand, &tmp.path().join("a.json"));
    assert_eq!(r.failed(), vec![ROW_TTFT, ROW_E2E], "{:#?}", r.rows);
    for row in [ROW_TTFT, ROW_E2E] {
        let d = &r.row(row).unwrap().detail;
        assert!(d.contains("cell open-near is missing from the candidate (its cells: closed-4)"), "{d}");
        assert!(r.row(row).unwrap().candidate.is_null());
    }
    // Missing from the baseline instead: named as the baseline's.
    let r = gate_lib(&cand, &base, &tmp.path().join("b.json"));
    assert!(r.row(ROW_TTFT).unwrap().detail.contains("cell open-near is missing from the baseline"));
    // No qualification in the candidate: parity and NLL fail, saying so ...
    let study = Study { qualification: false, ..Study::quick_candidate() };
    let bare = write_study(&tmp.path().join("bare"), "ci-pr", &study);
    let r = gate_lib(&base, &bare, &tmp.path().join("c.json"));
    assert_eq!(r.failed(), vec![ROW_PARITY, ROW_NLL], "{:#?}", r.rows);
    assert!(r.row(ROW_PARITY).unwrap().detail.contains("the candidate has no qualification"));
    // ... and pass when --qualification points at a `harness qualify` directory.
    let q = tmp.path().join("qualify/qualification/qualification.json");
    write(&q, &serde_json::to_vec(&qualification(&Study::quick_candidate())).unwrap());
    seal(&tmp.path().join("qualify"), "qualify");
    let mut a = args(&base, &bare, &tmp.path().join("d.json"));
    a.qualification = Some(tmp.path().join("qualify"));
    let GateOutcome::Gated(r) = gate::run(&a).unwrap() else { panic!() };
    assert!(r.passed, "{:#?}", r.rows);
}

#[test]
fn an_exported_baseline_file_gates_like_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let base = write_study(&tmp.path().join("base"), "ci-main", &Study::baseline());
    let file = tmp.path().join("ci/baseline.json");
    let o = harness(&["--export-baseline".as_ref(), base.as_os_str(), "--out".as_ref(), file.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("12 matrix rows, with its qualification"), "{}", text(&o));
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["format"], "harness-gate-baseline/1");
    assert_eq!(v["study"], "ci-main");
    assert_eq!(v["matrix"].as_array().unwrap().len(), 12);
    for (i, study) in
        [Study::quick_candidate(), Study { ttft_p95: 21.2, ..Study::quick_candidate() }].iter().enumerate()
    {
        let cand = write_study(&tmp.path().join(format!("cand{i}")), "ci-pr", study);
        let from_dir = gate_lib(&base, &cand, &tmp.path().join(format!("dir{i}.json")));
        let from_file = gate_lib(&file, &cand, &tmp.path().join(format!("file{i}.json")));
        assert_eq!(from_dir.rows, from_file.rows, "case {i}");
        assert_eq!(from_file.passed, i == 0);
        assert_eq!(from_file.baseline.source, "baseline-file");
    }
    // A JSON file that is not a baseline file is refused.
    let o = harness(&[
        "--baseline".as_ref(),
        base.join("results/evidence.json").as_os_str(),
        "--candidate".as_ref(),
        base.as_os_str(),
        "--rules".as_ref(),
        rules_file().as_os_str(),
        "--json".as_ref(),
        tmp.path().join("x.json").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("must be a harness-gate-baseline/1 file"), "{}", text(&o));
}

#[test]
fn errors_exit_1_and_say_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let base = write_study(&tmp.path().join("base"), "ci-main", &Study::baseline());
    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[rules]]\nkind = \"latency\"\ncell = \"closed-4\"\nmetric = \"ttft_p95\"\nmax_regression = 5\n",
    )
    .unwrap();
    let run = |rules: &Path, cand: &Path, json: &Path| {
        harness(&[
            "--baseline".as_ref(),
            base.as_os_str(),
            "--candidate".as_ref(),
            cand.as_os_str(),
            "--rules".as_ref(),
            rules.as_os_str(),
            "--json".as_ref(),
            json.as_os_str(),
        ])
    };
    let o = run(&bad, &base, &tmp.path().join("x.json"));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    for want in [
        "rules[0].max_regression: unknown key",
        "rules[0].metric: \"ttft_p95\" is not a latency column",
        "rules[0].max_regression_pct: missing",
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }
    let o = run(&rules_file(), &tmp.path().join("nowhere"), &tmp.path().join("x.json"));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("nowhere: not usable as a gate side: does not exist"), "{}", text(&o));
    // A sealed directory with nothing to gate: undecided (1). An empty one is not
    // evidence at all: refused (2), as is a side whose files differ from its manifest.
    let bare = tmp.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(bare.join("notes.txt"), "nothing to gate\n").unwrap();
    seal(&bare, "bare");
    let o = run(&rules_file(), &bare, &tmp.path().join("x.json"));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("no results/matrix.csv and no qualification.json"), "{}", text(&o));
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = run(&rules_file(), &empty, &tmp.path().join("x.json"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("empty: not an evidence directory"), "{}", text(&o));
    let changed = tmp.path().join("changed");
    write_study(&changed, "ci-pr", &Study::quick_candidate());
    std::fs::write(changed.join("results/matrix.csv"), matrix_csv(&Study::baseline())).unwrap();
    let o = run(&rules_file(), &changed, &tmp.path().join("x.json"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("results/matrix.csv: "), "{}", text(&o));
    let o = run(&rules_file(), &base, &base.join("results/gate.json"));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("is inside the candidate evidence directory"), "{}", text(&o));
    assert!(!base.join("results/gate.json").exists());
    assert!(!tmp.path().join("x.json").exists(), "no verdict is written on an error");
}
