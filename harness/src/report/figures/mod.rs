//! The figures of `results/figures/`, each as SVG and as PNG (for quick viewing):
//! - `latency_vs_load`: p95 E2E latency from intended arrival against offered load,
//!   per arm, for the open-loop cells: a faint point per block, a filled median;
//! - `throughput_<cell>`: for each closed-loop cell, request throughput per arm with
//!   one line per block joining that block's arms (paired values);
//! - `dist_<cell>`: for each cell, ECDFs of TTFT (from HTTP send) and TPOT per arm,
//!   one line per block (requests are never pooled across blocks).
//!
//! Every title names the study and the plan hash (first 12 hex digits); axes carry
//! units. Text is drawn with DejaVu Sans, compiled in and registered once (PNG text
//! rendering needs a font; see `assets/fonts/LICENSE`). Owns the data each figure
//! shows and the drawing; must not compute measures (`metrics` does).

mod plots;

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::{BitMapBackend, DrawingArea, DrawingBackend, IntoDrawingArea, SVGBackend};
use plotters::style::{FontStyle, register_font};

use super::ReportError;
use super::load::Loaded;
use crate::evidence::write_bytes;
use crate::plan::ResolvedLoad;

pub use plots::{Distributions, LatencyVsLoad, PairedThroughput, Series};

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

/// Writes `<dir>/<name>.svg` and `<dir>/<name>.png`; returns their file names.
pub fn write_figure(dir: &Path, fig: &impl Figure) -> Result<Vec<String>, ReportError> {
    let name = fig.name();
    let svg_path = dir.join(format!("{name}.svg"));
    if !font_ready() {
        return Err(fig_err(&svg_path)("cannot load the compiled-in DejaVu Sans font".into()));
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        fig.draw(&root).map_err(fig_err(&svg_path))?;
        root.present().map_err(|e| fig_err(&svg_path)(e.to_string()))?;
    }
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

/// Every figure of the study, written into `dir`; returns the file names in order.
pub fn write_all(l: &Loaded, dir: &Path) -> Result<Vec<String>, ReportError> {
    let mut files = Vec::new();
    let open: Vec<(f64, String)> = l
        .resolved
        .iter()
        .filter_map(|c| match c.load {
            ResolvedLoad::Open { rate_rps, .. } => Some((rate_rps, c.name.clone())),
            _ => None,
        })
        .collect();
    if !open.is_empty() {
        let mut series: Vec<Series> = arms(l).into_iter().map(|label| Series { label, points: Vec::new() }).collect();
        for (rate, cell) in &open {
            for (s, pts) in series.iter_mut().zip(points(l, cell, |s| s.e2e_from_intended_p95_ms)) {
                s.points.push((*rate, pts.into_iter().map(|(_, v)| v).collect()));
            }
        }
        let fig = LatencyVsLoad { title: title(l, "p95 E2E latency from intended arrival vs offered load"), series };
        files.extend(write_figure(dir, &fig)?);
    }
    for c in &l.resolved {
        if let ResolvedLoad::Closed { concurrency } = c.load {
            let fig = PairedThroughput {
                name: format!("throughput_{}", c.name),
                title: title(
                    l,
                    &format!("request throughput per block, {} (closed loop, concurrency {concurrency})", c.name),
                ),
                arms: arms(l),
                values: points(l, &c.name, |s| Some(s.request_throughput_rps)),
            };
            files.extend(write_figure(dir, &fig)?);
        }
    }
    for c in &l.resolved {
        let per_arm = |f: fn(&super::load::CellData) -> &Vec<f64>| -> Vec<Vec<Vec<f64>>> {
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
        };
        files.extend(write_figure(dir, &fig)?);
    }
    Ok(files)
}
