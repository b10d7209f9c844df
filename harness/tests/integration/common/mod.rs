//! Shared helpers of the harness's integration tests: the engine binary, a synthetic
//! model directory with calibrated k16v8 scales, free loopback ports, running
//! `harness run`, and reading the evidence it writes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use harness::evidence::request_record::RequestRecord;

pub mod plan;
pub mod studies;
pub mod tamper;
#[allow(unused_imports)] // not every test crate builds plans
pub use plan::TestPlan;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

pub fn harness_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_harness"))
}

/// `harness plan check --probe PLAN` with its scratch folder (the system's
/// temporary folder) under `tmp`: a failed probe keeps its servers' logs there,
/// and must say so; the test's own temporary folder then removes them.
pub fn probe_plan(plan: &Path, tmp: &Path) -> Output {
    let out = Command::new(harness_bin())
        .args(["plan", "check", "--probe"])
        .arg(plan)
        .env("TMPDIR", tmp)
        .output()
        .expect("harness plan check --probe");
    if !out.status.success() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kept = stdout.lines().find_map(|l| l.strip_prefix("probe: logs kept in ")).map(PathBuf::from);
        assert!(
            kept.as_ref().is_some_and(|d| d.starts_with(tmp) && d.is_dir()),
            "a failed probe names the folder it kept its logs in, under {}:\n{stdout}",
            tmp.display()
        );
    }
    out
}

/// The `engine` binary of the current sources: `cargo build --workspace --bin engine`
/// runs once per test process (cargo from `$CARGO`, into the inherited
/// `CARGO_TARGET_DIR`), and the path is the `executable` of its compiler-artifact
/// message, so a stale or missing binary is never tested. `--workspace`, not
/// `-p engine`: the dependencies' features resolve as in the workspace's own test
/// build, so their artifacts are reused (`-p engine` resolved them apart and
/// recompiled tokio, tokenizers and reqwest once per target directory: minutes).
pub fn engine_bin() -> PathBuf {
    static ENGINE: OnceLock<PathBuf> = OnceLock::new();
    ENGINE.get_or_init(build_engine).clone()
}

fn build_engine() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--workspace", "--bin", "engine", "--message-format=json-render-diagnostics"])
        .current_dir(workspace())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{cargo} build --workspace --bin engine`: {e}"));
    assert!(out.status.success(), "`cargo build --workspace --bin engine` failed; the harness tests need the engine");
    let engine = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "engine")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("`cargo build --workspace --bin engine` reported no engine executable"));
    assert!(engine.is_file(), "no engine binary at {} after building it", engine.display());
    engine
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// `engine synth --tokenizer byte` into `dir/model`, plus `dir/model/scales.json`.
pub fn synth_model(dir: &Path) -> PathBuf {
    let engine = engine_bin();
    let model = dir.join("model");
    run_ok(Command::new(&engine).args(["synth", "--tokenizer", "byte", "--out"]).arg(&model));
    let mut text = workspace().join("assets/texts/macbeth_gut.txt");
    if !text.is_file() {
        // scripts/fetch-assets was not run: any text calibrates a random model.
        text = dir.join("calibration.txt");
        std::fs::write(&text, "When shall we three meet again, in thunder, lightning, or in rain? ".repeat(40))
            .expect("write calibration text");
    }
    run_ok(
        Command::new(&engine)
            .args(["calibrate", "--model"])
            .arg(&model)
            .arg("--text")
            .arg(&text)
            .args(["--max-tokens", "256", "--out"])
            .arg(model.join("scales.json")),
    );
    model
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A TOML array of strings.
pub fn toml_array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// argv of `engine serve` for an arm of a test plan.
pub fn serve_argv(model: &Path, kv: &[&str], extra: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = vec![engine_bin().display().to_string(), "serve".into(), "--model".into()];
    argv.push(model.display().to_string());
    for a in ["--served-model-name", "{model}", "--host", "{host}", "--port", "{port}"] {
        argv.push(a.into());
    }
    argv.extend(kv.iter().map(|s| s.to_string()));
    for a in ["--kv-budget", "64MiB", "--max-num-seqs", "8", "--max-num-batched-tokens", "512"] {
        argv.push(a.into());
    }
    for a in ["--max-model-len", "256", "--threads", "1", "--receipts", "{receipts}"] {
        argv.push(a.into());
    }
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv
}

pub fn run_harness(plan: &Path, out: &Path) -> Output {
    Command::new(harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(out)
        .arg(plan)
        .current_dir(workspace())
        .output()
        .expect("run harness")
}

/// Writes `text` as `dir/plan.toml`, runs `harness run` into `dir/evidence` and
/// asserts that it succeeded; returns the evidence directory and the run's stdout.
pub fn run_study_ok(dir: &Path, text: &str) -> (PathBuf, String) {
    let plan_path = dir.join("plan.toml");
    std::fs::write(&plan_path, text).expect("write plan");
    let out = dir.join("evidence");
    let run = run_harness(&plan_path, &out);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "harness run failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    (out, stdout)
}

pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn read_records(path: &Path) -> Vec<RequestRecord> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).collect()
}

/// Every file under `dir`, relative and `/`-separated, sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("inside").to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// Recomputes every manifest entry's size and SHA-256 and checks that the manifest
/// lists every file of the directory (except itself).
pub fn check_manifest(dir: &Path, plan_bytes: &[u8]) {
    let m = read_json(&dir.join("manifest.json"));
    assert_eq!(m["plan_sha256"], harness::evidence::sha256_hex(plan_bytes));
    let entries = m["files"].as_array().expect("files");
    let mut listed: Vec<String> = Vec::new();
    for f in entries {
        let rel = f["path"].as_str().expect("path");
        let bytes = std::fs::read(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(f["bytes"].as_u64(), Some(bytes.len() as u64), "{rel}: size");
        assert_eq!(f["sha256"].as_str(), Some(harness::evidence::sha256_hex(&bytes).as_str()), "{rel}: sha256");
        listed.push(rel.to_string());
    }
    let on_disk: Vec<String> = files(dir).into_iter().filter(|p| p != "manifest.json").collect();
    listed.sort();
    assert_eq!(listed, on_disk, "the manifest lists exactly the files on disk");
    // Discarded partial units (`--resume`) are kept as found, half files included.
    let kept = on_disk.iter().filter(|p| !p.starts_with("discarded/"));
    assert!(kept.clone().all(|p| !p.ends_with(".partial") && !p.ends_with(".tmp")), "{on_disk:?}");
    harness::evidence::verify_manifest(dir).expect("verify_manifest");
}

/// Copies a k16v8 scales file with every scale multiplied by `factor` (a broken candidate).
pub fn scaled_scales(src: &Path, dst: &Path, factor: f64) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    let scaled: Vec<f64> =
        v["scales"].as_array().expect("scales").iter().map(|s| s.as_f64().unwrap() * factor).collect();
    v["scales"] = serde_json::json!(scaled);
    std::fs::write(dst, v.to_string()).unwrap();
}

/// Runs `harness args` in `dir` (the workspace when `None`), killing it after
/// `limit`: `Err` says it hung (what a FIFO input or an unbounded trace once did).
pub fn harness_within<S: AsRef<std::ffi::OsStr>>(
    dir: Option<&Path>,
    args: &[S],
    limit: std::time::Duration,
) -> Result<Output, String> {
    let mut cmd = Command::new(harness_bin());
    cmd.args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    cmd.current_dir(dir.map_or_else(workspace, Path::to_path_buf));
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(|e| e.to_string()),
            Ok(None) if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("hung: no exit within {} s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
            Err(e) => return Err(e.to_string()),
        }
    }
}
