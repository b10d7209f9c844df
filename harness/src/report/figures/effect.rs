//! `effect_<hypothesis>`: the per-block chart of one hypothesis with its paired
//! effect and verdict. Left, the metric per block for control and candidate (one
//! line per block, `PerBlock`); right, the paired effect of each block (positive:
//! the candidate is better), the zero line, the hypothesis's threshold, the median
//! effect with its order-statistic interval, and the verdict with the rule that
//! decided it. Owns this figure's drawing. Must not decide anything: every number
//! comes from the analysis (`stats`).

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Figure;
use super::axis::{pct_tick, tick};
use super::plots::PerBlock;
use super::style::{FONT, extent, legend, mesh, padded, s, title_font};

const WIN: RGBColor = RGBColor(44, 160, 44);
const LOSS: RGBColor = RGBColor(214, 39, 40);
const THRESHOLD: RGBColor = RGBColor(90, 90, 90);
const MEDIAN: RGBColor = RGBColor(0, 0, 0);

pub struct EffectPerBlock {
    pub name: String,
    pub title: String,
    /// Left panel: the metric per block, control then candidate.
    pub values: PerBlock,
    /// `(block, effect)`, effects as fractions (+0.05 = 5% better).
    pub effects: Vec<(u32, f64)>,
    /// How the effect is computed, e.g. "1 - candidate / control".
    pub definition: String,
    pub threshold: f64,
    pub median: Option<f64>,
    /// `(lower, upper, coverage)` of the median's interval.
    pub interval: Option<(f64, f64, f64)>,
    /// The claim in a few words, naming the failed rules (`text::short_decision`).
    pub verdict: String,
}

impl EffectPerBlock {
    fn effect_panel<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let caption = format!("verdict: {}", self.verdict);
        let area = area.titled(&caption, (FONT, 15)).map_err(s)?;
        let ys = self.effects.iter().map(|e| e.1).chain([0.0, self.threshold]).chain(self.median);
        let ys = ys.chain(self.interval.iter().flat_map(|i| [i.0, i.1]));
        let (y0, y1) = extent(ys).map_or((-0.1, 0.1), |(lo, hi)| padded(lo, hi, 0.12));
        let xs = self.effects.iter().map(|e| f64::from(e.0));
        let (x0, x1) = extent(xs).map_or((0.0, 1.0), |(lo, hi)| (lo - 0.6, hi + 0.6));
        let mut chart = ChartBuilder::on(&area)
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(s)?;
        let block_label = |v: &f64| if (v - v.round()).abs() < 1e-9 { format!("b{}", tick(*v)) } else { String::new() };
        let y_desc = format!("paired effect per block ({}; positive: candidate better)", self.definition);
        mesh(&mut chart, "confirmation block", &y_desc, &block_label, &|v| pct_tick(*v))?;
        if let Some((lo, hi, coverage)) = self.interval {
            let band = Rectangle::new([(x0, lo), (x1, hi)], RGBColor(120, 120, 120).mix(0.15).filled());
            chart
                .draw_series(std::iter::once(band))
                .map_err(s)?
                .label(format!(
                    "{}% interval of the median [{}, {}]",
                    tick(coverage * 100.0),
                    pct_tick(lo),
                    pct_tick(hi)
                ))
                .legend(|(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 20, y + 5)], RGBColor(120, 120, 120).mix(0.3).filled())
                });
        }
        chart.draw_series(LineSeries::new([(x0, 0.0), (x1, 0.0)], BLACK.stroke_width(1))).map_err(s)?;
        chart
            .draw_series(DashedLineSeries::new(
                [(x0, self.threshold), (x1, self.threshold)],
                8,
                5,
                THRESHOLD.stroke_width(2),
            ))
            .map_err(s)?
            .label(format!("threshold {}", pct_tick(self.threshold)))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], THRESHOLD.stroke_width(2)));
        if let Some(m) = self.median {
            chart
                .draw_series(LineSeries::new([(x0, m), (x1, m)], MEDIAN.stroke_width(2)))
                .map_err(s)?
                .label(format!("median effect {}", pct_tick(m)))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MEDIAN.stroke_width(2)));
        }
        let (wins, rest): (Vec<_>, Vec<_>) =
            self.effects.iter().map(|&(b, e)| (f64::from(b), e)).partition(|p| p.1 > 0.0);
        chart
            .draw_series(wins.iter().map(|&p| Circle::new(p, 6, WIN.filled())))
            .map_err(s)?
            .label(format!("win ({} of {} blocks)", wins.len(), self.effects.len()))
            .legend(|(x, y)| Circle::new((x + 10, y), 6, WIN.filled()));
        chart
            .draw_series(rest.iter().map(|&p| Circle::new(p, 6, LOSS.filled())))
            .map_err(s)?
            .label("no win (effect <= 0)")
            .legend(|(x, y)| Circle::new((x + 10, y), 6, LOSS.filled()));
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

impl Figure for EffectPerBlock {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(s)?;
        let area = root.titled(&self.title, title_font(&self.title)).map_err(s)?;
        let (left, right) = area.split_horizontally(super::SIZE.0 * 45 / 100);
        self.values.draw_on(&left)?;
        self.effect_panel(&right)
    }
}
