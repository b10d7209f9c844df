//! `harness profile` (AIPerf 0.13's `aiperf profile`) on the real engine binary over
//! HTTP, synthetic model: AIPerf's flags as its users write them, against a
//! running server; the artifact directory's files load in AIPerf's own models and
//! every record metric's summary equals what AIPerf's own summary function
//! computes from the exported records (harness/tests/reference/aiperf_check.py, in
//! the venv scripts/test makes); the evidence replays clean. A refused flag exits
//! 2 with its reason and writes nothing. No timed assertions.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use common::*;

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The engine serving `model` as `synth` on `port`, without receipts.
fn serve(model: &Path, port: u16) -> Child {
    let argv: Vec<String> = serve_argv(model, &["--kv-format", "f16"], &[])
        .into_iter()
        .map(|w| w.replace("{model}", "synth").replace("{host}", "127.0.0.1").replace("{port}", &port.to_string()))
        .collect();
    let receipts = argv.iter().position(|w| w == "--receipts").expect("--receipts");
    let argv: Vec<String> = argv[..receipts].iter().chain(&argv[receipts + 2..]).cloned().collect();
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the engine")
}

/// Waits (at most 60 s) until the server answers its health path.
fn wait_up(port: u16) {
    for _ in 0..600 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the engine did not listen on {port}");
}

fn profile(args: &[&str]) -> Output {
    Command::new(harness_bin()).arg("profile").args(args).current_dir(workspace()).output().expect("harness profile")
}

