//! Three kinds of figure, drawn with plotters on any backend: latency against load,
//! per-block values of one cell (paired lines, one per block) and TTFT/TPOT ECDFs.
//! Each holds exactly the numbers it shows (built by `figures::write_all`), and the
//! plan's `[slo]` targets it draws as dashed lines. Must not read files.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Figure;
use super::axis::{LatencyAxis, tick};
use super::style::{
    BOLD, FONT, LIGHT, YAxis, arm_color, extent, legend, median, mesh, padded, s, slo_line, title_font,
};

type Point = (f64, f64);

/// One arm's values per x position: `(x, one value per block)`.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, Vec<f64>)>,
}

/// p95 latency (ms) against offered load (req/s), per arm; only drawn with at least
/// two load levels (one level: `PerBlock` of that cell instead).
pub struct LatencyVsLoad {
    pub title: String,
    pub series: Vec<Series>,
    /// `[slo] e2e_ms` (per request, from HTTP send), as a dashed line.
    pub slo_e2e_ms: Option<f64>,
}

impl Figure for LatencyVsLoad {
    fn name(&self) -> String {
        "latency_vs_load".into()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let xs = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = self.series.iter().flat_map(|s| s.points.iter().flat_map(|p| p.1.iter().copied()));
        let (x0, x1) = extent(xs).map_or((0.0, 1.0), |(lo, hi)| padded(lo, hi, 0.15));
        let y1 = extent(ys.chain(self.slo_e2e_ms)).map_or(1.0, |(_, hi)| hi.max(1e-3) * 1.15);
        let y = LatencyAxis::for_max(y1);
        let mut chart = ChartBuilder::on(&area)
            .margin(20)
            .x_label_area_size(55)
            .y_label_area_size(90)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(s)?;
        let y_desc = format!("p95 E2E latency from intended arrival ({})", y.unit());
        mesh(&mut chart, "offered load (requests/s)", &y_desc, &|v| tick(*v), &|v| y.label(*v))?;
        let n = self.series.len() as f64;
        for (i, ser) in self.series.iter().enumerate() {
            let color = arm_color(i);
            let off = (i as f64 - (n - 1.0) / 2.0) * 0.012 * (x1 - x0);
            // Faint points only where there are several blocks; a single run is hollow.
            let faint: Vec<Point> = ser
                .points
                .iter()
                .filter(|(_, vs)| vs.len() > 1)
                .flat_map(|(x, vs)| vs.iter().map(move |&v| (x + off, v)))
                .collect();
            chart
                .draw_series(faint.iter().map(|&p| Circle::new(p, 4, color.mix(0.3).filled())))
                .map_err(s)?
                .label(format!("{}: each block", ser.label))
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.mix(0.3).filled()));
            // (x, blocks, median) where the arm has values.
            let present: Vec<(f64, usize, f64)> =
                ser.points.iter().filter_map(|(x, vs)| median(vs).map(|m| (x + off, vs.len(), m))).collect();
            let medians: Vec<Point> = present.iter().map(|&(x, _, m)| (x, m)).collect();
            chart.draw_series(LineSeries::new(medians, color.stroke_width(2))).map_err(s)?;
            let (many, single): (Vec<_>, Vec<_>) =
                present.iter().map(|&(x, n, m)| (n, (x, m))).partition(|(n, _)| *n > 1);
            chart
                .draw_series(many.iter().map(|&(_, p)| Circle::new(p, 7, color.filled())))
                .map_err(s)?
                .label(format!("{}: median across blocks", ser.label))
                .legend(move |(x, y)| Circle::new((x + 10, y), 7, color.filled()));
            if !single.is_empty() {
                chart
                    .draw_series(single.iter().map(|&(_, p)| Circle::new(p, 7, color.stroke_width(2))))
                    .map_err(s)?
                    .label(format!("{}: single run (one block)", ser.label))
                    .legend(move |(x, y)| Circle::new((x + 10, y), 7, color.stroke_width(2)));
            }
        }
        if let Some(t) = self.slo_e2e_ms {
            slo_line(
                &mut chart,
                (x0, t),
                (x1, t),
                format!("[slo] e2e_ms {} (per request, from HTTP send)", y.value(t)),
            )?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

/// What the y axis of a `PerBlock` shows.
pub enum Quantity {
    /// Milliseconds; the description without its unit (added as ms or s).
    Latency(String),
    /// Anything else; the description with its unit.
    Other(String),
}

/// One value per (arm, block) of one cell: a line per block joins that block's arms
/// (paired values), a black dot marks each arm's median across blocks.
pub struct PerBlock {
    pub name: String,
    pub title: String,
    pub arms: Vec<String>,
    /// Per arm (plan order): `(block, value)`.
    pub values: Vec<Vec<(u32, f64)>>,
    pub quantity: Quantity,
    /// A dashed target line (ms, legend text), for a latency quantity.
    pub slo: Option<(f64, String)>,
}

impl PerBlock {
    /// The chart on `area` (also the left panel of an effect figure).
    pub fn draw_on<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let all = self.values.iter().flat_map(|v| v.iter().map(|p| p.1)).chain(self.slo.as_ref().map(|t| t.0));
        let (y0, y1) = extent(all).map_or((0.0, 1.0), |(lo, hi)| padded(lo, hi, 0.08));
        let (y_axis, y_desc) = match &self.quantity {
            Quantity::Latency(what) => {
                let a = LatencyAxis::for_max(y1);
                (YAxis::Latency(a), format!("{what} ({}; axis not from zero)", a.unit()))
            }
            Quantity::Other(what) => (YAxis::Plain, format!("{what} (axis not from zero)")),
        };
        let n = self.arms.len();
        let labels = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-9 && i >= 0.0 && (i as usize) < n {
                self.arms[i as usize].clone()
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(area)
            .margin(20)
            .x_label_area_size(55)
            .y_label_area_size(90)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)
            .map_err(s)?;
        chart
            .configure_mesh()
            .x_labels(2 * n + 1)
            .x_label_formatter(&labels)
            .y_label_formatter(&|v| y_axis.label(*v))
            .y_labels(8)
            .disable_x_mesh()
            .x_desc("arm")
            .y_desc(y_desc)
            .axis_desc_style((FONT, 17))
            .label_style((FONT, 14))
            .light_line_style(LIGHT)
            .bold_line_style(BOLD)
            .draw()
            .map_err(s)?;
        let mut blocks: Vec<u32> = self.values.iter().flat_map(|v| v.iter().map(|p| p.0)).collect();
        blocks.sort_unstable();
        blocks.dedup();
        // (block, first point, last point) of each line.
        let mut labels_at: Vec<(u32, Point, Point)> = Vec::new();
        for (k, &b) in blocks.iter().enumerate() {
            let color = Palette99::pick(b as usize).to_rgba();
            let line: Vec<Point> = self
                .values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.iter().find(|p| p.0 == b).map(|p| (i as f64, p.1)))
                .collect();
            let series = chart.draw_series(LineSeries::new(line.clone(), color.stroke_width(2))).map_err(s)?;
            if k == 0 {
                series
                    .label("one block (paired line)")
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            }
            chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(s)?;
            if let (Some(&first), Some(&last)) = (line.first(), line.last()) {
                labels_at.push((b, first, last));
            }
        }
        // Block labels at both ends of each line, leaving out one that would overlap
        // the previous label on the same side.
        let gap = (y1 - y0) * 0.035;
        for left in [true, false] {
            let mut ends: Vec<(u32, Point)> =
                labels_at.iter().map(|&(b, f, l)| (b, if left { f } else { l })).collect();
            ends.sort_by(|a, b| a.1.1.total_cmp(&b.1.1));
            let mut last_y = f64::NEG_INFINITY;
            for (b, (x, y)) in ends {
                if y - last_y < gap {
                    continue;
                }
                last_y = y;
                let pos = if left { (x - 0.07, y) } else { (x + 0.02, y) };
                let text = Text::new(format!("b{b}"), pos, (FONT, 13).into_font());
                chart.draw_series(std::iter::once(text)).map_err(s)?;
            }
        }
        let medians: Vec<Point> = self
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| median(&v.iter().map(|p| p.1).collect::<Vec<_>>()).map(|m| (i as f64, m)))
            .collect();
        chart
            .draw_series(medians.iter().map(|&p| Circle::new(p, 8, BLACK.filled())))
            .map_err(s)?
            .label("median across blocks")
            .legend(|(x, y)| Circle::new((x + 10, y), 7, BLACK.filled()));
        if let Some((t, label)) = &self.slo {
            slo_line(&mut chart, (-0.5, *t), (n as f64 - 0.5, *t), label.clone())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

impl Figure for PerBlock {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        self.draw_on(&area)
    }
}

