//! The figures of `results/figures/`, each as SVG and as PNG (for quick viewing):
//! - `throughput_vs_latency`: every cell's output token throughput against its p95
//!   E2E latency from HTTP send, per arm (medians across blocks, faint per-block
//!   points), the cells of one sweep joined in load order (`tradeoff`);
//! - `latency_vs_load`: p95 E2E latency from intended arrival against offered load,
//!   per arm, for the open-loop cells: a faint point per block, a filled median. With
//!   a single load level a column of points says nothing about load: that cell gets
//!   `latency_<cell>` instead, its per-block chart (`PerBlock`);
//! - `throughput_<cell>`: for each closed-loop cell, request throughput per arm with
//!   one line per block joining that block's arms (paired values);
//! - `effect_<hypothesis>`: the hypothesis's metric per block for its two arms, its
//!   paired effect per block with the threshold, the median and its interval, and
//!   the verdict (`effect`);
//! - `dist_<cell>`: for each cell, ECDFs of TTFT (from HTTP send) and TPOT per arm,
//!   one line per block (requests are never pooled across blocks), each block's
//!   median marked.
//!
//! With `[slo]` targets, each is a dashed line where its quantity is drawn (E2E on
//! the latency charts, TTFT and TPOT on the ECDFs). Tick labels group thousands and
//! turn to seconds from 10 s (`axis`). Every title names the study and the plan hash
//! (first 12 hex digits); axes carry units. Text is drawn with DejaVu Sans, compiled
//! in and registered once (PNG text rendering needs a font; see
//! `assets/fonts/LICENSE`). Owns the data each figure shows and the drawing; must
//! not compute measures (`metrics` does) or decide anything (`stats` does).

mod axis;
mod effect;
mod plots;
mod style;
#[cfg(test)]
mod tests;
mod tradeoff;

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::{BitMapBackend, DrawingArea, DrawingBackend, IntoDrawingArea, SVGBackend};
use plotters::style::{FontStyle, register_font};

use super::ReportError;
use crate::analysis::claims::{Analysis, HypothesisReport};
use crate::analysis::study::Loaded;
use crate::evidence::write_bytes;
use crate::metrics::CellSummary;
use crate::plan::{MetricKind, ResolvedCell, ResolvedLoad, concurrency_cell_name, rate_cell_name};

pub use effect::EffectPerBlock;
pub use plots::{Distributions, LatencyVsLoad, PerBlock, Quantity, Series};
pub use tradeoff::{ArmPoints, CellPoints, ThroughputVsLatency};

static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

const SIZE: (u32, u32) = (1100, 650);

fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| register_font("sans-serif", FontStyle::Normal, FONT).is_ok())
}

/// A figure that can draw itself on any plotters backend.
pub trait Figure {
    /// File name without extension.
    fn name(&self) -> String;
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, plotters::coord::Shift>) -> Result<(), String>;
}

fn fig_err(path: &Path) -> impl FnOnce(String) -> ReportError + '_ {
    move |message| ReportError::Figure { path: path.to_path_buf(), message }
}

/// The figure as SVG text (the font must be registered: `write_figure` checks).
fn svg(fig: &impl Figure) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        fig.draw(&root)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// How the open-loop cells are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenCharts {
    /// No open-loop cell.
    None,
    /// Two or more load levels: `latency_vs_load`.
    AgainstLoad,
    /// One load level: each open cell's per-block chart, `latency_<cell>`.
    PerCell,
}

/// Latency against load needs at least two distinct offered loads.
fn open_charts(rates: &[f64]) -> OpenCharts {
    let mut distinct: Vec<f64> = rates.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    match distinct.len() {
        0 => OpenCharts::None,
        1 => OpenCharts::PerCell,
        _ => OpenCharts::AgainstLoad,
    }
}

/// Writes `<dir>/<name>.svg` and `<dir>/<name>.png`; returns their file names.
pub fn write_figure(dir: &Path, fig: &impl Figure) -> Result<Vec<String>, ReportError> {
    let name = fig.name();
    let svg_path = dir.join(format!("{name}.svg"));
    if !font_ready() {
        return Err(fig_err(&svg_path)("cannot load the compiled-in DejaVu Sans font".into()));
    }
    let svg = svg(fig).map_err(fig_err(&svg_path))?;
    write_bytes(&svg_path, svg.as_bytes())?;
    let png_path = dir.join(format!("{name}.png"));
    // The image encoder picks the format from the extension: keep `.png` last.
    let tmp = dir.join(format!(".{name}.tmp.png"));
    {
        let root = BitMapBackend::new(&tmp, SIZE).into_drawing_area();
        fig.draw(&root).map_err(fig_err(&png_path))?;
        root.present().map_err(|e| fig_err(&png_path)(e.to_string()))?;
    }
    crate::evidence::commit_rename(&tmp, &png_path)
        .map_err(|error| ReportError::Io { path: png_path.clone(), error })?;
    Ok(vec![format!("{name}.svg"), format!("{name}.png")])
}

