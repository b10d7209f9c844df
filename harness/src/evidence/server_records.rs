//! The files of one server invocation, typed once for the commands that write
//! them and for `report`, `replay` and `--resume` that read them:
//! - a study unit (`raw/b<block>/<arm>/`): `startup.json` ([`StartupRecord`]: how
//!   the server started and what it said it is), `warmup.json` ([`WarmupRecord`]),
//!   `arm_outcome.json` ([`UnitOutcome`]: how it ended, cell by cell; its completion
//!   record `unit.json` is `unit_record`'s);
//! - a comparison's server start (`compare`'s `raw/<phase>/...`): `startup.json` and
//!   `unit.json`, both a [`ServerRecord`] (the second one final).
//!
//! Fields added after a format was first written are optional or defaulted, so
//! older evidence reads. Owns the file names and fields. Must not decide what a
//! record means for a claim (`report`, `replay`) or when a server is stopped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{CellStatus, UnitStatus};

/// A unit's startup record, in its unit directory.
pub const STARTUP_FILE: &str = "startup.json";
/// A unit's warmup record, in its unit directory.
pub const WARMUP_FILE: &str = "warmup.json";
/// A unit's outcome file, in its unit directory.
pub const ARM_OUTCOME_FILE: &str = "arm_outcome.json";
/// How a spawned qualification server stopped ([`StopRecord`]), in `qualification/<arm>/`.
pub const STOP_FILE: &str = "stop.json";

/// `startup.json`: how a study unit's server started and what it said it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartupRecord {
    pub block: u32,
    pub arm: String,
    pub role: String,
    pub url: String,
    /// `spawn` or `external`.
    pub kind: String,
    pub argv: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub program_sha256: Option<String>,
    pub pid: Option<u32>,
    pub spawned_ns: u64,
    pub healthy_ns: Option<u64>,
    /// Cold start: spawn (or first poll, external) to the first 200 from the health path.
    pub startup_s: Option<f64>,
    pub health_polls: u64,
    pub ok: bool,
    pub error: Option<String>,
    /// The engine's startup JSON line (`"event": "kv_inventory"`), when its log has one.
    pub kv_inventory: Option<serde_json::Value>,
    /// What the healthy server says it is: `/version` and `/v1/models` answers (and,
    /// with identity checks, `/props`, the `/metrics` names and the log length read).
    pub identity: Option<ServerIdentity>,
    /// The verdicts of the arm's identity checks (`[arms.identity]`), when it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_checks: Option<Vec<CheckResult>>,
    /// The arm's CPU set (`[[arms]] cpus`, the kernel's list spelling), when pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// The CPUs the healthy server's threads may run on (the union of their
    /// `Cpus_allowed_list`), read after health; a spawned server only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_allowed: Option<String>,
}

impl StartupRecord {
    /// The record of `arm`'s server in `block` before anything happened: started
    /// `kind` (`spawn` or `external`), not yet spawned, healthy or identified.
    pub fn new(block: u32, arm: &str, kind: &str) -> StartupRecord {
        StartupRecord {
            block,
            arm: arm.into(),
            role: String::new(),
            url: String::new(),
            kind: kind.into(),
            argv: None,
            env: None,
            program_sha256: None,
            pid: None,
            spawned_ns: 0,
            healthy_ns: None,
            startup_s: None,
            health_polls: 0,
            ok: false,
            error: None,
            kv_inventory: None,
            identity: None,
            identity_checks: None,
            cpus: None,
            cpus_allowed: None,
        }
    }
}

/// `arm_outcome.json`: how a study unit (one server invocation) ended, cell by cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitOutcome {
    pub block: u32,
    pub arm: String,
    /// The session that ran it (`run.json` `sessions`): its timestamps are on that
    /// session's clock.
    #[serde(default)]
    pub session: u32,
    pub status: UnitStatus,
    pub detail: Option<String>,
    pub pid: Option<u32>,
    pub startup_s: Option<f64>,
    pub cells: Vec<CellOutcome>,
    pub stop: Option<StopRecord>,
    pub scrapes: u64,
    pub memory_samples: u64,
    /// Where the receipts came from, and whether `receipts.jsonl` holds them.
    pub receipts_source: Option<String>,
    pub receipts_kept: bool,
}

