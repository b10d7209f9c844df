//! Issue 52 item 21, over real HTTP on the real engine binary: a server that
//! writes 200 MB to its log before it starts. The identity checks still search
//! the whole log (streamed: the harness's peak memory stays far below the log's
//! size, where reading it whole once took more than the log), the evidence keeps
//! the log's first 16 MiB with the size and SHA-256 of the whole
//! (`arm_outcome.json` `stop.log`), and `harness replay` still passes, taking the
//! log verdicts it can no longer read again as recorded.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// Filler bytes the server writes to its log before it starts.
const FILLER: u64 = 200_000_000;

/// `VmHWM` (peak resident set) of `pid` in bytes, while it runs.
fn peak_rss(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 =
        text.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_200_mb_server_log_is_searched_whole_in_bounded_memory_and_kept_to_its_first_16_mib() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let mut argv: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "yes 'filler: a chatty server logs every step of every request' | head -c {FILLER} >&2; exec \"$0\" \"$@\""
        ),
    ];
    argv.extend(serve_argv(&model, &["--kv-format", "f16"], &[]));
    let mut plan =
        TestPlan { warmup_prompts: 1, blocks: 1, ..TestPlan::new("chatty-log", 5) }.arm("a", "control", &argv);
    plan.arms.last_mut().expect("an arm").push_str("identity = { preset = \"engine\", kv_format = \"f16\" }\n");
    let text = plan.closed("c", "confirmation", 1, 2).render();
    let path = tmp.path().join("plan.toml");
    std::fs::write(&path, text).expect("write plan");
    let out = tmp.path().join("evidence");
    let mut child = Command::new(harness_bin())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&path)
        .current_dir(workspace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("harness run");
    let pid = child.id();
    let mut peak = 0;
    while child.try_wait().expect("wait").is_none() {
        peak = peak.max(peak_rss(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = child.wait_with_output().expect("output");
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{said}");
    eprintln!("harness peak RSS {} MB with a {} MB server log", peak >> 20, FILLER / 1_000_000);
    assert!(peak > 0 && peak < 150 << 20, "the harness peaked at {} MB: it holds the log", peak >> 20);

    let unit = out.join("raw/b0/a");
    let log = std::fs::metadata(unit.join("server.log")).expect("server.log").len();
    assert_eq!(log, harness::arm::log_scan::LOG_KEPT_BYTES, "the evidence keeps the first 16 MiB");
    let outcome = read_json(&unit.join("arm_outcome.json"));
    let kept = &outcome["stop"]["log"];
    assert!(kept["bytes"].as_u64().unwrap() > FILLER, "{kept}");
    assert_eq!(kept["kept_bytes"].as_u64(), Some(log), "{kept}");
    assert_eq!(kept["sha256"].as_str().map(str::len), Some(64), "{kept}");
    let startup = read_json(&unit.join("startup.json"));
    assert!(startup["identity"]["log_bytes"].as_u64().unwrap() > FILLER, "the checks read the whole log: {startup}");
    let checks = startup["identity_checks"].as_array().expect("verdicts");
    assert!(checks.iter().all(|c| c["ok"] == true), "{checks:#?}");
    assert!(checks.iter().any(|c| c["check"] == "engine_startup_field"), "the startup line after 200 MB was found");

    let replay = Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    let said = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{said}");
    assert!(said.contains("log verdicts as recorded"), "{said}");
}
