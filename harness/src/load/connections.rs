//! How the load generator holds its TCP connections: warm keep-alive connections
//! (the default), opened before a cell's first timed send (`prewarm`), or a fresh
//! connection per request (`Connections::Fresh`, the harness's behaviour before
//! issue 53). Owns the HTTP client builders and the pre-warming. Must not send a
//! timed request or record anything.
//!
//! Why keep-alive: a fresh loopback connect costs a SYN/SYN-ACK/ACK round and an
//! accept in the server before the request is written, and that time sat inside
//! every request's send-to-first-token (the fidelity study measured it as the
//! largest part of the harness's TTFT error, docs/fidelity.md). vLLM bench serve
//! 0.34 (one `aiohttp.TCPConnector`, `force_close=False`, keep-alive 60 s), guidellm
//! 0.8 (one `httpx.AsyncClient` per worker process, unlimited keep-alive
//! connections, 5 s expiry) and AIPerf 0.13 (`--connection-reuse-strategy pooled` by
//! default, keep-alive 300 s) all reuse connections.
//!
//! The race that once made the harness open a fresh connection per request (a
//! server closing an idle keep-alive socket just as the client reuses it; llama.cpp's
//! server closes idle sockets after 5 s, as does uvicorn under vLLM) is avoided by
//! never reusing a connection idle for `KEEP_ALIVE_IDLE` or longer, well under those
//! servers' 5 s; a connection the server closed before the request was written is
//! retried by hyper on a new one.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};

use super::{LoadError, RequestCtx};
use crate::trace::TraceEntry;

/// An idle pooled connection is dropped, never reused, after this long.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(2);

/// Seconds of arrivals an open-loop cell pre-warms connections for
/// (`warm_connections`): rate x this, at most the cell's requests.
pub const OPEN_LOOP_WARM_S: f64 = 0.1;

/// Most connections pre-warmed for one cell.
pub const MAX_WARM: usize = 20_000;

/// How timed requests get their TCP connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Connections {
    /// Pooled keep-alive connections, pre-warmed before the first timed send.
    #[default]
    KeepAlive,
    /// A fresh connection for every request (its connect inside the request's times).
    Fresh,
}

impl Connections {
    pub fn name(self) -> &'static str {
        match self {
            Connections::KeepAlive => "keep-alive",
            Connections::Fresh => "fresh",
        }
    }
}

fn builder(headers: HeaderMap, connections: Connections) -> reqwest::ClientBuilder {
    let b = reqwest::Client::builder().default_headers(headers).no_proxy().tcp_nodelay(true);
    match connections {
        Connections::KeepAlive => b.pool_idle_timeout(KEEP_ALIVE_IDLE),
        Connections::Fresh => b.pool_max_idle_per_host(0),
    }
}

/// The HTTP client every request of one server invocation shares: no proxy, no
/// client-side timeouts (the plan's request timeout is applied per request), no
/// limit on connections, `headers` added to every request (an arm's
/// `Authorization` and extra headers, `arm::arm_headers`), connections held as
/// `connections` says.
pub fn client(headers: HeaderMap, connections: Connections) -> Result<reqwest::Client, LoadError> {
    builder(headers, connections).build().map_err(|e| LoadError::Client(e.to_string()))
}

/// One `client` per source address, each binding its sockets to that address
/// (`RequestCtx::source_clients`): past the ephemeral-port limit of one source
/// address, e.g. 127.0.0.1 to 127.0.0.4 towards a loopback server.
pub fn clients_from(
    headers: &HeaderMap,
    sources: &[IpAddr],
    connections: Connections,
) -> Result<Vec<reqwest::Client>, LoadError> {
    sources
        .iter()
        .map(|ip| {
            builder(headers.clone(), connections)
                .local_address(*ip)
                .build()
                .map_err(|e| LoadError::Client(e.to_string()))
        })
        .collect()
}

/// Connections to open before a cell's first timed send: none for `Fresh`;
/// otherwise the cell's intended arrivals in its first `OPEN_LOOP_WARM_S` (a closed
/// loop's are all at 0: its requests), at most `concurrency` (a closed loop's, or an
/// open loop's cap) and `MAX_WARM`.
pub fn warm_connections(connections: Connections, concurrency: Option<u32>, entries: &[TraceEntry]) -> usize {
    let Some(first) = entries.iter().map(|e| e.offset_ns).min() else { return 0 };
    if connections == Connections::Fresh {
        return 0;
    }
    let horizon = first.saturating_add((OPEN_LOOP_WARM_S * 1e9) as u64);
    let early = entries.iter().filter(|e| e.offset_ns <= horizon).count();
    early.min(concurrency.map_or(usize::MAX, |c| c.max(1) as usize)).min(MAX_WARM)
}

/// Opens `n` connections to `ctx`'s server and leaves them idle in the pool(s) of
/// `ctx` (spread over its source clients as `for_request` spreads requests):
/// `n` untimed `GET /v1/models` in flight at once, each holding its own
/// connection until answered. Best effort: a failure here is not a failure of any
/// request (the timed requests report their own).
pub async fn prewarm(ctx: &RequestCtx, n: usize) {
    if n == 0 {
        return;
    }
    let Ok(url) = reqwest::Url::parse(&ctx.url).and_then(|u| u.join(crate::protocol::routes::MODELS_PATH)) else {
        return;
    };
    let clients: Vec<reqwest::Client> = (0..n as u64).map(|i| ctx.for_request(i).client).collect();
    let gets = clients.into_iter().map(|c| {
        let url = url.clone();
        async move {
            if let Ok(resp) = c.get(url).timeout(Duration::from_secs(10)).send().await {
                // Read to the end, so the connection goes back to the pool.
                let _ = resp.bytes().await;
            }
        }
    });
    futures_util::future::join_all(gets).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offsets_ms: &[u64]) -> Vec<TraceEntry> {
        offsets_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| TraceEntry {
                index: i as u64,
                offset_ns: ms * 1_000_000,
                prompt: 0,
                input_length: None,
                output_length: None,
            })
            .collect()
    }

    #[test]
    fn warms_a_closed_loops_concurrency_and_an_open_loops_first_arrivals() {
        let closed = at(&[0; 50]);
        assert_eq!(warm_connections(Connections::KeepAlive, Some(8), &closed), 8);
        assert_eq!(warm_connections(Connections::KeepAlive, Some(80), &closed), 50);
        // Open loop: the arrivals at or before 100 ms after the first.
        let open = at(&[5, 20, 60, 105, 106, 300]);
        assert_eq!(warm_connections(Connections::KeepAlive, None, &open), 4);
        assert_eq!(warm_connections(Connections::KeepAlive, Some(2), &open), 2);
        assert_eq!(warm_connections(Connections::Fresh, Some(8), &closed), 0);
        assert_eq!(warm_connections(Connections::KeepAlive, None, &[]), 0);
        assert_eq!(warm_connections(Connections::KeepAlive, None, &at(&[0; 30_000])), MAX_WARM);
        assert_eq!(serde_json::to_value(Connections::KeepAlive).unwrap(), "keep-alive");
    }
}
