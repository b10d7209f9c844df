//! `harness bench` on the real engine binary over HTTP, synthetic model: a started
//! server (`--argv`) with a rate and a concurrency sweep, and a running server behind
//! an API key (`--url`, `--api-key-env`); each prints a vLLM-bench-like block per
//! cell, writes an ordinary study whose frozen plan is the one-arm plan, and replays
//! clean. Bad flags exit 2 and write nothing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

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
    args.extend(strings(&["--input-len", "16", "--output-len", "5", "--settle-s", "0", "--quiet", "--out"]));
    args.push(out.display().to_string());
    let run = bench(&args);
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("study complete: 1 server invocations, 0 failed requests"), "{stdout}");
    for cell in ["poisson-r20", "closed-c2"] {
        let head = format!(" Serving Benchmark Result: {cell} ");
        assert!(stdout.contains(&head), "no block for {cell}:\n{stdout}");
    }
    assert_eq!(stdout.matches("Successful requests:                     6").count(), 2, "{stdout}");
    assert!(stdout.contains("Total generated tokens:                  30"), "6 forced outputs of 5:\n{stdout}");
    for label in ["Median TTFT (ms):", "P99 TPOT (ms):", "Mean ITL (ms):", "Median E2EL (ms):"] {
        assert!(stdout.contains(label), "{label}:\n{stdout}");
    }
    assert!(stdout.contains(&format!("audit: harness replay {}", out.display())), "{stdout}");
    // The evidence is an ordinary study: the one-arm plan frozen, as `harness run` does.
    let plan = std::fs::read(out.join("plan.toml")).expect("plan.toml");
    check_manifest(&out, &plan);
    let frozen = harness::plan::freeze(plan).expect("the frozen plan parses");
    assert_eq!(frozen.plan.arms.len(), 1);
    assert!(out.join("raw/b0/server/poisson-r20.requests.jsonl").is_file());
    assert!(out.join("results/report.md").is_file() && out.join("results/matrix.csv").is_file());
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
    assert!(stdout.contains("Serving Benchmark Result: closed-c1"), "{stdout}");
    assert!(stdout.contains("Successful requests:                     3"), "{stdout}");
    let plan = std::fs::read_to_string(out.join("plan.toml")).expect("plan.toml");
    assert!(plan.contains("api_key_env = \"HARNESS_BENCH_TEST_KEY\"") && !plan.contains("s3cret"), "{plan}");
    replay_ok(&out);
}

#[test]
fn bad_bench_flags_exit_2_and_write_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("never");
    let o = out.display().to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["--model", "m", "--rate", "1"], "--url"),
        (&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "0"], "--rate: every rate must be a positive"),
        (
            &["--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "2", "--dataset", "sharegpt"],
            "--dataset-path",
        ),
        (&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--name", "a b"], "study.name"),
    ];
    for (flags, want) in cases {
        let mut args = strings(flags);
        args.extend(["--out".to_string(), o.clone()]);
        let r = bench(&args);
        let (stdout, stderr) = text(&r);
        assert_eq!(r.status.code(), Some(2), "{flags:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stderr.contains(want), "{flags:?}: no {want:?} in\n{stderr}");
        assert!(!out.exists(), "{flags:?} wrote {}", out.display());
    }
    // --print-plan runs nothing and prints a plan that validates.
    let r = bench(&strings(&["--url", "http://127.0.0.1:9", "--model", "m", "--rate", "1,2", "--print-plan"]));
    let (stdout, stderr) = text(&r);
    assert!(r.status.success(), "{stderr}");
    let plan = harness::plan::parse(&stdout).expect("the printed plan parses");
    assert_eq!(plan.cells.len(), 2);
}
