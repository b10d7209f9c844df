//! One server invocation of one arm, the lifecycle every command shares (`run`,
//! `qualify`, `compare`, `accept --plan`): spawn the expanded argv (or take an
//! external arm as it is), wait for its health path (cold start = spawn to the first
//! 200), sample `/metrics` and memory once a second when asked, send the plan's
//! warmup call when asked, and stop it with SIGTERM to its group and SIGKILL after
//! the arm's `stop_grace_s` from the plan. Owns the order of these steps and the
//! facts they produce (`Startup`, `Stopped`; the records they fill are
//! `evidence`'s). Must not write evidence files (each command chooses which files
//! it writes), send timed requests, or decide when to stop.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

use crate::protocol::routes::{COMPLETIONS_PATH, METRICS_PATH};
use axum::body::Bytes;

use super::health::WarmupCalls;
use super::{ArmError, Sampler, SamplerSpec, ServerProcess};
use crate::evidence::{CheckResult, ExitInfo, OversizedAnswer, ServerIdentity, StopRecord, WarmupRecord};
use crate::load::{Connections, StudyClock, http_client_for, warmup_body, warmup_chat_bodies};
use crate::plan::{Arm, ArmCommand, Endpoint, Plan};
use crate::trace::{ChatMessage, Panel};

/// Stands in for a wait too long for a `Duration` (validated plans have none).
const LONGEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// What the start of one invocation recorded, whichever way it went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Startup {
    pub pid: Option<u32>,
    /// Study time just before the spawn (external arm: before the first poll).
    pub spawned_ns: u64,
    /// Study time of the first 200 from the health path.
    pub healthy_ns: Option<u64>,
    /// Health polls up to that 200 (0 when it never came).
    pub health_polls: u64,
    /// Cold start: `healthy_ns - spawned_ns`, in seconds.
    pub startup_s: Option<f64>,
}

/// The largest identity answer read whole (`/version`, `/v1/models`, `/props`): 1 MiB.
pub const ANSWER_MAX_BYTES: usize = 1 << 20;
/// The largest `/metrics` answer the identity checks read whole: 8 MiB.
pub const METRICS_MAX_BYTES: usize = 8 << 20;
/// The first bytes of an oversized answer kept in the evidence.
const OVERSIZED_HEAD_BYTES: usize = 4 << 10;

/// How long the identity checks wait for a log line the server has not flushed yet.
const LOG_LINE_WAIT: Duration = Duration::from_secs(3);

/// What stopping an invocation found and did.
#[derive(Debug, Clone, PartialEq)]
pub struct Stopped {
    /// `VmHWM` of the server PID read just before the stop (the peak resident set).
    pub peak_rss_bytes: Option<u64>,
    /// Lines the sampler wrote (`scrapes.jsonl`, `memory.jsonl`); 0 without one.
    pub scrapes: u64,
    pub memory_samples: u64,
    /// How the process had ended when the stop began, if it had.
    pub exited_before_stop: Option<ExitInfo>,
    /// `None` for an external arm (never stopped) or a spawn that failed.
    pub stop: Option<StopRecord>,
}

/// One server invocation. Dropping it without `stop` kills the server's group.
pub struct Invocation {
    arm: String,
    base_url: String,
    health_url: String,
    startup_timeout: Duration,
    grace: Duration,
    clock: StudyClock,
    client: reqwest::Client,
    command: Option<ArmCommand>,
    log: PathBuf,
    process: Option<ServerProcess>,
    sampler: Option<Sampler>,
    phase: watch::Sender<String>,
    startup: Startup,
}

impl Invocation {
    /// An invocation of `arm` from its expanded `command` (`None`: external arm) with
    /// its output appended to `log`. Starts nothing yet. Every request through its
    /// client (health polls, warmup, scrapes, timed requests) carries the arm's
    /// headers: `api_key_env`'s key, read from the environment now, and `headers`.
    pub fn new(
        arm: &Arm,
        command: Option<ArmCommand>,
        log: PathBuf,
        clock: StudyClock,
    ) -> Result<Invocation, ArmError> {
        let headers = super::access::arm_headers(arm, |v| std::env::var(v).ok())?;
        let client = http_client_for(headers, Connections::KeepAlive).map_err(|e| ArmError::Client(e.to_string()))?;
        let base_url = arm.base_url();
        Ok(Invocation {
            arm: arm.name.clone(),
            health_url: format!("{base_url}{}", arm.health),
            base_url,
            startup_timeout: Duration::try_from_secs_f64(arm.startup_timeout_s).unwrap_or(LONGEST_WAIT),
            grace: arm.stop_grace(),
            clock,
            client,
            command,
            log,
            process: None,
            sampler: None,
            phase: watch::channel("idle".to_string()).0,
            startup: Startup::default(),
        })
    }