impl UnitOutcome {
    /// A unit of `arm` in `block` that has not run yet (status `completed` until
    /// something says otherwise).
    pub fn new(block: u32, arm: &str, session: u32) -> UnitOutcome {
        UnitOutcome {
            block,
            arm: arm.to_string(),
            session,
            status: UnitStatus::Completed,
            detail: None,
            pid: None,
            startup_s: None,
            cells: Vec::new(),
            stop: None,
            scrapes: 0,
            memory_samples: 0,
            receipts_source: None,
            receipts_kept: false,
        }
    }
}

/// One cell of `arm_outcome.json` `cells`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellOutcome {
    pub cell: String,
    /// `completed`, `interrupted` (the server died during it) or `not_run`.
    pub status: CellStatus,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
}

/// How a server process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Study time the harness saw the exit.
    pub t_ns: u64,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// In words, e.g. `server exited with code 0` or `server killed by signal 9 (SIGKILL)`.
    pub description: String,
}

/// What stopping the server did (`arm_outcome.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopRecord {
    /// `exited_on_sigterm`, `killed_after_grace`, `already_exited` or `did_not_exit`.
    pub how: String,
    pub requested_ns: u64,
    pub sigterm_sent: bool,
    pub sigkill_sent: bool,
    pub grace_s: f64,
    pub exit: Option<ExitInfo>,
    /// Processes of the server's group still alive after it exited, then killed.
    pub group_leftovers_killed: bool,
    /// The server's log as the evidence keeps it (spawned servers; absent in
    /// evidence written before logs were capped): its whole size and SHA-256, and
    /// the first bytes kept in `server.log` (all of them up to 16 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogKept>,
}

/// A file the evidence keeps only the beginning of: the size and SHA-256 of the
/// whole, and how many of its first bytes are kept (`kept_bytes == bytes`: all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogKept {
    pub bytes: u64,
    pub sha256: String,
    pub kept_bytes: u64,
}

/// An identity answer larger than the harness reads (`arm::Invocation`): never
/// parsed (its field is `null`), its whole size and SHA-256, and its first bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OversizedAnswer {
    /// The route, e.g. `/version`.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
    /// The answer's first bytes (at most 4 KiB, as text; invalid UTF-8 replaced).
    pub head: String,
}

/// What a healthy server said it is (`arm::Invocation::identity`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerIdentity {
    /// `GET /version` (vLLM and this engine: `{"version": ...}`).
    pub version: Option<serde_json::Value>,
    /// `GET /v1/models`: the served model names and their `max_model_len`.
    pub models: Option<serde_json::Value>,
    /// `GET /props` (llama.cpp's server: `n_ctx`), when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub props: Option<serde_json::Value>,
    /// Family and sample names of one `GET /metrics` answer (identity checks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_names: Option<Vec<String>>,
    /// Bytes of the server log the identity checks read (identity checks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_bytes: Option<u64>,
    /// Answers larger than the harness reads (1 MiB; `/metrics` 8 MiB), each
    /// recorded by size, SHA-256 and first bytes instead of whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oversized: Vec<OversizedAnswer>,
}

/// The verdict of one check, as `startup.json` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub check: String,
    pub expected: String,
    pub source: String,
    pub ok: bool,
    /// What the server showed instead (or the line that matched).
    pub found: String,
}

fn completions() -> String {
    "completions".into()
}

fn one() -> u32 {
    1
}

