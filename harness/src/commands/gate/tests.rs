//! Unit tests of the gate: rules validation (every problem named by its key), the
//! evaluation of each kind on in-memory sides, and the matrix reader.

use std::collections::BTreeMap;

use super::rules::parse;
use super::*;
use crate::evidence::{RowStatus, UnitState, UnitStatus};

fn mrow(block: u32, arm: &str, role: &str, cell: &str, values: &[(&str, f64)]) -> MatrixRow {
    MatrixRow {
        block,
        arm: arm.into(),
        role: role.into(),
        cell: cell.into(),
        kind: "confirmation".into(),
        load: format!("load of {cell}"),
        unit_status: UnitState::Ended(UnitStatus::Completed),
        status: RowStatus::Measured,
        values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>(),
    }
}

/// Three blocks of arm `new` (candidate) and `old` (control) in cell `c`, with the
/// candidate's throughput and p95 TTFT scaled.
fn side(tput: [f64; 3], ttft: [f64; 3], failed: u64) -> Side {
    let mut rows = Vec::new();
    for b in 0..3u32 {
        let i = b as usize;
        rows.push(mrow(
            b,
            "new",
            "candidate",
            "c",
            &[("request_throughput_rps", tput[i]), ("ttft_p95_ms", ttft[i]), ("failed", failed as f64)],
        ));
        rows.push(mrow(
            b,
            "old",
            "control",
            "c",
            &[("request_throughput_rps", 10.0), ("ttft_p95_ms", 50.0), ("failed", 0.0)],
        ));
    }
    Side {
        format: BASELINE_FORMAT.into(),
        study: Some("s".into()),
        plan_sha256: None,
        git: None,
        evidence: "mem".into(),
        matrix: Some(rows),
        qualification: Some(Qualification {
            source: "mem".into(),
            arms: vec![
                QualArm { arm: "new".into(), role: "candidate".into(), qualified: true, reasons: vec![] },
                QualArm { arm: "old".into(), role: "control".into(), qualified: true, reasons: vec![] },
            ],
            parity: vec![QualParity { arm: "new".into(), pass: true, mismatches: 0, rule: String::new() }],
            comparisons: vec![QualComparison {
                gate: "nll".into(),
                candidate: "new".into(),
                control: "old".into(),
                pass: true,
                upper: Some(0.002),
                limit: Some(0.00995),
                detail: String::new(),
            }],
        }),
    }
}

const RULES: &str = r#"
[[rules]]
name = "tput"
kind = "throughput"
cell = "c"
max_regression_pct = 3

[[rules]]
name = "ttft"
kind = "latency"
cell = "c"
metric = "ttft_p95_ms"
max_regression_pct = 5.0

[[rules]]
name = "fail"
kind = "failures"

[[rules]]
name = "parity"
kind = "parity"

[[rules]]
name = "nll"
kind = "nll"

[[rules]]
name = "qualified"
kind = "qualified"
"#;

fn verdicts(base: &Side, cand: &Side) -> Vec<(String, bool)> {
    let rules = parse(RULES).unwrap();
    evaluate(&rules.rules, base, cand).into_iter().map(|r| (r.name, r.pass)).collect()
}

fn failed(base: &Side, cand: &Side) -> Vec<String> {
    verdicts(base, cand).into_iter().filter(|(_, p)| !p).map(|(n, _)| n).collect()
}

#[test]
fn rules_defaults_and_names() {
    let r = parse(RULES).unwrap();
    assert_eq!(r.rules.len(), 6);
    assert_eq!(
        r.rules[0].check,
        Check::Throughput {
            cell: "c".into(),
            metric: "request_throughput_rps".into(),
            statistic: Statistic::Median,
            max_regression_pct: 3.0
        }
    );
    assert_eq!(r.rules[0].arms, ArmSelect::Role("candidate".into()));
    assert_eq!(r.rules[2].check, Check::Failures { cell: None, max_failed: 0 });
    assert_eq!(r.rules[2].arms, ArmSelect::All);
    match &r.rules[4].check {
        Check::Bound { gate, max_upper, .. } => assert!(gate == "nll" && (*max_upper - 1.01f64.ln()).abs() < 1e-15),
        other => panic!("{other:?}"),
    }
    let unnamed =
        parse("[[rules]]\nkind = \"latency\"\ncell = \"x\"\nmetric = \"e2e_p95_ms\"\nmax_regression_pct = 1").unwrap();
    assert_eq!(unnamed.rules[0].name, "latency x e2e_p95_ms median");
}

