//! The mock's ground truth: one JSON line per request (`--ground-truth FILE`,
//! format `harness-mock-truth/1`) with, on CLOCK_MONOTONIC, the connection's accept,
//! the request's arrival (its headers parsed), the start of its service, and for
//! every SSE event the time it was scheduled, the time the answer handed it to the
//! connection, and the time the write that carried it returned from the kernel
//! (`written_ns`, from the connection's own write log: `StampedIo`). Also the
//! lateness of every written event against its schedule, summarized on stop. Owns
//! the record's format, the write log, the attribution of writes to events and the
//! writer thread. Must not decide what is sent or when.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::timer::mono_ns;

/// The ground truth's format tag (the first line of the file).
pub const TRUTH_FORMAT: &str = "harness-mock-truth/1";

/// What an event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Chat's role-only first chunk.
    Role,
    /// A reasoning token (`delta.reasoning_content`).
    Reasoning,
    /// A content token.
    Content,
    /// The usage-only chunk.
    Usage,
    /// `data: [DONE]`.
    Done,
    /// An in-stream error event.
    Error,
    /// A whole non-streamed body or an error body.
    Body,
}

/// One event of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruthEvent {
    pub kind: EventKind,
    /// Tokens it carries (1 for a token event, 0 otherwise).
    pub tokens: u32,
    /// When the schedule put it (none for events sent as soon as they can be).
    pub scheduled_ns: Option<u64>,
    /// When the answer handed it to the connection.
    pub yielded_ns: u64,
    /// When the socket write that carried it returned (none: never written, e.g.
    /// the client had gone).
    pub written_ns: Option<u64>,
}

/// The injected failure of a request, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Injected {
    Http500,
    Reset,
    Stall,
}

/// One request, as the mock saw and answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruthRecord {
    /// The server request id (the `id` of every chunk).
    pub id: String,
    /// Arrival order, from 0 (also the seed of its draws).
    pub n: u64,
    pub route: String,
    pub stream: bool,
    /// The client's address and port.
    pub peer: String,
    /// The request's `X-Request-ID` header, when the client sent one (vLLM bench
    /// and AIPerf do): joins the truth to a peer's own per-request records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// The connection's accept (earlier than `arrival_ns` for a reused connection).
    pub accepted_ns: u64,
    /// The request's headers parsed (the handler started).
    pub arrival_ns: u64,
    /// The whole body read.
    pub body_read_ns: u64,
    /// Out of the queue: service began (none when refused before).
    pub service_start_ns: Option<u64>,
    /// Requests in service or queued when this one arrived (itself excluded).
    pub in_flight_at_arrival: u64,
    pub prompt_tokens: u64,
    pub max_tokens: u32,
    pub output_tokens: u32,
    pub reasoning_tokens: u32,
    pub status: u16,
    pub injected: Option<Injected>,
    pub events: Vec<TruthEvent>,
    /// `complete`, `reset` (injected), `client_gone` (the body was dropped before
    /// its end) or `refused` (400).
    pub outcome: String,
}

impl TruthRecord {
    /// Written token events' `written - scheduled`, in nanoseconds (signed).
    pub fn lateness_ns(&self) -> impl Iterator<Item = i64> + '_ {
        self.events.iter().filter_map(|e| {
            let (s, w) = (e.scheduled_ns?, e.written_ns?);
            Some(w as i64 - s as i64)
        })
    }
}

/// The first line of the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TruthHeader {
    pub format: String,
    pub clock: String,
    /// The spec the mock ran with, as JSON.
    pub spec: serde_json::Value,
    pub pid: u32,
}

/// The socket write completions of one connection, in order (CLOCK_MONOTONIC ns).
#[derive(Debug, Default)]
pub struct WriteLog {
    stamps: Mutex<Vec<u64>>,
}

impl WriteLog {
    fn push(&self, t: u64) {
        if let Ok(mut s) = self.stamps.lock() {
            s.push(t);
        }
    }

    /// The first write completed at or after `t`.
    pub fn first_at_or_after(&self, t: u64) -> Option<u64> {
        let s = self.stamps.lock().ok()?;
        let i = s.partition_point(|&x| x < t);
        s.get(i).copied()
    }

    /// Fills `written_ns` of every event: the first write that returned at or after
    /// the event was handed over (hyper writes what it was handed in the same poll,
    /// before asking the answer for more).
    pub fn attribute(&self, events: &mut [TruthEvent]) {
        for e in events {
            e.written_ns = self.first_at_or_after(e.yielded_ns);
        }
    }
}

/// A connection whose every write is stamped into its `WriteLog`.
pub struct StampedIo<T> {
    pub inner: T,
    pub log: Arc<WriteLog>,
}

impl<T: AsyncRead + Unpin> AsyncRead for StampedIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StampedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            self.log.push(mono_ns());
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            self.log.push(mono_ns());
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Lateness of written token and `[DONE]` events against their schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lateness {
    pub requests: u64,
    pub events: u64,
    /// Nearest-rank percentiles of written - scheduled, microseconds.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
}

impl Lateness {
    pub fn of(values_ns: &mut [i64], requests: u64) -> Lateness {
        values_ns.sort_unstable();
        let pick = |p: f64| -> Option<f64> {
            if values_ns.is_empty() {
                return None;
            }
            let r = ((p / 100.0) * values_ns.len() as f64).ceil().max(1.0) as usize;
            Some(values_ns[r.min(values_ns.len()) - 1] as f64 / 1e3)
        };
        Lateness {
            requests,
            events: values_ns.len() as u64,
            p50_us: pick(50.0),
            p99_us: pick(99.0),
            max_us: pick(100.0),
        }
    }
}

