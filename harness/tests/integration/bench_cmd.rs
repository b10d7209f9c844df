//! `harness bench` on the real engine binary over HTTP, synthetic model: a started
//! server (`--argv`) with a rate and a concurrency sweep, and a running server behind
//! an API key (`--url`, `--api-key-env`); each prints a vLLM-bench-like block per
//! cell, writes an ordinary study whose frozen plan is the one-arm plan, and replays
//! clean. Bad flags exit 2 and write nothing.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::tamper::*;
use common::*;

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn bench(args: &[String]) -> Output {
    Command::new(harness_bin()).arg("bench").args(args).current_dir(workspace()).output().expect("harness bench")
}

fn replay_ok(dir: &Path) {
    let replay = Command::new(harness_bin()).arg("replay").arg(dir).output().expect("replay");
    let (stdout, stderr) = text(&replay);
    assert!(replay.status.success(), "replay failed:\n{stdout}\n{stderr}");
}

/// `results/matrix.csv` and `matrix.parquet` read back with polars: the same column
/// types in both (an all-null column included), and the study's own columns.
fn matrix_reads_alike(dir: &Path, output_len: f64) -> polars::prelude::DataFrame {
    use polars::prelude::DataType;
    use polars_io::SerReader;
    use polars_io::csv::read::CsvReadOptions;
    use polars_io::parquet::read::ParquetReader;
    let csv = CsvReadOptions::default()
        .with_has_header(true)
        .try_into_reader_with_file_path(Some(dir.join("results/matrix.csv")))
        .expect("csv reader")
        .finish()
        .expect("read matrix.csv");
    let file = std::fs::File::open(dir.join("results/matrix.parquet")).expect("matrix.parquet");
    let parquet = ParquetReader::new(file).finish().expect("read matrix.parquet");
    assert_eq!(csv.schema(), parquet.schema(), "the CSV and Parquet readers see the same types");
    let dtype = |name: &str| parquet.column(name).unwrap_or_else(|e| panic!("{name}: {e}")).dtype().clone();
    for name in ["block", "requests", "completed", "total_output_tokens", "ttft_samples"] {
        assert_eq!(dtype(name), DataType::Int64, "{name}");
    }
    for name in ["study", "plan_sha256", "arm_settings", "cell"] {
        assert_eq!(dtype(name), DataType::String, "{name}");
    }
    let plan = std::fs::read(dir.join("plan.toml")).expect("plan.toml");
    let text = |name: &str| parquet.column(name).unwrap().str().unwrap().get(0).map(str::to_string);
    assert_eq!(text("study").as_deref(), Some("bench"));
    assert_eq!(text("plan_sha256"), Some(harness::evidence::sha256_hex(&plan)));
    let f = |name: &str| parquet.column(name).unwrap().f64().unwrap().get(0);
    assert_eq!(f("output_tokens_mean"), Some(output_len), "forced outputs");
    for m in ["ttft", "tpot", "itl", "e2e"] {
        let (min, p90, max) = (f(&format!("{m}_min_ms")), f(&format!("{m}_p90_ms")), f(&format!("{m}_max_ms")));
        let (min, p90, max) = (min.expect("min"), p90.expect("p90"), max.expect("max"));
        assert!(min <= p90 && p90 <= max, "{m}: {min} {p90} {max}");
        assert!(f(&format!("{m}_sd_ms")).is_some_and(|sd| sd >= 0.0), "{m} sd");
    }
    parquet
}