    /// Spawns the server (an external arm: only notes the time).
    pub fn spawn(&mut self) -> Result<(), ArmError> {
        self.startup.spawned_ns = self.clock.now_ns();
        if let Some(cmd) = &self.command {
            let p = ServerProcess::spawn(&cmd.argv, &cmd.env, cmd.cpus.as_deref(), &self.log, self.clock)?;
            self.startup.pid = Some(p.pid);
            self.process = Some(p);
        }
        Ok(())
    }

    /// Polls the health path until 200, the process exits, or the arm's startup
    /// timeout passes. An early exit or a timeout of a spawned server names the tail
    /// of the server's log and its path.
    pub async fn wait_healthy(&mut self) -> Result<(), ArmError> {
        let exit = self.process.as_ref().map(ServerProcess::exit_watch);
        let got = super::wait_healthy(&self.client, &self.health_url, self.clock, self.startup_timeout, exit).await;
        match got {
            Ok((t, polls)) => {
                self.startup.healthy_ns = Some(t);
                self.startup.health_polls = polls;
                self.startup.startup_s = Some(t.saturating_sub(self.startup.spawned_ns) as f64 / 1e9);
                Ok(())
            }
            Err(ArmError::ExitedBeforeHealthy { detail }) => {
                Err(ArmError::ExitedBeforeHealthy { detail: with_log_tail(detail, &self.log) })
            }
            // A spawned server that never answered: its log usually says why.
            Err(ArmError::HealthTimeout { url, after_s, last, .. }) if self.process.is_some() => {
                let log = with_log_tail(String::new(), &self.log);
                Err(ArmError::HealthTimeout { url, after_s, last, log })
            }
            Err(e) => Err(e),
        }
    }

    /// `spawn` then `wait_healthy`.
    pub async fn start(&mut self) -> Result<(), ArmError> {
        self.spawn()?;
        self.wait_healthy().await
    }

    /// Starts sampling `/metrics` (and, for a spawned server, memory) into the two
    /// files, every line tagged with the current phase (initially `phase`).
    pub fn start_sampling(
        &mut self,
        scrapes: PathBuf,
        memory: PathBuf,
        phase: &str,
        nvidia_smi: Option<PathBuf>,
    ) -> Result<(), ArmError> {
        let (tx, rx) = watch::channel(phase.to_string());
        self.phase = tx;
        self.sampler = Some(Sampler::start(SamplerSpec {
            metrics_url: format!("{}{METRICS_PATH}", self.base_url),
            pid: self.startup.pid,
            scrapes,
            memory,
            clock: self.clock,
            phase: rx,
            nvidia_smi,
            client: self.client.clone(),
        })?);
        Ok(())
    }

