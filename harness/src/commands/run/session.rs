//! What a session needs beyond its record (`evidence::Session` in `run.json`):
//! the sessions an earlier `run.json` recorded, and whether a session it names as
//! `running` is still alive. Must not decide what to resume (`resume` does).

use std::path::Path;

use crate::evidence::{RUN_FILE, Session};

/// The start time and sessions recorded in an earlier `run.json`, if readable.
pub fn read_previous(root: &Path) -> (Option<u64>, Option<Vec<Session>>) {
    let Some(v) =
        std::fs::read(root.join(RUN_FILE)).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    else {
        return (None, None);
    };
    let started = v.get("started_unix_ms").and_then(serde_json::Value::as_u64);
    let sessions = v.get("sessions").and_then(|s| serde_json::from_value(s.clone()).ok());
    (started, sessions)
}

/// Whether `pid` is a live `harness` process other than this one (Linux `/proc`).
pub fn live_harness(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesized command name; a zombie is not alive.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, None | Some("Z" | "X")) {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains("harness")
}