fn engine_words(model: &Path) -> Vec<String> {
    serve_argv(model, &["--kv-format", "f16"], &[])
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn bench_starts_a_server_sweeps_rate_and_concurrency_prints_blocks_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let out = tmp.path().join("bench");
    let mut args = vec!["--argv".to_string(), engine_words(&model).join(" ")];
    args.extend(strings(&["--model", "synth", "--rate", "20", "--concurrency", "2", "--num-prompts", "6"]));
    // Without --quiet: each cell's table is printed once (at the end, with its load).
    args.extend(strings(&["--input-len", "16", "--output-len", "5", "--settle-s", "0", "--out"]));
    args.push(out.display().to_string());
    // vLLM's own random dataset (its default), from the model's tokenizer.
    args.extend(["--dataset-name".to_string(), "random".into(), "--tokenizer".into(), model.display().to_string()]);
    // vLLM's --save-result: one result file per cell, vLLM's keys, vLLM's names.
    let saved = tmp.path().join("saved");
    args.extend(strings(&["--save-result", "--save-detailed", "--percentile-metrics", "ttft,tpot,itl,e2el"]));
    args.extend(strings(&["--label", "mine", "--result-dir"]));
    args.push(saved.display().to_string());
    args.extend(strings(&["--metadata", "gpu=none", "note=a b"]));
    let run = bench(&args);
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.matches("Serving Benchmark Result").count(), 2, "one table per cell:\n{stdout}");
    assert!(stdout.contains("study complete: 1 server invocations, 0 failed requests"), "{stdout}");
    for cell in ["poisson-r20", "closed-c2"] {
        let head = format!("cell {cell} (block 0, arm server): ");
        assert!(stdout.contains(&head), "no block for {cell}:\n{stdout}");
    }
    assert_eq!(stdout.matches("Successful requests:                     6").count(), 2, "{stdout}");
    assert!(stdout.contains("Total generated tokens:                  30"), "6 forced outputs of 5:\n{stdout}");
    for label in ["Median TTFT (ms):", "P99 TPOT (ms):", "Mean ITL (ms):", "Median E2EL (ms):"] {
        assert!(stdout.contains(label), "{label}:\n{stdout}");
    }
    assert!(stdout.contains(&format!("audit: harness replay {}", out.display())), "{stdout}");
    let mut names: Vec<String> =
        std::fs::read_dir(&saved).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("mine-20.0qps-synth-") && names[0].ends_with(".json"), "{names:?}");
    assert!(names[1].starts_with("mine-infqps-concurrency2-synth-"), "{names:?}");
    for n in &names {
        assert!(stdout.contains(&format!("saved: {}", saved.join(n).display())), "{stdout}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(saved.join(n)).unwrap()).unwrap();
        let keys: std::collections::BTreeSet<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want: std::collections::BTreeSet<&str> = harness::export::VLLM_BENCH_KEYS.into_iter().collect();
        want.extend(["gpu", "note"]);
        assert_eq!(keys, want, "{n}");
        assert_eq!((v["gpu"].as_str(), v["note"].as_str()), (Some("none"), Some("a b")), "vLLM's --metadata");
        assert_eq!(
            (v["label"].as_str(), v["completed"].as_u64(), v["num_prompts"].as_u64()),
            (Some("mine"), Some(6), Some(6))
        );
    }
    // The evidence is an ordinary study: the one-arm plan frozen, as `harness run` does.
    let plan = std::fs::read(out.join("plan.toml")).expect("plan.toml");
    check_manifest(&out, &plan);
    let frozen = harness::plan::freeze(plan).expect("the frozen plan parses");
    assert_eq!(frozen.plan.arms.len(), 1);
    assert!(out.join("raw/b0/server/poisson-r20.requests.jsonl").is_file());
    assert!(out.join("results/report.md").is_file() && out.join("results/matrix.csv").is_file());
    // Figures: the two cells on one throughput-latency chart; one open-loop load
    // level gets its per-block chart, not a latency-vs-load column.
    let figures = out.join("results/figures");
    for f in ["throughput_vs_latency.svg", "latency_poisson-r20.svg", "throughput_closed-c2.svg", "dist_closed-c2.png"]
    {
        assert!(figures.join(f).is_file(), "{f}");
    }
    assert!(!figures.join("latency_vs_load.svg").exists(), "a single load level draws no column of points");
    // The report: peer names stated, and the same page as self-contained HTML.
    let md = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    assert!(md.contains("### Names in other tools") && md.contains("\"inter chunk latency\""), "{md}");
    // The last definition (the smallest sign-test p) stays under Definitions.
    let (defs, peers) = (md.find("## Definitions").unwrap(), md.find("### Names in other tools").unwrap());
    let sign = md.find("smallest one-sided sign-test p").expect("the sign-test line");
    assert!(defs < sign && sign < peers, "{md}");
    let html = std::fs::read_to_string(out.join("results/report.html")).expect("report.html");
    assert!(html.contains("<h2>Claims</h2>") && html.contains("<table>") && html.contains("<figure><svg"), "{html}");
    assert!(html.contains("<pre>") && html.contains("Serving Benchmark Result"), "the per-cell tables");
    for external in ["<script", "<img", "<link", "src=\"http", "@import"] {
        assert!(!html.contains(external), "report.html loads something ({external})");
    }
    let matrix = matrix_reads_alike(&out, 5.0);
    let settings = matrix.column("arm_settings").unwrap().str().unwrap().get(0).unwrap_or_default().to_string();
    assert!(settings.starts_with("argv: ") && settings.contains(" serve "), "{settings}");
    assert_eq!(matrix.column("concurrency").unwrap().dtype(), &polars::prelude::DataType::Int64);
    replay_ok(&out);
}

