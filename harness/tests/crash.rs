//! Crash consistency of `harness run` (debug builds): the smallest real study (one
//! block, two arms on the synthetic model, one closed cell of two requests) is run
//! once counting its evidence writes (`HARNESS_DEBUG_COUNT_WRITES`), then once per
//! write boundary N with the harness aborting right after its N-th completed write
//! (`HARNESS_DEBUG_EXIT_AFTER_WRITES`, `std::process::abort`: no destructor, no
//! cleanup, like SIGKILL). Each time `harness run --resume` must finish the study
//! (or refuse it as already complete, when the kill came after the manifest) and
//! `harness replay` must pass every check.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn plan_text(model: &Path) -> String {
    let argv = serve_argv(model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { blocks: 1, warmup_prompts: 1, output_tokens: 4, ..TestPlan::new("crash-test", 5) };
    plan.arm("a", "control", &argv).arm("b", "candidate", &argv).closed("c", "confirmation", 1, 2).render()
}

fn harness(args: &[&str], dir: &Path, plan: &Path, env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(harness_bin());
    cmd.args(args).arg(dir).arg(plan).current_dir(workspace());
    cmd.env_remove("HARNESS_DEBUG_COUNT_WRITES").env_remove("HARNESS_DEBUG_EXIT_AFTER_WRITES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run harness")
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Waits until every server a killed harness started is gone (they die with it,
/// `PR_SET_PDEATHSIG`), so the next run finds their ports free.
fn reap_servers(dir: &Path) {
    for rel in files(dir).into_iter().filter(|f| f.ends_with("/startup.json") && f.starts_with("raw/")) {
        let v: serde_json::Value =
            match std::fs::read(dir.join(&rel)).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
                Some(v) => v,
                None => continue,
            };
        let Some(pid) = v["pid"].as_u64().and_then(|p| i32::try_from(p).ok()) else { continue };
        for _ in 0..200 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next().map(str::to_string));
            if !matches!(state.as_deref(), Some(s) if s != "Z" && s != "X") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

#[test]
fn a_study_killed_after_any_write_resumes_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, plan_text(&model)).expect("write plan");

    // The uninterrupted study, counting its writes.
    let log = tmp.path().join("writes.log");
    let full = tmp.path().join("full");
    let r = harness(
        &["run", "--quiet", "--out"],
        &full,
        &plan,
        &[("HARNESS_DEBUG_COUNT_WRITES", log.display().to_string())],
    );
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let writes = std::fs::read_to_string(&log).expect("the debug build logs its writes");
    let total = writes.lines().count();
    assert!(total > 10, "too few writes logged:\n{writes}");
    assert!(
        writes.lines().last().is_some_and(|l| l.ends_with("manifest.json")),
        "the manifest is the last write:\n{writes}"
    );
    let r = Command::new(harness_bin()).arg("replay").arg(&full).output().expect("replay");
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));

    let mut resumed = 0;
    // From the last write back: the finish of a study is where a crash window hides.
    for n in (1..=total).rev() {
        let dir = tmp.path().join(format!("kill{n}"));
        let what = writes.lines().nth(n - 1).unwrap_or_default();
        let killed =
            harness(&["run", "--quiet", "--out"], &dir, &plan, &[("HARNESS_DEBUG_EXIT_AFTER_WRITES", n.to_string())]);
        assert!(killed.status.code().is_none(), "write {n} ({what}): the harness was not killed:\n{}", text(&killed));
        reap_servers(&dir);
        if dir.join("manifest.json").symlink_metadata().is_ok() {
            // Killed after its last write: complete, and resume says so.
            let r = harness(&["run", "--quiet", "--resume"], &dir, &plan, &[]);
            assert!(text(&r).contains("nothing to resume"), "write {n} ({what}):\n{}", text(&r));
        } else {
            let r = harness(&["run", "--quiet", "--resume"], &dir, &plan, &[]);
            assert_eq!(r.status.code(), Some(0), "write {n} ({what}): resume failed:\n{}", text(&r));
            resumed += 1;
        }
        let r = Command::new(harness_bin()).arg("replay").arg(&dir).output().expect("replay");
        assert_eq!(r.status.code(), Some(0), "write {n} ({what}): replay failed:\n{}", text(&r));
        std::fs::remove_dir_all(&dir).ok();
    }
    eprintln!("{total} write boundaries: killed after each, {resumed} resumed, every one replayed clean");
    assert_eq!(resumed, total - 1, "every kill but the one after the manifest leaves a study to resume");
}
