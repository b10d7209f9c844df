//! What an array task was given, from Slurm's allocation: who it is
//! (`SLURM_JOB_ID`, `SLURM_ARRAY_JOB_ID`, `SLURM_ARRAY_TASK_ID`), its CPUs (the
//! affinity Slurm bound it to, else the allocation's `CPU_IDs` from `scontrol show
//! job -d`, which the worker then pins itself to, so that its servers inherit them
//! and two tasks on one node never share a CPU), and its GPUs (`SLURM_JOB_GPUS`,
//! `CUDA_VISIBLE_DEVICES`, which the servers inherit, and `nvidia-smi -L`). Ports
//! are the plan's (`Plan::dispatched_port`). Owns reading these facts and the pin.
//! Must not choose CPUs or GPUs of its own.

use super::SlurmError;
use crate::evidence::GpuFacts;

/// The task's identity in Slurm.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskIdentity {
    pub job_id: String,
    pub array_job_id: String,
    pub array_task: u32,
}

impl TaskIdentity {
    /// From the task's environment; `block` must be its array index.
    pub fn from_env(block: u32) -> Result<TaskIdentity, SlurmError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let Some(job_id) = var("SLURM_JOB_ID") else {
            return Err(SlurmError::Worker {
                block,
                why: "SLURM_JOB_ID is not set: `harness run --block` runs inside a Slurm array task (the study's \
                      slurm/blocks.sbatch)"
                    .into(),
            });
        };
        let array_job_id = var("SLURM_ARRAY_JOB_ID").unwrap_or_else(|| job_id.clone());
        let array_task = var("SLURM_ARRAY_TASK_ID").and_then(|t| t.parse().ok()).unwrap_or(block);
        if array_task != block {
            return Err(SlurmError::Worker {
                block,
                why: format!("this is array task {array_task}: a task runs the block of its own index"),
            });
        }
        Ok(TaskIdentity { job_id, array_job_id, array_task })
    }

    /// `<array job>_<task>`, Slurm's name of the task.
    pub fn label(&self) -> String {
        format!("{}_{}", self.array_job_id, self.array_task)
    }
}

/// The CPUs a task runs on, and where that came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCpus {
    pub list: Option<String>,
    /// `affinity`, `scontrol` or `none` (see `TaskPlacement::cpus_source`).
    pub source: &'static str,
}

fn online() -> Option<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    crate::host::parse_cpu_list(text.trim()).ok()
}

/// The task's CPUs: its affinity when Slurm bound it to fewer than the node's
/// online CPUs; else the allocation's `CPU_IDs`, pinned here (the process and every
/// thread; servers started later inherit it); else unpinned.
pub fn take_cpus(task: &TaskIdentity, node: &str) -> TaskCpus {
    let mine = crate::host::allowed_cpus(None).and_then(|l| crate::host::parse_cpu_list(&l).ok());
    let online = online();
    if let (Some(mine), Some(online)) = (&mine, &online)
        && mine.len() < online.len()
    {
        return TaskCpus { list: Some(crate::host::cpu_list(mine)), source: "affinity" };
    }
    let label = task.label();
    let allocated = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
        .and_then(|rt| rt.block_on(super::cli::allocated_cpus(&label, node)));
    let ids = allocated.and_then(|l| crate::host::parse_cpu_list(&l).ok());
    match ids {
        // Slurm's CPU ids are the kernel's on ordinary nodes; ids the kernel does not
        // have are not pinned (recorded as unknown).
        Some(ids) if online.as_ref().is_none_or(|o| ids.iter().all(|c| o.contains(c))) => {
            match crate::host::pin_this_process(&ids) {
                Ok(list) => TaskCpus { list: Some(list), source: "scontrol" },
                Err(e) => {
                    eprintln!(
                        "harness: worker: cannot pin to the allocation's CPUs {}: {e}",
                        crate::host::cpu_list(&ids)
                    );
                    TaskCpus { list: None, source: "none" }
                }
            }
        }
        _ => TaskCpus { list: None, source: "none" },
    }
}

/// The task's GPUs as Slurm and `nvidia-smi` see them.
pub fn gpus() -> GpuFacts {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let devices = crate::arm::find_nvidia_smi()
        .and_then(|smi| std::process::Command::new(smi).arg("-L").output().ok())
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default();
    GpuFacts { slurm_job_gpus: var("SLURM_JOB_GPUS"), cuda_visible_devices: var("CUDA_VISIBLE_DEVICES"), devices }
}
