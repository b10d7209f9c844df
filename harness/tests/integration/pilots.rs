//! In-study pilots (`[pilots]`) on the real engine binary over HTTP with a synthetic
//! model: `harness run` runs the control arm's closed-loop pilots first on fresh
//! servers into `pilots/`, derives the loads by the formula, records them with the
//! pilot records' hashes in `pilots/derived.json` (listed in the manifest), and runs
//! the confirmation cells at those loads while `plan.toml` stays byte-identical;
//! `harness replay` passes, names a changed byte of a pilot record (behind a
//! rewritten manifest) and a changed derived load; a study killed in the pilot
//! phase resumes, reusing the finished pilot and repeating the partial one, and
//! says which; `plan check` refuses a candidate arm in the pilots.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::tamper::{copy_dir, flip_digit, rewrite_manifest};
use common::*;
use harness::commands::replay::{ReplayOutcome, Status, replay_dir};

const PILOTS_CHECK: &str = "pilots: rates from pilots/ raw records, derived loads by the formula";
const POWER_CHECK: &str = "evidence.json: power from the pilots' noise";

/// Two arms, pilots of the control only (`runs` runs of 6 requests at closed-loop 2),
/// a closed and an open cell at derived count and near load, `blocks` blocks.
fn plan_text(model: &Path, runs: u32, slow: bool, blocks: u32) -> String {
    let scales = model.join("scales.json").display().to_string();
    let extra: &[&str] = if slow { &["--debug-step-delay-us", "20000"] } else { &[] };
    let f16 = serve_argv(model, &["--kv-format", "f16"], extra);
    let k16v8 = serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &scales], extra);
    let plan = TestPlan { blocks, ..TestPlan::new("pilots", 21) };
    let mut plan = plan.arm("f16", "control", &f16).arm("k16v8", "candidate", &k16v8);
    plan.cells.push(
        "[[cells]]\nname = \"closed-2\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 2\n\
         count = \"derived:count\"\n"
            .into(),
    );
    plan.cells.push(
        "[[cells]]\nname = \"open-near\"\nkind = \"confirmation\"\nload = \"open\"\nrate = \"derived:near\"\n\
         count = \"derived:count\"\n"
            .into(),
    );
    plan.tail(&format!(
        "[pilots]\narms = [\"f16\"]\nconcurrency = 2\ncount = 6\nruns = {runs}\n\n\
         [derive]\nnear_fraction = 0.9\ncount_floor = 6\ncount_duration_s = 0.5\ncount_multiple = 2\n\n\
         [analysis]\nalpha = 0.05\n\n[[hypotheses]]\nmetric = \"throughput_rps\"\ncell = \"closed-2\"\n\
         candidate = \"k16v8\"\ncontrol = \"f16\"\nthreshold = 0.01\n"
    ))
    .render()
}

fn replay(dir: &Path) -> ReplayOutcome {
    replay_dir(dir).unwrap_or_else(|e| panic!("replay {}: {e}", dir.display()))
}

/// The power section's one hypothesis row of `report`.
fn row_of_power(report: &str) -> &str {
    let at = report.find("## Power of this study").expect("a power section");
    report[at..].lines().find(|l| l.contains("(throughput_rps in closed-2)")).unwrap_or_default()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).lines().count()
}

