//! Driving one cell: every trace entry is dispatched at its intended time on the
//! study clock by a dedicated OS thread (sleep, then spin: `StudyClock::block_until`)
//! and recorded by its own async task. Open loop: no semaphore and no
//! connection limit; a task per request is spawned at its intended time (with a
//! `max_concurrency`, the closed loop's semaphore below admits it). Closed loop:
//! requests are dispatched at their intended times (all at the cell start) and then
//! admitted in index order by a semaphore of C permits, each held until its request
//! ends (returned by `Drop`). Owns dispatch timing, admission and the drain. Must not
//! retry, reorder a trace, or leave a planned request out of the result.
//!
//! Drain: from the later of the last intended arrival and the last admission, the
//! outstanding requests get `drain_timeout`; those still running then end as
//! `Timeout`. If the server dies, dispatch stops: outstanding requests end as
//! `ServerDied`, and entries never dispatched or admitted are recorded as
//! `ServerDied` with the stamps they reached.
//!
//! Session cells (`CellDrive::sessions`): each trace entry is a session; the
//! dispatch, admission and permit above belong to its first turn, and its task runs
//! every turn (`session::run_session`; records numbered as that module says). A
//! session never dispatched or admitted records its later turns as never sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use reqwest::header::HeaderValue;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::recorder::{RequestCtx, execute, exited};
use super::session::{SessionScript, not_sent, run_session};
use super::{LoadError, StudyClock};
use crate::evidence::request_record::{Failure, RecordKey, RequestRecord, TurnRecord};
use crate::trace::TraceEntry;

/// Live counts of one cell for progress displays.
#[derive(Debug, Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (self.sent.load(Ordering::Relaxed), self.completed.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed))
    }
}

/// One cell on one arm in one block.
pub struct CellDrive<'a> {
    pub block: u32,
    pub arm: &'a str,
    pub cell: &'a str,
    pub entries: &'a [TraceEntry],
    /// Study time of the cell start: entry i is intended at `start_ns + offset_ns`.
    pub start_ns: u64,
    /// Closed loop: C; open loop and isolated: `None`.
    pub concurrency: Option<u32>,
    /// The prepared request of each panel index.
    pub bodies: &'a [PreparedRequest],
    /// When set, entry i sends `entry_bodies[i]` instead of its prompt's body (a
    /// trace-file cell whose rows set each request's output length).
    pub entry_bodies: Option<&'a [Bytes]>,
    /// A session cell: the session script of each panel index (every entry is then
    /// a session, `session`); `None` for one request per entry.
    pub sessions: Option<&'a [Arc<SessionScript>]>,
    pub drain_timeout: Duration,
}

/// One panel entry's request, ready to send: its body bytes, its exact prompt
/// length, the `max_tokens` the body asks for, and its `x-request-id` header value
/// when the plan names requests (`request.request_id_prefix`), built here once so
/// that sending it allocates nothing.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub body: Bytes,
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    pub request_id: Option<HeaderValue>,
}

/// A record with the planned fields and no stamps.
pub fn skeleton(d: &CellDrive<'_>, e: &TraceEntry) -> RequestRecord {
    let prepared = usize::try_from(e.prompt).ok().and_then(|i| d.bodies.get(i));
    let (prompt_tokens_intended, output_tokens_intended) = prepared.map_or((0, 0), |b| (b.prompt_tokens, b.max_tokens));
    let key = RecordKey { cell: d.cell, block: d.block, arm: d.arm, index: e.index };
    let tokens = (prompt_tokens_intended, e.output_length.unwrap_or(output_tokens_intended));
    RequestRecord::planned(key, e.prompt, tokens, d.start_ns.saturating_add(e.offset_ns))
}

struct Dispatched {
    rec: RequestRecord,
    body: Bytes,
    request_id: Option<HeaderValue>,
    session: Option<Arc<SessionScript>>,
}

impl CellDrive<'_> {
    fn session_of(&self, e: &TraceEntry) -> Option<Arc<SessionScript>> {
        self.sessions.and_then(|s| usize::try_from(e.prompt).ok().and_then(|p| s.get(p))).cloned()
    }

    /// Records the cell holds: one per entry, or every turn of every session.
    pub fn planned_records(&self) -> usize {
        match self.sessions {
            None => self.entries.len(),
            Some(_) => self.entries.iter().map(|e| self.session_of(e).map_or(1, |s| s.turns() as usize)).sum(),
        }
    }
}

/// Turn 0's record of a session whose turns start at record `base`.
fn session_skeleton(d: &CellDrive<'_>, e: &TraceEntry, base: u64) -> RequestRecord {
    let mut rec = skeleton(d, &TraceEntry { index: base, ..*e });
    rec.turn = Some(TurnRecord { session: e.index, turn: 0, body_sha256: None, reply: None });
    rec
}

