//! Crash consistency of `harness run` (debug builds): the smallest real study (one
//! block, two arms on the synthetic model, one closed cell of two requests) is run
//! once counting its evidence writes (`HARNESS_DEBUG_COUNT_WRITES`), then once per
//! write boundary N with the harness aborting right after its N-th completed write
//! (`HARNESS_DEBUG_EXIT_AFTER_WRITES`, `std::process::abort`: no destructor, no
//! cleanup, like SIGKILL). Each time `harness run --resume` must finish the study
//! (or refuse it as already complete, when the kill came after the manifest) and
//! `harness replay` must pass every check. The second study adds the phases before
//! the timing: in-study pilots and a required qualification.

use crate::common;

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

fn text_of(o: &Output) -> String {
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

/// Interleaved (`blocks.rounds = 2`): both arms' servers up at once, the cell in
/// two rounds; a kill leaves at most part of the block, which runs again whole.
fn interleaved_plan_text(model: &Path) -> String {
    let argv = serve_argv(model, &["--kv-format", "f16"], &[]);
    let plan =
        TestPlan { blocks: 1, warmup_prompts: 1, output_tokens: 4, rounds: 2, ..TestPlan::new("crash-interleaved", 6) };
    plan.arm("a", "control", &argv).arm("b", "candidate", &argv).closed("c", "confirmation", 1, 3).render()
}

/// Two arms, one block, pilots of the control arm (one run) deriving the
/// confirmation cell's count, and a required qualification (the parity gate) before
/// any timing: every phase of a study writes.
fn phases_plan_text(model: &Path) -> String {
    let argv = serve_argv(model, &["--kv-format", "f16"], &[]);
    let (engine, m) = (engine_bin().display().to_string(), model.display().to_string());
    let reference: Vec<String> =
        [&engine, "generate", "--model", &m, "--kv-format", "f16", "--threads", "1", "--json"].map(String::from).into();
    let plan = TestPlan { blocks: 1, warmup_prompts: 1, output_tokens: 4, ..TestPlan::new("crash-phases", 9) };
    let mut plan = plan.arm("a", "control", &argv).arm("b", "candidate", &argv);
    plan.cells.push(
        "[[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\n\
         count = \"derived:count\"\n"
            .into(),
    );
    plan.tail(&format!(
        "[pilots]\narms = [\"a\"]\nconcurrency = 1\ncount = 2\nruns = 1\n\n\
         [derive]\nnear_fraction = 0.9\ncount_floor = 2\ncount_duration_s = 0.1\ncount_multiple = 2\n\n\
         [qualification]\nrequired = true\ntokenizer = {tok:?}\nconcurrency = 2\n\n\
         [qualification.parity]\nprompts = 2\ninput_tokens = 8\noutput_tokens = 3\nconcurrency = 2\n\n\
         [qualification.parity.reference]\na = {reference}\n",
        tok = model.join("tokenizer.json").display().to_string(),
        reference = toml_array(&reference),
    ))
    .render()
}

/// Runs the study of `text` once counting its writes, then once per write boundary
/// killed right after it, resumed and replayed. Returns the number of boundaries.
fn kill_after_every_write(tmp: &Path, text: &str) -> usize {
    let plan = tmp.join("plan.toml");
    std::fs::write(&plan, text).expect("write plan");

    // The uninterrupted study, counting its writes.
    let log = tmp.join("writes.log");
    let full = tmp.join("full");
    let r = harness(
        &["run", "--quiet", "--out"],
        &full,
        &plan,
        &[("HARNESS_DEBUG_COUNT_WRITES", log.display().to_string())],
    );
    assert_eq!(r.status.code(), Some(0), "{}", text_of(&r));
    let writes = std::fs::read_to_string(&log).expect("the debug build logs its writes");
    let total = writes.lines().count();
    assert!(total > 10, "too few writes logged:\n{writes}");
    assert!(
        writes.lines().last().is_some_and(|l| l.ends_with("manifest.json")),
        "the manifest is the last write:\n{writes}"
    );
    let r = Command::new(harness_bin()).arg("replay").arg(&full).output().expect("replay");
    assert_eq!(r.status.code(), Some(0), "{}", text_of(&r));

    let mut resumed = 0;
    // From the last write back: the finish of a study is where a crash window hides.
    for n in (1..=total).rev() {
        let dir = tmp.join(format!("kill{n}"));
        let what = writes.lines().nth(n - 1).unwrap_or_default();
        let killed =
            harness(&["run", "--quiet", "--out"], &dir, &plan, &[("HARNESS_DEBUG_EXIT_AFTER_WRITES", n.to_string())]);
        assert!(
            killed.status.code().is_none(),
            "write {n} ({what}): the harness was not killed:\n{}",
            text_of(&killed)
        );
        reap_servers(&dir);
        if dir.join("manifest.json").symlink_metadata().is_ok() {
            // Killed after its last write: complete, and resume says so.
            let r = harness(&["run", "--quiet", "--resume"], &dir, &plan, &[]);
            assert!(text_of(&r).contains("nothing to resume"), "write {n} ({what}):\n{}", text_of(&r));
        } else {
            let r = harness(&["run", "--quiet", "--resume"], &dir, &plan, &[]);
            assert_eq!(r.status.code(), Some(0), "write {n} ({what}): resume failed:\n{}", text_of(&r));
            resumed += 1;
        }
        let r = Command::new(harness_bin()).arg("replay").arg(&dir).output().expect("replay");
        assert_eq!(r.status.code(), Some(0), "write {n} ({what}): replay failed:\n{}", text_of(&r));
        if text.contains("\nrounds = ") {
            // An interleaved block is measured by one session, all its arms together.
            let session = |arm: &str| read_json(&dir.join(format!("raw/b0/{arm}/unit.json")))["session"].clone();
            assert_eq!(session("a"), session("b"), "write {n} ({what}): the block's arms ran in different sessions");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
    eprintln!("{total} write boundaries: killed after each, {resumed} resumed, every one replayed clean");
    assert_eq!(resumed, total - 1, "every kill but the one after the manifest leaves a study to resume");
    total
}

#[test]
fn a_study_killed_after_any_write_resumes_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    kill_after_every_write(tmp.path(), &plan_text(&model));
}

/// The same through the pilot phase and a required qualification: a kill after
/// the qualification's completion record and before the session's end once left a
/// resumed study that failed its own replay ("units_run qualification: in no session").
#[test]
fn a_study_with_pilots_and_qualification_killed_after_any_write_resumes_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text = phases_plan_text(&model);
    assert!(text.contains("[pilots]") && text.contains("required = true"));
    kill_after_every_write(tmp.path(), &text);
}

/// The same for an interleaved block: a kill after one arm's completion record and
/// before the other's must not leave a block half from one session and half from
/// another (the completed arm is moved aside and the whole block runs again).
#[test]
fn an_interleaved_study_killed_after_any_write_resumes_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let text = interleaved_plan_text(&model);
    assert!(text.contains("rounds = 2"));
    kill_after_every_write(tmp.path(), &text);
}