#[test]
fn bench_against_a_running_server_behind_a_key_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let port = free_port();
    let argv: Vec<String> = engine_words(&model)
        .into_iter()
        .map(|w| w.replace("{model}", "synth").replace("{host}", "127.0.0.1").replace("{port}", &port.to_string()))
        .take_while(|w| w != "--receipts")
        .collect();
    let mut server = Command::new(&argv[0])
        .args(&argv[1..])
        .args(["--api-key", "s3cret-bench-key"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the engine");
    let out = tmp.path().join("bench-url");
    let mut args = strings(&["--url", &format!("http://127.0.0.1:{port}"), "--model", "synth", "--concurrency", "1"]);
    args.extend(strings(&["--dataset-name", "random-ids"]));
    args.extend(strings(&["--num-prompts", "3", "--input-len", "8", "--output-len", "4", "--quiet"]));
    args.extend(strings(&["--startup-timeout-s", "60", "--api-key-env", "HARNESS_BENCH_TEST_KEY", "--out"]));
    args.push(out.display().to_string());
    let run = Command::new(harness_bin())
        .arg("bench")
        .args(&args)
        .env("HARNESS_BENCH_TEST_KEY", "s3cret-bench-key")
        .current_dir(workspace())
        .output()
        .expect("harness bench");
    let _ = server.kill();
    let _ = server.wait();
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("cell closed-c1 (block 0, arm server): closed-loop concurrency 1"), "{stdout}");
    assert!(stdout.contains("Successful requests:                     3"), "{stdout}");
    let plan = std::fs::read_to_string(out.join("plan.toml")).expect("plan.toml");
    assert!(plan.contains("api_key_env = \"HARNESS_BENCH_TEST_KEY\"") && !plan.contains("s3cret"), "{plan}");
    // Only a closed-loop cell and no [slo]: offered_rate_rps and the goodput columns
    // have no value in any row, and keep a numeric type in both files.
    let matrix = matrix_reads_alike(&out, 4.0);
    for name in ["offered_rate_rps", "slo_met_requests", "goodput_rps"] {
        let col = matrix.column(name).unwrap();
        assert_eq!((col.dtype(), col.null_count()), (&polars::prelude::DataType::Float64, 1), "{name}");
    }
    let csv = std::fs::read_to_string(out.join("results/matrix.csv")).expect("matrix.csv");
    assert!(csv.contains(&format!("url: http://127.0.0.1:{port}")), "{csv}");
    // evidence.json: units beside the values, counts' medians integers.
    let ev = read_json(&out.join("results/evidence.json"));
    assert_eq!(ev["median_units"]["ttft_p50_ms"], "ms");
    assert_eq!(ev["median_units"]["request_throughput_rps"], "req/s");
    let medians = &ev["descriptive_cells"][0]["medians"];
    assert!(medians["completed"].is_u64() && medians["completed"] == 3, "{medians}");
    replay_ok(&out);

    // Replay recomputes the new columns and the unit map: a changed spread value and
    // a changed unit are named even behind a rewritten manifest.
    let tampered = tmp.path().join("tampered");
    copy_dir(&out, &tampered);
    let ev_path = tampered.join("results/evidence.json");
    let mut ev = read_json(&ev_path);
    ev["median_units"]["e2e_p95_ms"] = "s".into();
    std::fs::write(&ev_path, serde_json::to_vec_pretty(&ev).expect("json")).expect("write evidence.json");
    let rows = std::fs::read_to_string(tampered.join("results/matrix.csv")).expect("matrix.csv");
    let mut lines: Vec<String> = rows.lines().map(str::to_string).collect();
    let col = lines[0].split(',').position(|h| h == "e2e_max_ms").expect("e2e_max_ms column");
    let mut cells: Vec<String> = lines[1].split(',').map(str::to_string).collect();
    cells[col] = "12345.5".into();
    lines[1] = cells.join(",");
    std::fs::write(tampered.join("results/matrix.csv"), lines.join("\n") + "\n").expect("write matrix.csv");
    rewrite_manifest(&tampered);
    let replay = Command::new(harness_bin()).arg("replay").arg(&tampered).output().expect("replay");
    let (stdout, _) = text(&replay);
    assert_eq!(replay.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("median_units"), "{stdout}");
    assert!(stdout.contains("e2e_max_ms: archived 12345.5"), "{stdout}");
}

