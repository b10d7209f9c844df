//! The mock's HTTP side: the routes (`/v1/completions`, `/v1/chat/completions`,
//! streamed and whole; `/v1/models`, `/health`, `/version`, `/metrics` with vLLM's
//! names), the FIFO queue of at most N in service, each answer's schedule (TTFT
//! from the start of service, then one ITL per token, each drawn for the request
//! from the spec; schedules are absolute, so a late event does not delay the next),
//! the injected failures, and the ground-truth record of each answer. Owns the
//! listener (every connection's writes stamped: `truth::StampedIo`) and the
//! running server's handle. Must not bind before the spec is valid.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::{IncomingStream, Listener};
use futures_util::stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::dist::{RequestRng, Sampler, TimeSampler};
use super::metrics::Metrics;
use super::spec::MockSpec;
use super::timer::{Timer, mono_ns};
use super::truth::{EventKind, Finished, Injected, Msg, StampedIo, TruthEvent, TruthRecord, WriteLog};
use super::wire::{self, Ask, Framer, Route, TokenKind};
use super::{MockError, MockOptions};

/// Largest request body read (a long token-ID prompt fits).
const BODY_LIMIT: usize = 64 << 20;

/// What the handler knows of its connection.
#[derive(Clone, Debug)]
pub struct ConnMeta {
    pub peer: SocketAddr,
    pub accepted_ns: u64,
    pub log: Arc<WriteLog>,
}

/// TCP listener whose connections have TCP_NODELAY and a write log.
pub struct StampedListener(tokio::net::TcpListener);