/// A session whose first turn failed before it was sent: that record, then its
/// later turns as never sent.
fn with_unsent_turns(rec: RequestRecord, session: Option<&SessionScript>) -> Vec<RequestRecord> {
    match session {
        Some(s) => {
            let rest = not_sent(&rec, &rec, s, 0);
            std::iter::once(rec).chain(rest).collect()
        }
        None => vec![rec],
    }
}

/// Drives the cell; returns every planned request's record in trace order.
/// `ctx.drain_expired` is replaced by the cell's own drain signal.
pub async fn drive_cell(
    d: &CellDrive<'_>,
    ctx: &RequestCtx,
    counters: &Arc<Counters>,
) -> Result<Vec<RequestRecord>, LoadError> {
    let (drain_tx, drain_rx) = watch::channel(false);
    let ctx = &RequestCtx { drain_expired: drain_rx, ..ctx.clone() };
    let clock = ctx.clock;
    let mut out: Vec<Option<RequestRecord>> = vec![None; d.planned_records()];
    // Session records count from 0 across the cell (sessions are never sliced).
    let base = if d.sessions.is_none() { d.entries.first().map_or(0, |e| e.index) } else { 0 };
    let died = |detail: String, stage: &str| Failure::ServerDied { detail: format!("{detail} before {stage}") };
    let (tx, mut rx) = mpsc::unbounded_channel::<Dispatched>();
    let mut set: JoinSet<Vec<RequestRecord>> = JoinSet::new();
    let sem = d.concurrency.map(|c| Arc::new(Semaphore::new(c.max(1) as usize)));
    let mut last_admitted = 0u64;

    // Stage 1: dispatch at the intended times, on a dedicated OS thread: neither the
    // async timer's granularity nor busy runtime workers stand between a request's
    // intended time and its dispatch stamp.
    let mut planned = Vec::with_capacity(d.entries.len());
    let mut next_record = 0u64;
    for e in d.entries {
        let body = match d.entry_bodies {
            Some(bodies) => usize::try_from(e.index).ok().and_then(|i| bodies.get(i)).cloned(),
            None => usize::try_from(e.prompt).ok().and_then(|p| d.bodies.get(p)).map(|b| b.body.clone()),
        };
        let Some(body) = body else {
            return Err(LoadError::UnknownPrompt { cell: d.cell.to_string(), index: e.index, prompt: e.prompt });
        };
        let request_id =
            usize::try_from(e.prompt).ok().and_then(|p| d.bodies.get(p)).and_then(|b| b.request_id.clone());
        let session = d.session_of(e);
        let rec = match &session {
            Some(_) => session_skeleton(d, e, next_record),
            None => skeleton(d, e),
        };
        next_record += session.as_ref().map_or(1, |s| u64::from(s.turns()));
        planned.push(Dispatched { rec, body, request_id, session });
    }
    let sessions: std::collections::HashMap<u64, Arc<SessionScript>> =
        planned.iter().filter_map(|p| Some((p.rec.index, p.session.clone()?))).collect();
    let (done_tx, done_rx) = oneshot::channel();
    let exit = ctx.server_exit.clone();
    std::thread::Builder::new()
        .name(format!("dispatch {}", d.cell))
        .spawn(move || {
            raise_priority();
            let undispatched = dispatch_on_thread(clock, planned, tx, exit);
            let _ = done_tx.send(undispatched);
        })
        .map_err(|e| LoadError::Task(format!("cannot start the dispatcher thread: {e}")))?;
    // Stage 2: admit (closed loop: by semaphore, in index order) and spawn.
    let admitter = async {
        let mut unadmitted = Vec::new();
        while let Some(Dispatched { mut rec, body, request_id, session }) = rx.recv().await {
            let permit = match &sem {
                None => None,
                Some(sem) => tokio::select! {
                    biased;
                    detail = exited(ctx.server_exit.clone()) => {
                        rec.failure = Some(died(detail, "admission"));
                        unadmitted.push(rec);
                        continue;
                    }
                    p = sem.clone().acquire_owned() => p.ok(),
                },
            };
            // A watch waiter can wake after the permit: the current value decides.
            let news = ctx.server_exit.borrow().clone();
            if let Some(detail) = news {
                rec.failure = Some(died(detail, if sem.is_some() { "admission" } else { "sending" }));
                unadmitted.push(rec);
                continue;
            }
            let admitted = if permit.is_some() { clock.now_ns() } else { rec.dispatch_ns.unwrap_or(0) };
            rec.admitted_ns = Some(admitted);
            last_admitted = last_admitted.max(admitted);
            counters.sent.fetch_add(1, Ordering::Relaxed);
            let (ctx, counters) = (ctx.for_request(rec.index), counters.clone());
            set.spawn(async move {
                let _permit = permit;
                if let Some(script) = session {
                    return run_session(rec, body, request_id, script, &ctx, &counters).await;
                }
                execute(&mut rec, body, request_id, &ctx).await;
                let counter = if rec.is_valid() { &counters.completed } else { &counters.failed };
                counter.fetch_add(1, Ordering::Relaxed);
                vec![rec]
            });
        }
        unadmitted
    };
    let unadmitted = admitter.await;
    let undispatched = done_rx.await.map_err(|_| LoadError::Task("the dispatcher thread panicked".into()))?;
    for rec in undispatched.into_iter().chain(unadmitted) {
        let session = sessions.get(&rec.index).map(|s| &**s);
        for rec in with_unsent_turns(rec, session) {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            place(&mut out, base, rec)?;
        }
    }

    // Drain.
    let last_intended = d.entries.last().map_or(d.start_ns, |e| d.start_ns.saturating_add(e.offset_ns));
    let drain_end = clock.instant(last_intended.max(last_admitted)) + d.drain_timeout;
    let mut expired = false;
    loop {
        let next = if expired {
            set.join_next().await
        } else {
            tokio::select! {
                r = set.join_next() => r,
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(drain_end)) => {
                    expired = true;
                    let _ = drain_tx.send(true);
                    continue;
                }
            }
        };
        match next {
            None => break,
            Some(Ok(recs)) => {
                for rec in recs {
                    place(&mut out, base, rec)?;
                }
            }
            Some(Err(e)) => return Err(LoadError::Task(e.to_string())),
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or(LoadError::Lost { cell: d.cell.to_string(), index: i as u64 }))
        .collect()
}

