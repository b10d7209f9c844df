//! The HTTP/1.1 accept loop (hyper's connection builder rather than
//! `axum::serve`, which sets no timer and so no timeouts). It owns connection
//! lifetimes: TCP_NODELAY on every socket, a header-read timeout (a client that
//! has not sent a whole request head in time is disconnected), an idle
//! keep-alive timeout (a connection with no bytes in or out for that long stops
//! keeping alive: closed at once when between requests, after its response
//! otherwise), a connection cap (`--max-connections`: a connection accepted
//! while that many are open is closed at once, so stalled clients cannot pile
//! up sockets and tasks without bound), and graceful shutdown (stop accepting,
//! let every connection finish its in-flight exchange, then return). The
//! body-read timeout is applied where bodies are read (`state::read_body`),
//! which can answer 408.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` resolves and every connection
/// has finished.
pub async fn serve(listener: TcpListener, app: Router, limits: ConnLimits, shutdown: impl Future<Output = ()>) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let mut refused = Refusals::default();
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // e.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refused.refuse(tcp, limits.max_connections);
            continue;
        };
        // Every SSE event is a small write: without TCP_NODELAY, Nagle's
        // algorithm and the client's delayed ACK can hold an event back ~40 ms.
        let _ = tcp.set_nodelay(true);
        let conn = Connection {
            http: http.clone(),
            app: app.clone(),
            limits,
            stop: stop_rx.clone(),
            done: done_tx.clone(),
            _permit: permit,
        };
        tokio::spawn(conn.run(tcp));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(done_tx);
    // Every connection task holds a sender; all gone means all finished.
    let _ = done_rx.recv().await;
}

/// Connections closed at accept because `max_connections` were open; warns at
/// most once a second, so a flood of them does not flood the log.
#[derive(Default)]
struct Refusals {
    since_warning: u64,
    warned: Option<Instant>,
}

impl Refusals {
    fn refuse(&mut self, tcp: TcpStream, max: usize) {
        drop(tcp);
        self.since_warning += 1;
        if self.warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            tracing::warn!("{max} connections open (--max-connections {max}): closed {} more", self.since_warning);
            self.since_warning = 0;
            self.warned = Some(Instant::now());
        }
    }
}

/// Raises the soft open-file limit toward the hard one so that
/// `max_connections` sockets fit beside the server's own files; warns when
/// they cannot (accepts past the limit fail and wait in the backlog instead
/// of being closed).
#[cfg(unix)]
pub fn raise_fd_limit(max_connections: usize) {
    const OWN_FILES: u64 = 256;
    let want = (max_connections as u64).saturating_add(OWN_FILES);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= want {
            return;
        }
        let raised = libc::rlimit { rlim_cur: want.min(lim.rlim_max), rlim_max: lim.rlim_max };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            lim = raised;
        }
    }
    if lim.rlim_cur < want {
        tracing::warn!(
            "the open-file limit ({}) is below --max-connections ({max_connections}) plus {OWN_FILES} for the server",
            lim.rlim_cur
        );
    }
}

#[cfg(not(unix))]
pub fn raise_fd_limit(_max_connections: usize) {}

struct Connection {
    http: hyper::server::conn::http1::Builder,
    app: Router,
    limits: ConnLimits,
    stop: tokio::sync::watch::Receiver<bool>,
    done: tokio::sync::mpsc::Sender<()>,
    /// This connection's place under `max_connections`, given back on drop.
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run(mut self, tcp: TcpStream) {
        let started = Instant::now();
        let last = Arc::new(AtomicU64::new(0));
        let io = TokioIo::new(Tracked { inner: tcp, started, last: last.clone() });
        let conn = self.http.serve_connection(io, TowerToHyperService::new(self.app.clone()));
        let mut conn = std::pin::pin!(conn);
        let keep_alive = self.limits.keep_alive_timeout;
        let mut tick = tokio::time::interval((keep_alive / 4).max(Duration::from_millis(10)));
        let mut closing = *self.stop.borrow();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                    break;
                }
                _ = self.stop.changed(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = tick.tick(), if !closing => {
                    let idle = started.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                    if idle >= keep_alive {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        }
        drop(self.done);
    }
}

/// A TCP stream that records when bytes last moved (milliseconds since `started`).
struct Tracked {
    inner: TcpStream,
    started: Instant,
    last: Arc<AtomicU64>,
}

impl Tracked {
    fn touch(&self) {
        self.last.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
