//! The sessions of a study (`run.json` `harness-run/2`: the first `harness run` and
//! every `--resume`) against the units and the discarded partial units:
//! - sessions are numbered from 0, every one but the last `interrupted`, the last
//!   `finished`, only later ones `resumed`; every unit is in exactly one session's
//!   `units_run`, the session its `unit.json`, its `arm_outcome.json` and its
//!   `run.json` `units[]` entry name (the qualification: `qualification_run`);
//!   `units[]` is the schedule with each unit's status and detail;
//! - `discarded/<n>-<unit>/` holds what a resuming session moved aside: each is
//!   named by exactly one session's `discarded`, its `discard.json` says the same
//!   (session, unit, reason, files), and it holds exactly those files. Their bytes
//!   are verified by the manifest only: they are not evidence, and nothing else in
//!   replay reads them (the raw readers look under `raw/` only).
//!
//! A study whose blocks ran as Slurm array tasks (`run.json` `executor`) has two
//! kinds of session: its coordinators' (the rules above, among themselves; the
//! first may discard a failed task's files before resubmitting its block) and its
//! workers' (one per task, never `resumed`, `finished` when its block's units are
//! the evidence, and not `running` otherwise).
//!
//! Must not read the discarded files' contents.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::complete::Study;
use super::read::read_json;
use super::units::{QUALIFICATION, Records};
use super::{Check, Mismatch};
use crate::evidence::{
    ARM_OUTCOME_FILE, DISCARD_FILE, DISCARDED_DIR, Discard, RUN_FILE, RunUnit, Session, SessionState, unit_path,
};

pub const NAME: &str = "sessions: run.json, unit.json and arm_outcome.json agree";
pub const DISCARDED_NAME: &str = "discarded: partial units kept aside (manifest only, not evidence)";

fn sessions_of(r: &Records) -> Result<&[Session], String> {
    Ok(&r.run.as_ref().map_err(|e| format!("run.json: {e}"))?.sessions)
}

fn text(v: Option<&Value>) -> String {
    v.map_or("absent".into(), Value::to_string)
}

