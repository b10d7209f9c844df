//! CPU time of this process and of its named threads, from `/proc` (Linux only):
//! `utime + stime` of `/proc/self/stat` (what `getrusage(RUSAGE_SELF)` reports, at
//! clock-tick resolution) and of each `/proc/self/task/<tid>/stat`, grouped by thread
//! name prefix so that the client runtime's threads and the fake server's threads are
//! told apart. Ticks are taken as 1/100 s (USER_HZ, fixed at 100 by the Linux ABI on
//! the architectures we run on). Must not change any thread or process setting.

use std::path::Path;

use super::BenchError;

/// Clock ticks per second of `/proc/.../stat` times.
pub const TICKS_PER_S: f64 = 100.0;

/// Thread name and `utime + stime` ticks of one `stat` file's contents.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    // After the name: state (field 3) ... utime (field 14), stime (field 15).
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

fn read_stat(path: &Path) -> Result<(String, u64), BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::Cpu(format!("{}: {e}", path.display())))?;
    parse_stat(&text).ok_or_else(|| BenchError::Cpu(format!("{}: unexpected format", path.display())))
}

/// CPU seconds of the whole process (all threads, living and exited).
pub fn process_cpu_s() -> Result<f64, BenchError> {
    Ok(read_stat(Path::new("/proc/self/stat"))?.1 as f64 / TICKS_PER_S)
}

/// CPU seconds of the living threads whose name starts with `prefix`.
pub fn threads_cpu_s(prefix: &str) -> Result<f64, BenchError> {
    let dir = std::fs::read_dir("/proc/self/task").map_err(|e| BenchError::Cpu(format!("/proc/self/task: {e}")))?;
    let mut ticks = 0u64;
    for entry in dir.flatten() {
        // A thread may exit between listing and reading: skip it.
        if let Ok((name, t)) = read_stat(&entry.path().join("stat"))
            && name.starts_with(prefix)
        {
            ticks += t;
        }
    }
    Ok(ticks as f64 / TICKS_PER_S)
}

/// Busy CPU seconds of the whole machine so far (every process, ours included): the
/// first line of `/proc/stat` minus idle and iowait; `None` when unreadable.
pub fn machine_busy_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> =
        text.lines().next()?.split_whitespace().skip(1).map(|t| t.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: u64 = ticks.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, t)| t).sum();
    Some(busy as f64 / TICKS_PER_S)
}

/// A snapshot of the three counters a benchmark reports.
#[derive(Debug, Clone, Copy)]
pub struct CpuSnapshot {
    pub process_s: f64,
    pub client_s: f64,
    pub server_s: f64,
}

pub fn snapshot(client_prefix: &str, server_prefix: &str) -> Result<CpuSnapshot, BenchError> {
    Ok(CpuSnapshot {
        process_s: process_cpu_s()?,
        client_s: threads_cpu_s(client_prefix)?,
        server_s: threads_cpu_s(server_prefix)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_awkward_names() {
        let line = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 37 0 0 20 0 1 0 100 0 0";
        assert_eq!(parse_stat(line), Some(("my (odd) name".to_string(), 287)));
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        assert!(process_cpu_s().is_ok());
        assert!(machine_busy_s().is_some_and(|b| b > 0.0));
    }
}