/// A sequential study (`[sequential]`, looks after 3 and 4 blocks) whose candidate
/// is so slow (a 20 ms delay per engine step) that it stops at the first look:
/// killed right before, at and after the write of `sequential.json`, resumed, it
/// stops at the same look again (no fourth block), and replays clean.
#[test]
fn a_sequential_study_killed_around_its_stop_resumes_to_the_same_stop_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let fast = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let slow = serve_argv(&model, &["--kv-format", "f16"], &["--debug-step-delay-us", "20000"]);
    let plan = TestPlan { blocks: 4, warmup_prompts: 1, output_tokens: 4, ..TestPlan::new("crash-sequential", 8) };
    let text = plan
        .arm("a", "control", &fast)
        .arm("b", "candidate", &slow)
        .closed("c", "confirmation", 1, 3)
        .tail(
            "[sequential]\nlooks = [3, 4]\n\n[analysis]\nalpha = 0.05\n\n[[hypotheses]]\nmetric = \"throughput_rps\"\n\
             cell = \"c\"\ncandidate = \"b\"\ncontrol = \"a\"\nthreshold = 0.0\n",
        )
        .render();
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, &text).expect("write plan");
    let log = tmp.path().join("writes.log");
    let full = tmp.path().join("full");
    let r = harness(
        &["run", "--quiet", "--out"],
        &full,
        &plan,
        &[("HARNESS_DEBUG_COUNT_WRITES", log.display().to_string())],
    );
    assert_eq!(r.status.code(), Some(0), "{}", text_of(&r));
    assert_eq!(read_json(&full.join("sequential.json"))["blocks"].as_u64(), Some(3), "stopped at the first look");
    let writes = std::fs::read_to_string(&log).expect("writes");
    let at = writes.lines().position(|l| l.ends_with("sequential.json")).expect("sequential.json is written") + 1;
    for n in [at - 1, at, at + 1] {
        let dir = tmp.path().join(format!("kill{n}"));
        let killed =
            harness(&["run", "--quiet", "--out"], &dir, &plan, &[("HARNESS_DEBUG_EXIT_AFTER_WRITES", n.to_string())]);
        assert!(killed.status.code().is_none(), "write {n}: not killed:\n{}", text_of(&killed));
        reap_servers(&dir);
        let r = harness(&["run", "--quiet", "--resume"], &dir, &plan, &[]);
        assert_eq!(r.status.code(), Some(0), "write {n}: resume failed:\n{}", text_of(&r));
        let seq = read_json(&dir.join("sequential.json"));
        assert_eq!((seq["blocks"].as_u64(), seq["state"].as_str()), (Some(3), Some("regressed")), "write {n}");
        assert!(!dir.join("raw/b3").exists(), "write {n}: a fourth block ran");
        let r = Command::new(harness_bin()).arg("replay").arg(&dir).output().expect("replay");
        assert_eq!(r.status.code(), Some(0), "write {n}: replay failed:\n{}", text_of(&r));
    }
}