#[test]
fn rules_errors_name_every_key() {
    let text = r#"
formt = 1
[[rules]]
name = "a"
kind = "throughput"
cell = "c"
metric = "ttft_p95_ms"
max_regresion_pct = 3

[[rules]]
name = "a"
kind = "latency"
cell = "c"
metric = "ttft_p95"
max_regression_pct = -1
statistic = "p90"

[[rules]]
kind = "failures"
metric = "failed"
max_failed = -2

[[rules]]
kind = "speed"

[[rules]]
kind = "parity"
arm = "x"
role = "candidate"
"#;
    let problems = parse(text).unwrap_err();
    let joined = problems.join("\n");
    for want in [
        "formt: unknown key",
        "rules[0].max_regresion_pct: unknown key",
        "rules[0].metric: \"ttft_p95_ms\" is not a throughput column",
        "rules[0].max_regression_pct: missing",
        "rules[1].metric: \"ttft_p95\" is not a latency column",
        "rules[1].max_regression_pct: must be zero or positive",
        "rules[1].statistic: \"p90\" is not one of median, mean, worst",
        "rules[2].metric: does not apply to kind \"failures\"",
        "rules[2].max_failed: must be an integer >= 0",
        "rules[3].kind: \"speed\" is not one of",
        "rules[4].role: set `arm` or `role`, not both",
    ] {
        assert!(joined.contains(want), "missing {want:?} in:\n{joined}");
    }
    assert!(parse("").unwrap_err()[0].contains("rules: missing"));
    let dup = parse("[[rules]]\nname = \"p\"\nkind = \"parity\"\n[[rules]]\nname = \"p\"\nkind = \"nll\"").unwrap_err();
    assert_eq!(dup, vec!["rules[1].name: duplicate rule name \"p\" (also rules[0])"]);
}

#[test]
fn identical_sides_pass_every_rule() {
    let s = side([10.0, 11.0, 12.0], [50.0, 51.0, 52.0], 0);
    assert!(failed(&s, &s).is_empty(), "{:?}", verdicts(&s, &s));
}

#[test]
fn each_violation_fails_only_its_row() {
    let base = side([10.0, 10.0, 10.0], [50.0, 50.0, 50.0], 0);
    // Median throughput 9.6 is 4% lower: over 3%. 9.8 (2% lower) passes.
    assert_eq!(failed(&base, &side([9.6, 9.6, 20.0], [50.0; 3], 0)), ["tput"]);
    assert!(failed(&base, &side([9.8, 9.7, 9.8], [50.0; 3], 0)).is_empty());
    // Median p95 TTFT 53 is 6% higher: over 5%; exactly 5% passes.
    assert_eq!(failed(&base, &side([10.0; 3], [53.0, 53.0, 40.0], 0)), ["ttft"]);
    assert!(failed(&base, &side([10.0; 3], [52.5, 52.5, 52.5], 0)).is_empty());
    assert_eq!(failed(&base, &side([10.0; 3], [50.0; 3], 1)), ["fail"]);
    let mut c = side([10.0; 3], [50.0; 3], 0);
    c.qualification.as_mut().unwrap().parity[0].pass = false;
    assert_eq!(failed(&base, &c), ["parity"]);
    let mut c = side([10.0; 3], [50.0; 3], 0);
    c.qualification.as_mut().unwrap().comparisons[0].upper = Some(0.0100);
    assert_eq!(failed(&base, &c), ["nll"]);
    let mut c = side([10.0; 3], [50.0; 3], 0);
    c.qualification.as_mut().unwrap().arms[1].qualified = false;
    assert_eq!(failed(&base, &c), ["qualified"]);
}

#[test]
fn missing_data_fails_and_is_named() {
    let base = side([10.0; 3], [50.0; 3], 0);
    let rules = parse(RULES).unwrap();
    // No qualification: parity, nll, qualified fail and say so.
    let mut c = side([10.0; 3], [50.0; 3], 0);
    c.qualification = None;
    let rows = evaluate(&rules.rules, &base, &c);
    for r in rows.iter().filter(|r| ["parity", "nll", "qualified"].contains(&r.name.as_str())) {
        assert!(!r.pass && r.detail.contains("has no qualification"), "{r:?}");
    }
    // A block without p95 TTFT (no samples) and an unmeasured block.
    let mut c = side([10.0; 3], [50.0; 3], 0);
    let m = c.matrix.as_mut().unwrap();
    m[0].values.remove("ttft_p95_ms");
    m[2].status = RowStatus::NotRun;
    let rows = evaluate(&rules.rules, &base, &c);
    let ttft = rows.iter().find(|r| r.name == "ttft").unwrap();
    assert!(!ttft.pass && ttft.detail.contains("candidate block 0 arm new cell c has no ttft_p95_ms"), "{ttft:?}");
    assert!(ttft.detail.contains("candidate block 1 arm new cell c was not measured (not_run"), "{ttft:?}");
    let fail = rows.iter().find(|r| r.name == "fail").unwrap();
    assert!(!fail.pass && fail.detail.contains("block 1 arm new cell c not measured"), "{fail:?}");
    // A role matching two arms is not silently resolved.
    let mut c = side([10.0; 3], [50.0; 3], 0);
    for r in c.matrix.as_mut().unwrap() {
        r.role = "candidate".into();
    }
    let rows = evaluate(&rules.rules, &base, &c);
    assert!(rows[0].detail.contains("matches 2 arms"), "{:?}", rows[0]);
    // Different loads are not comparable.
    let mut c = side([10.0; 3], [50.0; 3], 0);
    for r in c.matrix.as_mut().unwrap() {
        r.load = "closed-loop concurrency 8".into();
    }
    let rows = evaluate(&rules.rules, &base, &c);
    assert!(!rows[0].pass && rows[0].detail.contains("the loads differ"), "{:?}", rows[0]);
}

