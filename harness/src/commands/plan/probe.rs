//! `harness plan check --probe`: each arm once, through the study's own lifecycle
//! (`arm::Invocation`): a spawned arm gets a fresh server from its expanded argv
//! (block 0), a health wait within its `startup_timeout_s`, the arm's identity
//! checks (the study's own, `arm::identity`), one streamed request with the study's
//! own body for the panel's first entry (its failure class, usage and token counts
//! judged as the study judges them), and a stop; a pinned arm (`cpus`) must still
//! run on its CPUs after health, the study's first identity check; an external arm gets the same
//! without the spawn and the stop. A failure names the server's exit or timeout and
//! the tail of its `server.log`, which is kept under the probe directory. Owns the
//! probe's outcome. Must not write evidence, send timed requests or warm up.

use std::path::{Path, PathBuf};

use super::PlanCommandError;
use crate::arm::Invocation;
use crate::load::StudyClock;
use crate::plan::Plan;

/// How one arm's probe went.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmProbe {
    pub arm: String,
    /// `spawn` or `external`.
    pub kind: &'static str,
    pub ok: bool,
    /// Spawn (or first poll) to the first 200 of the health path.
    pub startup_s: Option<f64>,
    /// Why it failed, with the tail of the server's log.
    pub detail: Option<String>,
    /// The server's log (spawned arms).
    pub log: Option<PathBuf>,
    /// The verdicts of the arm's identity checks (`[arms.identity]`), the same the
    /// study runs after health; empty when the arm declares none or never got healthy.
    pub identity: Vec<crate::evidence::CheckResult>,
    /// The one streamed request with the study's own body, in words (`None`: not
    /// sent, because the arm failed before it or the panel could not be built).
    pub request: Option<String>,
}

/// What the probe's one streamed request found: `Ok(summary)` or `Err(why)`.
async fn test_request(inv: &Invocation, plan: &Plan, prompt: &crate::trace::Prompt) -> Result<String, String> {
    let endpoint = plan.request.endpoint;
    let prepared = crate::load::prepare(plan, plan.body_kind(endpoint), prompt);
    let clock = StudyClock::start();
    let url = match endpoint {
        crate::plan::Endpoint::Completions => inv.completions_url(),
        crate::plan::Endpoint::Chat => inv.chat_url(),
    };
    let ctx = crate::load::RequestCtx {
        client: inv.client().clone(),
        url,
        clock,
        timeout: std::time::Duration::try_from_secs_f64(plan.timing.request_timeout_s)
            .unwrap_or(std::time::Duration::from_secs(600)),
        server_exit: inv.exit_watch(),
        drain_expired: tokio::sync::watch::channel(false).1,
        forced_output: plan.request.forced(),
        light: false,
        source_clients: Default::default(),
    };
    let key = crate::evidence::request_record::RecordKey { cell: "probe", block: 0, arm: inv.arm(), index: 0 };
    let mut rec = crate::evidence::request_record::RequestRecord::planned(
        key,
        prompt.index,
        (prepared.prompt_tokens, prepared.max_tokens),
        clock.now_ns(),
    );
    crate::load::execute(&mut rec, prepared.body, prepared.request_id, &ctx).await;
    if let Some(f) = &rec.failure {
        return Err(format!("the study's request body (panel entry {}) failed: {f:?}", prompt.index));
    }
    let tokens: u32 = rec.events.iter().map(|e| e.tokens).sum();
    let ids = rec.events.iter().any(|e| e.token_ids.is_some());
    let Some(usage) = rec.usage else {
        return Err("the stream carried no usage (the study counts tokens from it)".into());
    };
    if usage.completion_tokens != tokens && ids {
        return Err(format!(
            "usage says {} completion tokens, the streamed token IDs {tokens}",
            usage.completion_tokens
        ));
    }
    let e2e = rec.done_ns.zip(rec.send_ns).map_or(0.0, |(d, s)| d.saturating_sub(s) as f64 / 1e6);
    Ok(format!(
        "one streamed request with the study's body: {} prompt + {} output tokens ({}), {e2e:.0} ms",
        usage.prompt_tokens,
        usage.completion_tokens,
        if ids { "token IDs streamed" } else { "text only: one token per text event" }
    ))
}

/// Every arm's probe, in plan order; logs under `dir/<arm>/server.log`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOutcome {
    pub dir: PathBuf,
    pub arms: Vec<ArmProbe>,
}

impl ProbeOutcome {
    pub fn all_ok(&self) -> bool {
        self.arms.iter().all(|a| a.ok)
    }
}

/// Probes every arm of `plan` one after another (never two servers at once); the
/// panel's inputs are resolved against `base`.
pub fn probe(plan: &Plan, base: &Path, dir: &Path) -> Result<ProbeOutcome, PlanCommandError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| PlanCommandError::Runtime(e.to_string()))?;
    let panel = crate::inputs::build_panel(plan, base).map_err(|e| e.to_string());
    rt.block_on(probe_all(plan, panel, dir))
}

