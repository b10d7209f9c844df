//! `harness run PLAN --resume DIR`: decides what of an interrupted study stands.
//! [`check`] changes nothing: it refuses a complete study (manifest present), a
//! changed plan (bytes against the frozen `plan.toml`), changed inputs (`inputs/`
//! against its catalog and against inputs regenerated from the plan), a completed
//! unit whose files differ from its `unit.json`, and a session that still runs.
//! Units run in schedule order, so the completed units are a prefix; the first unit
//! without a completion record and everything after it is partial. A unit whose
//! server failed to start (`start_failed` in its `unit.json`) measured nothing: it is
//! moved aside with its record and run again (the cause, outside the plan, may be
//! fixed now: a busy port, a missing file). [`discard`] then
//! moves each partial unit (and stray half-written files) aside to
//! `discarded/<n>-<unit>/<former path>` with a `discard.json` saying why; nothing
//! is deleted (the emptied directories stay; they hold no files). Must not rerun or
//! repair a completed unit that measured anything.

use std::path::{Path, PathBuf};

use super::session::{live_harness, read_previous};
use super::{RunError, qualify};
use crate::evidence::{
    CATALOG_PATH, CELLS_DIR, DISCARD_FILE, DISCARDED_DIR, Discard, Evidence, MANIFEST_FILE, QUALIFICATION_UNIT,
    RAW_DIR, RESULTS_DIR, RUN_FORMAT, RecordCheck, Session, SessionState, UNIT_FILE, UnitRecord, UnitStatus,
    check_record, files_under, sha256_hex, unit_name, write_json,
};
use crate::plan::{FrozenPlan, Schedule, ScheduledBlock};

/// What a resuming session starts from.
#[derive(Debug, Default)]
pub struct ResumeState {
    /// Earlier sessions, a `running` one marked `interrupted`.
    pub sessions: Vec<Session>,
    pub started_unix_ms: Option<u64>,
    /// `inputs/` stands (else it is discarded and written again: nothing was timed).
    pub inputs_ok: bool,
    pub qualification_done: bool,
    /// Completed units: (block, arm) and their record.
    pub completed: Vec<(u32, String, UnitRecord)>,
    /// To move aside: unit, files (absolute), reason.
    pub partial: Vec<(String, Vec<PathBuf>, String)>,
    /// Completed units whose server failed to start: moved aside (in `partial`) and
    /// run again, whichever session ran them before.
    pub rerun: Vec<String>,
}

impl ResumeState {
    pub fn completed(&self, block: u32, arm: &str) -> Option<&UnitRecord> {
        self.completed.iter().find(|(b, a, _)| *b == block && a == arm).map(|(_, _, r)| r)
    }
}

fn refuse(root: &Path, why: impl std::fmt::Display) -> RunError {
    RunError::Resume { dir: root.to_path_buf(), why: why.to_string() }
}

/// The summary files a unit owns under `results/cells/`.
pub fn summary_paths(ev: &Evidence, block: &ScheduledBlock, arm: &str) -> Vec<PathBuf> {
    block.cells.iter().map(|c| ev.cell_summary_path(block.index, arm, c)).collect()
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).to_string_lossy().replace('\\', "/")
}