impl Listener for StampedListener {
    type Io = StampedIo<tokio::net::TcpStream>;
    type Addr = ConnMeta;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((tcp, peer)) => {
                    let accepted_ns = mono_ns();
                    // Without it each small frame may wait for the client's delayed ACK.
                    let _ = tcp.set_nodelay(true);
                    let log = Arc::new(WriteLog::default());
                    return (StampedIo { inner: tcp, log: log.clone() }, ConnMeta { peer, accepted_ns, log });
                }
                // Out of descriptors or a connection reset while queued: wait, retry.
                Err(e) => {
                    eprintln!("harness mock: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<ConnMeta> {
        Ok(ConnMeta { peer: self.0.local_addr()?, accepted_ns: 0, log: Arc::default() })
    }
}

impl Connected<IncomingStream<'_, StampedListener>> for ConnMeta {
    fn connect_info(stream: IncomingStream<'_, StampedListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Everything the handlers share.
pub struct Shared {
    pub spec: MockSpec,
    ttft: TimeSampler,
    itl: TimeSampler,
    output: Option<Sampler>,
    timer: Timer,
    queue: Option<Arc<Semaphore>>,
    next_n: AtomicU64,
    /// Arrived and not finished (queued or in service).
    in_flight: AtomicU64,
    pub in_service: AtomicU64,
    pub waiting: AtomicU64,
    pub metrics: Metrics,
    sink: Option<mpsc::Sender<Msg>>,
}

impl Shared {
    pub fn new(spec: MockSpec, timer: Timer, sink: Option<mpsc::Sender<Msg>>) -> Result<Shared, MockError> {
        spec.validate()?;
        Ok(Shared {
            ttft: TimeSampler::new(&spec.ttft, "ttft")?,
            itl: TimeSampler::new(&spec.itl, "itl")?,
            output: spec.output_tokens.as_ref().map(|d| Sampler::new(d, "output_tokens")).transpose()?,
            queue: spec.queue.as_ref().map(|q| Arc::new(Semaphore::new(q.max_in_service.min(1 << 28) as usize))),
            timer,
            next_n: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            in_service: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            metrics: Metrics::default(),
            sink,
            spec,
        })
    }
}

/// Decrements a counter when dropped.
struct Count(Arc<Shared>, fn(&Shared) -> &AtomicU64);

impl Count {
    fn up(shared: &Arc<Shared>, which: fn(&Shared) -> &AtomicU64) -> (Count, u64) {
        let before = which(shared).fetch_add(1, Ordering::Relaxed);
        (Count(shared.clone(), which), before)
    }
}

impl Drop for Count {
    fn drop(&mut self) {
        (self.1)(&self.0).fetch_sub(1, Ordering::Relaxed);
    }
}

/// The routes, on a shared state.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(Route::Completions.path(), post(|s, c, r| answer(s, c, r, Route::Completions)))
        .route(Route::Chat.path(), post(|s, c, r| answer(s, c, r, Route::Chat)))
        .route(crate::protocol::routes::MODELS_PATH, get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route(
            "/version",
            get(|| async {
                axum::Json(serde_json::json!({"version": env!("CARGO_PKG_VERSION"), "server": "harness-mock"}))
            }),
        )
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn models(State(s): State<Arc<Shared>>) -> Response {
    let m = &s.spec.model;
    axum::Json(serde_json::json!({"object": "list", "data": [{"id": m, "object": "model", "created": 0,
        "owned_by": "harness-mock", "root": m, "max_model_len": 1_048_576}]}))
    .into_response()
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    let text = s.metrics.render(&s.spec.model, s.in_service.load(Ordering::Relaxed), s.waiting.load(Ordering::Relaxed));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

/// The answer being sent: its schedule state and its truth record, which it hands
/// to the ground-truth writer when dropped (finished, reset, or abandoned by hyper
/// because the client went away).
struct Answer {
    shared: Arc<Shared>,
    record: TruthRecord,
    log: Arc<WriteLog>,
    rng: RequestRng,
    id: String,
    route: Route,
    ask: Ask,
    finish: &'static str,
    /// Scheduled time of the next token.
    next_at: u64,
    /// Next token to send.
    k: u32,
    /// Frames to send at once before the next scheduled one (the first token after
    /// chat's role, usage, [DONE]): kind, tokens, scheduled time, bytes.
    tail: std::collections::VecDeque<(EventKind, u32, Option<u64>, Bytes)>,
    done: bool,
    _in_flight: Count,
    _service: Count,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Answer {
    fn framer(&self) -> Framer<'_> {
        Framer {
            route: self.route,
            id: &self.id,
            model: &self.shared.spec.model,
            return_token_ids: self.ask.return_token_ids,
            reasoning_field: self.shared.spec.reasoning.as_ref().map_or("reasoning_content", |r| r.field.as_str()),
        }
    }

    fn push_event(&mut self, kind: EventKind, tokens: u32, scheduled_ns: Option<u64>) {
        self.record.events.push(TruthEvent { kind, tokens, scheduled_ns, yielded_ns: mono_ns(), written_ns: None });
    }

    fn in_service(&self) -> u64 {
        self.shared.in_service.load(Ordering::Relaxed)
    }

    /// The next frame of a streamed answer, at its time; `None` at the end.
    async fn next_frame(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if let Some((kind, tokens, scheduled, bytes)) = self.tail.pop_front() {
            self.push_event(kind, tokens, scheduled);
            if kind == EventKind::Done {
                self.done = true;
            }
            return Some(Ok(bytes));
        }
        if self.done || self.k >= self.record.output_tokens {
            return None;
        }
        let errors = &self.shared.spec.errors;
        if self.record.injected == Some(Injected::Reset) && self.k == errors.after_tokens.min(self.record.output_tokens)
        {
            self.record.outcome = "reset".into();
            self.done = true;
            return Some(Err(std::io::Error::other("injected reset")));
        }
        let at = self.next_at;
        self.shared.timer.at(at).await;
        let k = self.k;
        let kind = if k < self.record.reasoning_tokens { TokenKind::Reasoning } else { TokenKind::Content };
        let last = k + 1 == self.record.output_tokens;
        let frame = self.framer().token(k, kind, last.then_some(self.finish));
        let event = if kind == TokenKind::Reasoning { EventKind::Reasoning } else { EventKind::Content };
        if k == 0 && self.route == Route::Chat {
            // vLLM's chat stream opens with the role, sent with the first token.
            let role = self.framer().role();
            self.push_event(EventKind::Role, 0, Some(at));
            self.tail.push_back((event, 1, Some(at), frame));
            self.record_token_then_schedule(at, last);
            return Some(Ok(role));
        }
        self.push_event(event, 1, Some(at));
        self.record_token_then_schedule(at, last);
        Some(Ok(frame))
    }

    /// After token k at `at`: schedule token k + 1, or queue the usage and `[DONE]`.
    fn record_token_then_schedule(&mut self, at: u64, last: bool) {
        self.k += 1;
        if self.k == 1 {
            self.shared.metrics.ttft(at.saturating_sub(self.record.arrival_ns));
        }
        if last {
            if self.ask.include_usage {
                let f = self.framer().usage(
                    self.record.prompt_tokens,
                    self.record.output_tokens,
                    self.record.reasoning_tokens,
                );
                self.tail.push_back((EventKind::Usage, 0, None, f));
            }
            self.tail.push_back((EventKind::Done, 0, Some(at), Bytes::from_static(wire::DONE)));
            return;
        }
        let in_service = self.in_service();
        let mut gap = self.shared.itl.draw_ns(&mut self.rng, self.record.prompt_tokens, in_service);
        let errors = &self.shared.spec.errors;
        if self.record.injected == Some(Injected::Stall) && self.k == errors.after_tokens {
            gap += (errors.stall_ms * 1e6) as u64;
        }
        self.next_at = at + gap;
    }

    /// A whole (non-streamed) answer: waits for the last token's time.
    async fn whole(&mut self) -> Response {
        let mut at = self.next_at;
        for k in 1..self.record.output_tokens {
            let in_service = self.in_service();
            let mut gap = self.shared.itl.draw_ns(&mut self.rng, self.record.prompt_tokens, in_service);
            if self.record.injected == Some(Injected::Stall) && k == self.shared.spec.errors.after_tokens {
                gap += (self.shared.spec.errors.stall_ms * 1e6) as u64;
            }
            at += gap;
        }
        self.shared.timer.at(at).await;
        self.shared.metrics.ttft(self.next_at.saturating_sub(self.record.arrival_ns));
        let body = self.framer().whole(
            &self.record_prompts(),
            self.record.output_tokens,
            self.record.reasoning_tokens,
            self.finish,
        );
        self.push_event(EventKind::Body, self.record.output_tokens, Some(at));
        self.k = self.record.output_tokens;
        self.done = true;
        json_response(StatusCode::OK, body)
    }

    fn record_prompts(&self) -> Vec<u64> {
        self.ask.prompt_tokens.clone()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        let complete = self.done && self.record.outcome.is_empty();
        if complete {
            self.record.outcome = "complete".into();
            let batch = self.ask.prompt_tokens.len() as u64;
            self.shared.metrics.finished(
                self.record.prompt_tokens,
                u64::from(self.record.output_tokens) * batch,
                self.finish,
                mono_ns().saturating_sub(self.record.arrival_ns),
            );
        } else if self.record.outcome.is_empty() {
            self.record.outcome = "client_gone".into();
        }
        if let Some(sink) = &self.shared.sink {
            let record = std::mem::replace(&mut self.record, empty_record());
            let _ = sink.send(Msg::Answer(Box::new(Finished { record, log: self.log.clone() })));
        }
    }
}

fn empty_record() -> TruthRecord {
    TruthRecord {
        id: String::new(),
        n: 0,
        route: String::new(),
        stream: false,
        peer: String::new(),
        client_request_id: None,
        accepted_ns: 0,
        arrival_ns: 0,
        body_read_ns: 0,
        service_start_ns: None,
        in_flight_at_arrival: 0,
        prompt_tokens: 0,
        max_tokens: 0,
        output_tokens: 0,
        reasoning_tokens: 0,
        status: 0,
        injected: None,
        events: Vec::new(),
        outcome: String::new(),
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(conn): ConnectInfo<ConnMeta>,
    req: Request,
    route: Route,
) -> Response {
    let arrival_ns = mono_ns();
    let n = shared.next_n.fetch_add(1, Ordering::Relaxed);
    let (in_flight, before) = Count::up(&shared, |s| &s.in_flight);
    let id = wire::request_id(route, n);
    let client_request_id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = axum::body::to_bytes(req.into_body(), BODY_LIMIT).await.unwrap_or_default();
    let mut record = TruthRecord {
        id: id.clone(),
        n,
        route: route.path().into(),
        peer: conn.peer.to_string(),
        client_request_id,
        accepted_ns: conn.accepted_ns,
        arrival_ns,
        body_read_ns: mono_ns(),
        in_flight_at_arrival: before,
        ..empty_record()
    };
    let ask = match wire::read_ask(route, &body) {
        Ok(a) => a,
        Err(refusal) => {
            record.status = 400;
            record.outcome = "refused".into();
            let body = wire::error_body(&refusal.message, "BadRequestError", refusal.param, 400);
            record.events.push(TruthEvent {
                kind: EventKind::Body,
                tokens: 0,
                scheduled_ns: None,
                yielded_ns: mono_ns(),
                written_ns: None,
            });
            if let Some(sink) = &shared.sink {
                let _ = sink.send(Msg::Answer(Box::new(Finished { record, log: conn.log.clone() })));
            }
            drop(in_flight);
            return json_response(StatusCode::BAD_REQUEST, body);
        }
    };
    let spec = &shared.spec;
    let mut rng = RequestRng::new(spec.seed, n);
    let errors = &spec.errors;
    let u = rng.unit();
    let injected = if u < errors.http_500 {
        Some(Injected::Http500)
    } else if u < errors.http_500 + errors.reset {
        Some(Injected::Reset)
    } else if u < errors.http_500 + errors.reset + errors.stall {
        Some(Injected::Stall)
    } else {
        None
    };
    let max_tokens = ask.max_tokens.unwrap_or(spec.default_max_tokens);
    let output_tokens = match (&shared.output, ask.ignore_eos) {
        (Some(d), false) => (d.draw(&mut rng).round() as u64).clamp(1, u64::from(max_tokens)) as u32,
        _ => max_tokens,
    };
    let reasoning_tokens = match &spec.reasoning {
        Some(r) if route == Route::Chat || r.on_completions => r.tokens.min(output_tokens),
        _ => 0,
    };
    let prompt_tokens: u64 = ask.prompt_tokens.iter().sum();
    record.stream = ask.stream;
    record.prompt_tokens = prompt_tokens;
    record.max_tokens = max_tokens;
    record.output_tokens = output_tokens;
    record.reasoning_tokens = reasoning_tokens;
    record.injected = injected;
    if injected == Some(Injected::Http500) {
        record.status = 500;
        record.outcome = "injected_500".into();
        record.events.push(TruthEvent {
            kind: EventKind::Body,
            tokens: 0,
            scheduled_ns: None,
            yielded_ns: mono_ns(),
            written_ns: None,
        });
        if let Some(sink) = &shared.sink {
            let _ = sink.send(Msg::Answer(Box::new(Finished { record, log: conn.log.clone() })));
        }
        let body =
            wire::error_body("injected failure (harness mock [errors] http_500)", "InternalServerError", None, 500);
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, body);
    }
    // The queue: FIFO (tokio's semaphore is fair), at most N in service.
    let permit = match &shared.queue {
        Some(q) => {
            let (_waiting, _) = Count::up(&shared, |s| &s.waiting);
            q.clone().acquire_owned().await.ok()
        }
        None => None,
    };
    let (service, in_service_before) = Count::up(&shared, |s| &s.in_service);
    let start = mono_ns();
    record.service_start_ns = Some(start);
    record.status = 200;
    let ttft = shared.ttft.draw_ns(&mut rng, prompt_tokens, in_service_before + 1);
    let finish = if output_tokens == max_tokens { "length" } else { "stop" };
    let stream = ask.stream;
    let mut answer = Answer {
        shared: shared.clone(),
        record,
        log: conn.log.clone(),
        rng,
        id,
        route,
        ask,
        finish,
        next_at: start + ttft,
        k: 0,
        tail: Default::default(),
        done: false,
        _in_flight: in_flight,
        _service: service,
        _permit: permit,
    };
    if !stream {
        return answer.whole().await;
    }
    let frames = stream::unfold(answer, |mut a| async move { a.next_frame().await.map(|f| (f, a)) });
    let mut resp = Response::new(Body::from_stream(frames));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache"));
    resp
}

/// A running mock: its address and how to stop it.
pub struct RunningMock {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

impl RunningMock {
    /// Stops accepting, lets open answers end for up to `grace`, then aborts them.
    pub async fn stop(mut self, grace: std::time::Duration) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(grace, &mut self.served).await.is_err() {
            self.served.abort();
        }
    }
}

/// Binds and serves on the current runtime.
pub async fn start(opts: &MockOptions, shared: Arc<Shared>) -> Result<RunningMock, MockError> {
    let addr = SocketAddr::new(opts.host, opts.port);
    let tcp = tokio::net::TcpListener::bind(addr).await.map_err(|e| MockError::Bind { addr, error: e.to_string() })?;
    let addr = tcp.local_addr().map_err(|e| MockError::Bind { addr, error: e.to_string() })?;
    let app = router(shared.clone()).into_make_service_with_connect_info::<ConnMeta>();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        let serve = axum::serve(StampedListener(tcp), app).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = serve.await {
            eprintln!("harness mock: the server stopped: {e}");
        }
    });
    Ok(RunningMock { addr, shared, stop: Some(stop), served })
}
