//! `run.json`, the study's run record: the plan it ran, the clock its timestamps
//! are on, the request bodies' hashes, every session (each `harness run` process
//! that worked on the directory, the first one and every `--resume`) and every
//! unit's status in schedule order. Rewritten at each session's start and end; a
//! session found `running` by a later `--resume` was interrupted. One definition
//! for the runner that writes it and for `report`, `replay`, `export` and `--resume`
//! that read it. Owns the file's name, format and fields. Must not decide what to
//! resume (`run::resume` does) or what a status means for a claim.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{EvidenceError, GitInfo, UnitStatus, write_json};
use crate::host::HostFacts;

/// The run record's file name, at the evidence root.
pub const RUN_FILE: &str = "run.json";

/// The `format` of `run.json`: `/2` added sessions and completion records, `/3`
/// the engine's decode measures in the cell summaries of arms with receipts.
pub const RUN_FORMAT: &str = "harness-run/3";

/// `run.json` formats with sessions and completion records.
pub const SESSION_FORMATS: [&str; 2] = ["harness-run/2", RUN_FORMAT];

/// The clock every timestamp of the evidence is on.
pub const CLOCK: &str = "nanoseconds since the start of the session that ran the unit, on that session's \
                         monotonic clock (std::time::Instant); a unit's session is in its unit.json, and \
                         timestamps are never compared across sessions";

/// `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub format: String,
    pub study: String,
    pub plan_sha256: String,
    pub harness_version: String,
    /// The git state of the latest session (each session has its own in `sessions`).
    pub git: GitInfo,
    /// Start of the first session; end of the last (none while a session runs).
    pub started_unix_ms: Option<u64>,
    pub finished_unix_ms: Option<u64>,
    pub clock: String,
    pub dispatch_spin_ns: u64,
    /// Whether the dispatcher threads run with real-time scheduling (SCHED_FIFO):
    /// without it, busy cores can delay dispatches (see `dispatch_lag_*` per cell).
    #[serde(default)]
    pub dispatch_realtime: bool,
    /// The longest `stop_grace_s` of the plan's spawned arms (each stop records its own).
    pub stop_grace_s: f64,
    pub nvidia_smi: Option<String>,
    /// SHA-256 of the request body sent for each panel prompt (same for every arm).
    pub request_body_sha256: BodyHashes,
    /// Per `trace_lengths` cell (each request its own `max_tokens`): SHA-256 of each
    /// entry's body, in trace order. Absent when no cell has one (and in studies
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_body_sha256: Option<BTreeMap<String, Vec<String>>>,
    /// Absent before `harness-run/2`.
    #[serde(default)]
    pub sessions: Vec<Session>,
    /// Every unit so far, in schedule order.
    pub units: Vec<RunUnit>,
    /// Where the blocks ran when they ran as Slurm array tasks (absent for a local
    /// run): per block its task, node and host facts (`dispatch_record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<super::ExecutorRecord>,
}

impl RunRecord {
    /// A record of this format and harness with no session, unit or spawned arm
    /// yet: the fields a caller fills in are public.
    pub fn new(study: &str, plan_sha256: &str, git: GitInfo) -> RunRecord {
        RunRecord {
            format: RUN_FORMAT.into(),
            study: study.into(),
            plan_sha256: plan_sha256.into(),
            harness_version: env!("CARGO_PKG_VERSION").into(),
            git,
            started_unix_ms: None,
            finished_unix_ms: None,
            clock: CLOCK.into(),
            dispatch_spin_ns: 0,
            dispatch_realtime: false,
            stop_grace_s: 0.0,
            nvidia_smi: None,
            request_body_sha256: BodyHashes::ByKind(BTreeMap::new()),
            entry_body_sha256: None,
            sessions: Vec::new(),
            units: Vec::new(),
            executor: None,
        }
    }

    /// Writes `run.json` at `root` (atomically).
    pub fn write(&self, root: &Path) -> Result<(), EvidenceError> {
        write_json(&root.join(RUN_FILE), self)
    }

    /// Whether the cell summaries carry the engine's decode measures (the current format).
    pub fn engine_measures(&self) -> bool {
        self.format == RUN_FORMAT
    }
}

/// `run.json` `request_body_sha256`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BodyHashes {
    /// Per kind of body the cells send (`"completions"`, `"chat"`, each with
    /// `-no-token-ids` when a cell does not ask for them), one hash per panel prompt.
    ByKind(BTreeMap<String, Vec<String>>),
    /// Studies written before cells could use other endpoints: the bodies of the
    /// study's one endpoint (`request.endpoint`).
    StudyEndpoint(Vec<String>),
}

impl BodyHashes {
    /// The hashes by kind of body, an older record's under `study_endpoint`.
    pub fn by_kind(&self, study_endpoint: &str) -> BTreeMap<String, Vec<String>> {
        match self {
            BodyHashes::ByKind(m) => m.clone(),
            BodyHashes::StudyEndpoint(v) => BTreeMap::from([(study_endpoint.to_string(), v.clone())]),
        }
    }
}

