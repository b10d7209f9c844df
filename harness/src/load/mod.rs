//! Load generation: the study's one monotonic clock, request bodies, the open-loop
//! dispatcher and closed-loop semaphore, and the SSE recorder that turns each request
//! into a `record::RequestRecord`; multi-turn sessions (`session`). Owns everything between "this cell's trace" and
//! "these records"; and the session's measurement floor (`floor`, against an
//! in-process `mock`). Must not start or stop servers, write files or compute
//! measures (`arm`, `evidence` and `metrics` do).

mod clock;
mod dispatch;
mod floor;
mod payload;
mod recorder;
mod session;
mod sse;

#[cfg(test)]
mod tests;

pub use clock::{SPIN_NS, StudyClock};
pub use dispatch::{
    CellDrive, Counters, PreparedRequest, drive_cell, raise_priority, realtime_dispatch_available, skeleton,
};
pub use floor::{FLOOR_DEFAULT_RATE, measure_floor, planned_rate};
pub use payload::{chat_body, prepare, stream_body, stream_body_with, warmup_body, warmup_chat_bodies};
pub use recorder::{DEATH_GRACE, RequestCtx, chain as error_chain, execute, exited};
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

/// The HTTP client every request of one server invocation shares: no proxy, no
/// client-side timeouts (the plan's request timeout is applied per request), no
/// limit on connections, and a fresh connection for every request, as vLLM's
/// benchmark client does. Reusing idle keep-alive connections races with servers
/// that close them (llama.cpp's server closes a connection after a number of
/// requests): the reused socket dies before the response and an artefact of the
/// client would be recorded as a server failure. The loopback connect is inside
/// every request's send-to-first-token time, the same for every arm.
pub fn http_client() -> Result<reqwest::Client, LoadError> {
    http_client_with(reqwest::header::HeaderMap::new())
}

/// `http_client` with `headers` added to every request it sends (an arm's
/// `Authorization` and extra headers, `arm::arm_headers`).
pub fn http_client_with(headers: reqwest::header::HeaderMap) -> Result<reqwest::Client, LoadError> {
    client_builder(headers).build().map_err(|e| LoadError::Client(e.to_string()))
}

fn client_builder(headers: reqwest::header::HeaderMap) -> reqwest::ClientBuilder {
    reqwest::Client::builder().default_headers(headers).no_proxy().pool_max_idle_per_host(0).tcp_nodelay(true)
}

/// One `http_client_with` per source address, each binding its sockets to that
/// address (`RequestCtx::source_clients`): past the ephemeral-port limit of one
/// source address, e.g. 127.0.0.1 to 127.0.0.4 towards a loopback server.
pub fn http_clients_from(
    headers: &reqwest::header::HeaderMap,
    sources: &[std::net::IpAddr],
) -> Result<Vec<reqwest::Client>, LoadError> {
    sources
        .iter()
        .map(|ip| {
            client_builder(headers.clone()).local_address(*ip).build().map_err(|e| LoadError::Client(e.to_string()))
        })
        .collect()
}

/// The ephemeral ports one source address has towards one destination
/// (`net.ipv4.ip_local_port_range`, both ends included); `None` where unreadable.
pub fn ephemeral_ports() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<u32>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    hi.checked_sub(lo).map(|d| d + 1)
}