fn title(l: &Loaded, what: &str) -> String {
    let hash: String = l.frozen.sha256.chars().take(12).collect();
    format!("{} (plan {hash}): {what}", l.frozen.plan.study.name)
}

fn arms(l: &Loaded) -> Vec<String> {
    l.frozen.plan.arms.iter().map(|a| format!("{} ({})", a.name, a.role.as_str())).collect()
}

/// Per (arm, block): the summary value of `field` for `cell`.
fn points(l: &Loaded, cell: &str, get: impl Fn(&crate::metrics::CellSummary) -> Option<f64>) -> Vec<Vec<(u32, f64)>> {
    l.frozen
        .plan
        .arms
        .iter()
        .map(|a| {
            l.cells
                .iter()
                .filter(|c| c.cell == cell && c.arm == a.name)
                .filter_map(|c| c.summary.as_ref().ok().and_then(&get).map(|v| (c.block, v)))
                .collect()
        })
        .collect()
}

/// The cells of each sweep (named as `plan::sweep` names them, `<name>-r<rate>` and
/// `<name>-c<C>`), each in load order; a group of one is no sweep.
pub fn sweeps(cells: &[ResolvedCell]) -> Vec<Vec<String>> {
    let mut groups: Vec<(String, Vec<(f64, String)>)> = Vec::new();
    for c in cells {
        let key = match c.load {
            ResolvedLoad::Open { rate_rps, .. } => c
                .name
                .rsplit_once("-r")
                .filter(|(base, _)| rate_cell_name(base, rate_rps) == c.name)
                .map(|(base, _)| (format!("{base}-r"), rate_rps)),
            ResolvedLoad::Closed { concurrency } => c
                .name
                .rsplit_once("-c")
                .filter(|(base, _)| concurrency_cell_name(base, i64::from(concurrency)) == c.name)
                .map(|(base, _)| (format!("{base}-c"), f64::from(concurrency))),
            _ => None,
        };
        let Some((key, load)) = key else { continue };
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push((load, c.name.clone())),
            None => groups.push((key, vec![(load, c.name.clone())])),
        }
    }
    groups
        .into_iter()
        .filter(|g| g.1.len() > 1)
        .map(|(_, mut cells)| {
            cells.sort_by(|a, b| a.0.total_cmp(&b.0));
            cells.into_iter().map(|c| c.1).collect()
        })
        .collect()
}

fn throughput_vs_latency(l: &Loaded) -> Option<ThroughputVsLatency> {
    let get = |s: &CellSummary| s.e2e_p95_ms.map(|e2e| (s.output_token_throughput_tps, e2e));
    let arms: Vec<ArmPoints> = arms(l)
        .into_iter()
        .zip(&l.frozen.plan.arms)
        .map(|(label, arm)| ArmPoints {
            label,
            cells: l
                .resolved
                .iter()
                .map(|c| CellPoints {
                    cell: c.name.clone(),
                    blocks: l
                        .cells
                        .iter()
                        .filter(|d| d.cell == c.name && d.arm == arm.name)
                        .filter_map(|d| d.summary.as_ref().ok().and_then(get))
                        .collect(),
                })
                .filter(|c| !c.blocks.is_empty())
                .collect(),
        })
        .collect();
    arms.iter().any(|a| !a.cells.is_empty()).then(|| ThroughputVsLatency {
        title: title(l, "output token throughput vs p95 E2E latency, every cell"),
        arms,
        sweeps: sweeps(&l.resolved),
        slo_e2e_ms: l.frozen.plan.slo.and_then(|s| s.e2e_ms),
    })
}

/// The per-block chart of one hypothesis with its effect and verdict.
fn effect_figure(l: &Loaded, h: &HypothesisReport) -> EffectPerBlock {
    let arm_label =
        |name: &str| l.frozen.plan.arm(name).map_or(name.to_string(), |a| format!("{} ({})", a.name, a.role.as_str()));
    let unit = super::metric_unit(h.metric);
    let per = |f: fn(&crate::analysis::BlockEffect) -> Option<f64>| -> Vec<(u32, f64)> {
        h.blocks.iter().filter_map(|b| f(b).map(|v| (b.block, v))).collect()
    };
    let quantity = if unit == "ms" {
        Quantity::Latency(h.metric.as_str().to_string())
    } else {
        Quantity::Other(format!("{} ({unit})", h.metric.as_str()))
    };
    let definition = match h.kind {
        MetricKind::Throughput => "candidate / control - 1",
        MetricKind::Latency => "1 - candidate / control",
    };
    EffectPerBlock {
        name: format!("effect_{}", h.name),
        title: title(l, &format!("hypothesis {}: {} in {}, per block", h.name, h.metric.as_str(), h.cell)),
        values: PerBlock {
            name: String::new(),
            title: String::new(),
            arms: vec![arm_label(&h.control), arm_label(&h.candidate)],
            values: vec![per(|b| b.control), per(|b| b.candidate)],
            quantity,
            slo: None,
        },
        effects: per(|b| b.effect),
        definition: definition.into(),
        threshold: h.threshold,
        median: h.median.as_ref().map(|m| m.median),
        interval: h.interval.as_ref().map(|i| (i.lower, i.upper, i.coverage)),
        verdict: super::text::short_decision(h),
    }
}