/// The warmup as recorded in `warmup.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupRecord {
    /// The route warmed: `"completions"` or `"chat"` (an endpoint the cells send to;
    /// the first of them when they use both).
    #[serde(default = "completions")]
    pub endpoint: String,
    /// HTTP calls sent together: 1 (batched completions) or one per prompt (chat).
    #[serde(default = "one")]
    pub calls: u32,
    pub prompts: u32,
    pub output_tokens: u32,
    /// SHA-256 of the request body, or with several calls of their bodies each
    /// followed by a newline, in order (identical for every arm of the study).
    pub body_sha256: String,
    pub send_ns: u64,
    pub end_ns: u64,
    pub status: Option<u16>,
    pub ok: bool,
    /// Why it is not ok, when it is not.
    pub detail: Option<String>,
    /// The answer's `usage` (with several calls: an array of theirs, in order).
    pub usage: Option<serde_json::Value>,
    /// Choices returned, over all calls.
    pub choices: Option<usize>,
    /// Cells on both endpoints: the warmup of the second route (`"chat"`), sent
    /// after the first answered. The outer `ok` and `detail` then cover both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_endpoints: Vec<WarmupRecord>,
}

/// A comparison's record of one server start (its `startup.json` once healthy, its
/// `unit.json` when stopped, and one entry of `compare.json` `units`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    /// `parity`, `noise` or `round`.
    pub phase: String,
    /// Noise round or schedule block (0 for parity).
    pub round: u32,
    pub arm: String,
    /// The arm, or `<arm>.a` / `<arm>.b` for the two noise measurements.
    pub label: String,
    /// Relative to the evidence directory.
    pub dir: String,
    pub argv: Vec<String>,
    pub pid: Option<u32>,
    pub spawned_ns: u64,
    pub healthy_ns: Option<u64>,
    /// Cold start: spawn to the first 200 from the health path.
    pub startup_s: Option<f64>,
    pub health_polls: u64,
    /// `VmHWM` of the server PID read just before the stop (the peak resident set).
    pub peak_rss_bytes: Option<u64>,
    pub warmup_ok: Option<bool>,
    /// `completed`, or `server_died` when the process exited before the stop.
    pub status: UnitStatus,
    pub detail: Option<String>,
    pub stop: Option<StopRecord>,
    pub scrapes: u64,
    pub memory_samples: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_format_startup_and_outcome_read_with_their_later_fields_absent() {
        // As the first harness wrote them: no identity, identity checks or CPU sets;
        // no session in the outcome.
        let startup = r#"{"block": 0, "arm": "a", "role": "candidate", "url": "http://127.0.0.1:1", "kind": "spawn",
            "argv": ["engine"], "env": {}, "program_sha256": null, "pid": 9, "spawned_ns": 1, "healthy_ns": 5,
            "startup_s": 4e-9, "health_polls": 2, "ok": true, "error": null, "kv_inventory": null}"#;
        let s: StartupRecord = serde_json::from_str(startup).unwrap();
        assert_eq!((s.identity, s.identity_checks, s.cpus), (None, None, None));
        let outcome = r#"{"block": 0, "arm": "a", "status": "server_died", "detail": "gone", "pid": 9,
            "startup_s": null, "cells": [{"cell": "c", "status": "interrupted", "requests": 3, "completed": 1,
            "failed": 2, "start_ns": 1, "end_ns": null}], "stop": null, "scrapes": 0, "memory_samples": 0,
            "receipts_source": null, "receipts_kept": false}"#;
        let o: UnitOutcome = serde_json::from_str(outcome).unwrap();
        assert_eq!((o.status, o.session, o.cells[0].failed), (UnitStatus::ServerDied, 0, 2));
    }

    #[test]
    fn a_renamed_or_missing_field_is_an_error_not_a_silent_default() {
        let mut v = serde_json::to_value(UnitOutcome::new(0, "a", 0)).unwrap();
        let status = v.as_object_mut().unwrap().remove("status").unwrap();
        v["state"] = status;
        let e = serde_json::from_value::<UnitOutcome>(v).unwrap_err().to_string();
        assert!(e.contains("missing field `status`"), "{e}");
        let mut s = serde_json::to_value(StartupRecord::new(0, "a", "spawn")).unwrap();
        s.as_object_mut().unwrap().remove("ok");
        assert!(serde_json::from_value::<StartupRecord>(s).unwrap_err().to_string().contains("`ok`"));
    }
}
