//! `throughput_vs_latency`: every cell's output token throughput against its p95
//! E2E latency from HTTP send, per arm: a faint point per block, a filled point at
//! the medians across blocks (named by its cell), and the cells of one sweep joined
//! in load order. The `[slo] e2e_ms` target (the same E2E definition) is a dashed
//! line. Owns this figure's drawing. Must not read files or pick the cells.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Figure;
use super::axis::{LatencyAxis, tick};
use super::style::{FONT, arm_color, extent, legend, median, mesh, padded, s, slo_line, title_font};

/// One cell of one arm: `(output tokens/s, p95 E2E ms)` per block.
pub struct CellPoints {
    pub cell: String,
    pub blocks: Vec<(f64, f64)>,
}

impl CellPoints {
    /// The medians across blocks of both coordinates.
    pub fn median(&self) -> Option<(f64, f64)> {
        let xs: Vec<f64> = self.blocks.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = self.blocks.iter().map(|p| p.1).collect();
        Some((median(&xs)?, median(&ys)?))
    }
}

pub struct ArmPoints {
    pub label: String,
    pub cells: Vec<CellPoints>,
}

pub struct ThroughputVsLatency {
    pub title: String,
    pub arms: Vec<ArmPoints>,
    /// The cells of each sweep, in load order (each joined by a line per arm).
    pub sweeps: Vec<Vec<String>>,
    pub slo_e2e_ms: Option<f64>,
}

impl ThroughputVsLatency {
    /// Per arm, per sweep: the median points the sweep's line joins, in load order.
    pub fn sweep_lines(&self) -> Vec<Vec<Vec<(f64, f64)>>> {
        self.arms
            .iter()
            .map(|arm| {
                self.sweeps
                    .iter()
                    .map(|cells| {
                        cells
                            .iter()
                            .filter_map(|c| arm.cells.iter().find(|p| &p.cell == c).and_then(CellPoints::median))
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }
}

impl Figure for ThroughputVsLatency {
    fn name(&self) -> String {
        "throughput_vs_latency".into()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let all = || self.arms.iter().flat_map(|a| a.cells.iter().flat_map(|c| c.blocks.iter().copied()));
        let (x0, x1) = extent(all().map(|p| p.0)).map_or((0.0, 1.0), |(lo, hi)| padded(lo, hi, 0.1));
        let y1 = extent(all().map(|p| p.1).chain(self.slo_e2e_ms)).map_or(1.0, |(_, hi)| hi.max(1e-3) * 1.15);
        let y = LatencyAxis::for_max(y1);
        let mut chart = ChartBuilder::on(&area)
            .margin(20)
            .x_label_area_size(55)
            .y_label_area_size(90)
            .build_cartesian_2d(x0.max(0.0)..x1, 0.0..y1)
            .map_err(s)?;
        let y_desc = format!("p95 E2E latency from HTTP send ({})", y.unit());
        mesh(&mut chart, "output token throughput (tokens/s)", &y_desc, &|v| tick(*v), &|v| y.label(*v))?;
        let lines = self.sweep_lines();
        let mut named: Vec<&str> = Vec::new();
        for (i, (arm, arm_lines)) in self.arms.iter().zip(&lines).enumerate() {
            let color = arm_color(i);
            let faint: Vec<(f64, f64)> = arm.cells.iter().flat_map(|c| c.blocks.iter().copied()).collect();
            if arm.cells.iter().any(|c| c.blocks.len() > 1) {
                chart
                    .draw_series(faint.iter().map(|&p| Circle::new(p, 3, color.mix(0.3).filled())))
                    .map_err(s)?
                    .label(format!("{}: each block", arm.label))
                    .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.mix(0.3).filled()));
            }
            for line in arm_lines.iter().filter(|l| l.len() > 1) {
                chart.draw_series(LineSeries::new(line.clone(), color.stroke_width(2))).map_err(s)?;
            }
            let medians: Vec<(&str, (f64, f64))> =
                arm.cells.iter().filter_map(|c| c.median().map(|m| (c.cell.as_str(), m))).collect();
            chart
                .draw_series(medians.iter().map(|&(_, p)| Circle::new(p, 6, color.filled())))
                .map_err(s)?
                .label(format!("{}: median across blocks (sweeps joined in load order)", arm.label))
                .legend(move |(x, y)| Circle::new((x + 10, y), 6, color.filled()));
            // Each cell named once, beside the first arm's point.
            for &(cell, (px, py)) in &medians {
                if named.contains(&cell) {
                    continue;
                }
                named.push(cell);
                let text = EmptyElement::at((px, py)) + Text::new(cell.to_string(), (8, -18), (FONT, 13).into_font());
                chart.draw_series(std::iter::once(text)).map_err(s)?;
            }
        }
        if let Some(t) = self.slo_e2e_ms {
            slo_line(&mut chart, (x0.max(0.0), t), (x1, t), format!("[slo] e2e_ms {} (per request)", y.value(t)))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}