/// A finished answer waiting for its writes to be attributed.
pub struct Finished {
    pub record: TruthRecord,
    pub log: Arc<WriteLog>,
}

/// An answer's writes are attributed once its connection has a write that returned
/// after its last event was handed over (microseconds later on an idle machine),
/// or after this long (a write that never came, e.g. the client had gone).
const SETTLE: Duration = Duration::from_secs(1);

/// What the writer thread receives.
pub enum Msg {
    Answer(Box<Finished>),
    /// Write what is pending and stop (answers still open are not waited for).
    Close,
}

/// The writer thread's handle: send finished answers; `finish` flushes and returns
/// the lateness summary.
pub struct TruthSink {
    tx: Option<mpsc::Sender<Msg>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<Finish>>>,
}

/// What the writer ends with: the lateness and the kept records.
pub type Finish = (Lateness, Vec<TruthRecord>);

impl TruthSink {
    /// Starts the writer (thread `mock-truth`); with `path`, the file is created now
    /// with its header line; with `keep`, the records are also kept in memory and
    /// returned by `finish`. Without either, only the lateness is kept.
    pub fn start(path: Option<&Path>, header: &TruthHeader, keep: bool) -> std::io::Result<TruthSink> {
        let mut file = match path {
            Some(p) => {
                let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(p)?);
                serde_json::to_writer(&mut f, header)?;
                f.write_all(b"\n")?;
                f.flush()?;
                Some((f, p.to_path_buf()))
            }
            None => None,
        };
        let (tx, rx) = mpsc::channel::<Msg>();
        let thread = std::thread::Builder::new().name("mock-truth".into()).spawn(move || {
            let mut pending: std::collections::VecDeque<(u64, Finished)> = Default::default();
            let (mut lateness, mut requests, mut kept) = (Vec::new(), 0u64, Vec::new());
            let mut emit = |f: Finished, file: &mut Option<(std::io::BufWriter<std::fs::File>, PathBuf)>| {
                let mut rec = f.record;
                f.log.attribute(&mut rec.events);
                lateness.extend(rec.lateness_ns());
                requests += 1;
                if let Some((w, _)) = file.as_mut() {
                    serde_json::to_writer(&mut *w, &rec)?;
                    w.write_all(b"\n")?;
                }
                if keep {
                    kept.push(rec);
                }
                Ok::<(), std::io::Error>(())
            };
            let mut open = true;
            while open || !pending.is_empty() {
                match rx.recv_timeout(Duration::from_millis(5)) {
                    Ok(Msg::Close) => open = false,
                    Ok(Msg::Answer(f)) => {
                        let f = *f;
                        let last = f.record.events.iter().map(|e| e.yielded_ns).max().unwrap_or(0);
                        pending.push_back((last, f));
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => open = false,
                }
                let now = mono_ns();
                let settle = SETTLE.as_nanos() as u64;
                while let Some((last, f)) = pending.front() {
                    let written = f.log.first_at_or_after(*last).is_some();
                    if open && !written && now < last + settle {
                        break;
                    }
                    if let Some((_, f)) = pending.pop_front() {
                        emit(f, &mut file)?;
                    }
                }
            }
            if let Some((mut w, _)) = file {
                w.flush()?;
                w.get_ref().sync_all()?;
            }
            Ok((Lateness::of(&mut lateness, requests), kept))
        })?;
        Ok(TruthSink { tx: Some(tx), thread: Some(thread) })
    }

    pub fn sender(&self) -> Option<mpsc::Sender<Msg>> {
        self.tx.clone()
    }

    /// Stops taking answers, attributes and writes every pending one, flushes;
    /// returns the lateness and the kept records.
    pub fn finish(mut self) -> std::io::Result<Finish> {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Msg::Close);
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| std::io::Error::other("the ground-truth writer panicked"))?,
            None => Ok((Lateness::default(), Vec::new())),
        }
    }
}

/// Reads a ground-truth file back (header, records).
pub fn read_truth(path: &Path) -> Result<(TruthHeader, Vec<TruthRecord>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: TruthHeader = serde_json::from_str(lines.next().ok_or("empty ground truth")?)
        .map_err(|e| format!("{}: header: {e}", path.display()))?;
    if header.format != TRUTH_FORMAT {
        return Err(format!("{}: format {:?}, expected {TRUTH_FORMAT}", path.display(), header.format));
    }
    let records = lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{} line {}: {e}", path.display(), i + 2)))
        .collect::<Result<_, _>>()?;
    Ok((header, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(yielded_ns: u64) -> TruthEvent {
        TruthEvent {
            kind: EventKind::Content,
            tokens: 1,
            scheduled_ns: Some(yielded_ns - 5),
            yielded_ns,
            written_ns: None,
        }
    }

    #[test]
    fn writes_are_attributed_to_the_events_they_carried() {
        let log = WriteLog::default();
        for t in [100u64, 210, 300, 450] {
            log.push(t);
        }
        let mut events = vec![event(90), event(200), event(205), event(460)];
        log.attribute(&mut events);
        let written: Vec<Option<u64>> = events.iter().map(|e| e.written_ns).collect();
        assert_eq!(written, [Some(100), Some(210), Some(210), None]);
        let l = Lateness::of(&mut [3_000, 1_000, 2_000, 100_000], 1);
        assert_eq!((l.p50_us, l.p99_us, l.max_us, l.events), (Some(2.0), Some(100.0), Some(100.0), 4));
        assert_eq!(Lateness::of(&mut [], 0).p50_us, None);
    }
}