/// Sessions against units.
pub fn check(s: &Study<'_>, r: &Records) -> Check {
    if !r.expected {
        return Check::skip(NAME, "no sessions (run.json is not harness-run/2 or later): written before resume");
    }
    let mut m = Vec::new();
    let sessions = match sessions_of(r) {
        Ok(v) => v,
        Err(e) => return Check::of(NAME, String::new(), vec![Mismatch::new(RUN_FILE, "sessions", "malformed", e)]),
    };
    // A dispatched study's worker sessions (and those whose units are the evidence).
    let executor = r.run.as_ref().ok().and_then(|run| run.executor.as_ref());
    let worker = |n: u32| executor.is_some_and(|e| e.is_worker(n));
    let kept = |n: u32| executor.is_some_and(|e| e.tasks.iter().any(|t| t.session == n && t.kept));
    let coordinators: Vec<usize> = (0..sessions.len()).filter(|&i| !worker(i as u32)).collect();
    let (first, last) = (coordinators.first().copied().unwrap_or(0), coordinators.last().copied().unwrap_or(0));
    if sessions.is_empty() {
        m.push(Mismatch::new(RUN_FILE, "sessions", "none", "at least one session"));
    }
    for (i, ses) in sessions.iter().enumerate() {
        let f = |k: &str| format!("sessions[{i}].{k}");
        if ses.session as usize != i {
            m.push(Mismatch::new(RUN_FILE, f("session"), ses.session.to_string(), i.to_string()));
        }
        if worker(i as u32) {
            let ok =
                if kept(i as u32) { ses.state == SessionState::Finished } else { ses.state != SessionState::Running };
            if !ok {
                let want = if kept(i as u32) { "finished (its block's units are kept)" } else { "not running" };
                m.push(Mismatch::new(RUN_FILE, f("state"), ses.state.as_str(), want));
            }
            if ses.resumed {
                m.push(Mismatch::new(RUN_FILE, f("resumed"), "true", "false (a worker)"));
            }
            continue;
        }
        let want_state = if i == last { SessionState::Finished } else { SessionState::Interrupted };
        // A session that stopped itself (an arm's max_start_failures) and was resumed.
        let stopped = i != last && ses.state == SessionState::Stopped;
        if ses.state != want_state && !stopped {
            m.push(Mismatch::new(RUN_FILE, f("state"), ses.state.as_str(), want_state.as_str()));
        }
        if ses.resumed != (i > first) {
            m.push(Mismatch::new(RUN_FILE, f("resumed"), ses.resumed.to_string(), (i > first).to_string()));
        }
    }
    // Which session ran each unit, by run.json's units_run.
    let mut ran: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for ses in sessions {
        for u in &ses.units_run {
            ran.entry(u.as_str()).or_default().push(ses.session);
        }
        if ses.qualification_run {
            ran.entry(QUALIFICATION).or_default().push(ses.session);
        }
    }
    let run_units: &[RunUnit] = r.run.as_ref().map_or(&[], |run| &run.units);
    if run_units.len() != s.units.len() {
        m.push(Mismatch::new(RUN_FILE, "units (count)", run_units.len().to_string(), s.units.len().to_string()));
    }
    for (name, rel, rec) in &r.units {
        let Ok(rec) = rec else { continue };
        // The session that ran the unit, by run.json; every other record must agree.
        let by = ran.remove(name.as_str()).unwrap_or_default();
        let session = match by.as_slice() {
            [one] => *one,
            [] => {
                m.push(Mismatch::new(RUN_FILE, format!("units_run {name}"), "in no session", "in exactly one"));
                rec.session
            }
            many => {
                m.push(Mismatch::new(RUN_FILE, format!("units_run {name}"), format!("sessions {many:?}"), "one"));
                rec.session
            }
        };
        if rec.session != session {
            let want = format!("{session} (run.json units_run)");
            m.push(Mismatch::new(rel, "session", rec.session.to_string(), want));
        }
        if name == QUALIFICATION {
            continue;
        }
        let Some((i, u)) = s.units.iter().enumerate().find(|(_, u)| format!("b{}/{}", u.block, u.arm) == *name) else {
            continue;
        };
        let outcome = format!("{}/{ARM_OUTCOME_FILE}", unit_path(u.block, &u.arm));
        if u.session != Some(session) {
            let got = u.session.map_or("absent".into(), |x| x.to_string());
            m.push(Mismatch::new(outcome, "session", got, format!("{session} (run.json units_run)")));
        }
        let f = |k: &str| format!("units[{i}].{k}");
        let Some(e) = run_units.get(i) else {
            m.push(Mismatch::new(RUN_FILE, format!("units[{i}]"), "absent", format!("b{}/{}", u.block, u.arm)));
            continue;
        };
        let quoted = |s: &str| format!("{s:?}");
        let detail = |d: &Option<String>| d.as_deref().map_or("null".into(), quoted);
        let fields = [
            ("block", e.block.to_string(), u.block.to_string()),
            ("arm", quoted(&e.arm), quoted(&u.arm)),
            ("status", quoted(e.status.as_str()), quoted(u.status.as_str())),
            ("detail", detail(&e.detail), detail(&u.detail)),
            ("session", e.session.to_string(), session.to_string()),
        ];
        for (k, got, want) in fields {
            if got != want {
                m.push(Mismatch::new(RUN_FILE, f(k), got, want));
            }
        }
    }
    for (name, by) in ran.into_iter().filter(|(n, _)| !r.units.iter().any(|(u, _, _)| u == n)) {
        m.push(Mismatch::new(RUN_FILE, format!("units_run {name}"), format!("sessions {by:?}"), "a scheduled unit"));
    }
    let resumed = coordinators.len().saturating_sub(1);
    let workers = sessions.len() - coordinators.len();
    let detail = if workers > 0 {
        format!(
            "{} sessions ({resumed} resumed, {workers} Slurm workers), {} units each in one session",
            sessions.len(),
            r.units.len()
        )
    } else {
        format!("{} sessions ({resumed} resumed), {} units each in one session", sessions.len(), r.units.len())
    };
    Check::of(NAME, detail, m)
}