/// One unit of `run.json` `units`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunUnit {
    pub block: u32,
    pub arm: String,
    pub status: UnitStatus,
    pub detail: Option<String>,
    /// Absent before sessions were recorded.
    #[serde(default)]
    pub session: u32,
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Working (or killed while it worked, until a later `--resume` says so).
    Running,
    /// Ran to its end.
    Finished,
    /// A later `--resume` found it still `running` (killed, crashed or stopped
    /// with Ctrl-C).
    Interrupted,
    /// It stopped the study itself (an arm's `max_start_failures`, or a server that
    /// failed its identity checks).
    Stopped,
}

impl SessionState {
    /// The spelling in `run.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Running => "running",
            SessionState::Finished => "finished",
            SessionState::Interrupted => "interrupted",
            SessionState::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// One session of `run.json` `sessions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Index in `sessions`, from 0.
    pub session: u32,
    pub state: SessionState,
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
    pub host: Option<HostFacts>,
    /// The CPUs this session's threads were pinned to (`[client] cpus`), as the
    /// kernel reported them after the pin; absent when unpinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpus: Option<String>,
    /// The client's measurement floor on this machine when the session started
    /// (`evidence::MeasurementFloor`); absent in studies run before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_floor: Option<super::MeasurementFloor>,
}

impl Session {
    /// This process's session, `running` from now.
    pub fn start(
        session: u32,
        resumed: bool,
        git: GitInfo,
        discarded: Vec<Discard>,
        host: HostFacts,
        client_cpus: Option<String>,
    ) -> Session {
        Session {
            session,
            state: SessionState::Running,
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
            measurement_floor: None,
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch (the sessions' start and end).
pub fn unix_ms() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_states_read_back_from_their_spellings() {
        for s in [SessionState::Running, SessionState::Finished, SessionState::Interrupted, SessionState::Stopped] {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<SessionState>(&json).unwrap(), s);
        }
        assert!(serde_json::from_str::<SessionState>("\"paused\"").is_err());
    }

    /// A `harness-run/2` record as the first harness with sessions wrote it: body
    /// hashes as one array, no real-time flag, entry hashes, host or CPU set.
    const RUN_2: &str = r#"{"format": "harness-run/2", "study": "s", "plan_sha256": "ab", "harness_version": "0.1.0",
        "git": {"revision": "r", "dirty": false}, "started_unix_ms": 1, "finished_unix_ms": 2, "clock": "c",
        "dispatch_spin_ns": 50000, "stop_grace_s": 30.0, "nvidia_smi": null, "request_body_sha256": ["h0", "h1"],
        "sessions": [{"session": 0, "state": "finished", "resumed": false, "pid": 7, "started_unix_ms": 1,
          "finished_unix_ms": 2, "harness_version": "0.1.0", "git": null, "discarded": [],
          "qualification_run": false, "units_run": ["b0/a"]}],
        "units": [{"block": 0, "arm": "a", "status": "completed", "detail": null}]}"#;

    #[test]
    fn an_older_run_record_reads_with_its_absent_fields_defaulted() {
        let r: RunRecord = serde_json::from_str(RUN_2).unwrap();
        assert!(!r.engine_measures() && !r.dispatch_realtime && r.entry_body_sha256.is_none());
        let by_kind = r.request_body_sha256.by_kind("completions");
        assert_eq!(by_kind, BTreeMap::from([("completions".to_string(), vec!["h0".to_string(), "h1".to_string()])]));
        assert_eq!((r.sessions[0].state, r.sessions[0].host.as_ref()), (SessionState::Finished, None));
        assert_eq!((r.units[0].status, r.units[0].session), (UnitStatus::Completed, 0));
    }

    #[test]
    fn a_written_run_record_reads_back_equal() {
        let git = GitInfo { revision: "r".into(), dirty: Some(true) };
        let mut r = RunRecord::new("s", "ab", git.clone());
        r.request_body_sha256 = BodyHashes::ByKind(BTreeMap::from([("chat".into(), vec!["h".into()])]));
        r.entry_body_sha256 = Some(BTreeMap::from([("tr".into(), vec!["e".into()])]));
        r.sessions.push(Session::start(0, false, git, vec![], HostFacts::default(), Some("0-1".into())));
        r.units.push(RunUnit {
            block: 2,
            arm: "a".into(),
            status: UnitStatus::ServerDied,
            detail: Some("x".into()),
            session: 0,
        });
        let tmp = tempfile::tempdir().unwrap();
        r.write(tmp.path()).unwrap();
        let back: RunRecord = serde_json::from_slice(&std::fs::read(tmp.path().join(RUN_FILE)).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
