//! CPU sets end to end, over real HTTP on the real engine binary: `[client] cpus`
//! pins the harness and `[[arms]] cpus` each spawned server, both recorded
//! (`run.json` sessions, `startup.json`) and checked again by `harness replay`; a
//! server that moves itself off its set (here `taskset` in its argv) stops the study
//! before it is timed; a CPU this machine does not have is refused before anything
//! is written.

use crate::common;

use std::process::Command;

use common::tamper::{copy_dir, reseal_unit, rewrite_manifest};
use common::*;

/// The CPUs this test process may use, in the kernel's spelling and as numbers.
fn my_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list").trim();
    harness::host::parse_cpu_list(list).expect("a CPU list")
}

fn with_cpus(mut plan: TestPlan, cpus: &[u32]) -> TestPlan {
    let last = plan.arms.last_mut().expect("an arm");
    let list: Vec<String> = cpus.iter().map(u32::to_string).collect();
    last.push_str(&format!("cpus = [{}]\n", list.join(", ")));
    plan
}

#[test]
fn pinned_client_and_servers_are_recorded_and_replayed() {
    let cpus = my_cpus();
    assert!(cpus.len() >= 2, "this test needs two CPUs to put the client and a server apart (has {cpus:?})");
    let (client, server) = (cpus[0], cpus[1]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { warmup_prompts: 1, blocks: 2, ..TestPlan::new("cpus", 5) };
    let plan = with_cpus(plan.arm("a", "control", &argv), &[server]);
    let plan = plan.arm("b", "candidate", &argv).closed("c", "confirmation", 2, 4);
    let text = plan.tail(&format!("[client]\ncpus = [{client}]\n")).render();
    let (out, _) = run_study_ok(tmp.path(), &text);

    let run = read_json(&out.join("run.json"));
    let session = &run["sessions"][0];
    assert_eq!(session["client_cpus"], client.to_string(), "{session}");
    let host = &session["host"];
    assert!(host["cpus_allowed"].is_string() && host["loadavg_1m"].is_number(), "{host}");
    for b in 0..2 {
        let pinned = read_json(&out.join(format!("raw/b{b}/a/startup.json")));
        assert_eq!(
            (&pinned["cpus"], &pinned["cpus_allowed"]),
            (&server.to_string().into(), &server.to_string().into())
        );
        let free = read_json(&out.join(format!("raw/b{b}/b/startup.json")));
        assert!(free.get("cpus").is_none(), "{free}");
        assert_eq!(free["cpus_allowed"], harness::host::cpu_list(&cpus), "{free}");
    }
    let replay = Command::new(harness_bin()).arg("replay").arg(&out).output().expect("replay");
    let said = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{said}");
    assert!(
        said.contains("CPU sets: the client's and each pinned server's")
            && said.contains("1 sessions, 4 spawned servers"),
        "{said}"
    );

    // A record that names another CPU set than the plan's is named by replay.
    let forged = tmp.path().join("forged");
    copy_dir(&out, &forged);
    let rel = "raw/b1/a/startup.json";
    let mut v = read_json(&forged.join(rel));
    v["cpus"] = client.to_string().into();
    std::fs::write(forged.join(rel), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    reseal_unit(&forged, "raw/b1/a/unit.json");
    rewrite_manifest(&forged);
    let replay = Command::new(harness_bin()).arg("replay").arg(&forged).output().expect("replay");
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(2), "{said}");
    assert!(said.contains("raw/b1/a/startup.json") && said.contains("cpus"), "{said}");
}

#[test]
fn a_server_that_leaves_its_cpus_stops_the_study_and_a_missing_cpu_is_refused() {
    let cpus = my_cpus();
    assert!(cpus.len() >= 2, "this test needs two CPUs (has {cpus:?})");
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    // taskset moves the server to the other CPU before the engine starts.
    let mut moved = vec!["taskset".to_string(), "-c".into(), cpus[0].to_string()];
    moved.extend(argv.iter().cloned());
    let plan = TestPlan { warmup_prompts: 1, blocks: 1, ..TestPlan::new("cpus-left", 5) };
    let plan = with_cpus(plan.arm("a", "control", &argv), &[cpus[1]]);
    let plan = with_cpus(plan.arm("b", "candidate", &moved), &[cpus[1]]).closed("c", "confirmation", 2, 4);
    let path = tmp.path().join("plan.toml");
    std::fs::write(&path, plan.render()).unwrap();
    let out = tmp.path().join("evidence");
    let run = run_harness(&path, &out);
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert_eq!(run.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let want = format!("cpus: the plan pins it to CPUs {}, its threads may run on {}", cpus[1], cpus[0]);
    assert!(stderr.contains(&want), "{stderr}");
    assert_eq!(read_json(&out.join("raw/b0/b/arm_outcome.json"))["status"], "identity_failed");
    assert!(!out.join("raw/b0/b/c.requests.jsonl").exists());
    // The probe runs the same check (issue 52, item 9): it passed this arm before.
    let probe = probe_plan(&path, tmp.path());
    let said = format!("{}{}", String::from_utf8_lossy(&probe.stdout), String::from_utf8_lossy(&probe.stderr));
    assert_eq!(probe.status.code(), Some(2), "{said}");
    assert!(said.contains(&want), "the probe names the CPUs the server left:\n{said}");

    // A CPU the machine does not offer: refused before anything is written.
    let missing = 1000;
    let plan = TestPlan { warmup_prompts: 0, blocks: 1, ..TestPlan::new("cpus-missing", 5) };
    let plan = plan.arm("a", "control", &argv).closed("c", "confirmation", 1, 1);
    let text = plan.tail(&format!("[client]\ncpus = [{missing}]\n")).render();
    std::fs::write(&path, text).unwrap();
    let out = tmp.path().join("evidence-missing");
    let run = run_harness(&path, &out);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("client.cpus") && stderr.contains("CPU(s) 1000 are not among the CPUs"), "{stderr}");
    assert!(!out.exists(), "nothing may be written for a refused plan");
}
