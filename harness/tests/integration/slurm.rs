//! The slurm executor through a real Slurm cluster (`scripts/slurm-local start`,
//! which scripts/test runs; or any cluster SLURM_CONF names): small studies of the
//! real engine on a synthetic model whose blocks run as `sbatch --array` tasks.
//! - merged evidence replays clean, and its `results/` are what the analysis
//!   computes from the same raw units (`harness report` on a copy, and on a copy
//!   without the Slurm facts: byte-identical matrix.csv); a block changed after
//!   merging is named by replay with its task and node;
//! - a killed array task is resubmitted (its partial units moved aside); a killed
//!   coordinator resumes, following running and pending tasks and resubmitting
//!   only the block whose task never ran; Ctrl-C cancels the array and leaves no
//!   task in the queue;
//! - bad input and faults: no sbatch on PATH, a missing SLURM_CONF, a partition
//!   Slurm refuses (exit 2, nothing written); a worker that cannot see its root; a
//!   task whose node cannot see the shared root (Slurm cannot open its log); a task
//!   that never leaves the queue (`executor.start_timeout_s`); a server that fails
//!   its identity checks on a node.
//!
//! With no cluster answering, every test fails and says how to start one. The tests
//! take one lock: the local cluster has the machine's CPUs only.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;

static CLUSTER: Mutex<()> = Mutex::new(());

/// The lock and the cluster's configuration (SLURM_CONF, else the one
/// scripts/slurm-local writes); fails with the fix when no controller answers.
fn cluster() -> (MutexGuard<'static, ()>, PathBuf) {
    let guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let conf = std::env::var_os("SLURM_CONF")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/slurm-local/slurm.conf"));
    let fix = "start the local cluster with `scripts/slurm-local start` (scripts/test does), or set SLURM_CONF to a \
               running cluster's slurm.conf";
    assert!(conf.is_file(), "no Slurm configuration at {}: {fix}", conf.display());
    let ping = Command::new("scontrol").arg("ping").env("SLURM_CONF", &conf).output();
    match ping {
        Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("is UP") => {}
        Ok(o) => panic!("no Slurm controller answers ({}): {fix}", String::from_utf8_lossy(&o.stdout).trim()),
        Err(e) => panic!("cannot run scontrol ({e}): {fix}"),
    }
    (guard, conf)
}

/// `harness args` from the workspace, on the cluster `conf`.
fn harness(conf: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(harness_bin());
    c.args(args).env("SLURM_CONF", conf).current_dir(workspace());
    c
}

fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Waits for `child`, killing it after `limit` (a hung coordinator fails the test).
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("no exit within {} s:\n{}", limit.as_secs(), text(&out));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("wait")
}

fn until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {} s", limit.as_secs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The study's tasks in the queue (`squeue -n` its job name).
fn queued(conf: &Path, dir: &Path) -> Vec<String> {
    let d = read_json(&dir.join("slurm/dispatch.json"));
    let name = d["job_name"].as_str().expect("job_name");
    let out = Command::new("squeue")
        .args(["-h", "-r", "-n", name, "-o", "%i %T"])
        .env("SLURM_CONF", conf)
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// Cancels whatever of the study is left (a failed test must not hold the CPUs).
struct Cleanup<'a>(&'a Path, PathBuf);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let dispatch = self.1.join("slurm/dispatch.json");
        if let Some(name) = std::fs::read_to_string(&dispatch)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|d| d["job_name"].as_str().map(str::to_string))
        {
            let _ = Command::new("scancel").args(["--name", &name]).env("SLURM_CONF", self.0).status();
        }
    }
}

/// A two-arm plan (f16 control, k16v8 candidate) of `blocks` blocks, one closed cell
/// of `count` requests, engine steps slowed by `slow_us`, arms on two consecutive
/// ports, and `executor` (TOML lines of `[executor]`) with the study's shared root.
fn plan(model: &Path, name: &str, blocks: u32, count: u32, slow_us: u32, executor: &str, root: &Path) -> String {
    plan_with(model, name, blocks, count, slow_us, executor, root, "")
}

