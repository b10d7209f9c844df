//! One number per measure: a `harness bench` study on the real engine binary, and
//! the median and p99 TTFT of its cell as every output shows them: the terminal's
//! block (with vLLM's `--metric-percentiles 50,90,99`: its P50 and P90 too), the
//! cell summary, report.md, the figure legend, the vLLM result saved by
//! `--save-result` and the guidellm export. Each is recomputed here from the raw
//! records with the definition that output states: the nearest-rank percentile
//! (terminal, summary, report, figure, and guidellm's `searchsorted` percentile,
//! the same rule for unweighted values) or NumPy's linear interpolation (the vLLM
//! result, as `vllm bench serve` computes it).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Nearest-rank percentile (`ceil(p * n)`-th smallest).
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let k = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

/// NumPy's default percentile (linear interpolation between closest ranks).
fn numpy(sorted: &[f64], p: f64) -> f64 {
    let h = p * (sorted.len() - 1) as f64;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// The number after `label` on the first line that starts with it.
fn after(text: &str, label: &str) -> f64 {
    let line = text.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("no {label:?}"));
    line.trim_start()[label.len()..].split_whitespace().next().unwrap().replace(',', "").parse().unwrap()
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (tolerance {tol})");
}

#[test]
fn every_output_shows_the_median_and_p99_ttft_its_stated_definition_gives() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let out = tmp.path().join("bench");
    let saved = tmp.path().join("saved");
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]).join(" ");
    let run = Command::new(harness_bin())
        .arg("bench")
        .arg(format!("--argv={argv}"))
        .args(["--model", "synth", "--max-concurrency", "2", "--num-prompts", "10", "--random-input-len", "16"])
        .args(["--random-output-len", "6", "--dataset-name", "random-ids", "--settle-s", "0", "--save-result"])
        .arg("--result-dir")
        .arg(&saved)
        // vLLM's flags for the block: its TTFT and E2EL sections, P50, P90 and P99.
        .args(["--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,90,99"])
        .arg("--out")
        .arg(&out)
        .current_dir(workspace())
        .output()
        .expect("harness bench");
    let terminal = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{terminal}\n{}", String::from_utf8_lossy(&run.stderr));

    // The samples, from the raw records: first token-bearing event - HTTP send.
    let records = read_records(&out.join("raw/b0/server/closed-c2.requests.jsonl"));
    let mut ttft: Vec<f64> = records
        .iter()
        .filter(|r| r.is_valid())
        .map(|r| {
            let first = r.events.iter().find(|e| e.tokens > 0).expect("a token event").t_ns;
            (first - r.send_ns.unwrap()) as f64 / 1e6
        })
        .collect();
    assert_eq!(ttft.len(), 10);
    ttft.sort_by(f64::total_cmp);
    let (p50, p99) = (nearest_rank(&ttft, 0.5), nearest_rank(&ttft, 0.99));
    let (np50, np99) = (numpy(&ttft, 0.5), numpy(&ttft, 0.99));
    // 10 samples: the two medians differ (5th value vs the mean of the 5th and 6th).
    assert_ne!(p50, np50, "the test needs a sample where the definitions differ");

    let cent = 0.005 + 1e-9;
    // Terminal block and report.md: nearest rank, 2 decimals (one block: the median
    // across blocks is that block's value).
    close(after(&terminal, "Median TTFT (ms):"), p50, cent, "terminal median");
    close(after(&terminal, "P99 TTFT (ms):"), p99, cent, "terminal p99");
    close(after(&terminal, "P50 TTFT (ms):"), p50, cent, "terminal p50 (--metric-percentiles)");
    close(after(&terminal, "P90 TTFT (ms):"), nearest_rank(&ttft, 0.9), cent, "terminal p90 (--metric-percentiles)");
    assert!(after(&terminal, "P90 E2EL (ms):") > 0.0, "{terminal}");
    for absent in ["P95 TTFT", "Time per Output Token", "Inter-token Latency"] {
        assert!(!terminal.contains(absent), "{absent:?}: not asked for by the flags\n{terminal}");
    }
    let report = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    close(after(&report, "Median TTFT (ms):"), p50, cent, "report.md median");
    close(after(&report, "P99 TTFT (ms):"), p99, cent, "report.md p99");
    assert!(report.contains("Percentiles: nearest rank"), "the report states its definition");
    let summary = read_json(&out.join("results/cells/b0-server-closed-c2.summary.json"));
    close(summary["ttft_p50_ms"].as_f64().unwrap(), p50, 1e-6, "summary p50");
    close(summary["ttft_p99_ms"].as_f64().unwrap(), p99, 1e-6, "summary p99");

    // The figure legend: the report's p50, to the axis's precision.
    let svg = std::fs::read_to_string(out.join("results/figures/dist_closed-c2.svg")).unwrap();
    let at = svg.find("server (control): p50 ").expect("legend") + "server (control): p50 ".len();
    let legend: Vec<&str> = svg[at..].split_whitespace().take(3).collect();
    assert_eq!(legend[2], "(median", "{legend:?}");
    let value: f64 = legend[0].replace(',', "").parse().unwrap();
    let want = if legend[1] == "s" { p50 / 1e3 } else { p50 };
    // The axis's rounding: 0 decimals from 100, 1 from 10, 2 from 1, else 3.
    let decimals = [(100.0, 0), (10.0, 1), (1.0, 2)].iter().find(|(at, _)| want >= *at).map_or(3, |x| x.1);
    let scale = 10f64.powi(decimals);
    close(value, (want * scale).round() / scale, 1e-9, "figure legend (the report's p50, as the axis rounds it)");

    // The vLLM result: NumPy's median and p99 (vLLM's definition, stated in the export).
    let file = std::fs::read_dir(&saved).unwrap().next().unwrap().unwrap().path();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    close(v["median_ttft_ms"].as_f64().unwrap(), np50, 1e-6, "vLLM median");
    close(v["p99_ttft_ms"].as_f64().unwrap(), np99, 1e-6, "vLLM p99");
    // vLLM's peak output line: the terminal shows the saved result's number.
    let peak = v["max_output_tokens_per_s"].as_f64().unwrap();
    assert!(peak > 0.0, "{v}");
    close(after(&terminal, "Peak output token throughput (tok/s):"), peak, cent, "terminal peak output");

    // The guidellm export: its searchsorted percentile, nearest rank here.
    let g = guidellm(&out, tmp.path());
    let m = &g["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"];
    close(m["median"].as_f64().unwrap(), p50, 1e-3, "guidellm median");
    close(m["percentiles"]["p99"].as_f64().unwrap(), p99, 1e-3, "guidellm p99");
}

fn guidellm(evidence: &Path, tmp: &Path) -> serde_json::Value {
    let path = tmp.join("guidellm.json");
    let run = Command::new(harness_bin())
        .arg("export")
        .arg(evidence)
        .args(["--format", "guidellm", "--out"])
        .arg(&path)
        .output()
        .expect("export");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}
