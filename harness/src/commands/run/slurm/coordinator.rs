//! The coordinator of a dispatched study: freezes the dispatch, submits the blocks
//! as one array, follows every task to its end, resubmits what failed, and merges
//! what the workers wrote into the study's sessions, units and `run.json`
//! `executor` record. Resumable at any point: a block is whole (every unit's
//! completion record verified), queued or running (followed, never submitted
//! again), or neither (its files moved aside, then submitted). Must not run a unit
//! itself or read a setting from anywhere but the frozen plan.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cli::{self, Queued};
use super::{SlurmError, script};
use crate::commands::run::{Ledger, RunError, resume, verified_unit};
use crate::evidence::{
    DISPATCH_FILE, DISPATCH_FORMAT, DispatchRecord, Evidence, ExecutorRecord, LOGS_DIR, RecordCheck, SBATCH_FILE,
    Session, SessionClaim, SessionRole, SessionState, SubmissionRecord, TaskFailure, TaskOutcome, UnitStatus,
    check_record, claim_session, files_under, read_claims, read_dispatch, read_submissions, sha256_hex,
    submission_path, unit_name, unix_ms, write_bytes, write_json,
};
use crate::plan::{FrozenPlan, Schedule, ScheduledBlock};

/// What the coordinator works with.
pub struct Coordinator<'a> {
    pub frozen: &'a FrozenPlan,
    pub ev: &'a Evidence,
    /// The working directory (the tasks' too).
    pub base_dir: &'a Path,
    pub shared_root: &'a Path,
    /// The coordinator's session.
    pub session: u32,
}

/// How the dispatch ended.
pub struct Dispatched {
    /// Why the study stopped (its tasks cancelled); `None`: every block is whole.
    pub stop: Option<RunError>,
    pub record: ExecutorRecord,
    /// Seconds from the last block's end being seen to the units being merged.
    pub merge_s: f64,
}

/// The coordinator's claim of session `n`.
pub fn coordinator_claim(n: u32) -> SessionClaim {
    SessionClaim {
        session: n,
        role: SessionRole::Coordinator,
        hostname: crate::host::hostname(),
        pid: std::process::id(),
        claimed_unix_ms: unix_ms(),
        record: None,
        task: None,
    }
}

/// Where one block stands.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// To submit.
    Waiting,
    /// Submitted as a task of `job` (queued, running, or ended and not yet judged).
    Queued { job: String, since: Instant },
    /// Whole: its units are those of `session`.
    Done { session: u32 },
}

#[derive(Debug, Clone)]
struct Track {
    block: u32,
    phase: Phase,
    /// Submissions of this block so far.
    attempts: u32,
    /// Slurm's view while queued.
    state: String,
    node: Option<String>,
    reason: String,
    /// When the task was first seen gone from the queue without a final record.
    gone_since: Option<Instant>,
}

/// A block's units as the directory holds them.
enum BlockFiles {
    /// Every unit whole, all of one session (with `resuming`, none that measured
    /// nothing).
    Whole { session: u32 },
    /// Files to move aside before the block runs again (possibly none).
    Partial { files: Vec<PathBuf>, why: String },
}

/// The block's units. A unit that measured nothing (its server failed to start
/// below its arm's `max_start_failures`) is an arm fault of a finished block, as
/// in a local run; a resuming coordinator runs such a block again (`resuming`), as
/// a local resume runs such a unit again.
fn block_files(ev: &Evidence, block: &ScheduledBlock, resuming: bool) -> Result<BlockFiles, RunError> {
    let root = ev.root();
    let mut sessions = Vec::new();
    let mut files = Vec::new();
    let mut why = None;
    for arm in &block.arms {
        let dir = ev.unit_dir(block.index, arm);
        let extra = resume::summary_paths(ev, block, arm);
        match check_record(root, &dir, &extra) {
            RecordCheck::Complete(rec) => {
                if resuming && rec.status.server().is_some_and(UnitStatus::measured_nothing) {
                    why.get_or_insert_with(|| format!("{} measured nothing ({})", rec.unit, rec.status));
                }
                sessions.push(rec.session);
                files.push(dir.join(crate::evidence::UNIT_FILE));
            }
            RecordCheck::Changed(problems) => {
                return Err(RunError::Resume {
                    dir: root.to_path_buf(),
                    why: format!(
                        "completed {} differs from its unit.json:\n  {}",
                        unit_name(block.index, arm),
                        problems.join("\n  ")
                    ),
                });
            }
            RecordCheck::Partial => {
                why.get_or_insert_with(|| format!("{} has no completion record", unit_name(block.index, arm)));
            }
        }
        if dir.exists() {
            files.extend(files_under(&dir)?.into_iter().filter(|f| !f.ends_with(crate::evidence::UNIT_FILE)));
        }
        for p in &extra {
            // The summary, and a half-written one of a killed worker.
            let tmp = p.with_file_name(format!(".{}.tmp", p.file_name().unwrap_or_default().to_string_lossy()));
            files.extend([p.clone(), tmp].into_iter().filter(|f| f.is_file()));
        }
    }
    sessions.dedup();
    match (why, sessions.as_slice()) {
        (None, [one]) => Ok(BlockFiles::Whole { session: *one }),
        (None, _) => Ok(BlockFiles::Partial { files, why: "its units come from more than one session".into() }),
        (Some(why), _) => Ok(BlockFiles::Partial { files, why }),
    }
}

