//! End to end: `harness run` on the real engine (synthetic model) writes the report
//! (matrix.csv, matrix.parquet, evidence.json, report.md, figures) into the manifest,
//! and `harness report DIR` regenerates every report file byte for byte from the raw
//! evidence alone, keeps the manifest valid, and warns when a stored summary no
//! longer matches its recomputation. Checks structure, not speed.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::tamper::rewrite_manifest;
use common::*;
use polars_io::SerReader;
use polars_io::parquet::read::ParquetReader;

fn plan_text(model: &Path) -> String {
    let f16 = serve_argv(model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan {
        output_tokens: 5,
        settle_s: 0.1,
        descriptive_blocks: 1,
        arm_order: "alternate",
        cell_order: "alternate",
        ..TestPlan::new("report-test", 3)
    };
    plan.arm("base", "control", &f16)
        .arm("same", "candidate", &f16)
        .closed("closed-2", "confirmation", 2, 5)
        .open("open", "confirmation", 20.0, 5)
        .open("open-low", "descriptive", 10.0, 3)
        .tail(
            r#"[analysis]
alpha = 0.05

[[hypotheses]]
name = "closed-throughput"
metric = "throughput_rps"
cell = "closed-2"
candidate = "same"
control = "base"
threshold = 0.01

[[hypotheses]]
name = "open-e2e-p95"
metric = "e2e_p95_intended"
cell = "open"
candidate = "same"
control = "base"
threshold = 0.05
"#,
        )
        .render()
}

/// Every file under `results/` that the report owns, with its bytes.
fn report_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for name in ["matrix.csv", "matrix.parquet", "evidence.json", "report.md"] {
        out.insert(name.to_string(), std::fs::read(dir.join("results").join(name)).expect(name));
    }
    for e in std::fs::read_dir(dir.join("results/figures")).expect("figures") {
        let p = e.expect("entry").path();
        let name = format!("figures/{}", p.file_name().expect("name").to_string_lossy());
        out.insert(name, std::fs::read(&p).expect("figure"));
    }
    out
}