    /// The plan's warmup, on every route the timed requests take (`Plan::endpoints`,
    /// in order, each after the one before answered): one batched non-streaming
    /// `/v1/completions` call of the warmup prompts' token IDs, and for the chat
    /// endpoint one non-streaming chat call per warmup entry (its messages), sent
    /// together. The first route's record is returned with the others in
    /// `more_endpoints`; its `ok` and `detail` cover them all (the first failure
    /// ends the warmup). `None` when the plan has no warmup prompts. Sent once.
    pub async fn warm_up(&self, plan: &Plan, panel: &Panel) -> Option<WarmupRecord> {
        if plan.warmup.prompts == 0 {
            return None;
        }
        let entries: Vec<_> = plan.warmup_prompts().iter().filter_map(|&i| panel.get(i)).collect();
        let (k, n) = (plan.warmup.prompts, plan.warmup.output_tokens);
        let timeout = Duration::try_from_secs_f64(plan.timing.request_timeout_s).unwrap_or(LONGEST_WAIT);
        let mut first: Option<WarmupRecord> = None;
        for endpoint in plan.endpoints() {
            let calls = match endpoint {
                Endpoint::Chat => {
                    let messages: Vec<&[ChatMessage]> =
                        entries.iter().map(|p| p.messages.as_deref().unwrap_or(&[])).collect();
                    let bodies = warmup_chat_bodies(plan, &messages).into_iter().map(Bytes::from).collect();
                    WarmupCalls { endpoint: endpoint.as_str(), url: self.chat_url(), bodies }
                }
                Endpoint::Completions => {
                    let prompts: Vec<&[u32]> = entries.iter().map(|p| p.tokens.as_slice()).collect();
                    let bodies = vec![Bytes::from(warmup_body(plan, &prompts))];
                    WarmupCalls { endpoint: endpoint.as_str(), url: self.completions_url(), bodies }
                }
            };
            let rec = super::warmup(&self.client, calls, k, n, self.clock, timeout).await;
            let ok = rec.ok;
            match &mut first {
                None => first = Some(rec),
                Some(f) => {
                    if !ok {
                        f.ok = false;
                        f.detail =
                            Some(format!("{} warmup: {}", endpoint.as_str(), rec.detail.clone().unwrap_or_default()));
                    }
                    f.more_endpoints.push(rec);
                }
            }
            if !ok {
                break;
            }
        }
        first
    }

    /// Reads the peak RSS, stops the sampler, then stops the server (SIGTERM to its
    /// group, SIGKILL after the grace). The server is stopped even when the sampler
    /// failed; that failure is returned after.
    pub async fn stop(mut self) -> Result<Stopped, ArmError> {
        let peak_rss_bytes = self.startup.pid.and_then(|pid| super::read_rss(pid).1);
        let sampled = match self.sampler.take() {
            Some(s) => s.finish().await,
            None => Ok((0, 0)),
        };
        let process = self.process.take();
        let exited_before_stop = process.as_ref().and_then(ServerProcess::exited);
        let mut stop = match &process {
            Some(p) => Some(p.stop(self.grace).await),
            None => None,
        };
        // The server is gone: its log is cut to the prefix the evidence keeps, its
        // whole size and hash recorded (a log of gigabytes stays out of the evidence).
        if let Some(rec) = stop.as_mut() {
            let log = self.log.clone();
            let capped =
                tokio::task::spawn_blocking(move || super::log_scan::cap_log(&log, super::log_scan::LOG_KEPT_BYTES))
                    .await;
            rec.log = match capped {
                Ok(Ok(kept)) => kept,
                Ok(Err(error)) => return Err(ArmError::Io { path: self.log.clone(), error }),
                Err(e) => return Err(ArmError::Io { path: self.log.clone(), error: std::io::Error::other(e) }),
            };
        }
        let (scrapes, memory_samples) = sampled?;
        Ok(Stopped { peak_rss_bytes, scrapes, memory_samples, exited_before_stop, stop })
    }