/// Every figure of the study, written into `dir`; returns the file names in order.
pub fn write_all(l: &Loaded, a: &Analysis, dir: &Path) -> Result<Vec<String>, ReportError> {
    let mut files = Vec::new();
    let slo = l.frozen.plan.slo;
    if let Some(fig) = throughput_vs_latency(l) {
        files.extend(write_figure(dir, &fig)?);
    }
    let open: Vec<(f64, String)> = l
        .resolved
        .iter()
        .filter_map(|c| match c.load {
            ResolvedLoad::Open { rate_rps, .. } => Some((rate_rps, c.name.clone())),
            _ => None,
        })
        .collect();
    let rates: Vec<f64> = open.iter().map(|o| o.0).collect();
    let e2e_slo = slo.and_then(|s| s.e2e_ms);
    let charts = open_charts(&rates);
    if charts == OpenCharts::PerCell {
        // One load level: each open cell's per-block chart, not a column of points.
        for (rate, cell) in &open {
            let fig = PerBlock {
                name: format!("latency_{cell}"),
                title: title(
                    l,
                    &format!(
                        "p95 E2E latency per block, {cell} (open loop, {} req/s; the only load level)",
                        axis::tick(*rate)
                    ),
                ),
                arms: arms(l),
                values: points(l, cell, |s| s.e2e_from_intended_p95_ms),
                quantity: Quantity::Latency("p95 E2E latency from intended arrival".into()),
                slo: e2e_slo.map(|t| (t, format!("[slo] e2e_ms {} ms (per request, from HTTP send)", axis::tick(t)))),
            };
            files.extend(write_figure(dir, &fig)?);
        }
    } else if charts == OpenCharts::AgainstLoad {
        let mut series: Vec<Series> = arms(l).into_iter().map(|label| Series { label, points: Vec::new() }).collect();
        for (rate, cell) in &open {
            for (s, pts) in series.iter_mut().zip(points(l, cell, |s| s.e2e_from_intended_p95_ms)) {
                s.points.push((*rate, pts.into_iter().map(|(_, v)| v).collect()));
            }
        }
        let fig = LatencyVsLoad {
            title: title(l, "p95 E2E latency from intended arrival vs offered load"),
            series,
            slo_e2e_ms: e2e_slo,
        };
        files.extend(write_figure(dir, &fig)?);
    }
    for c in &l.resolved {
        if let ResolvedLoad::Closed { concurrency } = c.load {
            let fig = PerBlock {
                name: format!("throughput_{}", c.name),
                title: title(
                    l,
                    &format!("request throughput per block, {} (closed loop, concurrency {concurrency})", c.name),
                ),
                arms: arms(l),
                values: points(l, &c.name, |s| Some(s.request_throughput_rps)),
                quantity: Quantity::Other("request throughput (requests/s)".into()),
                slo: None,
            };
            files.extend(write_figure(dir, &fig)?);
        }
    }
    for h in &a.hypotheses {
        files.extend(write_figure(dir, &effect_figure(l, h))?);
    }
    for c in &l.resolved {
        let per_arm = |f: fn(&crate::analysis::study::CellData) -> &Vec<f64>| -> Vec<Vec<Vec<f64>>> {
            l.frozen
                .plan
                .arms
                .iter()
                .map(|a| l.cells.iter().filter(|d| d.cell == c.name && d.arm == a.name).map(|d| f(d).clone()).collect())
                .collect()
        };
        let ttft = per_arm(|d| &d.ttft_ms);
        if ttft.iter().all(|blocks| blocks.iter().all(Vec::is_empty)) {
            continue;
        }
        let fig = Distributions {
            name: format!("dist_{}", c.name),
            title: title(l, &format!("TTFT and TPOT per arm, {} (one line per block)", c.name)),
            arms: arms(l),
            ttft,
            tpot: per_arm(|d| &d.tpot_ms),
            slo_ttft_ms: slo.and_then(|s| s.ttft_ms),
            slo_tpot_ms: slo.and_then(|s| s.tpot_ms),
        };
        files.extend(write_figure(dir, &fig)?);
    }
    Ok(files)
}