/// Moves a block's files aside (`discarded/`), returning what was moved.
fn discard_block(
    ev: &Evidence,
    block: u32,
    files: Vec<PathBuf>,
    why: String,
    session: u32,
    ledger: &mut Ledger,
) -> Result<(), RunError> {
    if files.is_empty() {
        return Ok(());
    }
    let state = resume::ResumeState { partial: vec![(format!("b{block}"), files, why)], ..Default::default() };
    let discarded = resume::discard(ev, &state, session)?;
    if let Some(s) = ledger.sessions.iter_mut().find(|s| s.session == session) {
        s.discarded.extend(discarded);
    }
    Ok(())
}

/// Writes the batch script and `slurm/dispatch.json` (a new dispatch), or checks
/// that an earlier dispatch is this study's.
async fn ensure_dispatch(cx: &Coordinator<'_>, schedule: &Schedule) -> Result<DispatchRecord, RunError> {
    let root = cx.ev.root();
    let plan = &cx.frozen.plan;
    let job_name = script::job_name(&plan.study.name, root);
    if let Some(d) = read_dispatch(root)? {
        if d.plan_sha256 != cx.frozen.sha256 || d.job_name != job_name {
            return Err(RunError::Resume {
                dir: root.to_path_buf(),
                why: format!("{DISPATCH_FILE} names another plan or evidence directory"),
            });
        }
        return Ok(d);
    }
    let harness = std::env::current_exe().map_err(|error| RunError::Io { path: "harness".into(), error })?;
    let working = std::fs::canonicalize(cx.base_dir).unwrap_or_else(|_| cx.base_dir.to_path_buf());
    let paths = script::ScriptPaths {
        study_dir: root,
        shared_root: cx.shared_root,
        working_dir: &working,
        harness: &harness,
        job_name: &job_name,
    };
    let text = script::render(plan, &cx.frozen.sha256, &paths);
    cx.ev.ensure_dir(&root.join(LOGS_DIR))?;
    write_bytes(&root.join(SBATCH_FILE), text.as_bytes())?;
    let derived = if plan.pilots.is_some() {
        let p = root.join(crate::evidence::DERIVED_PATH);
        Some(sha256_hex(&std::fs::read(&p).map_err(|error| RunError::Io { path: p, error })?))
    } else {
        None
    };
    let catalog = cx.ev.root().join(crate::evidence::CATALOG_PATH);
    let catalog = sha256_hex(&std::fs::read(&catalog).map_err(|error| RunError::Io { path: catalog, error })?);
    let d = DispatchRecord {
        format: DISPATCH_FORMAT.into(),
        study: plan.study.name.clone(),
        plan_sha256: cx.frozen.sha256.clone(),
        derived_sha256: derived,
        catalog_sha256: catalog,
        job_name,
        shared_root: cx.shared_root.display().to_string(),
        study_dir: root.display().to_string(),
        working_dir: working.display().to_string(),
        harness: harness.display().to_string(),
        ports_per_task: plan.ports_per_task(),
        blocks: schedule.blocks.iter().map(|b| b.index).collect(),
        script_sha256: sha256_hex(text.as_bytes()),
        created_unix_ms: unix_ms(),
    };
    write_json(&root.join(DISPATCH_FILE), &d)?;
    Ok(d)
}