/// `discarded/`: named by run.json and discard.json, holding exactly what they list.
pub fn discarded_check(root: &Path, s: &Study<'_>, r: &Records) -> Check {
    let mut on_disk: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in s.scan.files.keys().chain(s.scan.unreadable.iter().map(|(p, _)| p)) {
        if let Some(rest) = p.strip_prefix(DISCARDED_DIR).and_then(|r| r.strip_prefix('/')) {
            let (dir, file) = rest.split_once('/').unwrap_or((rest, ""));
            on_disk.entry(format!("{DISCARDED_DIR}/{dir}")).or_default().insert(file.to_string());
        }
    }
    let sessions = sessions_of(r).unwrap_or_default();
    let named: Vec<(u32, &Discard)> =
        sessions.iter().flat_map(|ses| ses.discarded.iter().map(move |d| (ses.session, d))).collect();
    if on_disk.is_empty() && named.is_empty() {
        return Check::skip(DISCARDED_NAME, "nothing discarded");
    }
    let mut m = Vec::new();
    let mut numbers = BTreeSet::new();
    for (session, d) in &named {
        let n = d
            .dir
            .strip_prefix(DISCARDED_DIR)
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|x| x.split_once('-'))
            .map(|(n, u)| (n.parse::<u32>(), u));
        match n {
            Some((Ok(n), unit)) if unit == d.unit.replace('/', "-") => {
                if !numbers.insert(n) {
                    m.push(Mismatch::new(RUN_FILE, format!("discarded {}", d.dir), "a repeated number", "unique"));
                }
            }
            _ => m.push(Mismatch::new(
                RUN_FILE,
                format!("discarded {}", d.dir),
                &d.dir,
                format!("{DISCARDED_DIR}/<n>-<unit>"),
            )),
        }
        // A dispatched study's first coordinator discards a failed task's files.
        let dispatched = r.run.as_ref().is_ok_and(|run| run.executor.is_some());
        if *session == 0 && !dispatched {
            m.push(Mismatch::new(RUN_FILE, format!("discarded {}", d.dir), "by session 0", "by a resuming session"));
        }
        let Some(files) = on_disk.remove(&d.dir) else {
            m.push(Mismatch::new(&d.dir, "directory", "named in run.json", "missing"));
            continue;
        };
        let rel = format!("{}/{DISCARD_FILE}", d.dir);
        match read_json::<Value>(root, &rel) {
            Err(e) => m.push(Mismatch::new(&rel, "parse", "malformed or missing", e)),
            Ok(v) => {
                if v.get("session") != Some(&Value::from(*session)) {
                    m.push(Mismatch::new(&rel, "session", text(v.get("session")), session.to_string()));
                }
                let want = serde_json::to_value(d).unwrap_or_default();
                if v.get("discard") != Some(&want) {
                    m.push(Mismatch::new(&rel, "discard", text(v.get("discard")), format!("{want} (run.json)")));
                }
            }
        }
        let listed: BTreeSet<String> = d.files.iter().cloned().chain([DISCARD_FILE.to_string()]).collect();
        for f in files.symmetric_difference(&listed) {
            let (a, b) = if files.contains(f) { ("on disk", "not listed") } else { ("listed", "missing") };
            m.push(Mismatch::new(format!("{}/{f}", d.dir), "file (discard.json)", a, b));
        }
    }
    for dir in on_disk.keys() {
        m.push(Mismatch::new(dir, "directory", "on disk", "named by no session in run.json"));
    }
    let list: Vec<String> = named.iter().map(|(_, d)| format!("{} ({})", d.dir, d.reason)).collect();
    let files: usize = named.iter().map(|(_, d)| d.files.len()).sum();
    let detail = format!(
        "{} discarded partial unit{}: {}; {files} files, verified by the manifest, never read as evidence",
        named.len(),
        if named.len() == 1 { "" } else { "s" },
        list.join(", ")
    );
    Check::of(DISCARDED_NAME, detail, m)
}
