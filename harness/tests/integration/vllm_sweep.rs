//! `harness bench` driven by vLLM's own parameter sweep, as a vLLM user would run
//! it: `vllm bench sweep serve --serve-cmd "engine serve ..." --bench-cmd "harness
//! bench ..." --bench-params P` starts the real engine (synthetic model), runs our
//! bench once per combination with the flags vLLM adds (`--request-rate`,
//! `--max-concurrency`, `--percentile-metrics`, `--save-result --result-dir
//! --result-filename run=0.json`), reads every saved result with its own reader and
//! writes its summaries; `vllm bench sweep plot` then draws them
//! (harness/tests/reference/vllm_sweep_check.py; scripts/test installs vLLM).
//! No timed assertions.

use crate::common;

use std::process::Command;

use common::*;

#[test]
fn vllm_s_parameter_sweep_runs_harness_bench_and_plots_what_it_saved() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let port = harness::commands::bench::free_port();
    let serve = format!(
        "{} serve --model {} --served-model-name synth --host 127.0.0.1 --port {port} --max-model-len 256 --threads 1",
        engine_bin().display(),
        model.display()
    );
    // What a user types after `--bench-cmd`: no --out (each run gets its own
    // evidence directory under reports/, even within one second).
    let bench = format!(
        "{} bench --base-url http://127.0.0.1:{port} --model synth --dataset-name random-ids --random-input-len 16 \
         --random-output-len 5 --num-prompts 6 --settle-s 0 --quiet --metric-percentiles 50,90,99",
        harness_bin().display()
    );
    let params = tmp.path().join("bench_params.json");
    // An open loop, one capped at 1 in flight, and vLLM's default rate (a closed loop of 2).
    let combinations = r#"[{"request_rate": 20}, {"request_rate": 20, "max_concurrency": 1},
                           {"request_rate": "inf", "max_concurrency": 2}]"#;
    std::fs::write(&params, combinations).unwrap();
    let script = workspace().join("harness/tests/reference/vllm_sweep_check.py");
    let out = tmp.path().join("sweep");
    let run = Command::new("python3")
        .arg(&script)
        .arg(&out)
        .arg("--")
        .args(["--serve-cmd", &serve, "--bench-cmd", &bench, "--bench-params"])
        .arg(&params)
        // vLLM's default after each run posts to its own /reset_prefix_cache.
        .args(["--after-bench-cmd", "true", "--num-runs", "1", "--experiment-name", "e"])
        .current_dir(tmp.path())
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "vLLM's sweep (run scripts/test):\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).expect("one JSON line last");
    assert_eq!(v["combinations"], 3, "{v}");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "{v}");
    for r in runs {
        assert_eq!((r["completed"].as_u64(), r["run_number"].as_u64()), (Some(6), Some(0)), "{r}");
        for key in ["total_token_throughput", "median_ttft_ms", "p90_ttft_ms"] {
            assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {r}");
        }
    }
    // vLLM's sweep orders combinations by name; each run kept its own cap.
    let caps: Vec<_> = runs.iter().map(|r| (r["request_rate"].clone(), r["max_concurrency"].clone())).collect();
    for want in [(20.into(), serde_json::Value::Null), (20.into(), 1.into()), ("inf".into(), 2.into())] {
        assert!(caps.contains(&want), "{want:?} in {caps:?}");
    }
    let figures = v["figures"].as_array().expect("figures");
    assert_eq!(figures.len(), 1, "vLLM's plot draws one figure: {v}");
    // Each run is an ordinary study of its own.
    let studies = std::fs::read_dir(tmp.path().join("reports")).expect("reports/").count();
    assert_eq!(studies, 3, "one evidence directory per run");
    // The capped run's study says so, and never had two requests in flight.
    let capped = std::fs::read_dir(tmp.path().join("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::read_to_string(p.join("plan.toml")).is_ok_and(|t| t.contains("max_concurrency = 1")))
        .expect("the capped run's evidence");
    let md = std::fs::read_to_string(capped.join("results/report.md")).unwrap();
    assert!(md.contains("at most 1 in flight"), "{md}");
    let mut spans: Vec<(u64, u64)> = std::fs::read_to_string(capped.join("raw/b0/server/poisson-r20.requests.jsonl"))
        .expect("the cell's records")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| (r["send_ns"].as_u64().unwrap(), r["done_ns"].as_u64().unwrap()))
        .collect();
    spans.sort_unstable();
    assert_eq!(spans.len(), 6);
    assert!(spans.windows(2).all(|w| w[1].0 >= w[0].1), "one request in flight at a time: {spans:?}");
}