/// One `sbatch --array` of `blocks`: its record first, then the submission, then
/// the record with the job id.
async fn submit(cx: &Coordinator<'_>, blocks: &[u32]) -> Result<String, RunError> {
    let root = cx.ev.root();
    let n = u32::try_from(read_submissions(root)?.len()).unwrap_or(u32::MAX);
    let array = script::array_spec(blocks, cx.frozen.plan.executor.max_parallel);
    let argv = cli::submit_argv(&root.join(SBATCH_FILE).display().to_string(), &array);
    let mut rec = SubmissionRecord {
        submission: n,
        session: cx.session,
        blocks: blocks.to_vec(),
        array,
        argv: argv.clone(),
        job_id: None,
        submitted_unix_ms: unix_ms(),
    };
    write_json(&submission_path(root, n), &rec)?;
    let job = cli::submit(&argv).await?;
    rec.job_id = Some(job.clone());
    write_json(&submission_path(root, n), &rec)?;
    Ok(job)
}

/// The last lines of a task's Slurm log.
fn log_tail(root: &Path, block: u32, job: &str) -> String {
    let path = crate::evidence::task_log_path(root, block, job);
    match std::fs::read_to_string(&path) {
        Ok(t) => {
            let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(6)..].join("\n    ");
            if tail.is_empty() {
                format!("its log {} is empty", path.display())
            } else {
                format!("its log says:\n    {tail}")
            }
        }
        Err(e) => format!(
            "no log ({}: {e}): Slurm could not write it, so the node may not see the evidence directory under the \
             shared root",
            path.display()
        ),
    }
}

/// Why a block's worker stopped the study, as a local run would have said it.
fn stop_of(cx: &Coordinator<'_>, block: &ScheduledBlock) -> RunError {
    let dir = cx.ev.root().to_path_buf();
    for arm in &block.arms {
        let Ok((u, _)) = verified_unit(cx.ev, block, arm) else { continue };
        let detail = u.detail.clone().unwrap_or_default();
        match u.status {
            UnitStatus::IdentityFailed => {
                return RunError::Identity { block: block.index, arm: arm.clone(), detail, dir };
            }
            UnitStatus::StartFailed => {
                let max = cx.frozen.plan.arm(arm).map_or(1, |a| a.max_start_failures);
                return RunError::StartFailures { arm: arm.clone(), failures: 1, max, last: detail, dir };
            }
            _ => {}
        }
    }
    SlurmError::Worker { block: block.index, why: "its worker stopped the study".into() }.into()
}

/// The progress line: blocks pending, running (with nodes), done and failed.
fn progress_line(tracks: &[Track], failed: usize, jobs: &[String]) -> String {
    let (mut pending, mut running, mut done) = (0, Vec::new(), 0);
    for t in tracks {
        match &t.phase {
            Phase::Done { .. } => done += 1,
            Phase::Queued { .. } if matches!(t.state.as_str(), "RUNNING" | "COMPLETING" | "CONFIGURING") => {
                running.push(format!("b{} on {}", t.block, t.node.as_deref().unwrap_or("?")));
            }
            _ => pending += 1,
        }
    }
    let nodes = if running.is_empty() { String::new() } else { format!(" ({})", running.join(", ")) };
    format!(
        "slurm: {} blocks: {pending} pending, {} running{nodes}, {done} done, {failed} failed (job {})",
        tracks.len(),
        running.len(),
        jobs.join(", ")
    )
}