#[test]
fn bad_bench_flags_exit_2_and_write_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("never");
    let o = out.display().to_string();
    let missing = tmp.path().join("nonexistent.jsonl").display().to_string();
    let deep = format!("{}1{}", "{\"a\":".repeat(100), "}".repeat(100));
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let file = file.display().to_string();
    // Issue 52 items 7, 14 and 16, and refused vLLM flags: exit 2, nothing written.
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v = strings(&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1"]);
        if !extra.contains(&"--dataset-name") {
            v.extend(strings(&["--dataset-name", "random-ids"]));
        }
        v.extend(strings(extra));
        v.extend(["--out".to_string(), o.clone()]);
        v
    };
    let early: [(Vec<String>, &str); 7] = [
        (with(&["--header", "Authorization=Bearer sk-secret"]), "--header Authorization: looks like a secret"),
        (with(&["--save-result", "--result-dir", &file]), "--result-dir"),
        (with(&["--save-result", "--result-filename", "../../etc/x"]), "--result-filename"),
        (with(&["--save-result", "--result-filename", ""]), "--result-filename"),
        (with(&["--extra-body", &deep]), "--extra-body: nested 100 levels deep"),
        (with(&["--profile"]), "--profile: refused: vLLM's torch profiler"),
        (with(&["--dataset-name", "hf"]), "refused: Hugging Face hub datasets"),
    ];
    for (args, want) in early {
        let r = bench(&args);
        let (stdout, stderr) = text(&r);
        assert_eq!(r.status.code(), Some(2), "{args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stderr.contains(want), "{args:?}: no {want:?} in\n{stderr}");
        assert!(!stderr.contains("sk-secret"), "the secret is not repeated: {stderr}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    // Every refused vLLM flag, through the binary: exit 2, its reason, nothing written.
    for r in harness::commands::bench::refused::VLLM_REFUSED {
        let r_out = bench(&with(&[r.flag, "1"]));
        let (stdout, stderr) = text(&r_out);
        assert_eq!(r_out.status.code(), Some(2), "{}\nstdout:\n{stdout}\nstderr:\n{stderr}", r.flag);
        assert!(stderr.contains(&format!("{}: refused: {}", r.flag, r.why)), "{}: {stderr}", r.flag);
        assert!(!out.exists(), "{} wrote {}", r.flag, out.display());
    }
    let cases: [(&[&str], &str); 8] = [
        (&["--model", "m", "--rate", "1", "--use-beam-search"], "--use-beam-search: refused"),
        // Each of these hung, panicked or exited 1 leaving a partial --out.
        (&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1e-9"], "cells[0].rate: must be in 0.001..="),
        (
            &["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--request-timeout-s", "1e20"],
            "timing.request_timeout_s: must be at most 604800 s",
        ),
        (
            &["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--settle-s", "1e308"],
            "timing.settle_s: must be at most 604800 s",
        ),
        (
            &[
                "--url",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--rate",
                "1",
                "--dataset",
                "requests",
                "--dataset-path",
                &missing,
            ],
            "nonexistent.jsonl",
        ),
        (&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "0"], "--rate: every rate must be a positive"),
        (
            &["--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "2", "--dataset", "sharegpt"],
            "--dataset-path",
        ),
        (&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--name", "a b"], "study.name"),
    ];
    for (flags, want) in cases {
        let mut args = strings(flags);
        if !flags.contains(&"--dataset") {
            args.extend(strings(&["--dataset-name", "random-ids"]));
        }
        args.extend(["--out".to_string(), o.clone()]);
        let r = bench(&args);
        let (stdout, stderr) = text(&r);
        assert_eq!(r.status.code(), Some(2), "{flags:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stderr.contains(want), "{flags:?}: no {want:?} in\n{stderr}");
        assert!(!out.exists(), "{flags:?} wrote {}", out.display());
    }
    // --print-plan runs nothing and prints a plan that validates.
    let r = bench(&strings(&[
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--rate",
        "1,2",
        "--dataset-name",
        "random-ids",
        "--print-plan",
    ]));
    let (stdout, stderr) = text(&r);
    assert!(r.status.success(), "{stderr}");
    let plan = harness::plan::parse(&stdout).expect("the printed plan parses");
    assert_eq!(plan.cells.len(), 2);
}

/// `harness benchmark`, guidellm's `run` in its own `kind=` syntax, with its default
/// profile (a sweep) bounded as guidellm's README bounds it: the anchors' study
/// (one at a time, all at once), then the sweep between their rates through the
/// plan's [derive] formula; both studies replay clean, and the JSON and YAML
/// reports are loaded by guidellm's own report model and metrics
/// (harness/tests/reference/guidellm_check.py).
#[test]
fn a_guidellm_sweep_measures_its_anchors_then_sweeps_between_them_and_both_replay() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let out = tmp.path().join("sweep");
    // A fixed 20 ms per engine step dominates a step of this tiny model, so the
    // throughput anchor (16 at once, 8 per step) is faster than the synchronous one
    // on any machine (with 5 ms, a debug build sharing 2 cores with other tests
    // measured them the other way round: 21.9 against 29.2 req/s).
    let port = free_port();
    let argv: Vec<String> = serve_argv(&model, &["--kv-format", "f16"], &["--debug-step-delay-us", "20000"])
        .into_iter()
        .map(|w| w.replace("{model}", "synth").replace("{host}", "127.0.0.1").replace("{port}", &port.to_string()))
        .collect();
    let receipts = argv.iter().position(|w| w == "--receipts").expect("--receipts");
    let argv: Vec<String> = argv[..receipts].iter().chain(&argv[receipts + 2..]).cloned().collect();
    let mut server = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the engine");
    let (json, yaml) = (tmp.path().join("benchmarks.json"), tmp.path().join("benchmarks.yaml"));
    let run = Command::new(harness_bin())
        .args(["benchmark", "run", "--backend"])
        .arg(format!("kind=openai_http,target=http://127.0.0.1:{port}/v1,model=synth"))
        .args(["--profile", "kind=sweep,sweep_size=4", "--constraint", "kind=max_requests,count=16"])
        .args(["--constraint", "kind=max_duration,seconds=1"])
        .args(["--data", "kind=synthetic_text,prompt_tokens=16,output_tokens=4", "--disable-console"])
        .arg("--output")
        .arg(format!("kind=json,path={}", json.display()))
        .arg("--output")
        .arg(format!("kind=yaml,path={}", yaml.display()))
        .arg("--out")
        .arg(&out)
        .current_dir(workspace())
        .output()
        .expect("harness benchmark");
    let _ = server.kill();
    let _ = server.wait();
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let anchors = tmp.path().join("sweep-anchors");
    assert!(
        stdout.contains(&format!("sweep: measuring the synchronous and throughput anchors into {}", anchors.display()))
    );
    assert!(stdout.contains("sweep: 4 benchmarks between the anchors' rates"), "{stdout}");
    replay_ok(&anchors);
    replay_ok(&out);
    let plan = harness::plan::freeze(std::fs::read(out.join("plan.toml")).unwrap()).unwrap().plan;
    let cells = plan.resolved_cells().unwrap();
    let names: Vec<&str> = cells.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["closed-c1", "closed-c16", "constant-s01", "constant-s02"]);
    let sync = read_json(&anchors.join("results/cells/b0-server-closed-c1.summary.json"))["request_throughput_rps"]
        .as_f64()
        .unwrap();
    let thr = read_json(&anchors.join("results/cells/b0-server-closed-c16.summary.json"))["request_throughput_rps"]
        .as_f64()
        .unwrap();
    for c in &cells[2..] {
        let harness::plan::ResolvedLoad::Open { rate_rps, .. } = c.load else { panic!("{:?}", c.load) };
        // Between the anchors (tenths rounded down), each cell rate x 1 s requests.
        assert!(rate_rps > sync - 0.1 && rate_rps < thr, "{rate_rps} not within ({sync}, {thr})");
        assert_eq!(c.count, (rate_rps.ceil() as u64).clamp(1, 16), "{}", c.name);
    }
    // guidellm's outputs, each loaded back by guidellm's own code.
    for (path, name) in [(&json, "benchmarks.json"), (&yaml, "benchmarks.yaml")] {
        assert!(stdout.contains(&format!("wrote {}", path.display())), "{name}: {stdout}");
        let check = Command::new("python3")
            .arg(workspace().join("harness/tests/reference/guidellm_check.py"))
            .arg(path)
            .output()
            .expect("python3");
        let (o, e) = text(&check);
        assert!(check.status.success(), "guidellm's loader on {name} (run scripts/test):\n{o}\n{e}");
        let v: serde_json::Value = serde_json::from_str(o.lines().last().unwrap_or("")).expect("one JSON line");
        assert_eq!(v["benchmarks"], 4, "{name}: {v}");
    }
}

/// The engine serving `model` under its path (as `vllm serve /path/to/model`
/// serves it), without receipts, on `port`; a context of 512 tokens so that vLLM's
/// default `--custom-output-len` of 256 fits beside a prompt.
fn serve_as_path(model: &Path, port: u16) -> std::process::Child {
    let name = model.display().to_string();
    let mut argv: Vec<String> = engine_words(model)
        .into_iter()
        .map(|w| w.replace("{model}", &name).replace("{host}", "127.0.0.1").replace("{port}", &port.to_string()))
        .collect();
    let receipts = argv.iter().position(|w| w == "--receipts").expect("--receipts");
    argv.drain(receipts..receipts + 2);
    let len = argv.iter().position(|w| w == "--max-model-len").expect("--max-model-len");
    argv[len + 1] = "512".into();
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the engine")
}

/// `harness bench ARGS` in `dir` (where vLLM's relative paths and the default
/// `reports/bench-<time>` evidence land); the evidence directory it printed.
fn bench_in(dir: &Path, args: &[String]) -> (Output, Option<std::path::PathBuf>) {
    let o = Command::new(harness_bin()).arg("bench").args(args).current_dir(dir).output().expect("harness bench");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let ev = stdout.lines().find_map(|l| l.strip_prefix("audit: harness replay ")).map(|p| dir.join(p.trim()));
    (o, ev)
}

/// vLLM's documented `vllm bench serve` command lines, the words after `vllm bench
/// serve` passed to `harness bench` unchanged but for the model (this test's
/// synthetic model, served under its path), the port (vLLM's examples rely on its
/// default 8000, or name 9001) and the placeholders for a data file; numbers are
/// vLLM's own unless a comment says otherwise. Each runs end to end against a
/// running engine, sends vLLM's request ids (its default `--request-id-prefix`,
/// drawn once and frozen in the plan, which the engine names its responses after)
/// and replays clean.
#[test]
fn vllm_bench_serves_documented_examples_run_unchanged_against_a_running_server() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let m = model.display().to_string();
    let port = free_port();
    let p = port.to_string();
    let mut server = serve_as_path(&model, port);

    // vLLM docs/cli/README.md, "bench" > "serve" (https://docs.vllm.ai/en/latest/cli/):
    //     vllm bench serve \
    //         --model meta-llama/Llama-3.2-1B-Instruct \
    //         --host server-host \
    //         --port server-port \
    //         --random-input-len 32 \
    //         --random-output-len 4  \
    //         --num-prompts  5
    // Its numbers are already small; vLLM's default dataset (random) reads the
    // model's tokenizer, here the model directory's.
    let readme = strings(&[
        "--model",
        &m,
        "--host",
        "127.0.0.1",
        "--port",
        &p,
        "--random-input-len",
        "32",
        "--random-output-len",
        "4",
        "--num-prompts",
        "5",
    ]);
    let (first, first_ev) = bench_in(tmp.path(), &readme);

    // vLLM docs/benchmarking/cli.md, "Online Benchmark" (ShareGPT):
    //     vllm bench serve \
    //       --backend vllm \
    //       --model NousResearch/Hermes-3-Llama-3.1-8B \
    //       --endpoint /v1/completions \
    //       --dataset-name sharegpt \
    //       --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json \
    //       --num-prompts 10
    // ShareGPT itself is not fetched (offline): twelve conversations in its format.
    let conversations: Vec<serde_json::Value> = (0..12)
        .map(|i| {
            serde_json::json!({"id": format!("c{i}"), "conversations": [
                {"from": "human", "value": format!("Question {i}: when shall we three meet again?")},
                {"from": "gpt", "value": format!("Answer {i}: when the hurly-burly's done.")},
            ]})
        })
        .collect();
    let data = tmp.path().join("ShareGPT_V3_unfiltered_cleaned_split.json");
    std::fs::write(&data, serde_json::to_vec(&conversations).unwrap()).unwrap();
    let mut online = strings(&["--backend", "vllm", "--model", &m, "--endpoint", "/v1/completions"]);
    online.extend(strings(&["--dataset-name", "sharegpt", "--dataset-path", &data.display().to_string()]));
    online.extend(strings(&["--num-prompts", "10", "--port", &p]));
    let (second, second_ev) = bench_in(tmp.path(), &online);

    // vLLM docs/benchmarking/cli.md, "Custom Dataset", with its data.jsonl:
    //     {"prompt": "What is the capital of India?"}
    //     {"prompt": "What is the capital of Iran?"}
    //     {"prompt": "What is the capital of China?"}
    //     vllm bench serve --port 9001 --save-result --save-detailed \
    //       --backend vllm \
    //       --model meta-llama/Llama-3.1-8B-Instruct \
    //       --endpoint /v1/completions \
    //       --dataset-name custom \
    //       --dataset-path <path-to-your-data-jsonl> \
    //       --skip-chat-template \
    //       --num-prompts 80 \
    //       --max-concurrency 1 \
    //       --temperature=0.3 \
    //       --top-p=0.75 \
    //       --result-dir "./log/"
    // --num-prompts 80 becomes 3, the file's lines: vLLM oversamples a short file to
    // 80, the harness never does (too few entries is an error).
    let jsonl = tmp.path().join("data.jsonl");
    std::fs::write(
        &jsonl,
        "{\"prompt\": \"What is the capital of India?\"}\n{\"prompt\": \"What is the capital of Iran?\"}\n{\"prompt\": \"What is the capital of China?\"}\n",
    )
    .unwrap();
    let mut custom = strings(&["--port", &p, "--save-result", "--save-detailed", "--backend", "vllm", "--model", &m]);
    custom.extend(strings(&["--endpoint", "/v1/completions", "--dataset-name", "custom", "--dataset-path"]));
    custom.push(jsonl.display().to_string());
    custom.extend(strings(&["--skip-chat-template", "--num-prompts", "3", "--max-concurrency", "1"]));
    custom.extend(strings(&["--temperature=0.3", "--top-p=0.75", "--result-dir", "./log/"]));
    let (third, third_ev) = bench_in(tmp.path(), &custom);
    let _ = server.kill();
    let _ = server.wait();

    for (run, n, ev) in [(&first, 5, first_ev), (&second, 10, second_ev), (&third, 3, third_ev)] {
        let (stdout, stderr) = text(run);
        assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stdout.contains(&format!("Successful requests:                     {n}")), "{stdout}");
        let ev = ev.as_ref().expect("the evidence directory");
        // vLLM's default --request-id-prefix, drawn once and frozen in the plan; each
        // request names its panel entry, and the engine's response id names it.
        let plan = harness::plan::freeze(std::fs::read(ev.join("plan.toml")).unwrap()).unwrap().plan;
        let prefix = plan.request.request_id_prefix.clone().expect("request_id_prefix");
        assert!(prefix.starts_with("bench-") && prefix.len() == 15 && prefix.ends_with('-'), "{prefix}");
        let cell = &plan.resolved_cells().unwrap()[0].name;
        let records = read_records(&ev.join(format!("raw/b0/server/{cell}.requests.jsonl")));
        assert_eq!(records.len(), n);
        for r in &records {
            let id = r.server_request_id.as_deref().unwrap_or_default();
            assert!(id.starts_with(&format!("cmpl-{prefix}{}-", r.prompt)), "{id} for entry {}", r.prompt);
        }
        replay_ok(ev);
    }
    // --save-result --save-detailed --result-dir "./log/": one vLLM result file,
    // relative to where the command ran, with vLLM's detailed keys.
    let log = tmp.path().join("log");
    let saved: Vec<_> = std::fs::read_dir(&log).expect("./log/").map(|e| e.unwrap().path()).collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    let v = read_json(&saved[0]);
    assert_eq!(
        (v["backend"].as_str(), v["label"].as_str(), v["completed"].as_u64(), v["max_concurrency"].as_u64()),
        (Some("vllm"), Some("vllm"), Some(3), Some(1)),
        "{v}"
    );
    assert!(v["ttfts"].as_array().is_some_and(|t| t.len() == 3), "--save-detailed: {v}");
}
