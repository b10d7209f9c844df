//! Once-a-second observation of a running server: a Prometheus scrape of `/metrics`
//! (raw text, `scrapes.jsonl`) and its memory (`memory.jsonl`: VmRSS and VmHWM of
//! the server PID from `/proc/PID/status`, and the GPU memory of its process group
//! from `nvidia-smi` where that exists). Every line carries the study time and the
//! phase (`warmup`, `settle:<cell>`, `cell:<cell>`, `idle`). Must not parse metrics
//! into measures (replay and report do) and must not block the load: it runs in its
//! own task and only reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::ArmError;
use crate::evidence::JsonlStream;
use crate::load::StudyClock;

pub const SAMPLE_PERIOD: Duration = Duration::from_secs(1);
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Serialize)]
struct ScrapeLine<'a> {
    t_ns: u64,
    phase: &'a str,
    /// Study time the scrape's answer was complete.
    end_ns: u64,
    status: Option<u16>,
    text: Option<String>,
    error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_mib: u64,
}

#[derive(Serialize)]
struct MemoryLine<'a> {
    t_ns: u64,
    phase: &'a str,
    pid: u32,
    rss_bytes: Option<u64>,
    hwm_bytes: Option<u64>,
    /// `None` where nvidia-smi does not exist; compute apps of the server's group.
    gpu: Option<Vec<GpuProcess>>,
    gpu_error: Option<String>,
}

/// `VmRSS` and `VmHWM` of `pid`, in bytes.
pub fn read_rss(pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (None, None);
    };
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map(|k| k * 1024)
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`).
fn pgrp(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

/// `nvidia-smi` on PATH, if any.
pub fn find_nvidia_smi() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("nvidia-smi")).find(|p| p.is_file())
}

/// GPU memory of the compute processes in the process group `group`.
async fn gpu_usage(smi: &Path, group: u32) -> Result<Vec<GpuProcess>, String> {
    let out = tokio::process::Command::new(smi)
        .args(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(NVIDIA_SMI_TIMEOUT, out)
        .await
        .map_err(|_| "nvidia-smi timed out".to_string())?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("nvidia-smi: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let (pid, mib) = l.split_once(',')?;
            Some(GpuProcess { pid: pid.trim().parse().ok()?, used_mib: mib.trim().parse().ok()? })
        })
        .filter(|g| g.pid == group || pgrp(g.pid) == Some(group))
        .collect())
}

/// What the sampler needs.
pub struct SamplerSpec {
    pub metrics_url: String,
    /// The server PID (also its process group); `None` for an external arm.
    pub pid: Option<u32>,
    pub scrapes: PathBuf,
    pub memory: PathBuf,
    pub clock: StudyClock,
    pub phase: watch::Receiver<String>,
    pub nvidia_smi: Option<PathBuf>,
    /// The invocation's client (it carries the arm's headers).
    pub client: reqwest::Client,
}

pub struct Sampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(u64, u64), ArmError>>,
}

impl Sampler {
    /// Starts sampling now and then every `SAMPLE_PERIOD`.
    pub fn start(spec: SamplerSpec) -> Result<Sampler, ArmError> {
        let client = spec.client.clone();
        let mut scrapes = JsonlStream::create(&spec.scrapes)?;
        let mut memory = match spec.pid {
            Some(_) => Some(JsonlStream::create(&spec.memory)?),
            None => None,
        };
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.wait_for(|&s| s) => break,
                }
                let phase = spec.phase.borrow().clone();
                let t_ns = spec.clock.now_ns();
                let (status, text, error) = match client.get(&spec.metrics_url).timeout(SCRAPE_TIMEOUT).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        match r.text().await {
                            Ok(t) => (Some(status), Some(t), None),
                            Err(e) => (Some(status), None, Some(e.to_string())),
                        }
                    }
                    Err(e) => (None, None, Some(e.to_string())),
                };
                let end_ns = spec.clock.now_ns();
                scrapes.push(&ScrapeLine { t_ns, phase: &phase, end_ns, status, text, error })?;
                if let (Some(mem), Some(pid)) = (memory.as_mut(), spec.pid) {
                    let t_ns = spec.clock.now_ns();
                    let (rss_bytes, hwm_bytes) = read_rss(pid);
                    let (gpu, gpu_error) = match &spec.nvidia_smi {
                        None => (None, None),
                        Some(smi) => match gpu_usage(smi, pid).await {
                            Ok(g) => (Some(g), None),
                            Err(e) => (None, Some(e)),
                        },
                    };
                    mem.push(&MemoryLine { t_ns, phase: &phase, pid, rss_bytes, hwm_bytes, gpu, gpu_error })?;
                }
            }
            let n_scrapes = scrapes.finish()?;
            let n_memory = match memory {
                Some(m) => m.finish()?,
                None => 0,
            };
            Ok((n_scrapes, n_memory))
        });
        Ok(Sampler { stop, task })
    }

    /// Stops sampling and closes both files; returns their line counts.
    pub async fn finish(self) -> Result<(u64, u64), ArmError> {
        let _ = self.stop.send(true);
        self.task.await.map_err(|e| ArmError::Task(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_rss_and_group() {
        let pid = std::process::id();
        let (rss, hwm) = read_rss(pid);
        assert!(rss.unwrap() > 0 && hwm.unwrap() >= rss.unwrap());
        assert!(pgrp(pid).is_some());
    }
}