#[test]
fn pilots_run_first_derive_the_loads_and_replay_recomputes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let text = plan_text(&model, 2, false, 5);
    let (out, stdout) = run_study_ok(tmp.path(), &text);
    assert!(stdout.contains("pilots: derived from the pilots: near "), "{stdout}");
    // The frozen plan is the plan as written: the derived values are a result.
    assert_eq!(std::fs::read(out.join("plan.toml")).unwrap(), text.as_bytes());
    check_manifest(&out, text.as_bytes());

    let rec = read_json(&out.join("pilots/derived.json"));
    assert_eq!(rec["format"], "harness-pilots/1");
    let pilots = rec["pilots"].as_array().unwrap();
    assert_eq!(pilots.len(), 2, "{rec}");

    // plan check says why it cannot estimate the pilot-rated cells, and estimates
    // them from this run's pilots when asked.
    let plan = tmp.path().join("plan.toml");
    let check = |extra: &[&std::ffi::OsStr]| {
        let o =
            std::process::Command::new(harness_bin()).args(["plan", "check"]).arg(&plan).args(extra).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (_, plain, _) = check(&[]);
    assert!(plain.contains("pilots first: 2 run(s) of") && plain.contains("at a rate they measure"), "{plain}");
    assert!(
        plain.contains("not estimated: closed loops and pilot-derived loads") && plain.contains("--pilots-from"),
        "{plain}"
    );
    let (code, with, err) = check(&["--pilots-from".as_ref(), out.as_os_str()]);
    assert_eq!(code, Some(0), "{with}\n{err}");
    assert!(
        with.contains("estimated with the pilot rates of") && with.contains("the study measures its own"),
        "{with}"
    );
    assert!(!with.contains("not estimated") && with.contains("pilots first: 2 run(s) of"), "{with}");
    let slower = rec["pilot_rates"].as_array().unwrap().iter().filter_map(|r| r.as_f64()).fold(f64::INFINITY, f64::min);
    assert!(with.contains(&format!("at {slower:.2} req/s")), "{with}");
    let (code, _, err) = check(&["--pilots-from".as_ref(), tmp.path().join("nothing").as_os_str()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--pilots-from") && err.contains("pilots/derived.json"), "{err}");
    for (i, p) in pilots.iter().enumerate() {
        assert_eq!((p["run"].as_u64(), p["arm"].as_str()), (Some(i as u64), Some("f16")));
        let records = out.join(p["records"].as_str().unwrap());
        assert_eq!(records, out.join(format!("pilots/raw/b{i}/f16/pilot.requests.jsonl")));
        assert_eq!(harness::evidence::sha256_hex(&std::fs::read(&records).unwrap()), p["sha256"].as_str().unwrap());
        assert_eq!(lines(&records), 6);
        assert!(out.join(format!("pilots/raw/b{i}/f16/unit.json")).is_file());
    }
    assert!(!out.join("pilots/raw/b0/k16v8").exists(), "the candidate is never piloted");
    // The loads are the formula's output for the recorded rates.
    let rates: Vec<f64> = rec["pilot_rates"].as_array().unwrap().iter().map(|r| r.as_f64().unwrap()).collect();
    let plan = harness::plan::parse(&text).unwrap();
    let (_, loads) = plan.with_pilot_rates(&rates).unwrap();
    assert_eq!(rec["rates_tenths"]["near"].as_u64(), loads.rates_tenths.get("near").copied());
    let count = loads.count.unwrap();
    assert_eq!(rec["count"].as_u64(), Some(count));
    // The confirmation cells ran at them: traces, records and the per-cell table.
    for cell in ["closed-2", "open-near"] {
        assert_eq!(lines(&out.join(format!("inputs/traces/{cell}.trace.jsonl"))) as u64, count);
        assert_eq!(lines(&out.join(format!("raw/b4/k16v8/{cell}.requests.jsonl"))) as u64, count);
    }
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(
        manifest.contains("\"pilots/derived.json\"") && manifest.contains("pilots/raw/b1/f16/pilot.requests.jsonl")
    );

    // The power summary at the top of the report, its noise from the two pilot runs.
    let report = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    let top = report.find("## Power of this study (noise from its own pilots)").expect("a power summary");
    assert!(top < report.find("## Claims").unwrap_or(usize::MAX), "{report}");
    assert!(report.contains("this study could detect +"), "{report}");
    assert!(report.contains("with 80% probability at 5 blocks"), "{report}");
    assert!(report.contains("times sqrt(2) because a paired log-ratio is a difference of two runs"), "{report}");
    assert!(!report.contains("never scaled by sqrt(2)"), "{report}");
    // `plan power --noise` on the study's evidence: the SD is that of a difference of
    // two runs, |ln(rate0 / rate1)| for throughput (two runs, SD of ln x sqrt(2)).
    let json = tmp.path().join("power.json");
    let o = Command::new(harness_bin())
        .args(["plan", "power"])
        .arg(tmp.path().join("plan.toml"))
        .arg("--noise")
        .arg(&out)
        .args(["--draws", "500", "--json"])
        .arg(&json)
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let power = read_json(&json);
    let sd = power["hypotheses"][0]["noise"]["sd"].as_f64().unwrap();
    let want = (rates[0] / rates[1]).ln().abs();
    assert!((sd - want).abs() < 1e-9, "noise SD {sd}, expected {want}");
    assert_eq!(power["hypotheses"][0]["noise"]["blocks"], serde_json::json!([0, 1]));

    let o = replay(&out);
    assert!(o.all_passed(), "{}", o.render_table(10));
    let c = o.check(PILOTS_CHECK).expect("the pilots check");
    assert_eq!(c.status, Status::Pass, "{}", o.render_table(10));

    // One changed byte of a pilot record, behind a rewritten manifest: named.
    let dir = tmp.path().join("flipped");
    copy_dir(&out, &dir);
    let rel = "pilots/raw/b1/f16/pilot.requests.jsonl";
    flip_digit(&dir, rel, 200);
    rewrite_manifest(&dir);
    let o = replay(&dir);
    let c = o.check(PILOTS_CHECK).unwrap();
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
    assert!(c.mismatches.iter().any(|m| m.file == rel && m.field == "sha256"), "{}", o.render_table(10));

    // A derived load changed in pilots/derived.json: named, field by field.
    let dir = tmp.path().join("near");
    copy_dir(&out, &dir);
    let path = dir.join("pilots/derived.json");
    let mut v = read_json(&path);
    let near = v["rates_tenths"]["near"].as_u64().unwrap();
    v["rates_tenths"]["near"] = (near + 1).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    rewrite_manifest(&dir);
    let o = replay(&dir);
    let c = o.check(PILOTS_CHECK).unwrap();
    assert!(
        c.mismatches.iter().any(|m| m.file == "pilots/derived.json" && m.field == "derived near"),
        "{}",
        o.render_table(10)
    );
    assert!(!o.all_passed());
}

fn harness_cmd(args: &[&str], plan: &Path, out: &Path) -> Command {
    let mut c = Command::new(harness_bin());
    c.args(args).arg(out).arg(plan).current_dir(workspace());
    c
}

#[test]
fn a_study_killed_in_the_pilot_phase_reuses_the_finished_pilot_and_repeats_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let text = plan_text(&model, 2, true, 2);
    let plan: PathBuf = tmp.path().join("plan.toml");
    std::fs::write(&plan, &text).unwrap();
    let out = tmp.path().join("evidence");
    let mut child = harness_cmd(&["run", "--quiet", "--out"], &plan, &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn harness");
    let marker = out.join("pilots/raw/b0/f16/unit.json");
    let deadline = Instant::now() + Duration::from_secs(180);
    while !marker.is_file() {
        assert!(Instant::now() < deadline, "the first pilot never finished");
        assert!(child.try_wait().unwrap().is_none(), "the harness ended before the kill");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.join("pilots/derived.json").exists() && !out.join("inputs").exists());

    let r = harness_cmd(&["run", "--quiet", "--resume"], &plan, &out).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&r.stderr));
    assert!(r.status.success(), "{said}");
    assert!(said.contains("resume: pilot pilots/b0/f16 reused"), "{said}");
    assert!(said.contains("resume: pilot pilots/b1/f16 runs now"), "{said}");
    check_manifest(&out, text.as_bytes());
    let rec = read_json(&out.join("pilots/derived.json"));
    let sessions: Vec<u64> = rec["pilots"].as_array().unwrap().iter().map(|p| p["session"].as_u64().unwrap()).collect();
    assert_eq!(sessions, [0, 1], "{rec}");
    let o = replay(&out);
    assert!(o.all_passed(), "{}", o.render_table(10));
}