/// `plan`, with `analysis` lines added to `[analysis]`.
#[allow(clippy::too_many_arguments)]
fn plan_with(
    model: &Path,
    name: &str,
    blocks: u32,
    count: u32,
    slow_us: u32,
    executor: &str,
    root: &Path,
    analysis: &str,
) -> String {
    let scales = model.join("scales.json").display().to_string();
    let slow = ["--debug-step-delay-us".to_string(), slow_us.to_string()];
    let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
    let f16 = serve_argv(model, &["--kv-format", "f16"], &slow);
    let k16v8 = serve_argv(model, &["--kv-format", "k16v8", "--kv-scales", &scales], &slow);
    let port = base_port(2 * blocks as u16);
    let mut p = TestPlan { blocks, settle_s: 0.0, warmup_prompts: 1, ..TestPlan::new(name, 17) };
    for (i, (arm, role, argv, kv)) in
        [("f16", "control", &f16, "f16"), ("k16v8", "candidate", &k16v8, "k16v8")].into_iter().enumerate()
    {
        p.arms.push(format!(
            "[[arms]]\nname = {arm:?}\nrole = {role:?}\nargv = {}\nport = {}\nstartup_timeout_s = 60.0\n\
             receipts = \"{{arm_dir}}/receipts.jsonl\"\nidentity = {{ preset = \"engine\", kv_format = {kv:?} }}\n",
            toml_array(argv),
            port + i as u16
        ));
    }
    p.closed("c", "confirmation", 2, count)
        .tail(&format!(
            "[executor]\n{executor}\nshared_root = {:?}\nports_per_task = 2\npoll_interval_s = 0.2\n\n\
             [analysis]\nalpha = 0.05\n{analysis}\n[[hypotheses]]\nmetric = \"throughput_rps\"\ncell = \"c\"\n\
             candidate = \"k16v8\"\ncontrol = \"f16\"\nthreshold = 0.01\n",
            root.display().to_string()
        ))
        .render()
}