/// Asks for real-time scheduling (SCHED_FIFO, lowest priority) for the calling
/// dispatcher thread, so that busy request tasks and servers on the same cores do not
/// delay a dispatch; where that is not permitted (no CAP_SYS_NICE), the thread keeps
/// normal scheduling. Safe: the thread sleeps between requests and spins at most
/// `SPIN_NS` per request, and the kernel caps real-time CPU share. Returns whether it
/// took effect.
pub fn raise_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: plain syscall on the calling thread with a valid parameter struct.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether a dispatcher thread gets real-time scheduling here (probed on a throwaway
/// thread; recorded beside the evidence).
pub fn realtime_dispatch_available() -> bool {
    std::thread::spawn(raise_priority).join().unwrap_or(false)
}

/// Why the dispatcher thread stopped early.
enum Stop {
    ServerDied(String),
    /// The cell's driver is gone (cancelled): nobody will read what is left.
    Abandoned,
}

/// The dispatcher thread: stamps each request at its intended time and hands it to
/// the admitter. On a server death, returns the rest as `ServerDied` records with no
/// dispatch stamp.
fn dispatch_on_thread(
    clock: StudyClock,
    planned: Vec<Dispatched>,
    tx: mpsc::UnboundedSender<Dispatched>,
    exit: watch::Receiver<Option<String>>,
) -> Vec<RequestRecord> {
    let stop = || match exit.borrow().clone() {
        Some(detail) => Some(Stop::ServerDied(detail)),
        None => tx.is_closed().then_some(Stop::Abandoned),
    };
    let mut planned = planned.into_iter();
    while let Some(mut next) = planned.next() {
        match clock.block_until(next.rec.intended_ns, stop) {
            None => {}
            Some(Stop::Abandoned) => return Vec::new(),
            Some(Stop::ServerDied(detail)) => {
                return std::iter::once(next.rec)
                    .chain(planned.map(|p| p.rec))
                    .map(|mut r| {
                        r.failure = Some(Failure::ServerDied { detail: format!("{detail} before dispatch") });
                        r
                    })
                    .collect();
            }
        }
        next.rec.dispatch_ns = Some(clock.now_ns());
        if tx.send(next).is_err() {
            return Vec::new();
        }
    }
    Vec::new()
}

/// Puts `rec` in its slot: record index minus `base`, the first entry's index (a
/// slice of a trace, as a round of an interleaved block drives, starts past 0).
fn place(out: &mut [Option<RequestRecord>], base: u64, rec: RequestRecord) -> Result<(), LoadError> {
    let slot = rec.index.checked_sub(base).and_then(|i| usize::try_from(i).ok()).and_then(|i| out.get_mut(i));
    match slot {
        Some(s @ None) => {
            *s = Some(rec);
            Ok(())
        }
        _ => Err(LoadError::Lost { cell: rec.cell.clone(), index: rec.index }),
    }
}
