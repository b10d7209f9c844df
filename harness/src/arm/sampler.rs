//! Once-a-second observation of a running server: a Prometheus scrape of `/metrics`
//! (raw text, `scrapes.jsonl`) and its memory (`memory.jsonl`: VmRSS and VmHWM of
//! the server PID from `/proc/PID/status`, VmRSS summed over its whole process
//! group (vLLM runs the model in a separate EngineCore process the server PID's RSS
//! misses), and the GPU memory of that group from `nvidia-smi` where that exists
//! (with every GPU's used and total memory, `--query-gpu`),
//! with an error when compute apps are listed but none is in the group: a container
//! without the host PID namespace sees other PIDs, and 0 MiB would be a lie). Every line carries the study time and the
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

/// One GPU's memory as `nvidia-smi --query-gpu` reports it (every process on it,
/// the server's and others').
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDevice {
    pub index: u32,
    pub used_mib: u64,
    pub total_mib: u64,
}

#[derive(Serialize)]
struct MemoryLine<'a> {
    t_ns: u64,
    phase: &'a str,
    pid: u32,
    rss_bytes: Option<u64>,
    hwm_bytes: Option<u64>,
    /// VmRSS summed over every process of the server's process group, and how many
    /// processes that is (the server and its workers).
    group_rss_bytes: Option<u64>,
    group_processes: u32,
    /// `None` where nvidia-smi does not exist; compute apps of the server's group.
    gpu: Option<Vec<GpuProcess>>,
    gpu_error: Option<String>,
    /// Every GPU's used and total memory (`None` without nvidia-smi): what the
    /// devices hold whether or not the server's processes could be matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_devices: Option<Vec<GpuDevice>>,
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

/// VmRSS summed over the processes of process group `group` (under `proc`, the
/// `/proc` directory), and how many there are; `None` when none is found.
pub fn group_rss(proc: &Path, group: u32) -> (Option<u64>, u32) {
    let Ok(entries) = std::fs::read_dir(proc) else { return (None, 0) };
    let (mut total, mut n) = (0u64, 0u32);
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if pgrp_in(proc, pid) != Some(group) {
            continue;
        }
        let status = std::fs::read_to_string(proc.join(pid.to_string()).join("status")).unwrap_or_default();
        let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|r| r.split_whitespace().next());
        // A kernel thread or a process that exited meanwhile has no VmRSS.
        if let Some(kb) = kb.and_then(|k| k.parse::<u64>().ok()) {
            total += kb * 1024;
            n += 1;
        }
    }
    ((n > 0).then_some(total), n)
}