    pub fn arm(&self) -> &str {
        &self.arm
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `<base>/v1/completions`, where warmup and timed requests go in every dialect.
    pub fn completions_url(&self) -> String {
        format!("{}{COMPLETIONS_PATH}", self.base_url)
    }

    /// Where the timed requests of a cell on the chat endpoint go.
    pub fn chat_url(&self) -> String {
        format!("{}{}", self.base_url, crate::protocol::routes::CHAT_COMPLETIONS_PATH)
    }

    /// What the server says it is, asked once it is healthy: the JSON of
    /// `GET /version` and of `GET /v1/models` (served names, `max_model_len`), each
    /// `None` when the route does not answer 200 with JSON within 5 s (llama.cpp's
    /// server has no /version). Recorded in `startup.json`, shown in the report.
    pub async fn identity(&self) -> ServerIdentity {
        let mut seen = ServerIdentity::default();
        seen.version = self.get_json(crate::protocol::routes::VERSION_PATH, &mut seen.oversized).await;
        seen.models = self.get_json(crate::protocol::routes::MODELS_PATH, &mut seen.oversized).await;
        seen
    }

    /// The JSON of `GET <base><path>` ([`Invocation::get_text`] with the answer cap).
    async fn get_json(&self, path: &str, oversized: &mut Vec<OversizedAnswer>) -> Option<serde_json::Value> {
        self.get_text(path, ANSWER_MAX_BYTES, oversized).await.and_then(|t| serde_json::from_str(&t).ok())
    }

    /// The body of `GET <base><path>` when it answers 200 within 5 s and its body
    /// is at most `cap` bytes. A larger body is read to its end (hashed, counted,
    /// its first 4 KiB kept) but never held whole: it is pushed to `oversized` and
    /// `None` returned.
    async fn get_text(&self, path: &str, cap: usize, oversized: &mut Vec<OversizedAnswer>) -> Option<String> {
        use sha2::Digest;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let r = self.client.get(format!("{}{path}", self.base_url)).timeout(Duration::from_secs(5)).send().await;
        let mut r = match r {
            Ok(r) if r.status().is_success() => r,
            _ => return None,
        };
        let mut body: Vec<u8> = Vec::new();
        let mut hasher = sha2::Sha256::new();
        let mut bytes = 0u64;
        loop {
            let chunk = tokio::time::timeout_at(deadline, r.chunk()).await.ok()?.ok()?;
            let Some(chunk) = chunk else { break };
            hasher.update(&chunk);
            bytes += chunk.len() as u64;
            let room = (cap + 1).saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        if body.len() > cap {
            let head = String::from_utf8_lossy(&body[..body.len().min(OVERSIZED_HEAD_BYTES)]).into_owned();
            let sha256 = crate::evidence::hex(&hasher.finalize());
            oversized.push(OversizedAnswer { path: path.to_string(), bytes, sha256, head });
            return None;
        }
        String::from_utf8(body).ok()
    }

    /// The identity checks of `spec` (`arm::identity`): what `identity` fetches, plus
    /// `/props`, the names in one `/metrics` answer and the server log so far (a
    /// spawned server's). A log line still missing is looked for again for up to
    /// 3 s (a server may flush its log late). Returns what was seen and the verdicts.
    pub async fn check_identity(&self, spec: &crate::plan::IdentitySpec) -> (ServerIdentity, Vec<CheckResult>) {
        let mut seen = self.identity().await;
        seen.props = self.get_json(crate::protocol::routes::PROPS_PATH, &mut seen.oversized).await;
        seen.metric_names = self
            .get_text(METRICS_PATH, METRICS_MAX_BYTES, &mut seen.oversized)
            .await
            .map(|t| super::identity::metric_names(&t));
        let planned = super::identity::planned(spec, self.command.as_ref().map(|c| c.argv.as_slice()));
        let deadline = std::time::Instant::now() + LOG_LINE_WAIT;
        // The whole log is searched, streamed line by line; each retry reads on.
        let mut scan = super::log_scan::LogScan::new(super::identity::log_facts(&planned));
        loop {
            let facts = match &self.command {
                Some(_) => scan.scan(&self.log).unwrap_or_else(|_| super::identity::log_facts(&planned)),
                None => super::identity::log_facts(&planned),
            };
            seen.log_bytes = Some(facts.bytes);
            let observed =
                super::identity::Observed { log_facts: Some(&facts), ..super::identity::Observed::of(&seen, "") };
            let results = super::identity::evaluate(&planned, &observed);
            let log_line_missing = results
                .iter()
                .any(|r| !r.ok && matches!(r.check.as_str(), "log_has" | "engine_startup" | "engine_startup_field"));
            if !log_line_missing || self.command.is_none() || std::time::Instant::now() >= deadline {
                return (seen, results);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The client the health polls and the warmup used.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub fn startup(&self) -> &Startup {
        &self.startup
    }

    pub fn pid(&self) -> Option<u32> {
        self.startup.pid
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    pub fn log(&self) -> &std::path::Path {
        &self.log
    }

    /// The expanded command (`None`: external arm).
    pub fn command(&self) -> Option<&ArmCommand> {
        self.command.as_ref()
    }

    /// `Some(description)` once the process exited; never fires for an external arm.
    pub fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        match &self.process {
            Some(p) => p.exit_watch(),
            None => watch::channel(None).1,
        }
    }

    pub fn exited(&self) -> Option<ExitInfo> {
        self.process.as_ref().and_then(ServerProcess::exited)
    }

    /// The phase every sampled line is tagged with from now on.
    pub fn phase(&self) -> &watch::Sender<String> {
        &self.phase
    }
}

impl Drop for Invocation {
    fn drop(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill_group();
        }
    }
}

/// Lines of the server log quoted when a server exits before it is healthy.
const LOG_TAIL_LINES: usize = 20;

/// `detail` plus the last lines of `log` (when it has any), read from its end.
fn with_log_tail(detail: String, log: &std::path::Path) -> String {
    let Some(lines) = super::log_scan::tail_lines(log, LOG_TAIL_LINES) else {
        return detail;
    };
    if lines.is_empty() {
        return format!("{detail}; {} is empty", log.display());
    }
    format!("{detail}; last lines of {}:\n{}", log.display(), lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plan::{ArmRole, Server};

    /// An arm whose "server" is `sh -c script` on a port nothing listens on.
    fn arm(script: &str, stop_grace_s: f64, startup_timeout_s: f64) -> (Arm, ArmCommand) {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        let arm = Arm {
            name: "a".into(),
            role: ArmRole::Control,
            server: Server::Spawn { argv: argv.clone(), port },
            env: BTreeMap::new(),
            health: "/health".into(),
            startup_timeout_s,
            stop_grace_s,
            receipts: None,
            tokenizer: None,
            max_start_failures: 2,
            api_key_env: None,
            headers: BTreeMap::new(),
            identity: None,
            cpus: None,
        };
        (arm, ArmCommand { argv, env: BTreeMap::new(), port, receipts: None, cpus: None })
    }

    fn alive(pid: u32) -> bool {
        // SAFETY: signal 0 only probes whether the process exists.
        unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
    }

    #[tokio::test]
    async fn the_stop_kills_after_the_plans_grace_a_server_that_ignores_sigterm() {
        let tmp = tempfile::tempdir().unwrap();
        let (arm, cmd) = arm("trap '' TERM; sleep 30", 0.3, 5.0);
        let mut inv = Invocation::new(&arm, Some(cmd), tmp.path().join("server.log"), StudyClock::start()).unwrap();
        assert_eq!(inv.grace(), Duration::from_millis(300));
        inv.spawn().unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t0 = std::time::Instant::now();
        let stopped = inv.stop().await.unwrap();
        let stop = stopped.stop.expect("a spawned server is stopped");
        assert_eq!(stop.how, "killed_after_grace");
        assert!(stop.sigterm_sent && stop.sigkill_sent);
        assert_eq!(stop.grace_s, 0.3);
        assert_eq!(stop.exit.and_then(|e| e.signal), Some(libc::SIGKILL));
        assert!(t0.elapsed() >= Duration::from_millis(300), "SIGKILL came before the grace");
        assert!(stopped.exited_before_stop.is_none());
    }

    #[tokio::test]
    async fn an_early_exit_fails_the_health_wait_with_the_log_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let (arm, cmd) = arm("echo loading model; echo 'fatal: no such model' >&2; exit 7", 30.0, 20.0);
        let mut inv = Invocation::new(&arm, Some(cmd), tmp.path().join("server.log"), StudyClock::start()).unwrap();
        let err = inv.start().await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ArmError::ExitedBeforeHealthy { .. }), "{text}");
        assert!(err.is_arm_fault());
        assert!(text.contains("code 7") && text.contains("fatal: no such model"), "{text}");
        assert!(text.contains("server.log"), "{text}");
        assert_eq!((inv.startup().healthy_ns, inv.startup().startup_s), (None, None));
        let stopped = inv.stop().await.unwrap();
        assert_eq!(stopped.stop.map(|s| s.how).as_deref(), Some("already_exited"));
        assert_eq!(stopped.exited_before_stop.and_then(|e| e.code), Some(7));
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out_naming_its_url_and_log_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let (arm, cmd) = arm("echo 'still loading shards'; exec sleep 30", 0.5, 0.3);
        let mut inv = Invocation::new(&arm, Some(cmd), tmp.path().join("server.log"), StudyClock::start()).unwrap();
        let err = inv.start().await.unwrap_err();
        assert!(matches!(&err, ArmError::HealthTimeout { url, .. } if url.ends_with("/health")), "{err}");
        let text = err.to_string();
        assert!(text.contains("still loading shards") && text.contains("server.log"), "{text}");
        let stop = inv.stop().await.unwrap().stop.unwrap();
        assert_eq!(stop.how, "exited_on_sigterm");
    }

    #[tokio::test]
    async fn an_external_server_that_refuses_connections_is_unreachable_well_before_its_startup_timeout() {
        let tmp = tempfile::tempdir().unwrap();
        // A port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (mut arm, _) = arm("", 30.0, 600.0);
        arm.server = Server::External { url: format!("http://127.0.0.1:{port}") };
        let mut inv = Invocation::new(&arm, None, tmp.path().join("server.log"), StudyClock::start()).unwrap();
        // Bounded only so that a regression cannot hang the suite (600 s before).
        let err = tokio::time::timeout(Duration::from_secs(120), inv.start()).await.expect("gave up").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ArmError::Unreachable { .. }), "{text}");
        assert!(err.is_arm_fault());
        assert!(text.contains(&format!("127.0.0.1:{port}/health")) && text.contains("refused"), "{text}");
        assert!(text.contains("start the server first"), "{text}");
    }

