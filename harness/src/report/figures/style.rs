//! What every figure looks alike in: arm colours, fonts, grid colours, the title
//! size, padded axis ranges, the SLO target line and the mesh every chart draws.
//! Owns look and layout helpers only. Must not choose what a figure shows.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::axis::{LatencyAxis, tick};

pub const ARM_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];
pub const FONT: &str = "sans-serif";
pub const LIGHT: RGBColor = RGBColor(238, 238, 238);
pub const BOLD: RGBColor = RGBColor(200, 200, 200);
/// The colour of `[slo]` target lines (dashed).
pub const SLO: RGBColor = RGBColor(204, 0, 102);

pub type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Title font size: 22 px, smaller for a long title so that it fits the width
/// (DejaVu Sans averages about 0.55 em per character).
pub fn title_font(title: &str) -> (&'static str, f64) {
    let chars = title.chars().count().max(1) as f64;
    (FONT, (f64::from(super::SIZE.0 - 40) / (0.55 * chars)).clamp(12.0, 22.0))
}

pub fn arm_color(i: usize) -> RGBColor {
    ARM_COLORS[i % ARM_COLORS.len()]
}

pub fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// `[lo, hi]` padded by `pad` of its width (or of `lo` when the width is zero).
pub fn padded(lo: f64, hi: f64, pad: f64) -> (f64, f64) {
    let w = if hi > lo { hi - lo } else { lo.abs().max(1.0) };
    (lo - w * pad, hi + w * pad)
}

/// The smallest and largest finite value (`None` when there is none).
pub fn extent(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().filter(|v| v.is_finite()).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

pub fn median(values: &[f64]) -> Option<f64> {
    crate::stats::median(values).ok()
}

/// How the y axis of a chart is labelled.
#[derive(Debug, Clone, Copy)]
pub enum YAxis {
    /// Milliseconds, labelled in ms or s (`LatencyAxis`).
    Latency(LatencyAxis),
    /// Any other quantity, thousands grouped.
    Plain,
}

impl YAxis {
    pub fn label(self, v: f64) -> String {
        match self {
            YAxis::Latency(a) => a.label(v),
            YAxis::Plain => tick(v),
        }
    }
}

/// The grid, tick labels (through `x`, `y`) and axis descriptions of a chart.
pub fn mesh<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    x_desc: &str,
    y_desc: &str,
    x: &dyn Fn(&f64) -> String,
    y: &dyn Fn(&f64) -> String,
) -> Result<(), String> {
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(x)
        .y_label_formatter(y)
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .x_labels(8)
        .y_labels(8)
        .draw()
        .map_err(s)
}

/// A dashed `[slo]` line from `a` to `b` (data coordinates), in the legend as `label`.
pub fn slo_line<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    a: (f64, f64),
    b: (f64, f64),
    label: String,
) -> Result<(), String> {
    chart
        .draw_series(DashedLineSeries::new([a, b], 10, 6, SLO.stroke_width(2)))
        .map_err(s)?
        .label(label)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], SLO.stroke_width(2)));
    Ok(())
}

/// The legend box at `pos`.
pub fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>, pos: SeriesLabelPosition) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .draw()
        .map_err(s)
}
