//! Where the noise of a finished study comes from (`harness noise DIR` is
//! `commands::noise`; a report's `analysis.noise` section uses it too). Reads the
//! frozen plan and the cell summaries (of a finished study, through
//! `evidence::Sealed`), and decomposes each measure's variance (in
//! log units) into blocks (drift over time), fresh servers within a block (start to
//! start, and in a sequential block the time between one server's turn and the
//! next's) and repeats of the same cell on one server (`stats::nested`).
//!
//! Meant for an A/A plan whose arms are one build (`plans/noise-cpu.toml`): every
//! arm is a server of the block, and the confirmation cells that share a load shape
//! (load, concurrency or rate, count) are repeats. Blocks missing a value of the
//! design (a fault, a failed cell) are left out and counted. A plan that names
//! measures in `analysis.noise` gets the same decomposition in its report
//! (`evidence.json` `noise`, from the report's recomputed summaries), which replay
//! recomputes. When the blocks ran as Slurm array tasks on more than one machine
//! (`run.json` `executor`), the machine becomes a level above the block
//! (`stats::nested_by_machine`), and a warning says so when it holds most of the
//! variance. Must not run anything or write into the evidence directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::evidence::{PLAN_FILE, SealError, Sealed, cell_summary_path};
use crate::metrics::CellSummary;
use crate::plan::{CellKind, FrozenPlan, Metric};
use crate::stats::Nested;