#[test]
fn plan_check_refuses_a_candidate_in_the_pilots() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    let text = plan_text(&model, 1, false, 2).replace("arms = [\"f16\"]", "arms = [\"k16v8\"]");
    let path = tmp.path().join("plan.toml");
    std::fs::write(&path, text).unwrap();
    let o = Command::new(harness_bin()).args(["plan", "check"]).arg(&path).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("pilots.arms[0]: arm \"k16v8\" is a candidate: pilots run control arms only"), "{said}");
}

#[test]
fn one_pilot_run_per_arm_gives_no_noise_estimate_and_the_report_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let (out, _) = run_study_ok(tmp.path(), &plan_text(&model, 1, false, 2));
    let report = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    assert!(report.contains("## Power of this study"), "{report}");
    assert!(report.contains("a noise estimate needs at least 2 pilot runs of the same arm"), "{report}");
    assert!(!report.contains("this study could detect"), "{report}");
    // The claims table says so beside the claim, evidence.json records why, and replay
    // agrees that there is no estimate.
    assert!(report.contains("| n/a: no noise estimate (see Power of this study) |"), "{report}");
    let ev = read_json(&out.join("results/evidence.json"));
    let why = ev["power"]["unavailable"].as_str().unwrap_or_else(|| panic!("{}", ev["power"]));
    assert!(why.contains("at least 2 pilot runs"), "{why}");
    assert_eq!(ev["power"]["hypotheses"], serde_json::json!([]));
    let o = replay(&out);
    assert_eq!(o.check(POWER_CHECK).map(|c| c.status), Some(Status::Pass), "{}", o.render_table(10));
}