/// Dispatches the blocks that are not whole, follows them to the end, and merges.
pub async fn run_blocks(
    cx: &Coordinator<'_>,
    schedule: &Schedule,
    ledger: &mut Ledger,
) -> Result<Dispatched, RunError> {
    let root = cx.ev.root().to_path_buf();
    let exec = &cx.frozen.plan.executor;
    let dispatch = ensure_dispatch(cx, schedule).await?;
    let name = dispatch.job_name.clone();
    let earlier = read_submissions(&root)?;
    let queue = cli::queue(&name).await?;
    let mut failures: Vec<TaskFailure> = Vec::new();
    let mut tracks = Vec::new();
    for block in &schedule.blocks {
        let attempts = u32::try_from(earlier.iter().filter(|s| s.blocks.contains(&block.index)).count()).unwrap_or(0);
        let mut t = Track {
            block: block.index,
            phase: Phase::Waiting,
            attempts,
            state: String::new(),
            node: None,
            reason: String::new(),
            gone_since: None,
        };
        // A task of this block still queued or running: followed, never resubmitted.
        if let Some(q) = queue.iter().find(|q| q.task == block.index) {
            println!(
                "slurm: b{} is {} as task {}_{} (an earlier session's submission)",
                block.index, q.state, q.array_job, q.task
            );
            t.phase = Phase::Queued { job: q.array_job.clone(), since: Instant::now() };
        } else {
            match block_files(cx.ev, block, true)? {
                BlockFiles::Whole { session } => {
                    println!("slurm: b{} verified (unit.json, session {session})", block.index);
                    t.phase = Phase::Done { session };
                }
                BlockFiles::Partial { files, why } => {
                    let why = format!("{why}; no task of it is queued or running, so the block runs again whole");
                    discard_block(cx.ev, block.index, files, why, cx.session, ledger)?;
                }
            }
        }
        tracks.push(t);
    }
    let poll = Duration::from_secs_f64(exec.poll_interval_s);
    // The arrays followed: an earlier session's still in the queue, then this one's.
    let mut jobs: Vec<String> = Vec::new();
    for t in &tracks {
        if let Phase::Queued { job, .. } = &t.phase
            && !jobs.contains(job)
        {
            jobs.push(job.clone());
        }
    }
    let mut last_line = String::new();
    let mut queue_error: Option<(Instant, String)> = None;
    let stop = loop {
        // Submit what waits, all in one array.
        let waiting: Vec<u32> = tracks.iter().filter(|t| t.phase == Phase::Waiting).map(|t| t.block).collect();
        if !waiting.is_empty() {
            match submit(cx, &waiting).await {
                Ok(job) => {
                    println!(
                        "slurm: submitted {} block(s) as array job {job} ({}), script {SBATCH_FILE}",
                        waiting.len(),
                        script::array_spec(&waiting, exec.max_parallel)
                    );
                    jobs.push(job.clone());
                    for t in tracks.iter_mut().filter(|t| t.phase == Phase::Waiting) {
                        t.phase = Phase::Queued { job: job.clone(), since: Instant::now() };
                        t.attempts += 1;
                        (t.state, t.node, t.gone_since) = ("PENDING".into(), None, None);
                    }
                }
                Err(e) => break Some(e),
            }
        }
        if tracks.iter().all(|t| matches!(t.phase, Phase::Done { .. })) {
            break None;
        }
        tokio::time::sleep(poll).await;
        let queue = match cli::queue(&name).await {
            Ok(q) => {
                queue_error = None;
                q
            }
            Err(e) => {
                let since = queue_error.get_or_insert_with(|| (Instant::now(), e.to_string())).0;
                let limit = Duration::from_secs(300).max(poll * 30);
                if since.elapsed() > limit {
                    break Some(
                        SlurmError::QueueLost { why: e.to_string(), secs: limit.as_secs(), dir: root.clone() }.into(),
                    );
                }
                continue;
            }
        };
        let mut stop = None;
        for track in tracks.iter_mut() {
            if let Some(s) = follow(cx, schedule, track, &queue, &mut failures, ledger).await? {
                stop = Some(s);
                break;
            }
        }
        if stop.is_some() {
            break stop;
        }
        let line = progress_line(&tracks, failures.len(), &jobs);
        if line != last_line {
            println!("{line}");
            last_line = line;
        }
    };
    if let Some(stop) = stop {
        let said = cancel(&name).await;
        println!("slurm: {said}");
        let record = executor_record(&root, &dispatch, &tracks)?;
        return Ok(Dispatched { stop: Some(stop), record, merge_s: 0.0 });
    }
    let merge = Instant::now();
    for block in &schedule.blocks {
        for arm in &block.arms {
            let (unit, summaries) = verified_unit(cx.ev, block, arm)?;
            ledger.summaries.extend(summaries);
            ledger.units.push(unit);
            ledger.verified_units += 1;
        }
    }
    // Half-written claims of workers killed while claiming: not evidence.
    let strays: Vec<PathBuf> = files_under(&root.join(crate::evidence::SLURM_DIR))?
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".tmp")))
        .collect();
    if !strays.is_empty() {
        let state = resume::ResumeState {
            partial: vec![("stray".into(), strays, "half-written files of a killed task".into())],
            ..Default::default()
        };
        let moved = resume::discard(cx.ev, &state, cx.session)?;
        if let Some(s) = ledger.sessions.iter_mut().find(|s| s.session == cx.session) {
            s.discarded.extend(moved);
        }
    }
    let record = executor_record(&root, &dispatch, &tracks)?;
    Ok(Dispatched { stop: None, record, merge_s: merge.elapsed().as_secs_f64() })
}