/// The process group of `pid` (field 5 of `PROC/PID/stat`).
fn pgrp_in(proc: &Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
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

/// The CSV rows (no header, no units) `nvidia-smi` gives for `query`.
async fn smi_csv(smi: &Path, query: &str) -> Result<String, String> {
    let out =
        tokio::process::Command::new(smi).args([query, "--format=csv,noheader,nounits"]).kill_on_drop(true).output();
    let out = tokio::time::timeout(NVIDIA_SMI_TIMEOUT, out)
        .await
        .map_err(|_| "nvidia-smi timed out".to_string())?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("nvidia-smi: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// GPU memory of the compute processes in the process group `group`.
async fn gpu_usage(smi: &Path, group: u32) -> Result<Vec<GpuProcess>, String> {
    group_apps(&smi_csv(smi, "--query-compute-apps=pid,used_memory").await?, group, pgrp)
}

/// Every GPU's memory: `nvidia-smi --query-gpu=index,memory.used,memory.total`.
async fn gpu_devices(smi: &Path) -> Result<Vec<GpuDevice>, String> {
    parse_devices(&smi_csv(smi, "--query-gpu=index,memory.used,memory.total").await?)
}

/// Rows `index, used MiB, total MiB`; a row that does not parse is an error.
fn parse_devices(csv: &str) -> Result<Vec<GpuDevice>, String> {
    csv.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            match f.as_slice() {
                [i, u, t] => match (i.parse(), u.parse(), t.parse()) {
                    (Ok(index), Ok(used_mib), Ok(total_mib)) => Ok(GpuDevice { index, used_mib, total_mib }),
                    _ => Err(format!("nvidia-smi --query-gpu: cannot read {l:?}")),
                },
                _ => Err(format!("nvidia-smi --query-gpu: cannot read {l:?}")),
            }
        })
        .collect()
}

/// The compute apps (nvidia-smi CSV rows `pid, used MiB`) in process group `group`
/// (`pgrp_of` finds a PID's group); an error when rows exist but none matches.
fn group_apps(csv: &str, group: u32, pgrp_of: impl Fn(u32) -> Option<u32>) -> Result<Vec<GpuProcess>, String> {
    let all: Vec<GpuProcess> = csv
        .lines()
        .filter_map(|l| {
            let (pid, mib) = l.split_once(',')?;
            Some(GpuProcess { pid: pid.trim().parse().ok()?, used_mib: mib.trim().parse().ok()? })
        })
        .collect();
    let n = all.len();
    let mine: Vec<GpuProcess> = all.into_iter().filter(|g| g.pid == group || pgrp_of(g.pid) == Some(group)).collect();
    if n > 0 && mine.is_empty() {
        return Err(format!(
            "nvidia-smi lists {n} compute app(s), none in the server's process group {group}: their PIDs are \
             not this machine's view (a container without the host PID namespace?), so the server's GPU memory \
             is unknown, not 0"
        ));
    }
    Ok(mine)
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
                    let (gpu, mut gpu_error) = match &spec.nvidia_smi {
                        None => (None, None),
                        Some(smi) => match gpu_usage(smi, pid).await {
                            Ok(g) => (Some(g), None),
                            Err(e) => (None, Some(e)),
                        },
                    };
                    let gpu_devices = match &spec.nvidia_smi {
                        None => None,
                        Some(smi) => match gpu_devices(smi).await {
                            Ok(d) => Some(d),
                            Err(e) => {
                                gpu_error = Some(gpu_error.map_or(e.clone(), |g| format!("{g}; {e}")));
                                None
                            }
                        },
                    };
                    let (group_rss_bytes, group_processes) = group_rss(Path::new("/proc"), pid);
                    let line = MemoryLine {
                        t_ns,
                        phase: &phase,
                        pid,
                        rss_bytes,
                        hwm_bytes,
                        group_rss_bytes,
                        group_processes,
                        gpu,
                        gpu_error,
                        gpu_devices,
                    };
                    mem.push(&line)?;
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
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn a_process_group_s_rss_sums_its_processes() {
        // This test process and a child in its own new group: the group is the
        // child alone; our own group holds at least this process.
        let mut child = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = child.id();
        let (rss, n) = group_rss(Path::new("/proc"), pid);
        // Its own VmRSS (the value moves while the child execs, so only its presence).
        assert_eq!(n, 1, "the child alone");
        assert!(rss.is_some_and(|b| b > 0), "{rss:?}");
        let own = pgrp(std::process::id()).unwrap();
        let (sum, k) = group_rss(Path::new("/proc"), own);
        assert!(k >= 1 && sum.unwrap() >= read_rss(std::process::id()).0.unwrap());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(group_rss(Path::new("/nonexistent"), 1), (None, 0));
    }

    #[test]
    fn gpu_rows_of_other_groups_are_an_error_not_zero() {
        let groups = |pid: u32| Some(if pid == 11 || pid == 12 { 10 } else { pid });
        let csv = "11, 300\n12, 7000\n99, 5\n";
        let mine = group_apps(csv, 10, groups).unwrap();
        assert_eq!(mine, [GpuProcess { pid: 11, used_mib: 300 }, GpuProcess { pid: 12, used_mib: 7000 }]);
        // Rows exist, none in the group (a container's PID namespace): an error.
        let err = group_apps(csv, 42, groups).unwrap_err();
        assert!(err.contains("lists 3 compute app(s), none in the server's process group 42"), "{err}");
        // No rows at all: no GPU process, truly none.
        assert_eq!(group_apps("", 42, groups).unwrap(), []);
    }

    #[test]
    fn every_gpu_s_memory_is_read_and_a_bad_row_is_an_error() {
        let d = parse_devices("0, 70123, 81559\n1, 0, 81559\n").unwrap();
        assert_eq!(d[0], GpuDevice { index: 0, used_mib: 70123, total_mib: 81559 });
        assert_eq!(d.len(), 2);
        assert!(parse_devices("0, [N/A], 81559\n").unwrap_err().contains("cannot read"));
        assert_eq!(parse_devices("").unwrap(), []);
    }

    #[test]
    fn reads_own_rss_and_group() {
        let pid = std::process::id();
        let (rss, hwm) = read_rss(pid);
        assert!(rss.unwrap() > 0 && hwm.unwrap() >= rss.unwrap());
        assert!(pgrp(pid).is_some());
    }
}
