//! Sessions of one study: each `harness run` process that worked on an evidence
//! directory, the first one and every `--resume`. A session is recorded in
//! `run.json` (`sessions`) when it starts (`running`) and again when it finishes;
//! a session found `running` by a later `--resume` was interrupted. Each session
//! has its own monotonic study clock, so timestamps are only compared within a unit
//! (a unit's `unit.json` names its session). Owns `run.json`. Must not decide what
//! to resume (`resume` does).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::RunError;
use crate::evidence::{GitInfo, write_json};

/// The `format` of `run.json`: `/2` added sessions and completion records, `/3`
/// the engine's decode measures in the cell summaries of arms with receipts.
pub const RUN_FORMAT: &str = "harness-run/3";

/// The clock every timestamp of the evidence is on.
pub const CLOCK: &str = "nanoseconds since the start of the session that ran the unit, on that session's \
                         monotonic clock (std::time::Instant); a unit's session is in its unit.json, and \
                         timestamps are never compared across sessions";

/// A partial unit (or stray half-written files) moved aside by a resuming session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Discard {
    /// `discarded/<n>-<unit>`, relative to the evidence root. Not evidence: kept as
    /// found (half files included) and covered by the manifest.
    pub dir: String,
    /// `b<k>/<arm>`, `qualification`, `inputs` or `stray`.
    pub unit: String,
    pub reason: String,
    /// The files moved, by their former paths relative to the evidence root
    /// (`discarded/<n>-<unit>/<former path>` now).
    pub files: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Index in `sessions`, from 0.
    pub session: u32,
    /// `running` while it works, then `finished`; `interrupted` when a later
    /// `--resume` found it still `running` (killed, crashed or stopped with Ctrl-C);
    /// `stopped` when it stopped the study itself (an arm's `max_start_failures`, or a
    /// server that failed its identity checks).
    pub state: String,
    pub resumed: bool,
    pub pid: Option<u32>,
    pub started_unix_ms: Option<u64>,
    pub finished_unix_ms: Option<u64>,
    pub harness_version: String,
    pub git: Option<GitInfo>,
    /// What this session moved aside before continuing.
    pub discarded: Vec<Discard>,
    /// Whether it ran the qualification to its completion record.
    pub qualification_run: bool,
    /// Units (`b<k>/<arm>`) it ran to their completion record, in order.
    pub units_run: Vec<String>,
    /// The machine as this session found it (absent in studies run before it was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::host::HostFacts>,
    /// The CPUs this session's threads were pinned to (`[client] cpus`), as the
    /// kernel reported them after the pin; absent when unpinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpus: Option<String>,
}

impl Session {
    pub fn start(
        session: u32,
        resumed: bool,
        git: GitInfo,
        discarded: Vec<Discard>,
        host: crate::host::HostFacts,
        client_cpus: Option<String>,
    ) -> Session {
        Session {
            session,
            state: "running".into(),
            resumed,
            pid: Some(std::process::id()),
            started_unix_ms: Some(unix_ms()),
            finished_unix_ms: None,
            harness_version: env!("CARGO_PKG_VERSION").into(),
            git: Some(git),
            discarded,
            qualification_run: false,
            units_run: Vec::new(),
            host: Some(host),
            client_cpus,
        }
    }
}

pub fn unix_ms() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `run.json`: the study's run record, rewritten at each session's start and end.
#[derive(Debug, Serialize)]
pub struct RunRecord<'a> {
    pub format: &'static str,
    pub study: &'a str,
    pub plan_sha256: &'a str,
    pub harness_version: &'static str,
    /// The git state of the latest session (each session has its own in `sessions`).
    pub git: &'a GitInfo,
    /// Start of the first session; end of the last (none while a session runs).
    pub started_unix_ms: Option<u64>,
    pub finished_unix_ms: Option<u64>,
    pub clock: &'static str,
    pub dispatch_spin_ns: u64,
    /// Whether the dispatcher threads run with real-time scheduling (SCHED_FIFO):
    /// without it, busy cores can delay dispatches (see `dispatch_lag_*` per cell).
    pub dispatch_realtime: bool,
    /// The longest `stop_grace_s` of the plan's spawned arms (each stop records its own).
    pub stop_grace_s: f64,
    pub nvidia_smi: Option<String>,
    /// Per kind of body the cells send (`"completions"`, `"chat"`, each with
    /// `-no-token-ids` when a cell does not ask for them): SHA-256 of the request
    /// body sent for each panel prompt (same for every arm).
    pub request_body_sha256: &'a std::collections::BTreeMap<String, Vec<String>>,
    /// Per `trace_lengths` cell (each request its own `max_tokens`): SHA-256 of each
    /// entry's body, in trace order. Absent when no cell has one.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub entry_body_sha256: std::collections::BTreeMap<String, Vec<String>>,
    pub sessions: &'a [Session],
    /// Every unit so far, in schedule order: block, arm, status, detail, session.
    pub units: Vec<serde_json::Value>,
}

impl RunRecord<'_> {
    pub fn write(&self, root: &Path) -> Result<(), RunError> {
        Ok(write_json(&root.join("run.json"), self)?)
    }
}

/// The start time and sessions recorded in an earlier `run.json`, if readable.
pub fn read_previous(root: &Path) -> (Option<u64>, Option<Vec<Session>>) {
    let Some(v) =
        std::fs::read(root.join("run.json")).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
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