/// Regenerates the inputs from the plan into a scratch directory and compares them
/// byte for byte with `inputs/` (after `inputs/` passed its catalog).
fn compare_inputs(ev: &Evidence, frozen: &FrozenPlan, base: &Path) -> Result<(), RunError> {
    let root = ev.root();
    let dir = ev.inputs_dir();
    crate::trace::verify_catalog(&dir).map_err(|e| refuse(root, format!("inputs/ differ from their catalog: {e}")))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let scratch = std::env::temp_dir().join(format!("harness-resume-{}-{nanos}", std::process::id()));
    let generated = crate::inputs::generate(&frozen.plan, &frozen.sha256, base, &scratch).map_err(RunError::from);
    let result = generated.and_then(|()| {
        let list = |d: &Path| -> Result<Vec<String>, RunError> {
            let mut v: Vec<String> = files_under(d)?.iter().map(|p| rel(d, p)).collect();
            v.sort();
            Ok(v)
        };
        let (fresh, kept) = (list(&scratch)?, list(&dir)?);
        let mut problems: Vec<String> = Vec::new();
        for f in kept.iter().filter(|f| !fresh.contains(f)) {
            problems.push(format!("inputs/{f}: not produced by the plan"));
        }
        for f in &fresh {
            let a = std::fs::read(scratch.join(f)).ok();
            match std::fs::read(dir.join(f)).ok() {
                None => problems.push(format!("inputs/{f}: missing")),
                Some(b) if Some(&b) != a.as_ref() => problems.push(format!(
                    "inputs/{f}: differs from the inputs regenerated from the plan (sha256 {} here, {} regenerated)",
                    sha256_hex(&b),
                    a.as_deref().map(sha256_hex).unwrap_or_default()
                )),
                Some(_) => {}
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(refuse(root, format!("changed inputs:\n  {}", problems.join("\n  "))))
        }
    });
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Everything `--resume` verifies before it touches the directory.
pub fn check(ev: &Evidence, frozen: &FrozenPlan, schedule: &Schedule, base: &Path) -> Result<ResumeState, RunError> {
    let root = ev.root();
    refuse_what_cannot_resume(root, ev, frozen)?;
    let mut state = ResumeState::default();
    // A dispatched study (its blocks Slurm array tasks): the coordinator's own
    // sessions are judged here; its workers' sessions, units and half-written files
    // are the coordinator's to judge against the queue (`slurm`), since a task may
    // still be running.
    let dispatched = root.join(crate::evidence::DISPATCH_FILE).is_file();
    judge_sessions(root, dispatched, &mut state)?;
    judge_inputs(ev, frozen, base, &mut state)?;

    // Qualification, then the units in schedule order.
    let interrupted = state.sessions.last().map_or(0, |s| s.session);
    let mut units = UnitJudge { root, interrupted, first_partial: None };
    if qualify::required(frozen) {
        let qdir = qualify::qualification_dir(ev);
        units.consider(&mut state, QUALIFICATION_UNIT, &qdir, &[qualify::outcome_path(ev)])?;
    }
    for block in schedule.blocks.iter().filter(|_| !dispatched) {
        for arm in &block.arms {
            let name = unit_name(block.index, arm);
            units.consider(&mut state, &name, &ev.unit_dir(block.index, arm), &summary_paths(ev, block, arm))?;
        }
    }
    if frozen.plan.blocks.rounds > 0 && !dispatched {
        rerun_unfinished_interleaved_blocks(ev, frozen, schedule, &mut state)?;
    }
    state.qualification_done = state.completed.iter().any(|(_, a, r)| a.is_empty() && r.unit == QUALIFICATION_UNIT);
    attribute_units_to_sessions(&mut state);
    collect_stray_files(root, dispatched, &mut state)?;
    Ok(state)
}

/// A directory that is not a study this plan can resume: finished, another plan,
/// or written by another harness version.
fn refuse_what_cannot_resume(root: &Path, ev: &Evidence, frozen: &FrozenPlan) -> Result<(), RunError> {
    if root.join(MANIFEST_FILE).is_file() {
        return Err(refuse(root, "the study is complete (manifest.json is present): there is nothing to resume"));
    }
    let frozen_bytes = std::fs::read(ev.plan_path())
        .map_err(|e| refuse(root, format!("no frozen plan.toml ({e}): not the evidence directory of a study")))?;
    if frozen_bytes != frozen.bytes {
        return Err(refuse(
            root,
            format!(
                "the plan changed: its SHA-256 is {}, the frozen plan.toml's is {}; a study resumes only with \
                 the exact plan it started with",
                frozen.sha256,
                sha256_hex(&frozen_bytes)
            ),
        ));
    }
    // Another run.json format means another harness wrote the completed units: their
    // summaries would not be what this one writes (harness-run/3 adds the engine's
    // decode measures), and the finished study would fail its own replay.
    let format = std::fs::read(root.join(crate::evidence::RUN_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("format")?.as_str().map(str::to_string));
    if let Some(f) = format.filter(|f| f != RUN_FORMAT) {
        return Err(refuse(
            root,
            format!(
                "run.json is {f}, written by another harness version (this one writes {RUN_FORMAT}); resume it \
                 with the harness that started it, or run the study again"
            ),
        ));
    }
    Ok(())
}

/// The earlier sessions from run.json (one unknown session when it was never
/// written); a session still running refuses the resume, the others are marked
/// interrupted. A dispatched study keeps only its coordinator's sessions.
fn judge_sessions(root: &Path, dispatched: bool, state: &mut ResumeState) -> Result<(), RunError> {
    let (started, sessions) = read_previous(root);
    state.started_unix_ms = started;
    state.sessions = sessions.unwrap_or_else(|| {
        // Killed before its first run.json: one session of which nothing is known.
        let git = crate::evidence::GitInfo { revision: "unknown".into(), dirty: None };
        let mut s = Session::start(0, false, git, vec![], crate::host::HostFacts::default(), None);
        (s.pid, s.started_unix_ms, s.git, s.host) = (None, None, None, None);
        vec![s]
    });
    if dispatched {
        let (claims, _) = crate::evidence::read_claims(root);
        let worker = |n: u32| claims.iter().any(|c| c.session == n && c.role == crate::evidence::SessionRole::Worker);
        state.sessions.retain(|s| !worker(s.session));
    }
    // `finished` without manifest.json: killed after run.json's last write but before
    // the manifest (the report files lie between). The study did not finish.
    for s in state.sessions.iter_mut().filter(|s| matches!(s.state, SessionState::Running | SessionState::Finished)) {
        if let Some(pid) = s.pid.filter(|&p| live_harness(p)) {
            return Err(refuse(root, format!("session {} (pid {pid}) is still running", s.session)));
        }
        s.state = SessionState::Interrupted;
    }
    Ok(())
}

/// Inputs: complete (catalog written) and unchanged, or never finished (then
/// written again).
fn judge_inputs(ev: &Evidence, frozen: &FrozenPlan, base: &Path, state: &mut ResumeState) -> Result<(), RunError> {
    if ev.root().join(CATALOG_PATH).is_file() {
        compare_inputs(ev, frozen, base)?;
        state.inputs_ok = true;
    } else if ev.inputs_dir().exists() {
        let files = files_under(&ev.inputs_dir())?;
        state.partial.push(("inputs".into(), files, "incomplete inputs (no catalog.json); written again".into()));
    }
    Ok(())
}

/// Judges each unit's completion record, in schedule order.
struct UnitJudge<'a> {
    root: &'a Path,
    /// The session that was interrupted (the last one).
    interrupted: u32,
    /// The first unit found partial: a complete unit after it means the directory
    /// was not written by one study.
    first_partial: Option<String>,
}

impl UnitJudge<'_> {
    fn why(&self, what: &str) -> String {
        format!(
            "partial {what}: no completion record (unit.json); session {} was interrupted during it",
            self.interrupted
        )
    }

    /// Keeps a complete unit, moves aside one that measured nothing (to run again)
    /// or is partial, and refuses a changed one or one complete after a partial one.
    fn consider(&mut self, state: &mut ResumeState, name: &str, dir: &Path, extra: &[PathBuf]) -> Result<(), RunError> {
        let root = self.root;
        match check_record(root, dir, extra) {
            // Nothing was measured: moved aside whole (its record too) and run again.
            RecordCheck::Complete(record)
                if record.status.server().is_some_and(UnitStatus::measured_nothing) && name != QUALIFICATION_UNIT =>
            {
                let mut files = files_under(dir)?;
                files.push(dir.join(UNIT_FILE));
                files.extend(extra.iter().filter(|p| p.is_file()).cloned());
                let what = if record.status.server() == Some(UnitStatus::StartFailed) {
                    "its server failed to start"
                } else {
                    "its server was not what the arm claims"
                };
                let why = format!(
                    "{what} ({}) in session {}; nothing was measured, so it runs again",
                    record.status, record.session
                );
                state.rerun.push(name.to_string());
                state.partial.push((name.to_string(), files, why));
                Ok(())
            }
            RecordCheck::Complete(record) if self.first_partial.is_none() => {
                state.completed_push(name, record);
                Ok(())
            }
            RecordCheck::Complete(_) => Err(refuse(
                root,
                format!(
                    "{name} is complete but {} before it is not: units run in order, so this directory was not \
                     written by one study",
                    self.first_partial.as_deref().unwrap_or("?")
                ),
            )),
            RecordCheck::Changed(problems) => Err(refuse(
                root,
                format!("completed {name} differs from its {UNIT_FILE}:\n  {}", problems.join("\n  ")),
            )),
            RecordCheck::Partial => {
                let mut files = if dir.exists() { files_under(dir)? } else { Vec::new() };
                files.extend(extra.iter().filter(|p| p.is_file()).cloned());
                // A unit an earlier session moved aside (e.g. to run again after its
                // server failed to start) may wait, empty, before completed units.
                let waiting =
                    files.is_empty() && state.sessions.iter().any(|s| s.discarded.iter().any(|d| d.unit == name));
                if !waiting {
                    self.first_partial.get_or_insert_with(|| name.to_string());
                }
                if !files.is_empty() {
                    state.partial.push((name.to_string(), files, self.why(name)));
                }
                Ok(())
            }
        }
    }
}

/// An interleaved block (`blocks.rounds` >= 1) ran its arms together: one whose
/// units did not all complete runs again whole, its completed units moved aside.
fn rerun_unfinished_interleaved_blocks(
    ev: &Evidence,
    frozen: &FrozenPlan,
    schedule: &Schedule,
    state: &mut ResumeState,
) -> Result<(), RunError> {
    for block in &schedule.blocks {
        let done = |arm: &String| state.completed(block.index, arm).is_some();
        if block.arms.iter().all(done) || !block.arms.iter().any(done) {
            continue;
        }
        for arm in &block.arms {
            let Some(pos) = state.completed.iter().position(|(b, a, _)| *b == block.index && a == arm) else {
                continue;
            };
            let (_, _, record) = state.completed.remove(pos);
            let dir = ev.unit_dir(block.index, arm);
            let mut files = files_under(&dir)?;
            files.push(dir.join(UNIT_FILE));
            files.extend(summary_paths(ev, block, arm).into_iter().filter(|p| p.is_file()));
            let name = unit_name(block.index, arm);
            let why = format!(
                "completed in session {}, but its interleaved block (blocks.rounds = {}) did not finish: the \
                 block's arms run together, so the whole block runs again",
                record.session, frozen.plan.blocks.rounds
            );
            state.rerun.push(name.clone());
            state.partial.push((name, files, why));
        }
    }
    Ok(())
}

/// The interrupted sessions' units: those whose record names them. A session's
/// run.json entry was last written when it started, so what it completed since (the
/// qualification included) is known only from the completion records. A unit run
/// again belongs to the session that runs it now.
fn attribute_units_to_sessions(state: &mut ResumeState) {
    for s in state.sessions.iter_mut().filter(|s| s.state == SessionState::Interrupted) {
        let mine: Vec<&UnitRecord> =
            state.completed.iter().map(|(_, _, r)| r).filter(|r| r.session == s.session).collect();
        s.qualification_run = mine.iter().any(|r| r.unit == QUALIFICATION_UNIT);
        s.units_run = mine.iter().filter(|r| r.unit != QUALIFICATION_UNIT).map(|r| r.unit.clone()).collect();
    }
    for s in &mut state.sessions {
        s.units_run.retain(|u| !state.rerun.contains(u));
    }
}

/// Half-written files elsewhere (an interrupted atomic write of run.json or results/).
fn collect_stray_files(root: &Path, dispatched: bool, state: &mut ResumeState) -> Result<(), RunError> {
    // Half-written files elsewhere (an interrupted atomic write of run.json or results/).
    let moving: Vec<PathBuf> = state.partial.iter().flat_map(|(_, f, _)| f.clone()).collect();
    let stray: Vec<PathBuf> = files_under(root)?
        .into_iter()
        .filter(|p| !p.starts_with(root.join(DISCARDED_DIR)) && !moving.contains(p))
        .filter(|p| {
            !dispatched
                || ![root.join(RAW_DIR), root.join(RESULTS_DIR).join(CELLS_DIR), root.join(crate::evidence::SLURM_DIR)]
                    .iter()
                    .any(|d| p.starts_with(d))
        })
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.ends_with(".partial") || (name.starts_with('.') && name.ends_with(".tmp"))
        })
        .collect();
    if !stray.is_empty() {
        state.partial.push(("stray".into(), stray, "half-written files of an interrupted write".into()));
    }
    Ok(())
}

