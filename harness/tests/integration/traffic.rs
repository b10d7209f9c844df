//! End to end for the real-traffic loads: `harness run` on the real engine
//! (synthetic model) over real HTTP with a constant-rate sweep, a trace-file cell
//! (the example Mooncake trace in traces/) and `[slo]` targets. The study replays
//! clean; a changed byte in the copied trace file and a changed goodput value are
//! named; `harness export --format vllm-bench` writes one object per cell with
//! exactly vLLM's keys. No timed assertions.

use crate::common;

use common::tamper::*;
use common::*;
use harness::commands::replay::{Status, replay_dir};

const CATALOG: &str = "inputs: traces and prompt panel against catalog.json";
const SUMMARIES: &str = "cell measures: summaries.json and results/cells/*.summary.json";

fn plan_text(model: &std::path::Path) -> String {
    let f16 = serve_argv(model, &["--kv-format", "f16"], &[]);
    let plan =
        TestPlan { prompt_tokens: 24, documents: 3, warmup_prompts: 2, blocks: 1, ..TestPlan::new("traffic", 3) };
    plan.arm("f16", "control", &f16)
        .tail(
            "[[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = [20.0, 40.0]\ncount = 6\n\n\
             [[cells]]\nname = \"tr\"\nkind = \"confirmation\"\nload = \"trace\"\n\
             trace = \"traces/example-mooncake.jsonl\"\ntime_scale = 0.05\ncount = 8\n\n\
             [slo]\nttft_ms = 60000\ne2e_ms = 60000\n",
        )
        .render()
}

#[test]
fn constant_sweep_trace_file_and_goodput_run_replay_and_export() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text = plan_text(&model);
    let (out, _) = run_study_ok(tmp.path(), &text);

    // The sweep expanded into two cells with exact constant offsets.
    let trace = |cell: &str| harness::trace::read_trace(&out.join("inputs"), cell).expect("trace").entries;
    let offsets: Vec<u64> = trace("c-r40").iter().map(|e| e.offset_ns).collect();
    assert_eq!(offsets, [0, 25_000_000, 50_000_000, 75_000_000, 100_000_000, 125_000_000]);
    // The trace cell replays the file's first 8 rows, scaled by 0.05.
    let file = std::fs::read_to_string(workspace().join("traces/example-mooncake.jsonl")).unwrap();
    let ms: Vec<u64> = file
        .lines()
        .take(8)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["timestamp"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = ms.iter().map(|t| ((t - ms[0]) as f64 * 1e6 * 0.05).round() as u64).collect();
    assert_eq!(trace("tr").iter().map(|e| e.offset_ns).collect::<Vec<_>>(), want);
    assert_eq!(std::fs::read_to_string(out.join("inputs/arrivals/tr.jsonl")).unwrap(), file);

    // Goodput in every summary: the generous targets are met by every valid request.
    for cell in ["c-r20", "c-r40", "tr"] {
        let s = read_json(&out.join(format!("results/cells/b0-f16-{cell}.summary.json")));
        let completed = s["completed"].as_u64().unwrap();
        assert!(completed > 0, "{s}");
        assert_eq!(s["slo_met_requests"].as_u64(), Some(completed), "{s}");
        assert_eq!(s["slo_attainment"].as_f64(), Some(1.0), "{s}");
        let want = completed as f64 / s["duration_s"].as_f64().unwrap();
        assert!((s["goodput_rps"].as_f64().unwrap() - want).abs() < 1e-9, "{s}");
    }
    let matrix = std::fs::read_to_string(out.join("results/matrix.csv")).unwrap();
    assert!(matrix.lines().next().unwrap().contains("goodput_rps"), "{matrix}");

    // Replay: clean.
    let o = replay_dir(&out).expect("replay");
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));

    // A changed byte in the copied trace file is named (behind a rewritten manifest).
    let dir = tmp.path().join("trace-flipped");
    copy_dir(&out, &dir);
    flip_digit(&dir, "inputs/arrivals/tr.jsonl", 20);
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).expect("replay");
    let c = o.check(CATALOG).expect("catalog check");
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
    assert!(c.mismatches.iter().any(|m| m.file == "inputs/arrivals/tr.jsonl"), "{}", o.render_table(10));

    // A changed goodput value is named by the recomputation.
    let dir = tmp.path().join("goodput-changed");
    copy_dir(&out, &dir);
    let rel = "results/cells/b0-f16-c-r20.summary.json";
    let mut s = read_json(&dir.join(rel));
    s["goodput_rps"] = serde_json::json!(s["goodput_rps"].as_f64().unwrap() * 2.0);
    std::fs::write(dir.join(rel), serde_json::to_string_pretty(&s).unwrap() + "\n").unwrap();
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).expect("replay");
    let c = o.check(SUMMARIES).expect("summaries check");
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
    assert!(c.mismatches.iter().any(|m| m.file == rel && m.field.ends_with("goodput_rps")), "{}", o.render_table(10));

    // Export: one vLLM bench object per (block, arm, cell), exactly vLLM's keys.
    let export = tmp.path().join("vllm.jsonl");
    let run = std::process::Command::new(harness_bin())
        .args(["export"])
        .arg(&out)
        .args(["--format", "vllm-bench", "--out"])
        .arg(&export)
        .output()
        .expect("harness export");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&export).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    for (v, cell) in lines.iter().zip(["c-r20", "c-r40", "tr"]) {
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = harness::export::VLLM_BENCH_KEYS.to_vec();
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(v["harness_cell"], cell);
        let s = read_json(&out.join(format!("results/cells/b0-f16-{cell}.summary.json")));
        assert_eq!(v["completed"], s["completed"]);
        assert!((v["request_goodput"].as_f64().unwrap() - s["goodput_rps"].as_f64().unwrap()).abs() < 1e-9);
        assert!((v["duration"].as_f64().unwrap() - s["duration_s"].as_f64().unwrap()).abs() < 1e-9);
    }
    assert_eq!(lines[1]["request_rate"], 40.0);
    assert_eq!(lines[1]["burstiness"], "inf");
}