/// AIPerf's own reading of an artifact directory (one JSON line of counts).
fn aiperf_reads(art: &Path) -> serde_json::Value {
    let python = workspace().join("target/venv-aiperf-ref/bin/python");
    assert!(python.is_file(), "{} is missing: run scripts/test (it installs AIPerf's models)", python.display());
    let script = workspace().join("harness/tests/reference/aiperf_check.py");
    let check = Command::new(&python).arg(&script).arg(art).output().expect("python");
    let (stdout, stderr) = text(&check);
    assert!(check.status.success(), "AIPerf's models refused {}:\n{stdout}\n{stderr}", art.display());
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

fn replay_ok(dir: &Path) {
    let replay = Command::new(harness_bin()).arg("replay").arg(dir).output().expect("replay");
    let (stdout, stderr) = text(&replay);
    assert!(replay.status.success(), "replay failed:\n{stdout}\n{stderr}");
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn aiperf_profile_flags_run_against_a_server_and_aiperf_reads_the_exports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let port = free_port();
    let mut server = serve(&model, port);
    wait_up(port);
    let url = format!("127.0.0.1:{port}");
    // Synthetic prompts on /v1/completions, streamed, closed loop of 2.
    let (art, ev) = (tmp.path().join("art"), tmp.path().join("ev"));
    let synthetic = profile(&[
        "-m",
        "synth",
        "--url",
        &url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--concurrency",
        "2",
        "--request-count",
        "6",
        "--isl",
        "12",
        "--isl-stddev",
        "2",
        "--osl",
        "4",
        "--extra-inputs",
        "ignore_eos:true",
        "--warmup-request-count",
        "1",
        "--goodput",
        "time_to_first_token:60000 request_latency:60000",
        "--random-seed",
        "3",
        "--artifact-dir",
        &s(&art),
        "--out",
        &s(&ev),
        "--ui",
        "none",
    ]);
    // A single_turn file (AIPerf's `text`, `output_length`) as chat messages, open loop.
    let rows = tmp.path().join("rows.jsonl");
    std::fs::write(&rows, "{\"text\": \"When shall we three meet again\", \"output_length\": 3}\n{\"text\": \"In thunder, lightning, or in rain?\"}\n{\"text\": \"When the hurlyburly's done\"}\n").unwrap();
    let (art2, ev2) = (tmp.path().join("art2"), tmp.path().join("ev2"));
    let chat = profile(&[
        "--model",
        "synth",
        "-u",
        &format!("http://{url}"),
        "--streaming",
        "--input-file",
        &s(&rows),
        "--custom-dataset-type",
        "single_turn",
        "--tokenizer",
        &s(&model),
        "--osl",
        "5",
        "--request-rate",
        "20",
        "--output-artifact-dir",
        &s(&art2),
        "--out",
        &s(&ev2),
    ]);
    let _ = server.kill();
    let _ = server.wait();

    let (stdout, stderr) = text(&synthetic);
    assert!(synthetic.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("LLM Metrics") && stdout.contains("Time to First Token (ms)"), "{stdout}");
    for f in ["profile_export_aiperf.json", "profile_export_aiperf.csv", "profile_export.jsonl"] {
        assert!(stdout.contains(&format!("wrote {}", art.join(f).display())), "{stdout}");
    }
    let v = aiperf_reads(&art);
    assert_eq!((v["records"].as_u64(), v["errors"].as_u64()), (Some(6), Some(0)), "{v}");
    assert!(v["recomputed"].as_u64().unwrap() >= 10, "every streamed record metric: {v}");
    let json = read_json(&art.join("profile_export_aiperf.json"));
    assert_eq!(json["output_sequence_length"]["avg"], 4.0, "forced outputs: {json}");
    assert_eq!(json["good_request_count"]["avg"], 6.0, "{json}");
    assert_eq!(json["run_info"]["random_seed"], 3, "{json}");
    let plan = std::fs::read_to_string(ev.join("plan.toml")).expect("plan.toml");
    assert!(plan.contains("dist = \"normal\", mean = 12.0, sd = 2.0"), "{plan}");
    replay_ok(&ev);

    let (stdout, stderr) = text(&chat);
    assert!(chat.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let v = aiperf_reads(&art2);
    assert_eq!((v["records"].as_u64(), v["errors"].as_u64()), (Some(3), Some(0)), "{v}");
    let plan = std::fs::read_to_string(ev2.join("plan.toml")).expect("plan.toml");
    assert!(plan.contains("endpoint = \"chat\"") && plan.contains("load = \"open\""), "{plan}");
    replay_ok(&ev2);
}

/// Every refused AIPerf flag exits 2 with its reason, before anything is written.
#[test]
fn refused_aiperf_flags_exit_2_and_write_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for r in harness::commands::profile::refused::AIPERF_REFUSED {
        let (art, ev) = (tmp.path().join("art"), tmp.path().join("ev"));
        let o = profile(&[
            "-m",
            "m",
            "--url",
            "127.0.0.1:9",
            "--endpoint-type",
            "completions",
            r.flag,
            "--artifact-dir",
            &s(&art),
            "--out",
            &s(&ev),
        ]);
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {stderr}", r.flag);
        assert!(stderr.contains(&format!("{}: refused: {}", r.flag, r.why)), "{}: {stderr}", r.flag);
        assert!(!art.exists() && !ev.exists(), "{}: wrote something", r.flag);
    }
    let unused: PathBuf = tmp.path().join("nothing");
    assert!(!unused.exists());
}

/// AIPerf's documented `aiperf profile` command lines, the words after `aiperf
/// profile` passed to `harness profile` unchanged but for the model (this test's
/// synthetic model, served under its path: a local directory holding its
/// tokenizer.json, as AIPerf would load the named model's tokenizer from the hub),
/// the URL (this test's server) and the counts and lengths (small, to keep CI
/// short), run in a scratch folder as a user would (AIPerf's default
/// `artifacts/...` directory lands there, and the prompts are cut from its
/// `assets/texts`). Each runs end to end, its files load in AIPerf's own models and
/// its evidence replays clean. The chat examples send their synthetic prompts as
/// text, one user message each; without a tokenizer (a model name that is not a
/// local one) they are refused (exit 2, the reason, nothing written).
#[test]
fn aiperf_documented_examples_run_unchanged_or_are_refused_with_the_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let m = model.display().to_string();
    scratch_texts(tmp.path());
    let port = free_port();
    // A context of 4096 and prefills as long: the README example's prompts are
    // AIPerf's default 550 tokens (plus the chat template's) and, with no --osl,
    // each request asks for up to 2048 (`UNSET_OSL_CAP`).
    let argv: Vec<String> = serve_argv(&model, &["--kv-format", "f16"], &[])
        .into_iter()
        .map(|w| w.replace("{model}", &m).replace("{host}", "127.0.0.1").replace("{port}", &port.to_string()))
        .collect();
    let receipts = argv.iter().position(|w| w == "--receipts").expect("--receipts");
    let mut argv: Vec<String> = argv[..receipts].iter().chain(&argv[receipts + 2..]).cloned().collect();
    for flag in ["--max-model-len", "--max-num-batched-tokens"] {
        let at = argv.iter().position(|w| w == flag).expect(flag);
        argv[at + 1] = "4096".into();
    }
    let mut server = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the engine");
    wait_up(port);
    let url = format!("127.0.0.1:{port}");
    let run = |args: &[&str]| {
        Command::new(harness_bin()).arg("profile").args(args).current_dir(tmp.path()).output().expect("profile")
    };

    // AIPerf docs/tutorials/openai-text-endpoints.md, "Profile Completions API" >
    // "Profile with synthetic inputs":
    //     aiperf profile \
    //         --model Qwen/Qwen3-0.6B \
    //         --endpoint-type completions \
    //         --endpoint /v1/completions \
    //         --synthetic-input-tokens-mean 64 \
    //         --synthetic-input-tokens-stddev 4 \
    //         --output-tokens-mean 128 \
    //         --output-tokens-stddev 4 \
    //         --url localhost:8000 \
    //         --request-count 32
    // --request-count 32 becomes 4.
    let completions = run(&[
        "--model",
        &m,
        "--endpoint-type",
        "completions",
        "--endpoint",
        "/v1/completions",
        "--synthetic-input-tokens-mean",
        "64",
        "--synthetic-input-tokens-stddev",
        "4",
        "--output-tokens-mean",
        "128",
        "--output-tokens-stddev",
        "4",
        "--url",
        &url,
        "--request-count",
        "4",
    ]);

    // AIPerf README.md, "Example with Custom Configuration":
    //     aiperf profile \
    //       --model Qwen/Qwen3-0.6B \
    //       --url http://localhost:8000 \
    //       --endpoint-type chat \
    //       --concurrency 10 \
    //       --request-count 100 \
    //       --streaming
    // --concurrency 10 and --request-count 100 become 2 and 4.
    let http = format!("http://{url}");
    let readme_of = |model: &str| {
        run(&[
            "--model",
            model,
            "--url",
            &http,
            "--endpoint-type",
            "chat",
            "--concurrency",
            "2",
            "--request-count",
            "4",
            "--streaming",
        ])
    };
    let readme = readme_of(&m);
    // AIPerf docs/tutorials/request-rate-concurrency.md, "Poisson Mode: Natural
    // Traffic Patterns":
    //     aiperf profile \
    //         --model Qwen/Qwen3-0.6B \
    //         --endpoint-type chat \
    //         --endpoint /v1/chat/completions \
    //         --streaming \
    //         --url localhost:8000 \
    //         --concurrency 100 \
    //         --request-rate 200 \
    //         --request-rate-mode poisson \
    //         --random-seed 42 \
    //         --request-count 500 \
    //         --synthetic-input-tokens-mean 500 \
    //         --output-tokens-mean 200
    // --concurrency 100, --request-count 500 and the lengths become 2, 4, 32 and 8.
    let poisson = run(&[
        "--model",
        &m,
        "--endpoint-type",
        "chat",
        "--endpoint",
        "/v1/chat/completions",
        "--streaming",
        "--url",
        &url,
        "--concurrency",
        "2",
        "--request-rate",
        "200",
        "--request-rate-mode",
        "poisson",
        "--random-seed",
        "42",
        "--request-count",
        "4",
        "--synthetic-input-tokens-mean",
        "32",
        "--output-tokens-mean",
        "8",
    ]);
    // The README example as written (a hub name, no local tokenizer): refused.
    let hub = readme_of("Qwen/Qwen3-0.6B");
    let _ = server.kill();
    let _ = server.wait();

    for (o, name) in [(&completions, "completions"), (&readme, "README"), (&poisson, "Poisson")] {
        let (stdout, stderr) = text(o);
        assert!(o.status.success(), "{name}:\nstdout:\n{stdout}\nstderr:\n{stderr}");
        let json = stdout
            .lines()
            .find_map(|l| l.strip_prefix("wrote ").filter(|p| p.ends_with("profile_export_aiperf.json")))
            .map(|p| tmp.path().join(p.trim()))
            .unwrap_or_else(|| panic!("{name}: no profile_export_aiperf.json written:\n{stdout}"));
        let art = json.parent().expect("the artifact directory");
        assert!(
            art.starts_with(tmp.path().join("artifacts")),
            "AIPerf's default artifact directory: {}",
            art.display()
        );
        let v = aiperf_reads(art);
        assert_eq!((v["records"].as_u64(), v["errors"].as_u64()), (Some(4), Some(0)), "{name}: {v}");
        // Each request carried an id, as AIPerf's carry their X-Request-ID, and the
        // records name it (the prefix and the request's panel index).
        let jsonl = std::fs::read_to_string(art.join("profile_export.jsonl")).expect("profile_export.jsonl");
        for line in jsonl.lines() {
            let r: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let id = r["metadata"]["x_request_id"].as_str().unwrap_or_default();
            assert!(id.starts_with("profile-") && id.len() == "profile-01234567-0".len(), "{name}: {line}");
        }
        let ev = stdout
            .lines()
            .find_map(|l| l.strip_prefix("audit: harness replay "))
            .map(|p| tmp.path().join(p.trim()))
            .unwrap_or_else(|| panic!("{name}: no evidence directory:\n{stdout}"));
        replay_ok(&ev);
    }

    let (stdout, stderr) = text(&hub);
    assert_eq!(hub.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("--endpoint-type chat with synthetic prompts: refused: no tokenizer resolves"), "{stderr}");
    let artifacts: Vec<_> = std::fs::read_dir(tmp.path().join("artifacts")).unwrap().collect();
    assert_eq!(artifacts.len(), 3, "the refused example wrote nothing");
}