async fn probe_all(
    plan: &Plan,
    panel: Result<crate::trace::Panel, String>,
    dir: &Path,
) -> Result<ProbeOutcome, PlanCommandError> {
    let first = match &panel {
        Ok(p) => p.get(0).ok_or_else(|| "the panel is empty".to_string()),
        Err(e) => Err(format!("the panel cannot be built: {e}")),
    };
    let mut arms = Vec::new();
    for arm in &plan.arms {
        let arm_dir = dir.join(&arm.name);
        std::fs::create_dir_all(&arm_dir).map_err(|error| PlanCommandError::Io { path: arm_dir.clone(), error })?;
        let arm_dir =
            std::fs::canonicalize(&arm_dir).map_err(|error| PlanCommandError::Io { path: arm_dir.clone(), error })?;
        let cmd = plan.arm_command(arm, 0, &arm_dir)?;
        let log = arm_dir.join(crate::evidence::SERVER_LOG_FILE);
        let kind = if cmd.is_some() { "spawn" } else { "external" };
        let spawned = cmd.is_some();
        let mut inv = Invocation::new(arm, cmd, log.clone(), StudyClock::start())?;
        let started = inv.start().await;
        let startup_s = inv.startup().startup_s;
        // The study's first identity check: a pinned server still on its CPUs.
        let off_cpus = match &started {
            Ok(()) if spawned => {
                let planned = arm.cpus.as_deref().map(crate::host::cpu_list);
                let allowed = inv.pid().and_then(crate::host::process_cpus);
                crate::arm::identity::cpus_left(&arm.name, planned.as_deref(), allowed.as_deref())
            }
            _ => None,
        };
        let identity = match (&started, &arm.identity) {
            (Ok(()), Some(spec)) if off_cpus.is_none() => inv.check_identity(spec).await.1,
            _ => Vec::new(),
        };
        let n = identity.iter().filter(|r| !r.ok).count() + usize::from(off_cpus.is_some());
        // One streamed request with the study's body, on a server that is itself.
        let request = match (&started, &first) {
            (Ok(()), Ok(prompt)) if n == 0 => Some(test_request(&inv, plan, prompt).await),
            (Ok(()), Err(why)) if n == 0 => Some(Ok(format!("no test request: {why}"))),
            _ => None,
        };
        // A failed stop cannot hide why the start failed; a sampler never ran here.
        let _ = inv.stop().await;
        let (ok, detail) = match started {
            Ok(()) if n > 0 => match off_cpus {
                Some(e) => (false, Some(e.to_string())),
                None => {
                    let failures = crate::arm::identity::failures(&identity);
                    (false, Some(crate::arm::ArmError::Identity { arm: arm.name.clone(), n, failures }.to_string()))
                }
            },
            Ok(()) => match &request {
                Some(Err(why)) => (false, Some(format!("test request: {why}"))),
                _ => (true, None),
            },
            Err(e) if e.is_arm_fault() => (false, Some(e.to_string())),
            Err(e) => return Err(e.into()),
        };
        let log = spawned.then_some(log);
        let request = request.and_then(Result::ok);
        arms.push(ArmProbe { arm: arm.name.clone(), kind, ok, startup_s, detail, log, identity, request });
    }
    Ok(ProbeOutcome { dir: dir.to_path_buf(), arms })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan with an external arm at `url` and an arm whose program exits at once
    /// with clap's message for a mistyped flag.
    fn plan(url: &str, bad_port: u16) -> Plan {
        let text = format!(
            "[study]\nname = \"probe\"\nseed = 1\n[request]\nmodel = \"m\"\noutput_tokens = 2\n\
             [prompts]\nsource = \"random\"\nmax_token_id = 9\nlengths = [4]\ndocuments = 1\n[warmup]\nprompts = 0\n\
             [timing]\nsettle_s = 0.0\nrequest_timeout_s = 5.0\ndrain_timeout_s = 5.0\n\
             [blocks]\ncount = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\
             [[arms]]\nname = \"good\"\nrole = \"control\"\nurl = {url:?}\nstartup_timeout_s = 20.0\n\
             [[arms]]\nname = \"bad\"\nrole = \"candidate\"\n\
             argv = [\"/bin/sh\", \"-c\", \"echo \\\"error: unexpected argument '--thread' found\\\" >&2; exit 2\"]\n\
             port = {bad_port}\nstartup_timeout_s = 20.0\n\
             [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 1\n"
        );
        crate::plan::parse(&text).unwrap()
    }

    #[tokio::test]
    async fn a_healthy_arm_probes_ok_and_a_failing_one_names_its_log_tail() {
        // Health, and the study's request streamed as vLLM does (2 tokens, usage).
        let sse = "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[5]}]}\n\n\
                   data: {\"choices\":[{\"index\":0,\"text\":\"b\",\"token_ids\":[6],\"finish_reason\":\"length\"}]}\n\n\
                   data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\n\
                   data: [DONE]\n\n";
        let app = axum::Router::new().route("/health", axum::routing::get(|| async { "ok" })).route(
            crate::protocol::routes::COMPLETIONS_PATH,
            axum::routing::post(
                move || async move { ([(axum::http::header::CONTENT_TYPE, "text/event-stream")], sse) },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tmp = tempfile::tempdir().unwrap();
        let p = plan(&url, port);
        let panel = crate::inputs::build_panel(&p, tmp.path()).map_err(|e| e.to_string());
        let out = probe_all(&p, panel, tmp.path()).await.unwrap();
        assert!(!out.all_ok());
        let [good, bad] = out.arms.as_slice() else { panic!("{out:?}") };
        assert!(good.ok && good.kind == "external" && good.detail.is_none(), "{good:?}");
        let request = good.request.as_deref().unwrap_or_default();
        assert!(request.contains("4 prompt + 2 output tokens (token IDs streamed)"), "{request}");
        assert!(!bad.ok && bad.kind == "spawn", "{bad:?}");
        let detail = bad.detail.as_deref().unwrap();
        assert!(detail.contains("code 2") && detail.contains("unexpected argument '--thread'"), "{detail}");
        assert!(detail.contains("server.log"), "{detail}");
        assert!(bad.log.as_ref().unwrap().is_file());
    }
}