/// ECDFs of TTFT and TPOT (ms) per arm, one line per block, each block's median
/// marked on its line; the `[slo]` targets of TTFT and TPOT as dashed lines.
pub struct Distributions {
    pub name: String,
    pub title: String,
    pub arms: Vec<String>,
    /// Per arm, per block: the values of valid requests.
    pub ttft: Vec<Vec<Vec<f64>>>,
    pub tpot: Vec<Vec<Vec<f64>>>,
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
}

fn ecdf(values: &[f64]) -> Vec<Point> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter().enumerate().flat_map(|(i, &x)| [(x, i as f64 / n), (x, (i + 1) as f64 / n)]).collect()
}

/// Per arm: the p50 of each block with values, at height 0.5 (where an ECDF crosses
/// it). The report's definition: the nearest-rank p50 (`stats::percentile`), so the
/// markers and the legend show the numbers report.md, the terminal and the cell
/// summaries show.
pub fn p50_markers(data: &[Vec<Vec<f64>>]) -> Vec<Vec<Point>> {
    data.iter()
        .map(|blocks| blocks.iter().filter_map(|v| crate::stats::percentile(v, 50.0).ok()).map(|m| (m, 0.5)).collect())
        .collect()
}

/// One ECDF panel; `slo` is the target (ms) and what it means.
fn ecdf_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    arms: &[String],
    data: &[Vec<Vec<f64>>],
    what: &str,
    slo: Option<(f64, &str)>,
) -> Result<(), String> {
    let x1 = extent(data.iter().flatten().flatten().copied().chain(slo.map(|t| t.0)))
        .map_or(1.0, |(_, hi)| hi.max(1e-3) * 1.05);
    let x = LatencyAxis::for_max(x1);
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x1, 0.0..1.0)
        .map_err(s)?;
    let x_desc = format!("{what} ({})", x.unit());
    mesh(&mut chart, &x_desc, "fraction of valid requests", &|v| x.label(*v), &|v| tick(*v))?;
    let markers = p50_markers(data);
    for (i, ((arm, blocks), marks)) in arms.iter().zip(data).zip(&markers).enumerate() {
        let color = arm_color(i);
        let mut labelled = false;
        for values in blocks.iter().filter(|v| !v.is_empty()) {
            let series = chart.draw_series(LineSeries::new(ecdf(values), color.mix(0.7).stroke_width(2))).map_err(s)?;
            if !labelled {
                labelled = true;
                let of_medians = median(&marks.iter().map(|p| p.0).collect::<Vec<_>>());
                let label = match of_medians {
                    Some(m) => format!("{arm}: p50 {} (median across blocks, as report.md)", x.value(m)),
                    None => arm.clone(),
                };
                series
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
            }
        }
        let dots = marks.iter().map(|&p| Circle::new(p, 5, BLACK.stroke_width(1)));
        chart.draw_series(dots).map_err(s)?;
        chart.draw_series(marks.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(s)?;
    }
    chart
        .draw_series(std::iter::empty::<Circle<Point, i32>>())
        .map_err(s)?
        .label("p50 of each block (marker at 0.5)")
        .legend(|(x, y)| Circle::new((x + 10, y), 4, BLACK.filled()));
    if let Some((t, meaning)) = slo {
        slo_line(&mut chart, (t, 0.0), (t, 1.0), format!("[slo] {} ({meaning})", x.value(t)))?;
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

impl Figure for Distributions {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let panels = area.split_evenly((1, 2));
        let ttft = self.slo_ttft_ms.map(|t| (t, "ttft_ms"));
        ecdf_panel(&panels[0], &self.arms, &self.ttft, "TTFT from HTTP send", ttft)?;
        let tpot = self.slo_tpot_ms.map(|t| (t, "tpot_ms, vLLM's goodput TPOT: to [DONE]"));
        ecdf_panel(&panels[1], &self.arms, &self.tpot, "TPOT (per output token after the first)", tpot)?;
        Ok(())
    }
}
