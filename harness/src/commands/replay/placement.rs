//! Where a dispatched study's blocks ran (`run.json` `executor`, `slurm/`): every
//! scheduled block has exactly one kept task, which finished; every unit of the
//! block names that task's session in its `unit.json`, and each file its record
//! lists still has the size and SHA-256 it had when the worker sealed it (a file
//! changed after the merge is named with its block, task and node); the task's
//! session record (`slurm/sessions/<n>.json`) is a worker's claim that says the
//! same block, job, node and ports as `run.json`; every task's session is in
//! `run.json` `sessions`; every submission's blocks are scheduled blocks; and
//! `run.json`'s failures are `slurm/failures/<n>.json`, in order.
//! `None` for a study whose blocks ran where `harness run` ran. Must not hash
//! anything again (digests come from the scan) or execute anything the records
//! name.

use std::collections::BTreeSet;
use std::path::Path;

use super::complete::Study;
use super::read::read_json;
use super::units::Records;
use super::{Check, Mismatch};
use crate::evidence::{SessionClaim, SessionRole, TaskOutcome, TaskPlacement};

pub const NAME: &str = "blocks on a cluster: each block whole on one node, in one worker session";

/// The fields a worker's claim and `run.json` must agree on.
fn same_task(a: &TaskPlacement, b: &TaskPlacement) -> bool {
    (a.block, a.session, &a.job_id, &a.array_job_id, a.array_task, &a.hostname, &a.ports, &a.cpus, &a.host)
        == (b.block, b.session, &b.job_id, &b.array_job_id, b.array_task, &b.hostname, &b.ports, &b.cpus, &b.host)
}

pub fn check(root: &Path, s: &Study<'_>, r: &Records) -> Option<Check> {
    let run = r.run.as_ref().ok()?;
    let exec = run.executor.as_ref()?;
    let mut m = Vec::new();
    let blocks: BTreeSet<u32> = s.units.iter().map(|u| u.block).collect();
    for &b in &blocks {
        let kept: Vec<&TaskPlacement> = exec.tasks.iter().filter(|t| t.block == b && t.kept).collect();
        let [t] = kept.as_slice() else {
            m.push(Mismatch::new(
                crate::evidence::RUN_FILE,
                format!("executor.tasks (block {b}, kept)"),
                kept.len().to_string(),
                "exactly one",
            ));
            continue;
        };
        let label =
            format!("block {b} (task {}_{} on {}, session {})", t.array_job_id, t.array_task, t.hostname, t.session);
        if t.outcome != TaskOutcome::Finished {
            m.push(Mismatch::new(
                crate::evidence::RUN_FILE,
                format!("executor.tasks {label} outcome"),
                t.outcome.as_str(),
                "finished",
            ));
        }
        for (name, rel, rec) in r.units.iter().filter(|(n, _, _)| n.starts_with(&format!("b{b}/"))) {
            let Ok(rec) = rec else {
                m.push(Mismatch::new(rel, format!("completion record of {label}"), "missing or malformed", name));
                continue;
            };
            if rec.session != t.session {
                m.push(Mismatch::new(
                    rel,
                    format!("session ({label})"),
                    rec.session.to_string(),
                    t.session.to_string(),
                ));
            }
            for f in &rec.files {
                let changed = match s.scan.files.get(&f.path) {
                    Some(d) => d.sha256 != f.sha256 || d.bytes != f.bytes,
                    None => true,
                };
                if changed {
                    m.push(Mismatch::new(
                        &f.path,
                        format!("{label}: changed after its worker sealed it ({rel})"),
                        s.scan.files.get(&f.path).map_or("missing".into(), |d| d.sha256.clone()),
                        &f.sha256,
                    ));
                }
            }
        }
    }
    for t in &exec.tasks {
        let rel = format!("{}/{}.json", crate::evidence::SESSIONS_DIR, t.session);
        let label = format!("block {} (task {}_{} on {})", t.block, t.array_job_id, t.array_task, t.hostname);
        match read_json::<SessionClaim>(root, &rel) {
            Err(e) => m.push(Mismatch::new(&rel, format!("session record of {label}"), "missing or malformed", e)),
            Ok(c) => {
                let ok = c.role == SessionRole::Worker
                    && c.session == t.session
                    && c.task.as_ref().is_some_and(|k| same_task(k, t));
                if !ok {
                    m.push(Mismatch::new(&rel, format!("task ({label})"), "another task", "the task run.json records"));
                }
            }
        }
        match run.sessions.get(t.session as usize) {
            Some(ses) if ses.session == t.session && ses.host.as_ref() == Some(&t.host) => {}
            _ => m.push(Mismatch::new(
                crate::evidence::RUN_FILE,
                format!("sessions[{}] ({label})", t.session),
                "absent or another machine",
                "the worker's session",
            )),
        }
        if !blocks.contains(&t.block) {
            m.push(Mismatch::new(
                crate::evidence::RUN_FILE,
                format!("executor.tasks {label}"),
                "present",
                "a scheduled block",
            ));
        }
    }
    for sub in &exec.submissions {
        for b in sub.blocks.iter().filter(|b| !blocks.contains(b)) {
            m.push(Mismatch::new(
                crate::evidence::RUN_FILE,
                format!("executor.submissions[{}]", sub.submission),
                format!("block {b}"),
                "scheduled blocks only",
            ));
        }
    }
    for (i, f) in exec.failures.iter().enumerate() {
        let rel = format!("{}/{i}.json", crate::evidence::FAILURES_DIR);
        match read_json::<crate::evidence::TaskFailure>(root, &rel) {
            Ok(on_disk) if on_disk == *f => {}
            Ok(_) => {
                m.push(Mismatch::new(&rel, "failure", "another failure", format!("run.json executor.failures[{i}]")))
            }
            Err(e) => m.push(Mismatch::new(&rel, "failure record", "missing or malformed", e)),
        }
    }
    let recorded =
        s.scan.files.keys().filter(|p| p.starts_with(&format!("{}/", crate::evidence::FAILURES_DIR))).count();
    if recorded != exec.failures.len() {
        m.push(Mismatch::new(
            crate::evidence::FAILURES_DIR,
            "records",
            recorded.to_string(),
            format!("{} (run.json executor.failures)", exec.failures.len()),
        ));
    }
    let machines = exec.machines();
    let detail = format!(
        "{} blocks on {} machine(s) ({}); {} worker session(s), {} failed task(s), {} submission(s)",
        blocks.len(),
        machines.len(),
        machines.join(", "),
        exec.tasks.len(),
        exec.failures.len(),
        exec.submissions.len()
    );
    Some(Check::of(NAME, detail, m))
}
