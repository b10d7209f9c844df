//! Arm identity: every unit of an arm with `[arms.identity]` whose server got
//! healthy recorded the verdicts of its checks in `startup.json`; replay plans the
//! checks again from the frozen plan and the recorded argv, judges them again
//! against the recorded observations (`identity`: `/version`, `/v1/models`,
//! `/props`, the `/metrics` names, and the first `log_bytes` of `server.log`,
//! streamed), and compares verdict by verdict. Where the log the checks read
//! ran past the first 16 MiB the evidence keeps (`arm_outcome.json` `stop.log`),
//! the log checks stand as recorded and the detail counts them. A unit whose checks failed must have stopped
//! before timing (`identity_failed`, no cell run); one that passed must not say
//! so. Units of arms without identity claims must record no verdicts. The checks
//! are the definitions of `arm::identity` (shared like the plan's parsing types);
//! the observations and verdicts are the evidence's. `None` when no arm declares
//! identity and no unit recorded verdicts.

use std::path::Path;

use std::io::Read;

use super::read::read_json;
use super::{Check, Mismatch};
use crate::arm::identity::{Observed, evaluate, log_facts, planned, reads_log};
use crate::arm::log_scan::scan_reader;
use crate::evidence::{ARM_OUTCOME_FILE, CheckResult, STARTUP_FILE, StartupRecord, UnitOutcome, UnitStatus};
use crate::evidence::{PILOTS_DIR, RAW_DIR, SERVER_LOG_FILE, open_regular};
use crate::plan::Plan;

pub const NAME: &str = "arm identity: each server's checks judged again";

/// The unit directories (`raw/` and the pilots' `pilots/raw/`) of `arm`.
fn unit_dirs(root: &Path, arm: &str) -> Vec<String> {
    let mut out = Vec::new();
    for base in [RAW_DIR.to_string(), format!("{PILOTS_DIR}/{RAW_DIR}")] {
        let Ok(entries) = std::fs::read_dir(root.join(&base)) else { continue };
        let mut blocks: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.strip_prefix('b').is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())))
            .collect();
        blocks.sort_by_key(|b| b[1..].parse::<u64>().unwrap_or(u64::MAX));
        for b in blocks {
            let rel = format!("{base}/{b}/{arm}");
            if root.join(&rel).join(STARTUP_FILE).is_file() {
                out.push(rel);
            }
        }
    }
    out
}