/// The first of `n` consecutive free ports below the kernel's ephemeral range
/// (32768 up): every block's servers take their own pair, and a port in that range
/// may be taken by any outgoing connection meanwhile.
fn base_port(n: u16) -> u16 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut x = u64::from(std::process::id()) ^ now.as_nanos() as u64;
    loop {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let base = 20_000 + ((x >> 33) % 10_000) as u16;
        if (base..base + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
}

/// `dir/plan.toml` with `text`, and the evidence directory `dir/ev`.
fn write_plan(dir: &Path, text: &str) -> (PathBuf, PathBuf) {
    let p = dir.join("plan.toml");
    std::fs::write(&p, text).unwrap();
    (p, dir.join("ev"))
}

fn start(conf: &Path, plan: &Path, out: &Path) -> Child {
    harness(conf, &["run", "--quiet", "--out", out.to_str().unwrap(), plan.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn harness run")
}

/// The worker claims (`slurm/sessions/*.json` with a task) of block `block`.
fn claims_of(dir: &Path, block: u64) -> Vec<serde_json::Value> {
    let Ok(entries) = std::fs::read_dir(dir.join("slurm/sessions")) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(e.path()).ok()?).ok())
        .filter(|c| c["task"]["block"].as_u64() == Some(block))
        .collect()
}

fn replay_ok(dir: &Path) {
    let r = Command::new(harness_bin()).args(["replay"]).arg(dir).output().expect("replay");
    assert!(r.status.success(), "replay failed:\n{}", text(&r));
}

#[test]
fn a_dispatched_study_replays_clean_equals_its_recomputation_and_names_a_changed_block() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let exec = "kind = \"slurm\"\ncpus_per_task = 1\nmax_parallel = 2";
    let noise = "noise = [\"throughput_rps\"]\n";
    let text_plan = plan_with(&model, "slurm-merge", 4, 4, 0, exec, tmp.path(), noise);
    let (plan_path, dir) = write_plan(tmp.path(), &text_plan);
    let _cleanup = Cleanup(&conf, dir.clone());
    let out = finish(start(&conf, &plan_path, &dir), Duration::from_secs(300));
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("submitted 4 block(s) as array job") && said.contains("(0-3%2)"), "{said}");
    assert!(said.contains("dispatched: 4 blocks as Slurm array job(s)"), "{said}");
    replay_ok(&dir);
    assert!(queued(&conf, &dir).is_empty(), "no task left in the queue");

    let run = read_json(&dir.join("run.json"));
    let tasks = run["executor"]["tasks"].as_array().expect("executor.tasks");
    assert_eq!(tasks.len(), 4, "one worker per block: {tasks:?}");
    let mut blocks: Vec<u64> = tasks.iter().map(|t| t["block"].as_u64().unwrap()).collect();
    blocks.sort();
    assert_eq!(blocks, [0, 1, 2, 3]);
    for t in tasks {
        assert_eq!(t["kept"], true);
        assert_eq!(t["outcome"], "finished");
        assert!(t["hostname"].as_str().is_some_and(|h| !h.is_empty()) && t["job_id"].is_string(), "{t}");
        assert!(t["host"]["cpu_model"].is_string() || t["host"]["cpus_online"].is_string(), "host facts: {t}");
        let b = t["block"].as_u64().unwrap();
        let ports = &t["ports"];
        assert_eq!(ports["k16v8"].as_u64().unwrap(), ports["f16"].as_u64().unwrap() + 1);
        let session = t["session"].as_u64().unwrap();
        for arm in ["f16", "k16v8"] {
            let unit = read_json(&dir.join(format!("raw/b{b}/{arm}/unit.json")));
            assert_eq!(unit["session"].as_u64(), Some(session), "b{b}/{arm} sealed by its worker");
        }
    }
    assert_eq!(run["sessions"].as_array().unwrap().len(), 5, "the coordinator and four workers");
    let report = std::fs::read_to_string(dir.join("results/report.md")).unwrap();
    assert!(report.contains("## Where the blocks ran") && report.contains("on 1 machine"), "{report}");
    assert!(dir.join("slurm/blocks.sbatch").is_file() && dir.join("slurm/logs").is_dir());

    // The analysis from the same raw units: `harness report` on a copy, and on a copy
    // stripped of every Slurm fact, gives the same matrix.csv byte for byte.
    let copy = tmp.path().join("copy");
    tamper::copy_dir(&dir, &copy);
    let r = Command::new(harness_bin()).arg("report").arg(&copy).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    for f in ["matrix.csv", "requests.csv", "evidence.json", "report.md", "summaries.json"] {
        assert_eq!(
            std::fs::read(dir.join("results").join(f)).unwrap(),
            std::fs::read(copy.join("results").join(f)).unwrap(),
            "results/{f} rebuilt from the raw units"
        );
    }
    let bare = tmp.path().join("bare");
    tamper::copy_dir(&dir, &bare);
    let mut run_bare = run.clone();
    run_bare.as_object_mut().unwrap().remove("executor");
    std::fs::write(bare.join("run.json"), serde_json::to_vec_pretty(&run_bare).unwrap()).unwrap();
    std::fs::remove_dir_all(bare.join("slurm")).unwrap();
    // Sealed again as a study that ran here would be: every reader refuses evidence
    // that differs from its manifest.
    tamper::rewrite_manifest(&bare);
    let r = Command::new(harness_bin()).arg("report").arg(&bare).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert_eq!(
        std::fs::read(dir.join("results/matrix.csv")).unwrap(),
        std::fs::read(bare.join("results/matrix.csv")).unwrap(),
        "matrix.csv does not depend on where the blocks ran"
    );
    let bare_report = std::fs::read_to_string(bare.join("results/report.md")).unwrap();
    assert!(!bare_report.contains("## Where the blocks ran"));

    // The same units as if blocks 2 and 3 had run on another node: the noise
    // decomposition gains the machine as a level (the report's, `harness noise`'s,
    // and replay's own recomputation agree).
    let two = tmp.path().join("two");
    tamper::copy_dir(&dir, &two);
    let mut run_two = run.clone();
    for t in run_two["executor"]["tasks"].as_array_mut().unwrap() {
        if t["block"].as_u64().unwrap() >= 2 {
            t["hostname"] = "node-b".into();
            let claim = two.join(format!("slurm/sessions/{}.json", t["session"]));
            let mut c = read_json(&claim);
            c["task"]["hostname"] = "node-b".into();
            std::fs::write(&claim, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
        }
    }
    std::fs::write(two.join("run.json"), serde_json::to_vec_pretty(&run_two).unwrap()).unwrap();
    tamper::rewrite_manifest(&two);
    let r = Command::new(harness_bin()).arg("report").arg(&two).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    tamper::rewrite_manifest(&two);
    replay_ok(&two);
    let report = std::fs::read_to_string(two.join("results/report.md")).unwrap();
    assert!(report.contains("on 2 machines") && report.contains("| node-b | 3 |"), "{report}");
    let evidence = read_json(&two.join("results/evidence.json"));
    let levels: Vec<&str> = evidence["noise"]["groups"][0]["decomposition"]["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["level"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["machine", "block", "server"], "{evidence}");
    let n = Command::new(harness_bin()).arg("noise").arg(&two).output().unwrap();
    assert!(n.status.success(), "{}", text(&n));
    assert!(text(&n).contains("the blocks ran on 2 machines") && text(&n).contains("  machine "), "{}", text(&n));
    let one = read_json(&dir.join("results/evidence.json"));
    assert_eq!(one["noise"]["groups"][0]["decomposition"]["components"][0]["level"], "block", "one machine: no level");

    // A unit changed after the merge: replay names its block, task and node.
    let tampered = tmp.path().join("tampered");
    tamper::copy_dir(&dir, &tampered);
    tamper::flip_digit(&tampered, "raw/b2/k16v8/c.requests.jsonl", 200);
    let r = Command::new(harness_bin()).arg("replay").arg(&tampered).output().unwrap();
    let said = text(&r);
    assert_eq!(r.status.code(), Some(2), "{said}");
    assert!(said.contains("block 2 (task") && said.contains("changed after its worker sealed it"), "{said}");
}

#[test]
fn a_killed_array_task_is_resubmitted_and_its_partial_units_kept_aside() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let exec = "kind = \"slurm\"\ncpus_per_task = 1\nmax_parallel = 2\nmax_resubmits = 1";
    let (plan_path, dir) = write_plan(tmp.path(), &plan(&model, "slurm-kill-task", 2, 8, 20_000, exec, tmp.path()));
    let _cleanup = Cleanup(&conf, dir.clone());
    let child = start(&conf, &plan_path, &dir);
    // Block 1's worker, once its first server is up: SIGKILL (its servers die with it).
    until("block 1's first server started", Duration::from_secs(120), || dir.join("raw/b1/f16/startup.json").is_file());
    let claim = claims_of(&dir, 1).pop().expect("block 1's worker claimed a session");
    let pid = claim["pid"].as_i64().unwrap() as i32;
    // SAFETY: kill(2) of the worker this test's study started on this machine.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill block 1's worker");
    let out = finish(child, Duration::from_secs(300));
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("b1 failed: task") && said.contains("b1 resubmitted (attempt 2 of 2)"), "{said}");
    replay_ok(&dir);
    let run = read_json(&dir.join("run.json"));
    let e = &run["executor"];
    let failures = e["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!((failures[0]["block"].as_u64(), failures[0]["resubmitted"].as_bool()), (Some(1), Some(true)));
    let b1: Vec<&serde_json::Value> = e["tasks"].as_array().unwrap().iter().filter(|t| t["block"] == 1).collect();
    assert_eq!(b1.len(), 2, "block 1 ran twice, once kept: {b1:?}");
    assert_eq!(b1.iter().filter(|t| t["kept"] == true).count(), 1);
    assert_eq!(e["submissions"].as_array().unwrap().len(), 2, "the array, then block 1 again");
    assert_eq!(e["submissions"][1]["blocks"], serde_json::json!([1]));
    let discarded: Vec<String> = files(&dir).into_iter().filter(|f| f.starts_with("discarded/")).collect();
    assert!(discarded.iter().any(|f| f.contains("/raw/b1/f16/")), "partial units moved aside: {discarded:?}");
    assert!(queued(&conf, &dir).is_empty());
}

