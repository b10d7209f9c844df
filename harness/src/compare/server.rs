//! One fresh server of one arm for one phase of a comparison, through the study's
//! own lifecycle (`crate::arm`): spawn the expanded argv into its evidence directory
//! (`server.log`), wait for the health path (cold start = spawn to the first 200,
//! `startup.json`), sample `/metrics` and memory once a second (`scrapes.jsonl`,
//! `memory.jsonl`), optionally send the plan's warmup call (`warmup.json`), and stop
//! (SIGTERM, then SIGKILL), reading the peak host RSS (`VmHWM` of the server PID)
//! just before and writing `unit.json`. Owns nothing of the lifecycle itself and must
//! not send timed requests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use super::CompareError;
use crate::arm::{Sampler, SamplerSpec, ServerProcess, StopRecord, read_rss, wait_healthy, warmup};
use crate::evidence::write_json;
use crate::load::{StudyClock, http_client, warmup_body};
use crate::plan::{Arm, Plan};
use crate::trace::Panel;

/// How long a server gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// What every server start of one comparison shares.
pub struct Shared<'a> {
    /// The evidence directory (absolute).
    pub root: &'a Path,
    pub plan: &'a Plan,
    pub panel: &'a Panel,
    pub clock: StudyClock,
    pub nvidia_smi: Option<PathBuf>,
}

/// The record of one server start (`unit.json`, and one entry of `compare.json`).
#[derive(Debug, Clone, Serialize)]
pub struct UnitRecord {
    /// `parity`, `noise` or `round`.
    pub phase: String,
    /// Noise round or schedule block (0 for parity).
    pub round: u32,
    pub arm: String,
    /// The arm, or `<arm>.a` / `<arm>.b` for the two noise measurements.
    pub label: String,
    /// Relative to the evidence directory.
    pub dir: String,
    pub argv: Vec<String>,
    pub pid: Option<u32>,
    pub spawned_ns: u64,
    pub healthy_ns: Option<u64>,
    /// Cold start: spawn to the first 200 from the health path.
    pub startup_s: Option<f64>,
    pub health_polls: u64,
    /// `VmHWM` of the server PID read just before the stop (the peak resident set).
    pub peak_rss_bytes: Option<u64>,
    pub warmup_ok: Option<bool>,
    /// `completed`, or `server_died` when the process exited before the stop.
    pub status: String,
    pub detail: Option<String>,
    pub stop: Option<StopRecord>,
    pub scrapes: u64,
    pub memory_samples: u64,
}

/// A healthy server.
pub struct Running {
    pub base_url: String,
    pub client: reqwest::Client,
    pub exit: watch::Receiver<Option<String>>,
    pub phase: watch::Sender<String>,
    pub dir: PathBuf,
    process: ServerProcess,
    sampler: Option<Sampler>,
    pub record: UnitRecord,
}

fn fault(label: &str, detail: impl Into<String>) -> CompareError {
    CompareError::Server { label: label.to_string(), detail: detail.into() }
}