impl ResumeState {
    fn completed_push(&mut self, name: &str, record: UnitRecord) {
        let (block, arm) = match (record.block, name.split_once('/')) {
            (Some(b), Some((_, arm))) => (b, arm.to_string()),
            _ => (0, String::new()),
        };
        self.completed.push((block, arm, record));
    }
}

/// Moves every partial unit of `state` aside (`discarded/<n>-<unit>/`, `n` counting
/// on from the discards already there) and writes its `discard.json`.
pub fn discard(ev: &Evidence, state: &ResumeState, session: u32) -> Result<Vec<Discard>, RunError> {
    let root = ev.root();
    let base = root.join(DISCARDED_DIR);
    let mut n = std::fs::read_dir(&base)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_string_lossy().split('-').next()?.parse::<u32>().ok())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let mut out = Vec::new();
    for (unit, files, reason) in &state.partial {
        n += 1;
        let name = format!("{n}-{}", unit.replace('/', "-"));
        let dest = base.join(&name);
        let mut moved = Vec::new();
        for f in files {
            let r = rel(root, f);
            let to = dest.join(&r);
            ev.ensure_dir(to.parent().unwrap_or(&dest))?;
            std::fs::rename(f, &to).map_err(|error| RunError::Io { path: f.clone(), error })?;
            // Both directories synced: the move survives a crash whole.
            crate::evidence::sync_parent(&to)
                .and_then(|()| crate::evidence::sync_parent(f))
                .map_err(|error| RunError::Io { path: to.clone(), error })?;
            moved.push(r);
        }
        moved.sort();
        let d = Discard {
            dir: format!("{DISCARDED_DIR}/{name}"),
            unit: unit.clone(),
            reason: reason.clone(),
            files: moved,
        };
        write_json(&dest.join(DISCARD_FILE), &serde_json::json!({"session": session, "discard": &d}))?;
        println!("resume: discarded {unit} to {}/ ({reason})", d.dir);
        out.push(d);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::RunRecord;
    use crate::evidence::{Completion, RecordStatus, write_record};
    use crate::plan::freeze;

    const PLAN: &str = r#"
[study]
name = "t"
seed = 7

[request]
model = "m"
output_tokens = 4

[prompts]
source = "random"
lengths = [8]
documents = 2
max_token_id = 255

[warmup]
prompts = 0

[timing]
settle_s = 0.0
request_timeout_s = 30
drain_timeout_s = 30

[blocks]
count = 1
arm_order = "fixed"
cell_order = "fixed"

[[arms]]
name = "a"
role = "control"
argv = ["engine", "serve", "--port", "{port}"]
port = 18001

[[arms]]
name = "b"
role = "candidate"
argv = ["engine", "serve", "--port", "{port}"]
port = 18002

[[cells]]
name = "c"
kind = "confirmation"
load = "closed"
concurrency = 2
count = 4
"#;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A study directory with the plan frozen, its inputs and a run.json whose only
    /// session is `first`.
    fn study(tmp: &Path, first: Session) -> (Evidence, FrozenPlan, Schedule) {
        let root = tmp.join("study");
        let ev = Evidence::create(&root, false).unwrap();
        let frozen = freeze(PLAN.as_bytes().to_vec()).unwrap();
        write(&ev.plan_path(), PLAN);
        crate::inputs::prepare(&frozen.plan, &frozen.sha256, tmp, &ev.inputs_dir()).unwrap();
        let schedule = frozen.plan.schedule();
        write_run(&ev, &frozen, &[first]);
        (ev, frozen, schedule)
    }

    fn write_run(ev: &Evidence, frozen: &FrozenPlan, sessions: &[Session]) {
        let git = crate::evidence::GitInfo { revision: "unknown".into(), dirty: None };
        let record = RunRecord {
            started_unix_ms: Some(1),
            sessions: sessions.to_vec(),
            ..RunRecord::new("t", &frozen.sha256, git)
        };
        record.write(ev.root()).unwrap();
    }

    fn first_session() -> Session {
        let git = crate::evidence::GitInfo { revision: "unknown".into(), dirty: None };
        let mut first = Session::start(0, false, git, vec![], crate::host::HostFacts::default(), None);
        first.pid = None;
        first
    }

    #[test]
    fn a_unit_whose_server_failed_to_start_is_moved_aside_and_run_again() {
        let tmp = tempfile::tempdir().unwrap();
        let mut stopped = first_session();
        stopped.state = SessionState::Stopped;
        stopped.units_run = vec!["b0/a".into(), "b0/b".into()];
        let (ev, frozen, schedule) = study(tmp.path(), stopped);
        let block = &schedule.blocks[0];
        let a = ev.unit_dir(0, "a");
        write(&a.join("server.log"), "error: unexpected argument\n");
        write(&a.join("arm_outcome.json"), "{\"status\":\"start_failed\"}");
        write_record(
            ev.root(),
            &a,
            &summary_paths(&ev, block, "a"),
            Completion {
                unit: "b0/a",
                block: Some(0),
                session: 0,
                status: RecordStatus::Server(UnitStatus::StartFailed),
            },
            &Default::default(),
        )
        .unwrap();
        let b = ev.unit_dir(0, "b");
        write(&b.join("c.requests.jsonl"), "{}\n");
        write_record(
            ev.root(),
            &b,
            &summary_paths(&ev, block, "b"),
            Completion {
                unit: "b0/b",
                block: Some(0),
                session: 0,
                status: RecordStatus::Server(UnitStatus::Completed),
            },
            &Default::default(),
        )
        .unwrap();

        let state = check(&ev, &frozen, &schedule, tmp.path()).unwrap();
        assert!(state.completed(0, "a").is_none(), "run again");
        assert!(state.completed(0, "b").is_some(), "a measured unit after it stands");
        assert_eq!(state.rerun, ["b0/a"]);
        assert_eq!(state.sessions[0].state, SessionState::Stopped);
        assert_eq!(state.sessions[0].units_run, ["b0/b"], "b0/a now belongs to the session that runs it");
        let (unit, files, why) = &state.partial[0];
        assert_eq!((unit.as_str(), files.len()), ("b0/a", 3), "its files and its unit.json: {files:?}");
        assert!(why.contains("failed to start (start_failed) in session 0"), "{why}");
        let discards = discard(&ev, &state, 1).unwrap();
        assert_eq!(discards[0].files, ["raw/b0/a/arm_outcome.json", "raw/b0/a/server.log", "raw/b0/a/unit.json"]);
        assert!(!a.join(UNIT_FILE).exists() && b.join(UNIT_FILE).is_file());
        // Interrupted before b0/a ran again: it waits, emptied, before the completed
        // b0/b (its discard is in run.json), and runs at the next resume.
        let mut second = first_session();
        (second.session, second.resumed, second.discarded) = (1, true, discards);
        write_run(&ev, &frozen, &[state.sessions[0].clone(), second]);
        let again = check(&ev, &frozen, &schedule, tmp.path()).unwrap();
        assert!(again.partial.is_empty() && again.completed(0, "a").is_none() && again.rerun.is_empty());
        assert!(again.completed(0, "b").is_some());
        // Without that discard an empty unit before a completed one is refused.
        write_run(&ev, &frozen, &[first_session()]);
        let err = check(&ev, &frozen, &schedule, tmp.path()).unwrap_err().to_string();
        assert!(err.contains("b0/b is complete but b0/a before it is not"), "{err}");
    }

    #[test]
    fn check_keeps_complete_units_discards_partial_ones_and_refuses_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let (ev, frozen, schedule) = study(tmp.path(), first_session());
        let root = ev.root().to_path_buf();
        let block = &schedule.blocks[0];
        // b0/a complete, b0/b partial, and a stray half-written file.
        let a = ev.unit_dir(0, "a");
        write(&a.join("c.requests.jsonl"), "{}\n");
        write(&ev.cell_summary_path(0, "a", "c"), "{}\n");
        write_record(
            ev.root(),
            &a,
            &summary_paths(&ev, block, "a"),
            Completion {
                unit: "b0/a",
                block: Some(0),
                session: 0,
                status: RecordStatus::Server(UnitStatus::Completed),
            },
            &Default::default(),
        )
        .unwrap();
        write(&ev.unit_dir(0, "b").join("startup.json"), "{}");
        write(&ev.unit_dir(0, "b").join("scrapes.jsonl.partial"), "{\"t_ns\":");
        write(&ev.results_dir().join(".summaries.json.tmp"), "[");

        let state = check(&ev, &frozen, &schedule, tmp.path()).unwrap();
        assert!(state.inputs_ok && state.completed(0, "a").is_some() && state.completed(0, "b").is_none());
        assert_eq!(state.sessions[0].state, SessionState::Interrupted);
        assert_eq!(state.sessions[0].units_run, ["b0/a"]);
        let partial: Vec<(&str, usize)> = state.partial.iter().map(|(u, f, _)| (u.as_str(), f.len())).collect();
        assert_eq!(partial, [("b0/b", 2), ("stray", 1)]);
        let discards = discard(&ev, &state, 1).unwrap();
        assert_eq!(discards[0].dir, "discarded/1-b0-b");
        assert_eq!(discards[0].files, ["raw/b0/b/scrapes.jsonl.partial", "raw/b0/b/startup.json"]);
        assert!(root.join("discarded/1-b0-b/raw/b0/b/startup.json").is_file());
        assert!(root.join("discarded/2-stray/results/.summaries.json.tmp").is_file());
        assert!(root.join("discarded/2-stray/discard.json").is_file());
        assert!(check(&ev, &frozen, &schedule, tmp.path()).unwrap().partial.is_empty());

        // A completed unit that changed, a changed plan, a complete study: refused.
        write(&a.join("c.requests.jsonl"), "{ }\n");
        let err = check(&ev, &frozen, &schedule, tmp.path()).unwrap_err().to_string();
        assert!(err.contains("completed b0/a differs from its unit.json") && err.contains("c.requests.jsonl: changed"));
        let other = freeze(format!("{PLAN}\n# edited\n").into_bytes()).unwrap();
        let err = check(&ev, &other, &schedule, tmp.path()).unwrap_err().to_string();
        assert!(err.contains("the plan changed"), "{err}");
        write(&root.join("manifest.json"), "{}");
        let err = check(&ev, &frozen, &schedule, tmp.path()).unwrap_err().to_string();
        assert!(err.contains("the study is complete"), "{err}");
    }
}