/// `dir/assets/texts`, where `harness profile` run in `dir` cuts its synthetic
/// prompts (`--texts`' default): the project's Macbeth, or any text when
/// scripts/fetch-assets was not run.
fn scratch_texts(dir: &Path) {
    let texts = dir.join("assets/texts");
    std::fs::create_dir_all(&texts).expect("mkdir assets/texts");
    let macbeth = workspace().join("assets/texts/macbeth_gut.txt");
    let text = std::fs::read_to_string(&macbeth)
        .unwrap_or_else(|_| "When shall we three meet again, in thunder, lightning, or in rain? ".repeat(40));
    std::fs::write(texts.join("macbeth.txt"), text).expect("write a text");
}

/// AIPerf's `--input-file F --custom-dataset-type mooncake_trace` (its fixed
/// schedule: each row at its timestamp less the first one's, with its lengths):
/// one trace cell on /v1/completions whose requests are intended exactly at the
/// rows' offsets and sent in that order, each after its intended time and within
/// a second of it (a loose bound: the machine may be busy), with each row's output
/// length forced; AIPerf's models read the exports; the evidence replays clean. A
/// trace row the cell cannot replay (`session_id`) exits 2 and writes nothing.
#[test]
fn a_mooncake_trace_replays_its_timestamps_and_aiperf_reads_the_exports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let trace = tmp.path().join("mooncake.jsonl");
    let rows = [(5000u64, 12u32, 3u32), (5200, 20, 4), (5450, 12, 2), (5900, 16, 5)];
    let lines: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, (t, inp, out))| {
            format!("{{\"timestamp\": {t}, \"input_length\": {inp}, \"output_length\": {out}, \"hash_ids\": [{i}]}}\n")
        })
        .collect();
    std::fs::write(&trace, lines.concat()).unwrap();
    let bad = tmp.path().join("sessions.jsonl");
    std::fs::write(&bad, "{\"session_id\": \"a\", \"timestamp\": 1, \"input_length\": 4, \"output_length\": 2}\n")
        .unwrap();
    let port = free_port();
    let mut server = serve(&model, port);
    wait_up(port);
    let url = format!("127.0.0.1:{port}");
    let (art, ev) = (tmp.path().join("art"), tmp.path().join("ev"));
    let flags = |file: &Path, art: &Path, ev: &Path| {
        let mut v: Vec<String> = ["-m", "synth", "--url", &url, "--endpoint-type", "completions", "--streaming"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for (k, val) in [("--input-file", s(file)), ("--artifact-dir", s(art)), ("--out", s(ev))] {
            v.extend([k.to_string(), val]);
        }
        v.extend(
            ["--custom-dataset-type", "mooncake_trace", "--extra-inputs", "ignore_eos:true", "--ui", "none"]
                .map(String::from),
        );
        v
    };
    let run = |v: Vec<String>| profile(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let ran = run(flags(&trace, &art, &ev));
    let refused = run(flags(&bad, &tmp.path().join("art2"), &tmp.path().join("ev2")));
    let _ = server.kill();
    let _ = server.wait();

    let (stdout, stderr) = text(&ran);
    assert!(ran.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let v = aiperf_reads(&art);
    assert_eq!((v["records"].as_u64(), v["errors"].as_u64()), (Some(4), Some(0)), "{v}");
    let plan = std::fs::read_to_string(ev.join("plan.toml")).expect("plan.toml");
    assert!(plan.contains("load = \"trace\"") && plan.contains("trace_lengths = true"), "{plan}");
    let mut records = Vec::new();
    for arm in std::fs::read_dir(ev.join("raw/b0")).expect("raw/b0") {
        for f in std::fs::read_dir(arm.expect("arm").path()).expect("arm dir") {
            let p = f.expect("file").path();
            if p.to_string_lossy().ends_with(".requests.jsonl") {
                records.extend(read_records(&p));
            }
        }
    }
    records.sort_by_key(|r| r.index);
    assert_eq!(records.len(), rows.len());
    let (t0, s0) = (records[0].intended_ns, records[0].send_ns.expect("sent"));
    let mut last_send = 0;
    for (r, (t, inp, out)) in records.iter().zip(&rows) {
        let offset = (t - rows[0].0) * 1_000_000;
        assert_eq!(r.intended_ns - t0, offset, "request {} intended at its row's offset", r.index);
        let sent = r.send_ns.expect("sent") - s0;
        assert!(sent >= last_send && r.send_ns.unwrap() >= r.intended_ns, "{r:?}");
        assert!(
            sent.abs_diff(offset) < 1_000_000_000,
            "request {} sent {sent} ns after the first, row {offset}",
            r.index
        );
        assert_eq!((r.prompt_tokens_intended, r.output_tokens_intended), (*inp, *out), "the row's lengths: {r:?}");
        assert_eq!(r.usage.as_ref().map(|u| u.completion_tokens), Some(*out), "forced: {r:?}");
        last_send = sent;
    }
    replay_ok(&ev);

    let (stdout, stderr) = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("`session_id` refused"), "{stderr}");
    assert!(!tmp.path().join("art2").exists() && !tmp.path().join("ev2").exists(), "nothing written");
}