#[derive(Debug, thiserror::Error)]
pub enum NoiseError {
    #[error("{dir}: {message}")]
    Plan { dir: PathBuf, message: String },
    #[error("unknown metric {0:?} (one of: {1})")]
    Metric(String, String),
    #[error("{0}")]
    Design(String),
    #[error("cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
    #[error(transparent)]
    Sealed(#[from] SealError),
}

impl crate::BadInput for NoiseError {
    /// Every error here is about the input (the directory, the flags).
    fn is_bad_input(&self) -> bool {
        !matches!(self, NoiseError::Write { .. })
    }
}

/// One cell group's decomposition of one measure.
#[derive(Debug, Clone, Serialize)]
pub struct GroupNoise {
    /// The cells taken as repeats (one load shape).
    pub cells: Vec<String>,
    pub metric: Metric,
    /// The arms taken as the block's servers.
    pub servers: Vec<String>,
    /// Confirmation blocks used, and those left out for a missing value.
    pub blocks_used: Vec<u32>,
    pub blocks_left_out: Vec<u32>,
    pub decomposition: Nested,
    /// The SD of a paired log-ratio of two servers of one block, one cell each.
    pub paired_sd_one_cell: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NoiseReport {
    pub study: String,
    pub plan_sha256: String,
    pub rounds: u32,
    pub coverage: f64,
    pub groups: Vec<GroupNoise>,
    /// The machine that ran each block, when the blocks ran on more than one
    /// (a dispatched study); empty otherwise.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub machine_of_block: BTreeMap<u32, String>,
    /// When the machine holds more than half of a measure's variance.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The share of the variance above which the machine level is warned about.
pub const MACHINE_WARNING_SHARE: f64 = 0.5;

/// What makes two cells repeats of one another.
fn shape(cell: &crate::plan::Cell) -> String {
    format!("{:?}|{:?}|{:?}|{:?}|{:?}", cell.load, cell.count, cell.input_tokens, cell.endpoint, cell.recorder)
}

fn summary(ev: &Sealed, b: u32, arm: &str, cell: &str) -> Option<CellSummary> {
    ev.read_json(&cell_summary_path(b, arm, cell)).ok()?
}

/// Decomposes the finished study in `dir` (see the module doc), from its stored
/// cell summaries, opened through [`Sealed`] (refused unless finished and as sealed).
pub fn analyse(dir: &Path, metrics: &[Metric]) -> Result<NoiseReport, NoiseError> {
    let ev = Sealed::open(dir)?;
    let frozen: FrozenPlan = crate::plan::freeze(ev.read(PLAN_FILE)?)
        .map_err(|e| NoiseError::Plan { dir: dir.to_path_buf(), message: e.to_string() })?;
    // The machine of each block, from the sealed run.json (a dispatched study).
    let machines = ev
        .read_json::<crate::evidence::RunRecord>(crate::evidence::RUN_FILE)
        .ok()
        .flatten()
        .and_then(|r| r.executor)
        .map(|e| e.machine_of_blocks())
        .unwrap_or_default();
    decompose(&frozen, metrics, &machines, |b, arm, cell| summary(&ev, b, arm, cell))
        .map_err(|e| NoiseError::Design(format!("{}: {e}", dir.display())))
}

/// The machine of each block of a dispatched study (`run.json` `executor`); empty
/// for a local one or an unreadable record.
pub fn machine_of_block(dir: &Path) -> BTreeMap<u32, String> {
    crate::evidence::read_input(&dir.join(crate::evidence::RUN_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<crate::evidence::RunRecord>(&b).ok())
        .and_then(|r| r.executor)
        .map(|e| e.machine_of_blocks())
        .unwrap_or_default()
}

/// Decomposes each of `metrics` of the study of `frozen` whose cell summaries
/// `summary_of(block, arm, cell)` gives (`None`: no summary; the report passes its
/// recomputed ones), with the machine of each block when they ran on several
/// (`machines`, empty otherwise). `Err`: why the design cannot be decomposed.
pub fn decompose(
    frozen: &FrozenPlan,
    metrics: &[Metric],
    machines: &BTreeMap<u32, String>,
    summary_of: impl Fn(u32, &str, &str) -> Option<CellSummary>,
) -> Result<NoiseReport, String> {
    let several = machines.values().collect::<std::collections::BTreeSet<_>>().len() > 1;
    let plan = &frozen.plan;
    let servers: Vec<String> = plan.arms.iter().map(|a| a.name.clone()).collect();
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for c in plan.cells.iter().filter(|c| c.kind == CellKind::Confirmation) {
        let key = shape(c);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, cells)) => cells.push(c.name.clone()),
            None => groups.push((key, vec![c.name.clone()])),
        }
    }
    if plan.blocks.count < 2 || groups.is_empty() {
        return Err(format!(
            "a decomposition needs at least 2 confirmation blocks and a confirmation cell (the plan has {} blocks)",
            plan.blocks.count
        ));
    }
    let mut out = Vec::new();
    for (_, cells) in &groups {
        for &metric in metrics {
            let mut y = Vec::new();
            let (mut used, mut left) = (Vec::new(), Vec::new());
            for b in 0..plan.blocks.count {
                let block: Option<Vec<Vec<f64>>> = servers
                    .iter()
                    .map(|arm| {
                        cells
                            .iter()
                            .map(|c| summary_of(b, arm, c)?.metric(metric).filter(|v| *v > 0.0).map(f64::ln))
                            .collect()
                    })
                    .collect();
                match block {
                    Some(v) => {
                        y.push(v);
                        used.push(b);
                    }
                    None => left.push(b),
                }
            }
            let names: Vec<&String> = used.iter().filter_map(|b| machines.get(b)).collect();
            let decomposition = if several && names.len() == used.len() {
                let mut labels: Vec<&String> = names.clone();
                labels.sort();
                labels.dedup();
                let index: Vec<usize> = names.iter().map(|n| labels.iter().position(|l| l == n).unwrap_or(0)).collect();
                crate::stats::nested_by_machine(&y, &index)
            } else {
                crate::stats::nested(&y)
            }
            .map_err(|e| format!("cells {} metric {}: {e}", cells.join(", "), metric.as_str()))?;
            let paired_sd_one_cell = decomposition.paired_sd(1);
            out.push(GroupNoise {
                cells: cells.clone(),
                metric,
                servers: servers.clone(),
                blocks_used: used,
                blocks_left_out: left,
                decomposition,
                paired_sd_one_cell,
            });
        }
    }
    let mut warnings = Vec::new();
    for g in &out {
        let total: f64 = g.decomposition.components.iter().map(|c| c.variance).sum();
        let Some(m) = g.decomposition.component("machine").filter(|_| total > 0.0) else { continue };
        let share = m.variance / total;
        if share > MACHINE_WARNING_SHARE {
            warnings.push(format!(
                "the machine explains {:.0}% of the variance of {} over cells [{}]: blocks differ more from machine \
                 to machine than within one. Pairs stay within a block, so the claims' paired effects are not biased, \
                 but absolute values depend on where a block ran; compare the per-block effects by machine in \
                 report.md",
                share * 100.0,
                g.metric.as_str(),
                g.cells.join(", ")
            ));
        }
    }
    Ok(NoiseReport {
        study: plan.study.name.clone(),
        plan_sha256: frozen.sha256.clone(),
        rounds: plan.blocks.rounds,
        coverage: crate::stats::COMPONENT_COVERAGE,
        groups: out,
        machine_of_block: if several { machines.clone() } else { BTreeMap::new() },
        warnings,
    })
}

impl NoiseReport {
    pub fn render_text(&self) -> String {
        let mut o = format!(
            "noise decomposition of study {} (blocks.rounds = {}; SDs in log units, {:.0}% intervals)\n",
            self.study,
            self.rounds,
            self.coverage * 100.0
        );
        if !self.machine_of_block.is_empty() {
            let mut by: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
            for (b, m) in &self.machine_of_block {
                by.entry(m.as_str()).or_default().push(*b);
            }
            let list: Vec<String> = by.iter().map(|(m, b)| format!("{m}: {b:?}")).collect();
            o.push_str(&format!(
                "the blocks ran on {} machines ({}): the machine is a level above the block where a machine ran two \
                 or more blocks\n",
                by.len(),
                list.join("; ")
            ));
        }
        for g in &self.groups {
            let d = &g.decomposition;
            let total: f64 = d.components.iter().map(|c| c.variance).sum();
            o.push_str(&format!(
                "\n{} over cells [{}]: {} blocks x {} servers ({}) x {} repeats{}\n",
                g.metric.as_str(),
                g.cells.join(", "),
                d.blocks,
                d.servers,
                g.servers.join(", "),
                d.repeats,
                if g.blocks_left_out.is_empty() {
                    String::new()
                } else {
                    format!("; blocks left out for a missing value: {:?}", g.blocks_left_out)
                }
            ));
            o.push_str("  level    SD       interval            df   share\n");
            for c in &d.components {
                let share = if total > 0.0 { c.variance / total * 100.0 } else { 0.0 };
                o.push_str(&format!(
                    "  {:<8} {:<8.4} [{:.4}, {:.4}]  {:>4}  {:>4.0}%{}\n",
                    c.level,
                    c.sd,
                    c.sd_interval.0,
                    c.sd_interval.1,
                    c.df,
                    share,
                    if c.clamped { " (estimate below 0, set to 0)" } else { "" }
                ));
            }
            o.push_str(&format!(
                "  paired log-ratio of two servers in one block, one cell each: SD {:.4} (block drift cancels in the \
                 pair)\n",
                g.paired_sd_one_cell
            ));
        }
        for w in &self.warnings {
            o.push_str(&format!("\nwarning: {w}\n"));
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "[study]\nname = \"n\"\nseed = 1\n\n[request]\nmodel = \"m\"\noutput_tokens = 4\n\n\
        [prompts]\nsource = \"random\"\nlengths = [8]\ndocuments = 2\nmax_token_id = 255\n\n[warmup]\nprompts = 0\n\n\
        [timing]\nsettle_s = 0.0\nrequest_timeout_s = 30\ndrain_timeout_s = 30\n\n[blocks]\ncount = 6\n\
        arm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
        [[arms]]\nname = \"a\"\nrole = \"control\"\nargv = [\"e\", \"{port}\"]\nport = 18000\n\n\
        [[arms]]\nname = \"b\"\nrole = \"candidate\"\nargv = [\"e\", \"{port}\"]\nport = 18001\n\n\
        [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 2\n";

    /// Throughput of block b, arm `arm`: machine `b >= 3` is twice as fast.
    fn summary(b: u32, arm: &str) -> Option<CellSummary> {
        let wiggle = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0][b as usize] * if arm == "a" { 1.0 } else { 1.005 };
        let machine = if b >= 3 { 2.0 } else { 1.0 };
        Some(CellSummary { request_throughput_rps: 10.0 * machine * wiggle, ..Default::default() })
    }

    #[test]
    fn blocks_on_two_machines_gain_a_machine_level_and_a_warning_when_it_holds_most_of_the_variance() {
        let frozen = crate::plan::freeze(PLAN.as_bytes().to_vec()).unwrap();
        let metric = [Metric::ThroughputRps];
        let machines: BTreeMap<u32, String> =
            (0..6).map(|b| (b, if b >= 3 { "node-b" } else { "node-a" }.to_string())).collect();
        let r = decompose(&frozen, &metric, &machines, |b, arm, _| summary(b, arm)).unwrap();
        let levels: Vec<&str> = r.groups[0].decomposition.components.iter().map(|c| c.level).collect();
        assert_eq!(levels, ["machine", "block", "server"]);
        assert_eq!(r.groups[0].decomposition.machines, 2);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("the machine explains") && r.render_text().contains("2 machines"));
        // One machine (or none recorded): the three-level design, no warning.
        let one: BTreeMap<u32, String> = (0..6).map(|b| (b, "node-a".to_string())).collect();
        for m in [one, BTreeMap::new()] {
            let r = decompose(&frozen, &metric, &m, |b, arm, _| summary(b, arm)).unwrap();
            assert_eq!(r.groups[0].decomposition.components[0].level, "block");
            assert!(r.warnings.is_empty() && r.machine_of_block.is_empty());
        }
    }
}