/// `scancel` of the whole study, waiting for the queue to empty.
pub async fn cancel(name: &str) -> String {
    match cli::cancel(name).await {
        Err(e) => format!("could not cancel the study's tasks ({e}): run `scancel --name {name}`"),
        Ok(()) if cli::wait_gone(name, Duration::from_secs(60)).await => {
            format!("cancelled the study's tasks (scancel --name {name}); none is left in the queue")
        }
        Ok(()) => format!("cancelled (scancel --name {name}); some tasks were still leaving the queue after 60 s"),
    }
}

/// One look at one block. `Some`: why the study stops now.
async fn follow(
    cx: &Coordinator<'_>,
    schedule: &Schedule,
    t: &mut Track,
    queue: &[Queued],
    failures: &mut Vec<TaskFailure>,
    ledger: &mut Ledger,
) -> Result<Option<RunError>, RunError> {
    let exec = &cx.frozen.plan.executor;
    let root = cx.ev.root();
    let Phase::Queued { job, since } = t.phase.clone() else { return Ok(None) };
    let Some(block) = schedule.blocks.iter().find(|b| b.index == t.block) else { return Ok(None) };
    if let Some(q) = queue.iter().find(|q| q.array_job == job && q.task == t.block) {
        (t.state, t.node, t.reason) = (q.state.clone(), q.node.clone().or(t.node.take()), q.reason.clone());
        let waited = since.elapsed().as_secs_f64();
        if q.state == "PENDING" && waited > exec.start_timeout_s {
            return Ok(Some(
                SlurmError::StartTimeout {
                    block: t.block,
                    job: format!("{job}_{}", t.block),
                    waited_s: waited,
                    limit_s: exec.start_timeout_s,
                    reason: q.reason.clone(),
                    dir: root.to_path_buf(),
                }
                .into(),
            ));
        }
        return Ok(None);
    }
    // Gone from the queue: judged by its worker's claim and its units.
    let (claims, _) = read_claims(root);
    let claim = claims
        .iter()
        .filter(|c| c.task.as_ref().is_some_and(|k| k.block == t.block && k.array_job_id == job))
        .max_by_key(|c| c.session);
    let outcome = claim.and_then(|c| c.task.as_ref()).map(|k| k.outcome);
    let files = block_files(cx.ev, block, false)?;
    let not_whole = match &files {
        BlockFiles::Partial { why, .. } => why.clone(),
        BlockFiles::Whole { .. } => String::new(),
    };
    match (outcome, files) {
        (Some(TaskOutcome::Finished), BlockFiles::Whole { session }) => {
            println!("slurm: b{} done on {} (session {session})", t.block, t.node.as_deref().unwrap_or("?"));
            t.phase = Phase::Done { session };
            return Ok(None);
        }
        (Some(TaskOutcome::Stopped), _) => return Ok(Some(stop_of(cx, block))),
        // The worker's last write may reach this node a moment after Slurm's end.
        (Some(TaskOutcome::Running) | None, _)
            if t.gone_since.get_or_insert_with(Instant::now).elapsed() < Duration::from_secs(5) =>
        {
            return Ok(None);
        }
        _ => {}
    }
    let ended = cli::ended(&job, t.block).await.unwrap_or_default();
    let state = if ended.state.is_empty() { "UNKNOWN".to_string() } else { ended.state.clone() };
    let node = ended.node.clone().or(t.node.clone());
    let worker = claim.and_then(|c| c.task.as_ref()).and_then(|k| k.detail.clone());
    let detail = match (&worker, outcome) {
        (Some(w), _) => format!("its worker failed: {w}"),
        (None, Some(TaskOutcome::Finished)) => format!("its worker finished but its units are not whole ({not_whole})"),
        (None, Some(_)) => {
            format!("it ended ({state}) while its worker was running; {}", log_tail(root, t.block, &job))
        }
        (None, None) => {
            format!("it ended ({state}) before its worker claimed a session; {}", log_tail(root, t.block, &job))
        }
    };
    let resubmit = t.attempts <= exec.max_resubmits;
    let what = format!(
        "task {job}_{} on {} ended {state}{}{}: {detail}",
        t.block,
        node.as_deref().unwrap_or("?"),
        ended.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
        ended.exit_code.as_deref().map(|c| format!(", exit {c}")).unwrap_or_default(),
    );
    let failure = TaskFailure {
        block: t.block,
        job: format!("{job}_{}", t.block),
        state,
        reason: ended.reason.clone(),
        exit_code: ended.exit_code.clone(),
        node,
        session: claim.map(|c| c.session),
        detail: detail.clone(),
        resubmitted: resubmit,
    };
    crate::evidence::write_failure(root, &failure)?;
    failures.push(failure);
    if !resubmit {
        println!("slurm: b{} failed: {what}", t.block);
        return Ok(Some(
            SlurmError::BlockFailed {
                block: t.block,
                attempts: t.attempts,
                max: exec.max_resubmits,
                last: what,
                dir: root.to_path_buf(),
            }
            .into(),
        ));
    }
    println!(
        "slurm: b{} failed: {what}\nslurm: b{} resubmitted (attempt {} of {})",
        t.block,
        t.block,
        t.attempts + 1,
        exec.max_resubmits + 1
    );
    if let BlockFiles::Partial { files, .. } = block_files(cx.ev, block, false)? {
        let why = format!(
            "the block's task {job}_{} failed ({}); the block runs again whole",
            t.block,
            failures.last().map_or("?", |f| f.state.as_str())
        );
        discard_block(cx.ev, t.block, files, why, cx.session, ledger)?;
    } else {
        // Whole units of a task that did not finish cleanly are not trusted either.
        let mut files = Vec::new();
        for arm in &block.arms {
            let dir = cx.ev.unit_dir(t.block, arm);
            if dir.exists() {
                files.extend(files_under(&dir)?);
            }
            files.extend(resume::summary_paths(cx.ev, block, arm).into_iter().filter(|p| p.is_file()));
        }
        let why = format!("the block's task {job}_{} did not finish cleanly; the block runs again whole", t.block);
        discard_block(cx.ev, t.block, files, why, cx.session, ledger)?;
    }
    (t.phase, t.gone_since, t.state, t.node) = (Phase::Waiting, None, String::new(), None);
    Ok(None)
}

