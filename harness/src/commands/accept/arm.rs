//! `--plan plan.toml --arm NAME`: the arm's server for one acceptance run, through
//! the study's own lifecycle (`crate::arm::Invocation`): spawn the expanded argv with
//! its log, wait for the health path, and stop it (SIGTERM to its group, then SIGKILL
//! after the arm's `stop_grace_s`). An external arm (`url`) is only health-checked.
//! The arm's client headers (`api_key_env`, `headers`) are handed to the suite.
//! Owns nothing of the lifecycle itself. Must not run cases.

use std::path::{Path, PathBuf};

use super::AcceptError;
use crate::arm::Invocation;
use crate::evidence::{SERVER_LOG_FILE, StopRecord};
use crate::load::StudyClock;

/// A healthy arm.
pub struct ArmServer {
    pub name: String,
    pub base_url: String,
    /// The plan's `request.model` (what `{model}` expands to in the argv).
    pub model: String,
    pub log: Option<PathBuf>,
    pub startup_s: f64,
    /// The arm's `api_key_env` and `headers`, for every request of the suite.
    pub headers: reqwest::header::HeaderMap,
    invocation: Option<Invocation>,
}

impl ArmServer {
    /// Freezes the plan, finds the arm, starts it (unless external) and waits until
    /// its health path answers 200 within the arm's startup timeout.
    pub async fn start(plan_path: &Path, arm_name: &str, log_dir: &Path) -> Result<ArmServer, AcceptError> {
        let frozen = crate::plan::freeze_file(plan_path)?;
        let plan = &frozen.plan;
        let arm = plan.arm(arm_name).ok_or_else(|| AcceptError::UnknownArm {
            arm: arm_name.to_string(),
            known: plan.arms.iter().map(|a| a.name.clone()).collect::<Vec<_>>().join(", "),
        })?;
        let base_url = arm.base_url();
        super::require_loopback(&base_url)?;
        let headers = crate::arm::arm_headers(arm, |v| std::env::var(v).ok())?;
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let dir = log_dir.join(format!("accept-{}-{unix_ms}", arm.name));
        std::fs::create_dir_all(&dir).map_err(|error| AcceptError::Io { path: dir.clone(), error })?;
        let dir = std::fs::canonicalize(&dir).map_err(|error| AcceptError::Io { path: dir.clone(), error })?;
        let cmd = plan.arm_command(arm, 0, &dir)?;
        let log = cmd.as_ref().map(|_| dir.join(SERVER_LOG_FILE));
        let mut inv = Invocation::new(arm, cmd, dir.join(SERVER_LOG_FILE), StudyClock::start())?;
        inv.spawn()?;
        let mut server = ArmServer {
            name: arm.name.clone(),
            base_url,
            model: plan.request.model.clone(),
            log,
            startup_s: 0.0,
            headers,
            invocation: None,
        };
        match inv.wait_healthy().await {
            Ok(()) => {
                server.startup_s = inv.startup().startup_s.unwrap_or_default();
                server.invocation = Some(inv);
                Ok(server)
            }
            Err(e) => {
                // The stop's own failure (a sampler; there is none here) cannot hide `e`.
                let _ = inv.stop().await;
                Err(AcceptError::Arm(e))
            }
        }
    }

    /// Stops a spawned server; `None` for an external one.
    pub async fn stop(&mut self) -> Option<StopRecord> {
        let inv = self.invocation.take()?;
        inv.stop().await.ok().and_then(|s| s.stop)
    }
}
