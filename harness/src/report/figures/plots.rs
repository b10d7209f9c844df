//! The three kinds of figure, drawn with plotters on any backend. Each holds exactly
//! the numbers it shows (built by `figures::write_all`). Must not read files.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Figure;

const ARM_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];
const FONT: &str = "sans-serif";
const LIGHT: RGBColor = RGBColor(238, 238, 238);
const BOLD: RGBColor = RGBColor(200, 200, 200);

type Point = (f64, f64);

/// Title font size: 22 px, smaller for a long title so that it fits the width
/// (DejaVu Sans averages about 0.55 em per character).
fn title_font(title: &str) -> (&'static str, f64) {
    let chars = title.chars().count().max(1) as f64;
    (FONT, (f64::from(super::SIZE.0 - 40) / (0.55 * chars)).clamp(12.0, 22.0))
}

fn arm_color(i: usize) -> RGBColor {
    ARM_COLORS[i % ARM_COLORS.len()]
}

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// `[lo, hi]` padded by `pad` of its width (or of `lo` when the width is zero).
fn padded(lo: f64, hi: f64, pad: f64) -> (f64, f64) {
    let w = if hi > lo { hi - lo } else { lo.abs().max(1.0) };
    (lo - w * pad, hi + w * pad)
}

fn median(values: &[f64]) -> Option<f64> {
    crate::stats::median(values).ok()
}

/// One arm's values per x position: `(x, one value per block)`.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, Vec<f64>)>,
}

/// p95 latency (ms) against offered load (req/s), per arm.
pub struct LatencyVsLoad {
    pub title: String,
    pub series: Vec<Series>,
}

impl Figure for LatencyVsLoad {
    fn name(&self) -> String {
        "latency_vs_load".into()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let xs: Vec<f64> = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
        let ys: Vec<f64> = self.series.iter().flat_map(|s| s.points.iter().flat_map(|p| p.1.iter().copied())).collect();
        let (x_lo, x_hi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let (x0, x1) = if x_lo.is_finite() { padded(x_lo, x_hi, 0.15) } else { (0.0, 1.0) };
        let y1 = ys.iter().copied().fold(0.0, f64::max).max(1e-3) * 1.15;
        let mut chart = ChartBuilder::on(&area)
            .margin(20)
            .x_label_area_size(55)
            .y_label_area_size(90)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(s)?;
        chart
            .configure_mesh()
            .x_desc("offered load (requests/s)")
            .y_desc("p95 E2E latency from intended arrival (ms)")
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 15))
            .light_line_style(LIGHT)
            .bold_line_style(BOLD)
            .draw()
            .map_err(s)?;
        let n = self.series.len() as f64;
        for (i, ser) in self.series.iter().enumerate() {
            let color = arm_color(i);
            let off = (i as f64 - (n - 1.0) / 2.0) * 0.012 * (x1 - x0);
            // Faint points only where there are several blocks; a single run is hollow.
            let faint: Vec<(f64, f64)> = ser
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
            let medians: Vec<(f64, f64)> = present.iter().map(|&(x, _, m)| (x, m)).collect();
            chart.draw_series(LineSeries::new(medians.clone(), color.stroke_width(2))).map_err(s)?;
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
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FONT, 15))
            .draw()
            .map_err(s)?;
        Ok(())
    }
}

/// Request throughput per arm, one line per block joining the block's arms.
pub struct PairedThroughput {
    pub name: String,
    pub title: String,
    pub arms: Vec<String>,
    /// Per arm (plan order): `(block, req/s)`.
    pub values: Vec<Vec<(u32, f64)>>,
}

impl Figure for PairedThroughput {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let all: Vec<f64> = self.values.iter().flat_map(|v| v.iter().map(|p| p.1)).collect();
        let (lo, hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let (y0, y1) = if lo.is_finite() { padded(lo, hi, 0.08) } else { (0.0, 1.0) };
        let n = self.arms.len();
        let labels = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-9 && i >= 0.0 && (i as usize) < n {
                self.arms[i as usize].clone()
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(&area)
            .margin(20)
            .x_label_area_size(55)
            .y_label_area_size(90)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)
            .map_err(s)?;
        chart
            .configure_mesh()
            .x_labels(2 * n + 1)
            .x_label_formatter(&labels)
            .disable_x_mesh()
            .x_desc("arm")
            .y_desc("request throughput (requests/s; axis not from zero)")
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 15))
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
            let line: Vec<(f64, f64)> = self
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
            let mut ends: Vec<(u32, (f64, f64))> =
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
        let medians: Vec<(f64, f64)> = self
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
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FONT, 15))
            .draw()
            .map_err(s)?;
        Ok(())
    }
}

/// ECDFs of TTFT and TPOT (ms) per arm, one line per block.
pub struct Distributions {
    pub name: String,
    pub title: String,
    pub arms: Vec<String>,
    /// Per arm, per block: the values of valid requests.
    pub ttft: Vec<Vec<Vec<f64>>>,
    pub tpot: Vec<Vec<Vec<f64>>>,
}

fn ecdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter().enumerate().flat_map(|(i, &x)| [(x, i as f64 / n), (x, (i + 1) as f64 / n)]).collect()
}

fn ecdf_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    arms: &[String],
    data: &[Vec<Vec<f64>>],
    x_desc: &str,
) -> Result<(), String> {
    let x1 = data.iter().flatten().flatten().copied().fold(0.0, f64::max).max(1e-3) * 1.05;
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x1, 0.0..1.0)
        .map_err(s)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("fraction of valid requests")
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .x_labels(6)
        .draw()
        .map_err(s)?;
    for (i, (arm, blocks)) in arms.iter().zip(data).enumerate() {
        let color = arm_color(i);
        let mut labelled = false;
        for values in blocks.iter().filter(|v| !v.is_empty()) {
            let series = chart.draw_series(LineSeries::new(ecdf(values), color.mix(0.7).stroke_width(2))).map_err(s)?;
            if !labelled {
                labelled = true;
                series
                    .label(arm.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()
        .map_err(s)?;
    Ok(())
}

impl Figure for Distributions {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let panels = area.split_evenly((1, 2));
        ecdf_panel(&panels[0], &self.arms, &self.ttft, "TTFT from HTTP send (ms)")?;
        ecdf_panel(&panels[1], &self.arms, &self.tpot, "TPOT (ms per output token after the first)")?;
        Ok(())
    }
}
