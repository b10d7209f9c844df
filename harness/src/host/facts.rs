//! The facts a session records about the machine it runs on (`run.json`
//! `sessions[].host`): CPU model, CPUs online, the harness's own CPU set, transparent
//! huge pages, the CPU frequency governor and the load average. Linux only: elsewhere
//! every fact is `None`. Must not decide anything from them.

use super::cpus::allowed_cpus;
use serde::{Deserialize, Serialize};

/// What a session saw of the machine when it started (`run.json` `sessions[].host`).
/// `None`: the file was not there or not readable (a VM without cpufreq has no
/// governor; that is a fact, not an error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// `model name` of the first processor in `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// `/sys/devices/system/cpu/online`, e.g. `0-1`.
    pub cpus_online: Option<String>,
    /// The harness's own CPU set when the session started (`Cpus_allowed_list`),
    /// before any `[client] cpus` pinning.
    pub cpus_allowed: Option<String>,
    /// Transparent huge pages: the selected mode of
    /// `/sys/kernel/mm/transparent_hugepage/enabled` (`always`, `madvise`, `never`).
    pub thp_enabled: Option<String>,
    /// The selected mode of `/sys/kernel/mm/transparent_hugepage/defrag`.
    pub thp_defrag: Option<String>,
    /// `scaling_governor` of CPU 0; `None` where the kernel offers no cpufreq (most
    /// VMs: the host sets the frequency and the guest cannot see it).
    pub cpufreq_governor: Option<String>,
    /// The 1-minute load average at the start: what else ran beside the study.
    pub loadavg_1m: Option<f64>,
}

/// Reads the facts now.
pub fn facts() -> HostFacts {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    HostFacts {
        cpu_model: read("/proc/cpuinfo").and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        }),
        cpus_online: read("/sys/devices/system/cpu/online"),
        cpus_allowed: allowed_cpus(None),
        thp_enabled: read("/sys/kernel/mm/transparent_hugepage/enabled").map(|s| selected_mode(&s)),
        thp_defrag: read("/sys/kernel/mm/transparent_hugepage/defrag").map(|s| selected_mode(&s)),
        cpufreq_governor: read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        loadavg_1m: loadavg_1m(),
    }
}

/// The bracketed choice of a sysfs mode file (`always [madvise] never` -> `madvise`);
/// the whole text when nothing is bracketed.
fn selected_mode(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or(text)
        .to_string()
}

/// The 1-minute load average (`/proc/loadavg`), to show what else ran beside a
/// measurement; `None` when unreadable.
pub fn loadavg_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// This machine's name: `SLURMD_NODENAME` inside a Slurm task (the node as the
/// cluster names it), else the kernel's host name; `None` when neither is known.
pub fn hostname() -> Option<String> {
    let slurm = std::env::var("SLURMD_NODENAME").ok().filter(|s| !s.trim().is_empty());
    slurm.or_else(|| {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
        Some(name.trim().to_string()).filter(|s| !s.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_modes_are_the_bracketed_word() {
        assert_eq!(selected_mode("always [madvise] never"), "madvise");
        assert_eq!(selected_mode("[always] defer defer+madvise madvise never"), "always");
        assert_eq!(selected_mode("odd"), "odd");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machines_facts_are_read() {
        let f = facts();
        let allowed = super::super::parse_cpu_list(f.cpus_allowed.as_deref().unwrap()).unwrap();
        assert!(!allowed.is_empty());
        assert!(f.loadavg_1m.is_some_and(|l| l >= 0.0));
    }
}