#[test]
fn a_killed_coordinator_resumes_following_its_tasks_and_resubmits_only_what_never_ran() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let exec = "kind = \"slurm\"\ncpus_per_task = 1\nmax_parallel = 2";
    let (plan_path, dir) = write_plan(tmp.path(), &plan(&model, "slurm-kill-coord", 4, 8, 20_000, exec, tmp.path()));
    let _cleanup = Cleanup(&conf, dir.clone());
    let mut child = start(&conf, &plan_path, &dir);
    until("two workers running", Duration::from_secs(120), || {
        !claims_of(&dir, 0).is_empty() && !claims_of(&dir, 1).is_empty()
    });
    child.kill().expect("SIGKILL the coordinator");
    child.wait().unwrap();
    // Block 3's task leaves the queue before it ever ran (as if lost or cancelled).
    let sub = read_json(&dir.join("slurm/submissions/0.json"));
    let job = sub["job_id"].as_str().expect("submitted").to_string();
    let st = Command::new("scancel").arg(format!("{job}_3")).env("SLURM_CONF", &conf).status().unwrap();
    assert!(st.success());
    assert!(claims_of(&dir, 3).is_empty(), "block 3 had not started");
    let resumed = harness(&conf, &["run", "--quiet", "--resume", dir.to_str().unwrap(), plan_path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(resumed, Duration::from_secs(300));
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("an earlier session's submission") || said.contains("verified (unit.json"), "{said}");
    assert!(said.contains("submitted 1 block(s) as array job") && said.contains("(3%2)"), "{said}");
    replay_ok(&dir);
    let run = read_json(&dir.join("run.json"));
    let e = &run["executor"];
    let tasks = e["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4, "every block ran once, none twice: {tasks:?}");
    assert!(tasks.iter().all(|t| t["kept"] == true));
    let subs = e["submissions"].as_array().unwrap();
    assert_eq!(subs.len(), 2);
    assert_eq!(subs[1]["blocks"], serde_json::json!([3]), "only the block that never ran");
    let sessions = run["sessions"].as_array().unwrap();
    let coordinators: Vec<&serde_json::Value> =
        sessions.iter().filter(|s| !tasks.iter().any(|t| t["session"] == s["session"])).collect();
    assert_eq!(coordinators.len(), 2, "the killed coordinator and its resume: {sessions:?}");
    assert_eq!(
        (coordinators[0]["state"].as_str(), coordinators[1]["state"].as_str()),
        (Some("interrupted"), Some("finished"))
    );
    assert!(queued(&conf, &dir).is_empty());
}

#[test]
fn ctrl_c_cancels_the_array_and_leaves_no_task() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let exec = "kind = \"slurm\"\ncpus_per_task = 1\nmax_parallel = 1";
    let (plan_path, dir) = write_plan(tmp.path(), &plan(&model, "slurm-ctrl-c", 3, 8, 20_000, exec, tmp.path()));
    let _cleanup = Cleanup(&conf, dir.clone());
    let child = start(&conf, &plan_path, &dir);
    until("a worker running", Duration::from_secs(120), || !claims_of(&dir, 0).is_empty());
    let worker = claims_of(&dir, 0)[0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: SIGINT to the coordinator this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = finish(child, Duration::from_secs(120));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("interrupted (Ctrl-C or SIGTERM)") && said.contains("cancelled the study's tasks"), "{said}");
    assert!(queued(&conf, &dir).is_empty(), "no task left in the queue");
    until("the worker gone", Duration::from_secs(30), || {
        let stat = std::fs::read_to_string(format!("/proc/{worker}/stat")).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).is_none_or(|s| s == "Z" || s == "X")
    });
    assert!(!dir.join("manifest.json").exists(), "an interrupted study has no manifest");
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("scales.json"), "{}").unwrap();
    let run = |plan_text: &str, env: &[(&str, &str)]| {
        let (p, out) = write_plan(tmp.path(), plan_text);
        let mut c = harness(&conf, &["run", "--quiet", "--out", out.to_str().unwrap(), p.to_str().unwrap()]);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(!out.exists(), "nothing written:\n{}", text(&o));
        (o.status.code(), text(&o))
    };
    let slurm = "kind = \"slurm\"";
    let base = plan(&model, "slurm-bad", 2, 4, 0, slurm, tmp.path());
    let (code, said) = run(&base, &[("PATH", "/nonexistent-dir")]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("needs Slurm's `sbatch` on PATH"), "{said}");
    let (code, said) = run(&base, &[("SLURM_CONF", "/nonexistent-dir/slurm.conf")]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("SLURM_CONF names /nonexistent-dir/slurm.conf"), "{said}");
    let (code, said) = run(
        &plan(&model, "slurm-bad", 2, 4, 0, "kind = \"slurm\"\npartition = \"no-such-partition\"", tmp.path()),
        &[],
    );
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("Slurm refused the study's batch script") && said.contains("invalid partition"), "{said}");
    let (code, said) = run(&plan(&model, "slurm-bad", 2, 4, 0, "kind = \"slurm\"\ngres = \"gpu:1\"", tmp.path()), &[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("Slurm refused") && said.contains("gres"), "{said}");
    let elsewhere = plan(&model, "slurm-bad", 2, 4, 0, slurm, &workspace().join("harness"));
    let (code, said) = run(&elsewhere, &[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("executor.shared_root") && said.contains("is not under the shared root"), "{said}");
    let with_cpus = base.replace("[executor]", "[client]\ncpus = [0]\n\n[executor]");
    let (code, said) = run(&with_cpus, &[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("client.cpus"), "{said}");

    // A worker whose shared root is not there says so (exit 2).
    let missing = tmp.path().join("missing");
    let o = harness(
        &conf,
        &[
            "run",
            "--block",
            "0",
            "--study",
            missing.join("ev").to_str().unwrap(),
            "--shared-root",
            missing.to_str().unwrap(),
        ],
    )
    .env("SLURM_JOB_ID", "1")
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not visible on node"), "{}", text(&o));
}

#[test]
fn a_node_that_cannot_see_the_shared_root_is_reported_and_a_task_that_never_starts_times_out() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    // The tasks start 3 s after their submission; meanwhile the shared root is moved
    // away, so that Slurm cannot open the task's log on the node (and the worker could
    // not have seen the study): the coordinator reports it and stops, never waiting on.
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let exec = "kind = \"slurm\"\nmax_resubmits = 0\nextra_sbatch = [\"--begin=now+3\"]";
    let (plan_path, dir) = write_plan(&shared, &plan(&model, "slurm-no-root", 1, 4, 0, exec, &shared));
    let _cleanup = Cleanup(&conf, dir.clone());
    let child = start(&conf, &plan_path, &dir);
    until("submitted", Duration::from_secs(120), || {
        std::fs::read_to_string(dir.join("slurm/submissions/0.json")).is_ok_and(|t| t.contains("\"job_id\": \""))
    });
    let name = read_json(&dir.join("slurm/dispatch.json"))["job_name"].as_str().unwrap().to_string();
    let away = tmp.path().join("away");
    std::fs::rename(&shared, &away).unwrap();
    let gone = |conf: &Path| {
        let o = Command::new("squeue").args(["-h", "-n", &name]).env("SLURM_CONF", conf).output().unwrap();
        o.status.success() && o.stdout.is_empty()
    };
    until("the task ended", Duration::from_secs(60), || gone(&conf));
    std::fs::rename(&away, &shared).unwrap();
    let out = finish(child, Duration::from_secs(120));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("block 0 failed 1 time(s)") && said.contains("may not see the evidence directory"), "{said}");

    // A task that never leaves the queue: the plan's start_timeout_s, then no task left.
    // Slurm's reason is the scheduler's: `BeginTime` once a scheduling pass has seen
    // the job, `None` before that (on a loaded machine the first pass can come later
    // than the timeout); either way the harness reports the reason squeue gives.
    let exec = "kind = \"slurm\"\nstart_timeout_s = 4\nextra_sbatch = [\"--begin=now+3600\"]";
    let (plan_path, dir) = write_plan(tmp.path(), &plan(&model, "slurm-queued", 1, 4, 0, exec, tmp.path()));
    let _cleanup2 = Cleanup(&conf, dir.clone());
    let out = finish(start(&conf, &plan_path, &dir), Duration::from_secs(120));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("past executor.start_timeout_s = 4 s"), "{said}");
    assert!(said.contains("(Slurm's reason: BeginTime)") || said.contains("(Slurm's reason: None)"), "{said}");
    assert!(queued(&conf, &dir).is_empty(), "the waiting task was cancelled");
}

#[test]
fn a_server_that_fails_its_identity_checks_on_a_node_stops_the_study_as_a_local_run_would() {
    let (_lock, conf) = cluster();
    let tmp = tempfile::tempdir().unwrap();
    let model = synth_model(tmp.path());
    let text_plan = plan(&model, "slurm-identity", 1, 4, 0, "kind = \"slurm\"", tmp.path())
        .replace("kv_format = \"f16\"", "kv_format = \"bf16\"");
    let (plan_path, dir) = write_plan(tmp.path(), &text_plan);
    let _cleanup = Cleanup(&conf, dir.clone());
    let out = finish(start(&conf, &plan_path, &dir), Duration::from_secs(180));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("block 0 arm f16: the server is not what the arm claims"), "{said}");
    let unit = read_json(&dir.join("raw/b0/f16/unit.json"));
    assert_eq!(unit["status"], "identity_failed");
    let run = read_json(&dir.join("run.json"));
    let coordinator = &run["sessions"][0];
    assert_eq!(coordinator["state"], "stopped");
    assert!(queued(&conf, &dir).is_empty());
}
