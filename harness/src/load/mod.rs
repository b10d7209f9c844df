//! Load generation: the study's one monotonic clock, request bodies, the open-loop
//! dispatcher and closed-loop semaphore, and the SSE recorder that turns each request
//! into an `evidence::RequestRecord`; multi-turn sessions (`session`). Owns everything between "this cell's trace" and
//! "these records"; and the session's measurement floor (`floor`, against an
//! in-process `mock`). Must not start or stop servers, write files or compute
//! measures (`arm`, `evidence` and `metrics` do).

mod clock;
mod connections;
mod dispatch;
mod floor;
mod payload;
mod recorder;
mod session;
mod sse;

#[cfg(test)]
mod tests;

pub use clock::{SPIN_NS, StudyClock};
pub use connections::{
    Connections, KEEP_ALIVE_IDLE, MAX_WARM, OPEN_LOOP_WARM_S, client as http_client_for,
    clients_from as http_clients_from, prewarm, warm_connections,
};
pub use dispatch::{
    CellDrive, Counters, PreparedRequest, drive_cell, raise_priority, realtime_dispatch_available, skeleton,
};
pub use floor::{FLOOR_DEFAULT_RATE, measure_floor, planned_rate};
pub use payload::{chat_body, prepare, stream_body, stream_body_with, warmup_body, warmup_chat_bodies};
pub use recorder::{DEATH_GRACE, REQUEST_ID, RequestCtx, chain as error_chain, execute, exited};
pub use session::SessionScript;
pub use sse::{Chunk, parse_chunk};

/// Failures of the load layer itself (request failures are records, not errors).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cell {cell}: trace entry {index} names prompt {prompt}, which the panel does not have")]
    UnknownPrompt { cell: String, index: u64, prompt: u64 },
    #[error("cell {cell}: request {index} was recorded twice or not at all (a harness bug)")]
    Lost { cell: String, index: u64 },
    #[error("a request task failed: {0} (a harness bug)")]
    Task(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// The load generator's default client: no extra headers, warm keep-alive
/// connections (`Connections::KeepAlive`).
pub fn http_client() -> Result<reqwest::Client, LoadError> {
    http_client_for(reqwest::header::HeaderMap::new(), Connections::KeepAlive)
}

/// The ephemeral ports one source address has towards one destination
/// (`net.ipv4.ip_local_port_range`, both ends included); `None` where unreadable.
pub fn ephemeral_ports() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<u32>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    hi.checked_sub(lo).map(|d| d + 1)
}