/// `run.json` `executor`: the submissions, every worker's task (its block's kept
/// one marked), and the failures seen.
fn executor_record(root: &Path, d: &DispatchRecord, tracks: &[Track]) -> Result<ExecutorRecord, RunError> {
    let kept: BTreeMap<u32, u32> = tracks
        .iter()
        .filter_map(|t| match t.phase {
            Phase::Done { session } => Some((t.block, session)),
            _ => None,
        })
        .collect();
    let (claims, _) = read_claims(root);
    let tasks = claims
        .into_iter()
        .filter_map(|c| {
            let mut task = c.task?;
            task.kept = kept.get(&task.block) == Some(&c.session);
            if task.outcome == TaskOutcome::Running {
                task.outcome = TaskOutcome::Interrupted;
            }
            Some(task)
        })
        .collect();
    Ok(ExecutorRecord {
        kind: "slurm".into(),
        job_name: d.job_name.clone(),
        script: SBATCH_FILE.into(),
        submissions: read_submissions(root)?,
        tasks,
        // Every session's, a resumed coordinator's earlier ones included.
        failures: crate::evidence::read_failures(root)?,
    })
}

/// The study's sessions in number order: the coordinator's (`coordinator`, by
/// their numbers) and every worker's from its claim (one still `running` whose task
/// ended is `interrupted`); a number claimed by a coordinator that left no record
/// is an `interrupted` session of which nothing is known.
pub fn merge_sessions(root: &Path, coordinator: &[Session]) -> Vec<Session> {
    let (claims, _) = read_claims(root);
    let mut by: BTreeMap<u32, Session> = coordinator.iter().map(|s| (s.session, s.clone())).collect();
    for c in claims {
        match (c.role, c.record) {
            (SessionRole::Worker, Some(mut r)) => {
                if r.state == SessionState::Running {
                    r.state = SessionState::Interrupted;
                }
                by.insert(c.session, r);
            }
            _ => {
                by.entry(c.session).or_insert_with(|| unknown_session(c.session));
            }
        }
    }
    let last = by.keys().next_back().copied().unwrap_or(0);
    (0..=last).map(|n| by.remove(&n).unwrap_or_else(|| unknown_session(n))).collect()
}

fn unknown_session(n: u32) -> Session {
    let git = crate::evidence::GitInfo { revision: "unknown".into(), dirty: None };
    let mut s = Session::start(n, n > 0, git, vec![], crate::host::HostFacts::default(), None);
    (s.pid, s.started_unix_ms, s.git, s.host, s.state) = (None, None, None, None, SessionState::Interrupted);
    s
}

/// Claims the coordinator's session number (the first free one from `from`).
pub fn claim(root: &Path, from: u32) -> Result<u32, RunError> {
    Ok(claim_session(root, from, coordinator_claim)?)
}