pub fn check(root: &Path, plan: &Plan) -> Option<Check> {
    let mut m = Vec::new();
    let (mut units, mut verdicts, mut as_recorded) = (0, 0, 0);
    for arm in &plan.arms {
        for dir in unit_dirs(root, &arm.name) {
            let rel = format!("{dir}/{STARTUP_FILE}");
            let v = match read_json::<StartupRecord>(root, &rel) {
                Ok(v) => v,
                Err(e) => {
                    m.push(Mismatch::new(&rel, "(file)", e, "a startup record"));
                    continue;
                }
            };
            let recorded = v.identity_checks;
            let Some(spec) = &arm.identity else {
                if recorded.is_some() {
                    m.push(Mismatch::new(&rel, "identity_checks", "present", "none (the arm claims nothing)"));
                }
                continue;
            };
            if !v.ok {
                continue; // never healthy: never checked
            }
            units += 1;
            let Some(recorded) = recorded else {
                m.push(Mismatch::new(&rel, "identity_checks", "absent", "the verdicts of the arm's checks"));
                continue;
            };
            let Some(seen) = v.identity else {
                m.push(Mismatch::new(&rel, "identity", "absent", "what the server showed"));
                continue;
            };
            let spawned = v.kind == "spawn";
            let outcome_rel = format!("{dir}/{ARM_OUTCOME_FILE}");
            let outcome = read_json::<UnitOutcome>(root, &outcome_rel).ok();
            let checks = planned(spec, v.argv.as_deref());
            let empty = log_facts(&checks);
            // The log the checks read: its first `log_bytes`, streamed. A log the
            // evidence keeps only the start of (`stop.log`) may end before that.
            let kept = outcome.as_ref().and_then(|o| o.stop.as_ref()).and_then(|s| s.log.as_ref());
            let (facts, cut) = match (spawned, seen.log_bytes) {
                (false, _) => (empty, false),
                (true, Some(n)) => {
                    let log = format!("{dir}/{SERVER_LOG_FILE}");
                    let cut = kept.is_some_and(|k| k.kept_bytes < k.bytes && k.kept_bytes < n);
                    let want = if cut { kept.map_or(n, |k| k.kept_bytes) } else { n };
                    match open_regular(root, Path::new(&log)).and_then(|f| scan_reader(empty, f.take(want))) {
                        Ok(f) if f.bytes == want || f.complete() => (f, cut),
                        Ok(f) => {
                            let got = format!("{} bytes, fewer than the {want} recorded", f.bytes);
                            m.push(Mismatch::new(&log, "(file)", got, format!("{want} bytes")));
                            continue;
                        }
                        Err(e) => {
                            m.push(Mismatch::new(&log, "(file)", e.to_string(), format!("{n} bytes")));
                            continue;
                        }
                    }
                }
                (true, None) => {
                    m.push(Mismatch::new(&rel, "identity.log_bytes", "absent", "the log length the checks read"));
                    continue;
                }
            };
            let observed = Observed { log_facts: Some(&facts), ..Observed::of(&seen, "") };
            let mut again = evaluate(&checks, &observed);
            if cut {
                // The log past the kept prefix is gone: its checks stand as recorded.
                for (a, r) in again.iter_mut().zip(&recorded) {
                    if reads_log(&a.check) && a.check == r.check {
                        *a = r.clone();
                        as_recorded += 1;
                    }
                }
            }
            verdicts += again.len();
            if again.len() != recorded.len() {
                let (a, b) = (recorded.len(), again.len());
                m.push(Mismatch::new(&rel, "identity_checks", format!("{a} checks"), format!("{b} checks")));
            }
            for (i, (r, a)) in recorded.iter().zip(&again).enumerate() {
                if r != a {
                    let show = |c: &CheckResult| format!("{} {}: ok {} (found {})", c.check, c.expected, c.ok, c.found);
                    m.push(Mismatch::new(&rel, format!("identity_checks[{i}]"), show(r), show(a)));
                }
            }
            // A server that failed its checks was never timed, and only such a one.
            let failed = again.iter().any(|c| !c.ok);
            let status = outcome.as_ref().map_or("absent", |o| o.status.as_str());
            let timed = outcome
                .as_ref()
                .is_some_and(|o| o.cells.iter().any(|c| c.status != crate::evidence::CellStatus::NotRun));
            let identity_failed = outcome.as_ref().is_some_and(|o| o.status == UnitStatus::IdentityFailed);
            if failed && (!identity_failed || timed) {
                let got = format!("status {status}{}", if timed { ", cells run" } else { "" });
                m.push(Mismatch::new(
                    &outcome_rel,
                    "status",
                    got,
                    format!("{}, no cell run", UnitStatus::IdentityFailed),
                ));
            } else if !failed && identity_failed {
                let want = format!("not {}: every check passed", UnitStatus::IdentityFailed);
                m.push(Mismatch::new(&outcome_rel, "status", status, want));
            }
        }
    }
    if units == 0 && m.is_empty() {
        return None;
    }
    let kept = if as_recorded > 0 {
        format!(
            "; {as_recorded} log verdicts as recorded (the log they read is longer than the first {} MiB server.log keeps)",
            crate::arm::log_scan::LOG_KEPT_BYTES >> 20
        )
    } else {
        String::new()
    };
    Some(Check::of(NAME, format!("{units} servers, {verdicts} verdicts{kept}"), m))
}