#[test]
fn statistics_and_directions() {
    let base = side([10.0, 10.0, 10.0], [50.0; 3], 0);
    let cand = side([8.0, 10.0, 10.0], [50.0, 50.0, 60.0], 0);
    let rules = |stat: &str| {
        parse(&format!(
            "[[rules]]\nname = \"t\"\nkind = \"throughput\"\ncell = \"c\"\nstatistic = \"{stat}\"\nmax_regression_pct = 5\n\
             [[rules]]\nname = \"l\"\nkind = \"latency\"\ncell = \"c\"\nmetric = \"ttft_p95_ms\"\nstatistic = \"{stat}\"\n\
             max_regression_pct = 5\n"
        ))
        .unwrap()
    };
    let rows = evaluate(&rules("median").rules, &base, &cand);
    assert!(rows.iter().all(|r| r.pass), "{rows:?}");
    let rows = evaluate(&rules("worst").rules, &base, &cand);
    assert_eq!((rows[0].candidate.as_f64(), rows[1].candidate.as_f64()), (Some(8.0), Some(60.0)));
    assert_eq!(
        (rows[0].regression_pct.map(f64::round), rows[1].regression_pct.map(f64::round)),
        (Some(20.0), Some(20.0))
    );
    assert!(rows.iter().all(|r| !r.pass));
    let rows = evaluate(&rules("mean").rules, &base, &cand);
    assert!((rows[0].change_pct.unwrap() + 20.0 / 3.0).abs() < 1e-9, "{:?}", rows[0]);
    // Better candidates pass with a negative regression.
    let rows = evaluate(&rules("median").rules, &base, &side([20.0; 3], [25.0; 3], 0));
    assert_eq!((rows[0].regression_pct, rows[1].regression_pct), (Some(-100.0), Some(-50.0)));
}

#[test]
fn arm_names_and_baseline_arm() {
    let base = side([10.0; 3], [50.0; 3], 0);
    let mut cand = side([10.0; 3], [50.0; 3], 0);
    for r in cand.matrix.as_mut().unwrap().iter_mut().filter(|r| r.arm == "new") {
        r.arm = "newer".into();
        r.values.insert("request_throughput_rps".into(), 5.0);
    }
    let text = |extra: &str| {
        parse(&format!("[[rules]]\nname = \"t\"\nkind = \"throughput\"\ncell = \"c\"\nmax_regression_pct = 3\n{extra}"))
            .unwrap()
    };
    let rows = evaluate(&text("arm = \"newer\"").rules, &base, &cand);
    assert!(!rows[0].pass && rows[0].detail.contains("no arm newer in cell c of the baseline"), "{:?}", rows[0]);
    let rows = evaluate(&text("arm = \"newer\"\nbaseline_arm = \"new\"").rules, &base, &cand);
    assert_eq!(rows[0].regression_pct, Some(50.0));
    let rows = evaluate(&text("arm = \"old\"").rules, &base, &cand);
    assert!(rows[0].pass, "{:?}", rows[0]);
}

#[test]
fn matrix_reader_reads_by_column_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("matrix.csv");
    std::fs::write(
        &path,
        "cell,block,arm,role,kind,load,unit_status,status,summary_error,failed,ttft_p95_ms,failed_timeout\n\
         c,0,a,candidate,confirmation,\"open-loop 1.5 req/s gamma burstiness 2, x\",completed,measured,,1,12.5,1\n\
         c,1,a,candidate,confirmation,x,server_died,not_run,,,,\n",
    )
    .unwrap();
    let rows = read_matrix(&path).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].load, "open-loop 1.5 req/s gamma burstiness 2, x");
    assert_eq!(rows[0].values.get("ttft_p95_ms"), Some(&12.5));
    assert_eq!(rows[0].values.get("failed_timeout"), Some(&1.0));
    assert!(rows[1].values.is_empty() && !rows[1].measured());
    std::fs::write(&path, "block,arm\n0,a\n").unwrap();
    assert!(read_matrix(&path).unwrap_err().to_string().contains("no column \"role\""));
    std::fs::write(&path, "block,arm,role,cell,kind,load,unit_status,status,failed\nx,a,c,c,k,l,u,s,1\n").unwrap();
    assert!(read_matrix(&path).unwrap_err().to_string().contains("row 2: block \"x\""));
    // A status the harness never writes is refused, not read as "not measured".
    std::fs::write(&path, "block,arm,role,cell,kind,load,unit_status,status,failed\n0,a,c,c,k,l,completed,passed,1\n")
        .unwrap();
    assert!(read_matrix(&path).unwrap_err().to_string().contains("row 2: status \"passed\""));
    std::fs::write(
        &path,
        "block,arm,role,cell,kind,load,unit_status,status,failed\n0,a,c,c,k,l,server_failed,measured,1\n",
    )
    .unwrap();
    assert!(read_matrix(&path).unwrap_err().to_string().contains("row 2: unit_status \"server_failed\""));
}