fn harness_report(dir: &Path) -> String {
    let out = Command::new(harness_bin()).arg("report").arg(dir).output().expect("harness report");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "harness report failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn run_writes_the_report_and_report_regenerates_it_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text = plan_text(&model);
    let (out, stdout) = run_study_ok(tmp.path(), &text);
    assert!(stdout.contains("claims:") && stdout.contains("closed-throughput"), "{stdout}");
    assert!(stdout.contains("report: ") && stdout.contains("results/report.md"), "{stdout}");
    check_manifest(&out, text.as_bytes());

    // The unpooled matrix: one row per (block, arm, cell): 2 x 2 x 2 + 1 x 2 x 1.
    let csv = std::fs::read_to_string(out.join("results/matrix.csv")).expect("matrix.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    for col in ["block", "arm", "cell", "kind", "request_throughput_rps", "e2e_from_intended_p95_ms", "failed"] {
        assert!(header.contains(&col), "{col} missing from {header:?}");
    }
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 10, "{csv}");
    assert!(rows.iter().all(|r| r.split(',').count() >= header.len()), "{csv}");
    let parquet = std::fs::read(out.join("results/matrix.parquet")).expect("parquet");
    assert!(parquet.starts_with(b"PAR1") && parquet.ends_with(b"PAR1"), "parquet magic");
    let df = ParquetReader::new(std::io::Cursor::new(parquet)).finish().expect("read matrix.parquet");
    assert_eq!(df.shape(), (rows.len(), header.len()), "parquet and CSV hold the same matrix");

    // Every derived number: two hypotheses over two blocks, never "supported" with
    // two blocks (the smallest sign-test p is 0.25).
    let ev = read_json(&out.join("results/evidence.json"));
    assert_eq!(ev["format"], "harness-report-evidence/1");
    assert_eq!(ev["plan_sha256"], harness::evidence::sha256_hex(text.as_bytes()));
    let hs = ev["hypotheses"].as_array().expect("hypotheses");
    assert_eq!(hs.len(), 2);
    for h in hs {
        assert_eq!(h["blocks"].as_array().expect("blocks").len(), 2, "{h}");
        let claim = h["claim"]["claim"].as_str().expect("claim");
        assert!(claim == "not_supported" || claim == "blocked", "{h}");
        if claim == "not_supported" {
            assert_eq!(h["sign_test"]["n"], 2);
            assert!(h["holm"]["adjusted_p"].as_f64().expect("holm p") >= 0.25);
        }
    }
    assert_eq!(hs[0]["candidate"], "same");
    let descriptive = ev["descriptive_cells"].as_array().expect("descriptive");
    assert_eq!(descriptive.len(), 2, "open-low, per arm");
    assert!(descriptive.iter().all(|d| d["cell"] == "open-low" && d["blocks"] == serde_json::json!([2])));
    assert_eq!(ev["summary_check"]["checked"], 10);
    assert_eq!(ev["summary_check"]["mismatches"].as_array().map(Vec::len), Some(0));

    let md = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    let hash12 = &harness::evidence::sha256_hex(text.as_bytes())[..12];
    for needle in [
        hash12,
        "## Claims",
        "closed-throughput",
        "open-e2e-p95",
        "Serving Benchmark Result",
        "(matrix.csv)",
        "nearest rank",
        "## Failures",
        "## Definitions",
        "block 1 (confirmation): arms same -> base",
        "figures/latency_vs_load.svg",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}:\n{md}");
    }
    assert!(!md.to_lowercase().contains("equivalen"));

    let files = report_files(&out);
    for stem in ["latency_vs_load", "throughput_closed-2", "dist_closed-2", "dist_open", "dist_open-low"] {
        let svg = String::from_utf8(files[&format!("figures/{stem}.svg")].clone()).expect("svg text");
        assert!(svg.starts_with("<svg") && svg.contains("report-test") && svg.contains(hash12), "{stem}");
        assert!(files[&format!("figures/{stem}.png")].starts_with(b"\x89PNG"), "{stem}.png");
    }

    // Regeneration from the raw evidence: byte-identical, manifest still valid.
    let manifest_before = std::fs::read(out.join("manifest.json")).expect("manifest");
    let stdout = harness_report(&out);
    assert!(!stdout.contains("warning"), "{stdout}");
    assert_eq!(report_files(&out), files, "harness report regenerates identical files");
    assert_eq!(std::fs::read(out.join("manifest.json")).expect("manifest"), manifest_before);
    check_manifest(&out, text.as_bytes());

    // A stored summary that no longer matches the raw records is reported, and the
    // report files still come from the raw records only.
    let stored = out.join("results/cells/b0-base-closed-2.summary.json");
    let tampered =
        std::fs::read_to_string(&stored).expect("summary").replacen("\"completed\": 5", "\"completed\": 4", 1);
    std::fs::write(&stored, tampered).expect("tamper");
    // Unsealed, the change is refused before anything is rewritten (exit 2, named).
    let refused = Command::new(harness_bin()).arg("report").arg(&out).output().expect("harness report");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("results/cells/b0-base-closed-2.summary.json: sha256"), "{err}");
    assert_eq!(report_files(&out), files, "nothing rewritten");
    // Resealed, the report reads it and names the difference from the raw records.
    rewrite_manifest(&out);
    let stdout = harness_report(&out);
    assert!(stdout.contains("b0-base-closed-2.summary.json: differs from the recomputation (completed)"), "{stdout}");
    let again = report_files(&out);
    assert_eq!(again["matrix.csv"], files["matrix.csv"]);
    assert_eq!(again["figures/latency_vs_load.png"], files["figures/latency_vs_load.png"]);

    // A qualification outcome is kept verbatim, shown, and an unqualified arm blocks
    // its claims.
    let qualification = serde_json::json!({
        "format": "harness-qualification/v1",
        "arms": [
            {"arm": "base", "qualified": true, "reasons": []},
            {"arm": "same", "qualified": false, "reasons": ["gsm: 40 losses, bound above the limit"]}
        ],
        "comparisons": [],
        "notes": []
    });
    std::fs::write(out.join("results/qualification.json"), qualification.to_string()).expect("qualification");
    rewrite_manifest(&out);
    harness_report(&out);
    let ev = read_json(&out.join("results/evidence.json"));
    assert_eq!(ev["qualification"], qualification);
    for h in ev["hypotheses"].as_array().expect("hypotheses") {
        assert_eq!(h["claim"]["claim"], "blocked", "{h}");
        let reasons = h["claim"]["reasons"].to_string();
        assert!(reasons.contains("arm same is not qualified"), "{reasons}");
    }
    let md = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    assert!(md.contains("## Qualification") && md.contains("gsm: 40 losses"), "{md}");
}
