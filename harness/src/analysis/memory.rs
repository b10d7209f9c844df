//! What a unit's `memory.jsonl` says, for report.md's arms section: the peak
//! resident memory of the server's whole process group (vLLM's EngineCore is a
//! separate process), the peak GPU memory of its own compute processes, each
//! device's peak use, and the first GPU error (a server whose GPU memory is unknown
//! says so instead of showing 0). Presentation only; must not affect a decision.

use serde::Deserialize;

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    group_rss_bytes: Option<u64>,
    #[serde(default)]
    group_processes: u32,
    #[serde(default)]
    gpu: Option<Vec<Proc>>,
    #[serde(default)]
    gpu_error: Option<String>,
    #[serde(default)]
    gpu_devices: Option<Vec<Device>>,
}

#[derive(Deserialize)]
struct Proc {
    used_mib: u64,
}

#[derive(Deserialize)]
struct Device {
    index: u32,
    used_mib: u64,
    total_mib: u64,
}

/// The peaks of one unit's samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPeaks {
    pub samples: u64,
    pub group_rss_bytes: Option<u64>,
    pub group_processes: u32,
    /// Sum over the group's compute processes, its largest sample.
    pub gpu_mib: Option<u64>,
    /// Per device: (index, peak used, total).
    pub devices: Vec<(u32, u64, u64)>,
    pub gpu_error: Option<String>,
}

/// The peaks of `text` (a `memory.jsonl`); unreadable lines are skipped.
pub fn peaks(text: &str) -> MemoryPeaks {
    let mut p = MemoryPeaks::default();
    for l in text.lines().filter_map(|l| serde_json::from_str::<Line>(l).ok()) {
        p.samples += 1;
        if let Some(r) = l.group_rss_bytes
            && p.group_rss_bytes.is_none_or(|m| r > m)
        {
            p.group_rss_bytes = Some(r);
            p.group_processes = l.group_processes;
        }
        if let Some(g) = l.gpu {
            let sum: u64 = g.iter().map(|x| x.used_mib).sum();
            p.gpu_mib = Some(p.gpu_mib.map_or(sum, |m| m.max(sum)));
        }
        if p.gpu_error.is_none() {
            p.gpu_error = l.gpu_error;
        }
        for d in l.gpu_devices.unwrap_or_default() {
            match p.devices.iter_mut().find(|x| x.0 == d.index) {
                Some(x) => x.1 = x.1.max(d.used_mib),
                None => p.devices.push((d.index, d.used_mib, d.total_mib)),
            }
        }
    }
    p
}

impl MemoryPeaks {
    /// One line for report.md, or `None` without samples.
    pub fn line(&self) -> Option<String> {
        if self.samples == 0 {
            return None;
        }
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let rss = self
            .group_rss_bytes
            .map_or("n/a".to_string(), |b| format!("{:.0} MiB over {} process(es)", mib(b), self.group_processes));
        let gpu = match (&self.gpu_mib, &self.gpu_error) {
            (_, Some(e)) => format!("GPU memory of the server unknown ({e})"),
            (Some(g), None) => format!("GPU {g} MiB"),
            (None, None) => "no GPU".to_string(),
        };
        let devices: Vec<String> =
            self.devices.iter().map(|(i, u, t)| format!("device {i} peak {u} of {t} MiB")).collect();
        let devices = if devices.is_empty() { String::new() } else { format!("; {}", devices.join(", ")) };
        Some(format!("peak resident memory {rss}; {gpu}{devices} ({} samples)", self.samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_take_the_largest_sample_and_an_unknown_gpu_says_why() {
        let text = r#"{"group_rss_bytes": 104857600, "group_processes": 1, "gpu": null, "gpu_error": null}
{"group_rss_bytes": 209715200, "group_processes": 2, "gpu": [{"pid": 1, "used_mib": 300}, {"pid": 2, "used_mib": 700}]}
{"group_rss_bytes": 157286400, "group_processes": 2, "gpu": [{"pid": 1, "used_mib": 100}], "gpu_devices": [{"index": 0, "used_mib": 1200, "total_mib": 81559}]}
not json
"#;
        let p = peaks(text);
        assert_eq!((p.samples, p.group_rss_bytes, p.group_processes, p.gpu_mib), (3, Some(209715200), 2, Some(1000)));
        assert_eq!(p.devices, [(0, 1200, 81559)]);
        let line = p.line().unwrap();
        assert!(
            line.starts_with("peak resident memory 200 MiB over 2 process(es); GPU 1000 MiB; device 0 peak 1200"),
            "{line}"
        );
        let unknown = peaks(
            r#"{"group_rss_bytes": 1048576, "group_processes": 1, "gpu": null, "gpu_error": "nvidia-smi lists 1 compute app(s), none in the server's process group 7"}"#,
        );
        assert!(
            unknown.line().unwrap().contains("GPU memory of the server unknown (nvidia-smi lists 1"),
            "{unknown:?}"
        );
        assert_eq!(peaks("").line(), None);
    }
}