/// The power figure beside every claim (report.md's claims table), the same numbers
/// in evidence.json (noise SD, degrees of freedom, pilot values, detectable effects,
/// seed and draws), recomputed by replay, which names a changed one.
#[test]
fn power_beside_every_claim_is_in_evidence_json_and_replay_names_a_changed_value() {
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let (out, _) = run_study_ok(tmp.path(), &plan_text(&model, 2, false, 5));
    let ev = read_json(&out.join("results/evidence.json"));
    let power = &ev["power"];
    assert_eq!(power["noise_source"], "pilots", "{power}");
    assert_eq!((power["blocks"].as_u64(), power["seed"].as_u64()), (Some(5), Some(21)), "{power}");
    assert_eq!((power["family"].as_u64(), power["draws"].as_u64()), (Some(1), Some(10_000)), "{power}");
    let h = &power["hypotheses"][0];
    let rec = read_json(&out.join("pilots/derived.json"));
    assert_eq!(h["pilot_values"], rec["pilot_rates"], "{h}");
    assert_eq!((h["pilot_runs"].clone(), h["noise_df"].as_u64()), (serde_json::json!([0, 1]), Some(1)), "{h}");
    let rates = rec["pilot_rates"].as_array().unwrap();
    let want = (rates[0].as_f64().unwrap() / rates[1].as_f64().unwrap()).ln().abs();
    assert!((h["noise_sd"].as_f64().unwrap() - want).abs() < 1e-9, "{h}");
    assert!(h["noise_sd_upper"].as_f64().unwrap() > want, "{h}");
    assert_eq!(h["proxy"], false, "closed-2 is the pilots' load shape: {h}");
    let det = h["detectable"].as_array().unwrap();
    let bases: Vec<(&str, f64)> =
        det.iter().map(|d| (d["sd_basis"].as_str().unwrap(), d["probability"].as_f64().unwrap())).collect();
    assert_eq!(bases, [("estimate", 0.8), ("estimate", 0.95), ("upper_bound", 0.8), ("upper_bound", 0.95)]);

    // The claims table carries the 80% figure of the power summary in its last column.
    let report = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    let header = "| detectable with 80% probability at 5 blocks (at the SD's upper bound) |";
    let claims = &report[report.find("## Claims").unwrap()..];
    let table_header = claims.lines().find(|l| l.starts_with("| hypothesis |")).unwrap();
    assert!(table_header.ends_with(header), "{table_header}");
    let row = claims.lines().find(|l| l.starts_with(&format!("| {} |", h["name"].as_str().unwrap()))).unwrap();
    let figure = |x: &serde_json::Value| {
        x.as_f64().map_or("no effect within the search".to_string(), |x| format!("{:+.1}%", x * 100.0))
    };
    let cell = format!("| {} ({})", figure(&det[0]["rule_simulated"]), figure(&det[2]["rule_simulated"]));
    assert!(row.contains(&cell), "{row} lacks {cell}");
    assert!(
        report.contains(&format!("this study could detect {} with 80% probability", figure(&det[0]["rule_simulated"])))
    );

    // The realised noise beside the assumption: the SD (n - 1) of the 5 confirmation
    // blocks' ln(k16v8 / f16) throughputs, from the cell summaries.
    let logs: Vec<f64> = (0..5)
        .map(|b| {
            let rate = |arm: &str| {
                read_json(&out.join(format!("results/cells/b{b}-{arm}-closed-2.summary.json")))
                    ["request_throughput_rps"]
                    .as_f64()
                    .unwrap()
            };
            (rate("k16v8") / rate("f16")).ln()
        })
        .collect();
    let mean = logs.iter().sum::<f64>() / 5.0;
    let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
    assert!((h["realised_sd"].as_f64().unwrap() - sd).abs() < 1e-9, "{h} vs {sd}");
    assert_eq!(h["realised_df"].as_u64(), Some(4), "{h}");
    let optimistic = sd > 2.0 * h["noise_sd"].as_f64().unwrap();
    assert_eq!(h["realised_optimistic"].as_bool(), Some(optimistic), "{h}");
    let realised = figure(&h["realised_detectable_80"]);
    assert!(
        row_of_power(&report).contains(&format!("{sd:.4} (5 blocks): {realised} with 80% probability")),
        "{report}"
    );
    assert_eq!(report.contains("**The power statement above was optimistic"), optimistic, "{report}");

    let o = replay(&out);
    assert!(o.all_passed(), "{}", o.render_table(10));
    assert_eq!(o.check(POWER_CHECK).map(|c| c.status), Some(Status::Pass), "{}", o.render_table(10));

    // A changed power value, behind a rewritten manifest: named by field.
    for (pointer, field) in [
        ("/power/hypotheses/0/detectable/0/rule_simulated", "detectable[estimate 0.8].rule_simulated"),
        ("/power/hypotheses/0/noise_sd", "noise_sd"),
        ("/power/hypotheses/0/noise_df", "noise_df"),
        ("/power/hypotheses/0/realised_sd", "realised_sd"),
        ("/power/hypotheses/0/realised_df", "realised_df"),
    ] {
        let dir = tmp.path().join(field.replace(['[', ']', ' ', '.'], "_"));
        copy_dir(&out, &dir);
        let path = dir.join("results/evidence.json");
        let mut v = read_json(&path);
        let x = v.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}"));
        *x = match x.as_u64() {
            Some(n) => (n + 1).into(),
            None => (x.as_f64().unwrap() * 1.01 + 0.001).into(),
        };
        std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        rewrite_manifest(&dir);
        let o = replay(&dir);
        let c = o.check(POWER_CHECK).unwrap();
        assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
        let want = format!("power.hypotheses[{}].{field}", h["name"].as_str().unwrap());
        assert!(
            c.mismatches.iter().any(|m| m.file == "results/evidence.json" && m.field == want),
            "{want}: {}",
            o.render_table(10)
        );
    }
}

#[test]
fn a_pilot_that_gives_no_rate_stops_the_study_before_any_block() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    let engine = engine_bin().display().to_string();
    // The control (the first arm) cannot start: its pilot has no rate.
    let text = plan_text(&model, 1, false, 2).replacen(&engine, "/nonexistent/engine", 1);
    let path = tmp.path().join("plan.toml");
    std::fs::write(&path, &text).unwrap();
    let out = tmp.path().join("evidence");
    let o = run_harness(&path, &out);
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("pilot pilots/b0/f16 gave no rate (start_failed"), "{said}");
    assert!(said.contains("--resume"), "{said}");
    assert!(out.join("pilots/raw/b0/f16/unit.json").is_file());
    assert!(!out.join("inputs").exists() && !out.join("raw").exists() && !out.join("manifest.json").exists());
}
