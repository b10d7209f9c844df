//! CPU sets (`[client] cpus`, `[[arms]] cpus`): every session of `run.json` names
//! the client CPU set the plan asks for (and none when it asks for none); every
//! spawned unit's `startup.json`, the pilots' included, names its arm's set, and a
//! unit whose server's threads could run elsewhere (`cpus_allowed` differs) ended
//! `identity_failed` rather than being timed. `None` when the plan pins nothing and
//! no record names a CPU set.

use std::path::Path;

use super::read::read_json;
use super::{Check, Mismatch};
use crate::evidence::{
    RUN_FILE, RecordStatus, RunRecord, STARTUP_FILE, StartupRecord, UNIT_FILE, UnitRecord, UnitStatus,
};
use crate::host::cpu_list;
use crate::plan::Plan;

pub const NAME: &str = "CPU sets: the client's and each pinned server's";

pub fn check(root: &Path, plan: &Plan) -> Option<Check> {
    let mut m = Vec::new();
    let mut any_recorded = false;
    let client = plan.client.cpus.as_deref().map(cpu_list);
    let mut sessions = 0;
    if let Ok(run) = read_json::<RunRecord>(root, RUN_FILE) {
        for (i, s) in run.sessions.iter().enumerate() {
            sessions += 1;
            let got = s.client_cpus.as_deref();
            any_recorded |= got.is_some();
            // A session of which nothing is known (killed before its first run.json) has no pid.
            if s.pid.is_none() && got.is_none() {
                continue;
            }
            if got != client.as_deref() {
                m.push(Mismatch::new(
                    RUN_FILE,
                    format!("sessions[{i}].client_cpus"),
                    got.unwrap_or("absent"),
                    client.as_deref().unwrap_or("absent (client.cpus not set)"),
                ));
            }
        }
    }
    let mut units = 0;
    for (prefix, count) in [
        (crate::evidence::RAW_DIR.to_string(), plan.blocks.count + plan.blocks.descriptive),
        (format!("{}/{}", crate::evidence::PILOTS_DIR, crate::evidence::RAW_DIR), pilot_blocks(plan)),
    ] {
        for b in 0..count {
            for arm in &plan.arms {
                let dir = format!("{prefix}/b{b}/{}", arm.name);
                let rel = format!("{dir}/{STARTUP_FILE}");
                let Ok(v) = read_json::<StartupRecord>(root, &rel) else { continue };
                if v.kind != "spawn" {
                    continue;
                }
                units += 1;
                let got = v.cpus.as_deref();
                any_recorded |= got.is_some();
                let want = arm.cpus.as_deref().map(cpu_list);
                if got != want.as_deref() {
                    m.push(Mismatch::new(
                        rel.clone(),
                        "cpus",
                        got.unwrap_or("absent"),
                        want.as_deref().unwrap_or("absent (the arm sets no cpus)"),
                    ));
                    continue;
                }
                let Some(want) = want else { continue };
                let allowed = v.cpus_allowed.as_deref();
                if v.ok && allowed != Some(want.as_str()) {
                    let unit_rel = format!("{dir}/{UNIT_FILE}");
                    let status = read_json::<UnitRecord>(root, &unit_rel).ok().map(|u| u.status);
                    let identity_failed = RecordStatus::Server(UnitStatus::IdentityFailed);
                    if status != Some(identity_failed) {
                        m.push(Mismatch::new(
                            unit_rel,
                            "status",
                            status.map_or_else(|| "absent".to_string(), |s| s.to_string()),
                            format!(
                                "{identity_failed}: its server's threads could run on {}, not the arm's CPUs {want}",
                                allowed.unwrap_or("(unread)")
                            ),
                        ));
                    }
                }
            }
        }
    }
    if client.is_none() && plan.arms.iter().all(|a| a.cpus.is_none()) && !any_recorded {
        return None;
    }
    Some(Check::of(NAME, format!("{sessions} sessions, {units} spawned servers"), m))
}

/// Pilot "blocks" (one per pilot run) of a plan with `[pilots]`.
fn pilot_blocks(plan: &Plan) -> u32 {
    plan.pilots.as_ref().map_or(0, |p| p.runs)
}