    #[tokio::test]
    async fn dropping_an_unstopped_invocation_kills_its_server() {
        let tmp = tempfile::tempdir().unwrap();
        let (arm, cmd) = arm("trap '' TERM; exec sleep 30", 30.0, 5.0);
        let mut inv = Invocation::new(&arm, Some(cmd), tmp.path().join("server.log"), StudyClock::start()).unwrap();
        inv.spawn().unwrap();
        let pid = inv.pid().unwrap();
        let mut exit = inv.exit_watch();
        assert!(alive(pid));
        drop(inv);
        let waited = tokio::time::timeout(Duration::from_secs(10), exit.wait_for(Option::is_some)).await;
        assert!(waited.is_ok(), "the server outlived its dropped invocation");
    }

    /// Issue 52 item 20: a 10 MB `/version` answer is not stored whole.
    #[tokio::test]
    async fn an_oversized_identity_answer_is_recorded_by_size_hash_and_head_not_whole() {
        let big = format!("{{\"version\": \"{}\"}}", "9".repeat(10 << 20));
        let (big_len, big_sha) = (big.len() as u64, crate::evidence::sha256_hex(big.as_bytes()));
        let app = axum::Router::new()
            .route("/health", axum::routing::get(|| async { "ok" }))
            .route(crate::protocol::routes::VERSION_PATH, axum::routing::get(move || async move { big }))
            .route(
                crate::protocol::routes::MODELS_PATH,
                axum::routing::get(|| async { r#"{"data": [{"id": "m", "max_model_len": 64}]}"# }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let tmp = tempfile::tempdir().unwrap();
        let (mut arm, _) = arm("", 30.0, 20.0);
        arm.server = Server::External { url };
        let mut inv = Invocation::new(&arm, None, tmp.path().join("server.log"), StudyClock::start()).unwrap();
        inv.start().await.unwrap();
        let seen = inv.identity().await;
        let stored = serde_json::to_vec(&seen).unwrap().len();
        assert!(stored < 16 << 10, "the identity record holds {stored} bytes");
        assert!(seen.version.is_none() && seen.models.is_some(), "{:?}", seen.models);
        let [o] = seen.oversized.as_slice() else { panic!("{:?}", seen.oversized) };
        assert_eq!(
            (o.path.as_str(), o.bytes, o.sha256.as_str()),
            (crate::protocol::routes::VERSION_PATH, big_len, big_sha.as_str())
        );
        assert!(o.head.starts_with("{\"version\": \"999") && o.head.len() == 4096, "{}", o.head.len());
    }

    #[test]
    fn the_log_tail_keeps_the_last_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("server.log");
        let text: String = (0..50).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let d = with_log_tail("server exited with code 1".into(), &log);
        assert!(d.starts_with("server exited with code 1; last lines of"));
        assert!(d.contains("line 49") && d.contains("line 30") && !d.contains("line 29\n"), "{d}");
        std::fs::write(&log, "").unwrap();
        assert!(with_log_tail("x".into(), &log).ends_with("is empty"));
        assert_eq!(with_log_tail("x".into(), &tmp.path().join("none")), "x");
    }
}
