//! `harness plan check --probe`: each arm once, through the study's own lifecycle
//! (`arm::Invocation`): a spawned arm gets a fresh server from its expanded argv
//! (block 0), a health wait within its `startup_timeout_s`, and a stop; an external
//! arm gets the health wait only. A failure names the server's exit or timeout and
//! the tail of its `server.log`, which is kept under the probe directory. Owns the
//! probe's outcome. Must not write evidence, send timed requests or warm up.

use std::path::{Path, PathBuf};

use super::RunError;
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

/// Probes every arm of `plan` one after another (never two servers at once).
pub fn probe(plan: &Plan, dir: &Path) -> Result<ProbeOutcome, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Runtime(e.to_string()))?;
    rt.block_on(probe_all(plan, dir))
}

async fn probe_all(plan: &Plan, dir: &Path) -> Result<ProbeOutcome, RunError> {
    let mut arms = Vec::new();
    for arm in &plan.arms {
        let arm_dir = dir.join(&arm.name);
        std::fs::create_dir_all(&arm_dir).map_err(|error| RunError::Io { path: arm_dir.clone(), error })?;
        let arm_dir = std::fs::canonicalize(&arm_dir).map_err(|error| RunError::Io { path: arm_dir.clone(), error })?;
        let cmd = plan.arm_command(arm, 0, &arm_dir)?;
        let log = arm_dir.join("server.log");
        let kind = if cmd.is_some() { "spawn" } else { "external" };
        let spawned = cmd.is_some();
        let mut inv = Invocation::new(arm, cmd, log.clone(), StudyClock::start())?;
        let started = inv.start().await;
        let startup_s = inv.startup().startup_s;
        // A failed stop cannot hide why the start failed; a sampler never ran here.
        let _ = inv.stop().await;
        let (ok, detail) = match started {
            Ok(()) => (true, None),
            Err(e) if e.is_arm_fault() => (false, Some(e.to_string())),
            Err(e) => return Err(e.into()),
        };
        arms.push(ArmProbe { arm: arm.name.clone(), kind, ok, startup_s, detail, log: spawned.then_some(log) });
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
        let app = axum::Router::new().route("/health", axum::routing::get(|| async { "ok" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tmp = tempfile::tempdir().unwrap();
        let out = probe_all(&plan(&url, port), tmp.path()).await.unwrap();
        assert!(!out.all_ok());
        let [good, bad] = out.arms.as_slice() else { panic!("{out:?}") };
        assert!(good.ok && good.kind == "external" && good.detail.is_none(), "{good:?}");
        assert!(!bad.ok && bad.kind == "spawn", "{bad:?}");
        let detail = bad.detail.as_deref().unwrap();
        assert!(detail.contains("code 2") && detail.contains("unexpected argument '--thread'"), "{detail}");
        assert!(detail.contains("server.log"), "{detail}");
        assert!(bad.log.as_ref().unwrap().is_file());
    }
}
