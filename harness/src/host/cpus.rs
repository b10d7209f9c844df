//! CPU sets: the kernel's list spelling (`0-2,5`), what a process may run on
//! (`Cpus_allowed_list` of each of its threads), and pinning this process
//! (`sched_setaffinity`). Linux only: elsewhere pinning is refused. Must not decide
//! which CPUs anything runs on (the plan does).

/// The kernel's list spelling of a CPU set (`[0, 1, 2, 5]` -> `0-2,5`), sorted, each
/// CPU once: what `Cpus_allowed_list` shows, so a plan's set and a process's
/// compare as text.
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j == i { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// Reads a kernel CPU list (`0-2,5`) back into CPUs; `Err` names what is wrong.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let num = |s: &str| s.trim().parse::<u32>().map_err(|_| format!("{s:?} in {text:?} is not a CPU number"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("{part:?} in {text:?} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

/// `Cpus_allowed_list` of process `pid` (`None`: this process's calling thread),
/// from `/proc/<pid>/status`; `None` when unreadable (the process is gone, or not
/// Linux).
pub fn allowed_cpus(pid: Option<u32>) -> Option<String> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/thread-self/status".to_string(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
}

/// The CPUs any thread of process `pid` may run on: the union of every thread's
/// `Cpus_allowed_list` (a server that re-pins its own workers shows here), in the
/// kernel's spelling; `None` when the process cannot be read.
pub fn process_cpus(pid: u32) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut all = Vec::new();
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("status")) else { continue };
        if let Some(list) = text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            all.extend(parse_cpu_list(list).ok()?);
        }
    }
    (!all.is_empty()).then(|| cpu_list(&all))
}

/// The largest CPU number a set may name (`CPU_SETSIZE - 1`).
pub const MAX_CPU: u32 = 1023;

/// A `cpu_set_t` holding `cpus`, built before a fork so that the child only calls
/// `sched_setaffinity` (async-signal-safe, no allocation).
#[cfg(target_os = "linux")]
pub fn cpu_set(cpus: &[u32]) -> Result<libc::cpu_set_t, String> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpus.is_empty() {
        return Err("an empty CPU set".into());
    }
    for &c in cpus {
        if c > MAX_CPU {
            return Err(format!("CPU {c} is beyond the largest CPU number a set can hold ({MAX_CPU})"));
        }
        // SAFETY: `c` is below CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    Ok(set)
}

/// Pins every thread of this process to `cpus` (threads started later inherit it
/// from the thread that starts them) and returns the CPUs its threads may now use
/// (the union over all of them, so a thread left off would show). A thread started
/// by a not-yet-pinned thread during the pass is caught by the next pass; passes
/// repeat until one finds no new thread. Refused when the kernel refuses any thread
/// (a CPU that is offline or outside the container's cpuset).
#[cfg(target_os = "linux")]
pub fn pin_this_process(cpus: &[u32]) -> Result<String, String> {
    let set = cpu_set(cpus)?;
    let mut pinned = std::collections::HashSet::new();
    loop {
        let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))?;
        let mut new = 0;
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<libc::pid_t>().ok()) else {
                continue;
            };
            if !pinned.insert(tid) {
                continue;
            }
            new += 1;
            // SAFETY: `set` is a valid cpu_set_t of the size passed.
            let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                // A thread that ended between the listing and the call is not an error.
                if e.raw_os_error() == Some(libc::ESRCH) {
                    continue;
                }
                return Err(format!("cannot pin this process to CPUs {}: {e}", cpu_list(cpus)));
            }
        }
        if new == 0 {
            break;
        }
    }
    process_cpus(std::process::id()).ok_or_else(|| "cannot read this process's threads' Cpus_allowed_list".into())
}

#[cfg(not(target_os = "linux"))]
pub fn pin_this_process(_cpus: &[u32]) -> Result<String, String> {
    Err("CPU sets are only supported on Linux".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip_in_the_kernels_spelling() {
        assert_eq!(cpu_list(&[5, 0, 1, 2, 2]), "0-2,5");
        assert_eq!(cpu_list(&[3]), "3");
        assert_eq!(cpu_list(&[0, 2, 4]), "0,2,4");
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list("7").unwrap(), vec![7]);
        assert!(parse_cpu_list("3-1").unwrap_err().contains("backwards"));
        assert!(parse_cpu_list("a").is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_empty_or_out_of_range_set_is_refused() {
        assert!(cpu_set(&[]).is_err());
        assert!(cpu_set(&[MAX_CPU + 1]).unwrap_err().contains("beyond"));
    }
}
