//! `--plan plan.toml --arm NAME`: the arm's server for one acceptance run, through
//! the study's own lifecycle (`crate::arm`): spawn the expanded argv with its log,
//! wait for the health path, and stop it (SIGTERM to its group, then SIGKILL). An
//! external arm (`url`) is only health-checked. Owns nothing of the lifecycle
//! itself. Must not run cases.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::AcceptError;
use crate::arm::{ServerProcess, StopRecord, wait_healthy};
use crate::load::StudyClock;

/// Grace between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// A healthy arm.
pub struct ArmServer {
    pub name: String,
    pub base_url: String,
    /// The plan's `request.model` (what `{model}` expands to in the argv).
    pub model: String,
    pub log: Option<PathBuf>,
    pub startup_s: f64,
    process: Option<ServerProcess>,
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
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let dir = log_dir.join(format!("accept-{}-{unix_ms}", arm.name));
        std::fs::create_dir_all(&dir).map_err(|error| AcceptError::Io { path: dir.clone(), error })?;
        let dir = std::fs::canonicalize(&dir).map_err(|error| AcceptError::Io { path: dir.clone(), error })?;
        let clock = StudyClock::start();
        let (process, log) = match plan.arm_command(arm, 0, &dir)? {
            Some(cmd) => {
                let log = dir.join("server.log");
                (Some(ServerProcess::spawn(&cmd.argv, &cmd.env, &log, clock)?), Some(log))
            }
            None => (None, None),
        };
        let client = reqwest::Client::builder().no_proxy().build().map_err(|e| AcceptError::Client(e.to_string()))?;
        let timeout = Duration::from_secs_f64(arm.startup_timeout_s);
        let exit = process.as_ref().map(ServerProcess::exit_watch);
        let health = format!("{base_url}{}", arm.health);
        let mut server = ArmServer {
            name: arm.name.clone(),
            base_url,
            model: plan.request.model.clone(),
            log,
            startup_s: 0.0,
            process,
        };
        match wait_healthy(&client, &health, clock, timeout, exit).await {
            Ok((t_ns, _polls)) => {
                server.startup_s = t_ns as f64 / 1e9;
                Ok(server)
            }
            Err(e) => {
                server.stop().await;
                Err(AcceptError::Arm(e))
            }
        }
    }

    /// Stops a spawned server; `None` for an external one.
    pub async fn stop(&mut self) -> Option<StopRecord> {
        match self.process.take() {
            Some(p) => Some(p.stop(STOP_GRACE).await),
            None => None,
        }
    }
}
