//! One fresh server of one arm for one phase of a comparison, through the study's
//! own lifecycle (`crate::arm::Invocation`): spawn the expanded argv into its evidence
//! directory (`server.log`), wait for the health path (cold start = spawn to the
//! first 200, `startup.json`), sample `/metrics` and memory once a second
//! (`scrapes.jsonl`, `memory.jsonl`), optionally send the plan's warmup call
//! (`warmup.json`), and stop (SIGTERM, then SIGKILL after the arm's `stop_grace_s`),
//! with the peak host RSS (`VmHWM` of the server PID) read just before, writing
//! `unit.json` (`evidence::ServerRecord`). Owns nothing of the lifecycle itself;
//! must not send timed requests.

use std::path::{Path, PathBuf};

use tokio::sync::watch;

use super::CompareError;
use crate::arm::Invocation;
use crate::evidence::{
    MEMORY_FILE, SCRAPES_FILE, SERVER_LOG_FILE, STARTUP_FILE, ServerRecord, UNIT_FILE, UnitStatus, WARMUP_FILE,
    write_json,
};
use crate::load::StudyClock;
use crate::plan::{Arm, Plan};
use crate::trace::Panel;

/// What every server start of one comparison shares.
pub struct Shared<'a> {
    /// The evidence directory (absolute).
    pub root: &'a Path,
    pub plan: &'a Plan,
    pub panel: &'a Panel,
    pub clock: StudyClock,
    pub nvidia_smi: Option<PathBuf>,
}

/// A healthy server.
pub struct Running {
    pub base_url: String,
    pub client: reqwest::Client,
    pub exit: watch::Receiver<Option<String>>,
    pub dir: PathBuf,
    server: Invocation,
    pub record: ServerRecord,
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
    let argv = cmd.argv.clone();
    let mut server = Invocation::new(arm, Some(cmd), dir.join(SERVER_LOG_FILE), sh.clock)?;
    server.spawn()?;
    let mut record = ServerRecord {
        phase: phase.to_string(),
        round,
        arm: arm.name.clone(),
        label: label.to_string(),
        dir: dir.strip_prefix(sh.root).unwrap_or(dir).to_string_lossy().into_owned(),
        argv,
        pid: server.pid(),
        spawned_ns: server.startup().spawned_ns,
        healthy_ns: None,
        startup_s: None,
        health_polls: 0,
        peak_rss_bytes: None,
        warmup_ok: None,
        status: UnitStatus::Completed,
        detail: None,
        stop: None,
        scrapes: 0,
        memory_samples: 0,
    };
    match server.wait_healthy().await {
        Ok(()) => {
            let st = server.startup();
            record.healthy_ns = st.healthy_ns;
            record.health_polls = st.health_polls;
            record.startup_s = st.startup_s;
            write_json(&dir.join(STARTUP_FILE), &record)?;
        }
        Err(e) => {
            record.status = UnitStatus::StartFailed;
            record.detail = Some(e.to_string());
            record.stop = server.stop().await?.stop;
            write_json(&dir.join(UNIT_FILE), &record)?;
            return Err(fault(label, e.to_string()));
        }
    }
    let scrapes = dir.join(SCRAPES_FILE);
    server.start_sampling(
        scrapes,
        dir.join(MEMORY_FILE),
        if warm { "warmup" } else { "idle" },
        sh.nvidia_smi.clone(),
    )?;
    let mut running = Running {
        base_url: server.base_url().to_string(),
        client: server.client().clone(),
        exit: server.exit_watch(),
        dir: dir.to_path_buf(),
        server,
        record,
    };
    if warm && let Some(rec) = running.server.warm_up(sh.plan, sh.panel).await {
        write_json(&dir.join(WARMUP_FILE), &rec)?;
        running.record.warmup_ok = Some(rec.ok);
        if !rec.ok {
            let detail = format!("warmup failed: {}", rec.detail.unwrap_or_default());
            running.record.status = UnitStatus::WarmupFailed;
            running.record.detail = Some(detail.clone());
            running.stop().await?;
            return Err(fault(label, detail));
        }
    }
    let _ = running.phase().send("idle".into());
    Ok(running)
}

impl Running {
    /// The exit description, once the process has exited.
    pub fn died(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// The phase the sampler tags its lines with.
    pub fn phase(&self) -> &watch::Sender<String> {
        self.server.phase()
    }

    /// Reads the peak RSS, stops sampling and the server, writes `unit.json`.
    pub async fn stop(mut self) -> Result<ServerRecord, CompareError> {
        let stopped = self.server.stop().await?;
        self.record.peak_rss_bytes = stopped.peak_rss_bytes;
        self.record.scrapes = stopped.scrapes;
        self.record.memory_samples = stopped.memory_samples;
        if let (Some(info), UnitStatus::Completed) = (stopped.exited_before_stop, self.record.status) {
            self.record.status = UnitStatus::ServerDied;
            self.record.detail = Some(info.description);
        }
        self.record.stop = stopped.stop;
        write_json(&self.dir.join(UNIT_FILE), &self.record)?;
        Ok(self.record)
    }
}