/// Starts `arm` fresh with its raw directory `dir` (absolute) and waits until healthy;
/// with `warm`, sends the plan's warmup call. A server that fails to start or to warm
/// up is stopped and reported as `CompareError::Server`.
pub async fn start(
    sh: &Shared<'_>,
    arm: &Arm,
    (phase, round, label): (&str, u32, &str),
    dir: &Path,
    warm: bool,
) -> Result<Running, CompareError> {
    std::fs::create_dir_all(dir).map_err(|error| CompareError::Io { path: dir.to_path_buf(), error })?;
    let cmd = sh.plan.arm_command(arm, round, dir)?.ok_or_else(|| fault(label, "an external arm cannot be started"))?;
    let client = http_client()?;
    let base_url = arm.base_url();
    let spawned_ns = sh.clock.now_ns();
    let process = ServerProcess::spawn(&cmd.argv, &cmd.env, &dir.join("server.log"), sh.clock)?;
    let exit = process.exit_watch();
    let mut record = UnitRecord {
        phase: phase.to_string(),
        round,
        arm: arm.name.clone(),
        label: label.to_string(),
        dir: dir.strip_prefix(sh.root).unwrap_or(dir).to_string_lossy().into_owned(),
        argv: cmd.argv.clone(),
        pid: Some(process.pid),
        spawned_ns,
        healthy_ns: None,
        startup_s: None,
        health_polls: 0,
        peak_rss_bytes: None,
        warmup_ok: None,
        status: "completed".into(),
        detail: None,
        stop: None,
        scrapes: 0,
        memory_samples: 0,
    };
    let health = format!("{base_url}{}", arm.health);
    let timeout = Duration::from_secs_f64(arm.startup_timeout_s);
    match wait_healthy(&client, &health, sh.clock, timeout, Some(exit.clone())).await {
        Ok((t, polls)) => {
            record.healthy_ns = Some(t);
            record.health_polls = polls;
            record.startup_s = Some(t.saturating_sub(spawned_ns) as f64 / 1e9);
            write_json(&dir.join("startup.json"), &record)?;
        }
        Err(e) => {
            record.status = "start_failed".into();
            record.detail = Some(e.to_string());
            record.stop = Some(process.stop(STOP_GRACE).await);
            write_json(&dir.join("unit.json"), &record)?;
            return Err(fault(label, e.to_string()));
        }
    }
    let (phase_tx, phase_rx) = watch::channel(if warm { "warmup" } else { "idle" }.to_string());
    let sampler = Sampler::start(SamplerSpec {
        metrics_url: format!("{base_url}/metrics"),
        pid: Some(process.pid),
        scrapes: dir.join("scrapes.jsonl"),
        memory: dir.join("memory.jsonl"),
        clock: sh.clock,
        phase: phase_rx,
        nvidia_smi: sh.nvidia_smi.clone(),
    })?;
    let mut running = Running {
        base_url,
        client,
        exit,
        phase: phase_tx,
        dir: dir.to_path_buf(),
        process,
        sampler: Some(sampler),
        record,
    };
    if warm && sh.plan.warmup.prompts > 0 {
        let plan = sh.plan;
        let prompts: Vec<&[u32]> =
            plan.warmup_prompts().iter().filter_map(|&i| sh.panel.get(i)).map(|p| p.tokens.as_slice()).collect();
        let url = format!("{}/v1/completions", running.base_url);
        let (k, n) = (plan.warmup.prompts, plan.warmup.output_tokens);
        let t = Duration::from_secs_f64(plan.timing.request_timeout_s);
        let body = warmup_body(plan, &prompts).into();
        let rec = warmup(&running.client, &url, body, k, n, sh.clock, t).await;
        write_json(&dir.join("warmup.json"), &rec)?;
        running.record.warmup_ok = Some(rec.ok);
        if !rec.ok {
            let detail = format!("warmup failed: {}", rec.detail.unwrap_or_default());
            running.record.status = "warmup_failed".into();
            running.record.detail = Some(detail.clone());
            running.stop().await?;
            return Err(fault(label, detail));
        }
    }
    let _ = running.phase.send("idle".into());
    Ok(running)
}

impl Running {
    /// The exit description, once the process has exited.
    pub fn died(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// Reads the peak RSS, stops sampling and the server, writes `unit.json`.
    pub async fn stop(mut self) -> Result<UnitRecord, CompareError> {
        let (_, hwm) = read_rss(self.process.pid);
        self.record.peak_rss_bytes = hwm;
        if let Some(s) = self.sampler.take() {
            let (scrapes, memory) = s.finish().await?;
            self.record.scrapes = scrapes;
            self.record.memory_samples = memory;
        }
        if let (Some(info), "completed") = (self.process.exited(), self.record.status.as_str()) {
            self.record.status = "server_died".into();
            self.record.detail = Some(info.description);
        }
        self.record.stop = Some(self.process.stop(STOP_GRACE).await);
        write_json(&self.dir.join("unit.json"), &self.record)?;
        Ok(self.record)
    }
}
