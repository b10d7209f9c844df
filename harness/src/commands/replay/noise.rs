//! `results/evidence.json`'s `noise` (a plan with `analysis.noise`) against replay's
//! own decomposition: the confirmation cells grouped by load shape (the same load,
//! count, input length, endpoint and recorder: repeats of one another), every arm a
//! server of the block, each group's values ln(measure) from replay's own measures
//! (blocks missing a value left out), each cell's own level removed (value minus
//! its cell's mean plus the grand mean), then the balanced nested ANOVA: mean
//! squares of repeats (df (B S - 1)(R - 1)), servers (B (S - 1)) and blocks (B - 1),
//! components by the method of moments clamped at 0, 90% intervals (chi-square for
//! the lowest level present, Satterthwaite's df, at least 1, for a difference; a
//! clamped component from the upper mean square alone), and the paired SD of two
//! servers of one block, one cell each, sqrt(2 (server + repeat)). Written from
//! Kalibera and Jones (ISMM 2013) without calling `stats` or `noise`. When the
//! blocks ran on several machines (`run.json` `executor`: each block's kept task's
//! node), the block level splits into machines and blocks within a machine: the
//! one-way ANOVA of block means with unequal group sizes, MS_machine over M - 1 df,
//! MS_block over N - M, n0 = (N - sum n_i^2 / N) / (M - 1), the machine component
//! (MS_machine - MS_block) / (S R n0); only with M >= 2 and N > M. Every
//! difference is named by field. Must not write anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use statrs::distribution::{ChiSquared, ContinuousCDF};

use super::measures::CellMeasures;
use super::read::read_json;
use super::{Check, Mismatch, close, num};
use crate::metrics::metric_field;
use crate::plan::{CellKind, Metric, Plan};

pub const NAME: &str = "evidence.json: the noise decomposition (analysis.noise)";
const FILE: &str = crate::evidence::EVIDENCE_FILE;
const COVERAGE: f64 = 0.9;

/// One level as replay computes it.
#[derive(Debug)]
struct Level {
    name: &'static str,
    mean_square: f64,
    df: usize,
    variance: f64,
    interval: (f64, f64),
    clamped: bool,
}

fn chi(df: f64, p: f64) -> f64 {
    ChiSquared::new(df).map(|d| d.inverse_cdf(p)).unwrap_or(f64::NAN)
}

/// The 90% interval for a variance `v` with `df` degrees of freedom.
fn interval(v: f64, df: f64) -> (f64, f64) {
    let tail = (1.0 - COVERAGE) / 2.0;
    (df * v / chi(df, 1.0 - tail), df * v / chi(df, tail))
}

/// Interval bounds: equal within a relative 1e-6. A bound is a chi-square quantile
/// that statrs finds numerically, at Satterthwaite degrees of freedom that replay's
/// ANOVA and the analysis path's reach in a different order of sums; bounds a few
/// ulps apart in df land up to about 1e-8 apart (a full test run met 0.9946778259432294
/// against 0.9946778327767134), above `close`'s 1e-9. Every other number keeps `close`.
fn close_quantile(a: f64, b: f64) -> bool {
    if a == b {
        return true;
    }
    a.is_finite() && b.is_finite() && (a - b).abs() <= 1e-12_f64.max(1e-6 * a.abs().max(b.abs()))
}

/// `(ms_hi - ms_lo) / c` with its interval; the level below is `(ms_lo, df_lo)`.
fn level_above(name: &'static str, ms: f64, df: usize, below: Option<(f64, usize)>, c: f64) -> Level {
    let Some((ms_lo, df_lo)) = below else {
        return Level { name, mean_square: ms, df, variance: ms, interval: interval(ms, df as f64), clamped: false };
    };
    let raw = (ms - ms_lo) / c;
    if raw > 0.0 {
        let sat = ((ms - ms_lo).powi(2) / (ms * ms / df as f64 + ms_lo * ms_lo / df_lo as f64)).max(1.0);
        Level { name, mean_square: ms, df, variance: raw, interval: interval(raw, sat), clamped: false }
    } else {
        Level {
            name,
            mean_square: ms,
            df,
            variance: 0.0,
            interval: (0.0, interval(ms / c, df as f64).1),
            clamped: true,
        }
    }
}

/// The levels of `y[b][s][r]` (balanced, B >= 2) that are present: machine (with
/// `machine[b]` the machine of block b, when several ran two or more blocks),
/// block, server, repeat (the order of `evidence.json`).
fn levels(y: &[Vec<Vec<f64>>], machine: Option<&[usize]>) -> Vec<Level> {
    let (nb, ns, nr) = (y.len(), y[0].len(), y[0][0].len());
    let n = (nb * ns * nr) as f64;
    let grand: f64 = y.iter().flatten().flatten().sum::<f64>() / n;
    let cell_mean = |k: usize| y.iter().flatten().map(|srv| srv[k]).sum::<f64>() / (nb * ns) as f64;
    let adj: Vec<Vec<Vec<f64>>> = y
        .iter()
        .map(|blk| blk.iter().map(|srv| (0..nr).map(|k| srv[k] - cell_mean(k) + grand).collect()).collect())
        .collect();
    let (mut ss_r, mut ss_s, mut ss_b) = (0.0, 0.0, 0.0);
    for blk in &adj {
        let srv_means: Vec<f64> = blk.iter().map(|srv| srv.iter().sum::<f64>() / nr as f64).collect();
        let blk_mean = srv_means.iter().sum::<f64>() / ns as f64;
        for (srv, m) in blk.iter().zip(&srv_means) {
            ss_r += srv.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
            ss_s += nr as f64 * (m - blk_mean) * (m - blk_mean);
        }
        ss_b += (ns * nr) as f64 * (blk_mean - grand) * (blk_mean - grand);
    }
    let (df_r, df_s, df_b) = ((nb * ns - 1) * (nr - 1), nb * (ns - 1), nb - 1);
    let mut out = Vec::new();
    let mut below = None;
    if df_r > 0 {
        let ms = ss_r / df_r as f64;
        out.push(level_above("repeat", ms, df_r, None, 1.0));
        below = Some((ms, df_r));
    }
    if df_s > 0 {
        let ms = ss_s / df_s as f64;
        out.push(level_above("server", ms, df_s, below, nr as f64));
        below = Some((ms, df_s));
    }
    let groups: Vec<Vec<usize>> = match machine {
        Some(mac) if mac.len() == nb => {
            let mut ids: Vec<usize> = mac.to_vec();
            ids.sort_unstable();
            ids.dedup();
            ids.iter().map(|id| (0..nb).filter(|&b| mac[b] == *id).collect()).collect()
        }
        _ => Vec::new(),
    };
    if groups.len() < 2 || nb <= groups.len() {
        out.push(level_above("block", ss_b / df_b as f64, df_b, below, (ns * nr) as f64));
        out.reverse();
        return out;
    }
    let blk_mean = |b: usize| adj[b].iter().flatten().sum::<f64>() / (ns * nr) as f64;
    let (mut ss_m, mut ss_w, mut sq) = (0.0, 0.0, 0.0);
    for g in &groups {
        let gm = g.iter().map(|&b| blk_mean(b)).sum::<f64>() / g.len() as f64;
        ss_m += (ns * nr * g.len()) as f64 * (gm - grand) * (gm - grand);
        ss_w += g.iter().map(|&b| (ns * nr) as f64 * (blk_mean(b) - gm) * (blk_mean(b) - gm)).sum::<f64>();
        sq += (g.len() * g.len()) as f64;
    }
    let (df_m, df_w) = (groups.len() - 1, nb - groups.len());
    let n0 = (nb as f64 - sq / nb as f64) / df_m as f64;
    let ms_w = ss_w / df_w as f64;
    out.push(level_above("block", ms_w, df_w, below, (ns * nr) as f64));
    out.push(level_above("machine", ss_m / df_m as f64, df_m, Some((ms_w, df_w)), (ns * nr) as f64 * n0));
    out.reverse();
    out
}

/// Whether two confirmation cells are repeats of one another.
fn same_shape(a: &crate::plan::Cell, b: &crate::plan::Cell) -> bool {
    a.load == b.load
        && a.count == b.count
        && a.input_tokens == b.input_tokens
        && a.endpoint == b.endpoint
        && a.recorder == b.recorder
}

pub fn check(root: &Path, plan: &Plan, cells: &[CellMeasures]) -> Option<Check> {
    let doc = read_json::<Value>(root, FILE).ok();
    let recorded = doc.as_ref().and_then(|d| d.get("noise"));
    if plan.noise.is_empty() {
        return recorded.map(|_| {
            let m = vec![Mismatch::new(FILE, "noise", "present", "absent (the plan has no analysis.noise)")];
            Check::of(NAME, "no analysis.noise".into(), m)
        });
    }
    let mut m = Vec::new();
    let machines: BTreeMap<u32, String> = read_json::<crate::evidence::RunRecord>(root, crate::evidence::RUN_FILE)
        .ok()
        .and_then(|r| r.executor)
        .map(|e| e.tasks.into_iter().filter(|t| t.kept).map(|t| (t.block, t.hostname)).collect())
        .unwrap_or_default();
    let Some(recorded) = recorded else {
        return Some(Check::of(NAME, "analysis.noise".into(), vec![Mismatch::new(FILE, "noise", "absent", "present")]));
    };
    let groups = shape_groups(plan);
    let got_groups = recorded.get("groups").and_then(Value::as_array).cloned().unwrap_or_default();
    let want_count = groups.len() * plan.noise.len();
    if got_groups.len() != want_count {
        m.push(Mismatch::new(FILE, "noise.groups", got_groups.len().to_string(), want_count.to_string()));
        return Some(Check::of(NAME, format!("{want_count} groups"), m));
    }
    let inputs = Inputs { plan, cells, machines: &machines };
    let mut i = 0;
    for g in &groups {
        for &metric in &plan.noise {
            let k = format!("noise.groups[{i}]");
            check_group(&mut m, &k, &got_groups[i], g, metric, &inputs);
            i += 1;
        }
    }
    Some(Check::of(NAME, format!("{want_count} groups of {} measure(s)", plan.noise.len()), m))
}

/// What every group's check reads: the plan, replay's cell measures and the
/// machine each block ran on.
struct Inputs<'a> {
    plan: &'a Plan,
    cells: &'a [CellMeasures],
    machines: &'a BTreeMap<u32, String>,
}

/// The groups: confirmation cells by shape, in plan order.
fn shape_groups(plan: &Plan) -> Vec<Vec<&crate::plan::Cell>> {
    let mut groups: Vec<Vec<&crate::plan::Cell>> = Vec::new();
    for c in plan.cells.iter().filter(|c| c.kind == CellKind::Confirmation) {
        match groups.iter_mut().find(|g| same_shape(g[0], c)) {
            Some(g) => g.push(c),
            None => groups.push(vec![c]),
        }
    }
    groups
}

/// One group and measure: its cells, the blocks with every value, and replay's own
/// decomposition (with a machine level when the blocks ran on several machines).
fn check_group(
    m: &mut Vec<Mismatch>,
    k: &str,
    got: &Value,
    g: &[&crate::plan::Cell],
    metric: Metric,
    study: &Inputs<'_>,
) {
    let Inputs { plan, cells, machines } = *study;
    let value = |b: u32, arm: &str, cell: &str, metric: Metric| {
        cells
            .iter()
            .find(|c| c.block == b && c.arm == arm && c.cell == cell)?
            .float(metric_field(metric))
            .filter(|v| *v > 0.0)
            .map(f64::ln)
    };
    let names: Vec<&str> = g.iter().map(|c| c.name.as_str()).collect();
    let got_cells: Vec<&str> =
        got.get("cells").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    if got_cells != names || got.get("metric").and_then(Value::as_str) != Some(metric.as_str()) {
        m.push(Mismatch::new(
            FILE,
            format!("{k}.cells/metric"),
            format!("{got_cells:?} {}", got.get("metric").map_or("absent".into(), Value::to_string)),
            format!("{names:?} {:?}", metric.as_str()),
        ));
        return;
    }
    let (mut y, mut used, mut left) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..plan.blocks.count {
        let blk: Option<Vec<Vec<f64>>> =
            plan.arms.iter().map(|a| names.iter().map(|c| value(b, &a.name, c, metric)).collect()).collect();
        match blk {
            Some(v) => {
                y.push(v);
                used.push(b);
            }
            None => left.push(b),
        }
    }
    let as_u32s = |key: &str| -> Vec<u64> {
        got.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_u64).collect()
    };
    let want_used: Vec<u64> = used.iter().map(|&b| u64::from(b)).collect();
    let want_left: Vec<u64> = left.iter().map(|&b| u64::from(b)).collect();
    if as_u32s("blocks_used") != want_used || as_u32s("blocks_left_out") != want_left {
        m.push(Mismatch::new(
            FILE,
            format!("{k}.blocks_used"),
            format!("{:?}", as_u32s("blocks_used")),
            format!("{want_used:?}"),
        ));
        return;
    }
    if y.len() < 2 {
        m.push(Mismatch::new(FILE, k, "a decomposition", format!("none: {} blocks with every value", y.len())));
        return;
    }
    // The machine of each block used, when the blocks ran on several.
    let labels: Vec<Option<&String>> = used.iter().map(|b| machines.get(b)).collect();
    let distinct: BTreeSet<&String> = labels.iter().flatten().copied().collect();
    let index: Option<Vec<usize>> = (distinct.len() > 1)
        .then(|| labels.iter().map(|l| l.and_then(|l| distinct.iter().position(|d| *d == l))).collect())
        .flatten();
    let mine = levels(&y, index.as_deref());
    let d = got.get("decomposition");
    let comps = d.and_then(|d| d.get("components")).and_then(Value::as_array).cloned().unwrap_or_default();
    if comps.len() != mine.len() {
        let at = format!("{k}.decomposition.components");
        m.push(Mismatch::new(FILE, at, comps.len().to_string(), mine.len().to_string()));
        return;
    }
    for (j, (c, l)) in comps.iter().zip(&mine).enumerate() {
        let ck = format!("{k}.decomposition.components[{j}]");
        if c.get("level").and_then(Value::as_str) != Some(l.name)
            || c.get("df").and_then(Value::as_u64) != Some(l.df as u64)
        {
            m.push(Mismatch::new(FILE, format!("{ck}.level/df"), c.to_string(), format!("{} df {}", l.name, l.df)));
            continue;
        }
        let f = |key: &str| c.get(key).and_then(Value::as_f64);
        let lo = c.get("sd_interval").and_then(|v| v.get(0)).and_then(Value::as_f64);
        let hi = c.get("sd_interval").and_then(|v| v.get(1)).and_then(Value::as_f64);
        let exact: fn(f64, f64) -> bool = close;
        let quantile: fn(f64, f64) -> bool = close_quantile;
        for (key, got, want, same) in [
            ("mean_square", f("mean_square"), l.mean_square, exact),
            ("variance", f("variance"), l.variance, exact),
            ("sd", f("sd"), l.variance.sqrt(), exact),
            ("sd_interval[0]", lo, l.interval.0.sqrt(), quantile),
            ("sd_interval[1]", hi, l.interval.1.sqrt(), quantile),
        ] {
            if !got.is_some_and(|g| same(g, want)) {
                m.push(Mismatch::new(FILE, format!("{ck}.{key}"), num(got), num(Some(want))));
            }
        }
        if c.get("clamped").and_then(Value::as_bool) != Some(l.clamped) {
            m.push(Mismatch::new(
                FILE,
                format!("{ck}.clamped"),
                c.get("clamped").map_or("absent".into(), Value::to_string),
                l.clamped.to_string(),
            ));
        }
    }
    let var = |name: &str| mine.iter().find(|l| l.name == name).map_or(0.0, |l| l.variance);
    let paired = (2.0 * (var("server") + var("repeat"))).sqrt();
    let got_paired = got.get("paired_sd_one_cell").and_then(Value::as_f64);
    if !got_paired.is_some_and(|g| close(g, paired)) {
        m.push(Mismatch::new(FILE, format!("{k}.paired_sd_one_cell"), num(got_paired), num(Some(paired))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded uniform draws in [-0.5, 0.5) (a 64-bit LCG).
    fn uniform(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        }
    }

    /// Replay's ANOVA and the analysis path's (`stats::nested`) agree on designs
    /// with and without a clamped level, with one repeat and with one server.
    #[test]
    fn replays_levels_match_the_analysis_path() {
        let mut next = uniform(7);
        for (b, s, r, block_sd) in [(4, 3, 2, 0.1), (5, 2, 3, 0.0), (3, 3, 1, 0.05), (4, 1, 3, 0.2), (2, 2, 2, 0.0)] {
            let y: Vec<Vec<Vec<f64>>> = (0..b)
                .map(|_| {
                    let blk = block_sd * next();
                    (0..s)
                        .map(|_| {
                            let srv = 0.03 * next();
                            (0..r).map(|k| 1.5 + 0.1 * k as f64 + blk + srv + 0.02 * next()).collect()
                        })
                        .collect()
                })
                .collect();
            let theirs = crate::stats::nested(&y).unwrap();
            let mine = levels(&y, None);
            assert_eq!(mine.len(), theirs.components.len(), "{b}x{s}x{r}");
            for (l, c) in mine.iter().zip(&theirs.components) {
                assert_eq!((l.name, l.df, l.clamped), (c.level, c.df, c.clamped), "{b}x{s}x{r}");
                assert!(close(l.mean_square, c.mean_square) && close(l.variance, c.variance), "{l:?} {c:?}");
                assert!(
                    close_quantile(l.interval.0.sqrt(), c.sd_interval.0)
                        && close_quantile(l.interval.1.sqrt(), c.sd_interval.1)
                );
            }
            // With the blocks on two machines (one holding two or more blocks).
            let machine: Vec<usize> = (0..b).map(|i| usize::from(i % 3 == 1)).collect();
            let theirs = crate::stats::nested_by_machine(&y, &machine).unwrap();
            let mine = levels(&y, Some(&machine));
            assert_eq!(mine.len(), theirs.components.len(), "{b}x{s}x{r} by machine");
            for (l, c) in mine.iter().zip(&theirs.components) {
                assert_eq!((l.name, l.df, l.clamped), (c.level, c.df, c.clamped), "{b}x{s}x{r} by machine");
                assert!(close(l.mean_square, c.mean_square) && close(l.variance, c.variance), "{l:?} {c:?}");
                assert!(
                    close_quantile(l.interval.0.sqrt(), c.sd_interval.0)
                        && close_quantile(l.interval.1.sqrt(), c.sd_interval.1)
                );
            }
        }
    }

    /// Over many random studies, replay's interval bounds agree with the analysis
    /// path's within `close_quantile`; the values a full test run once met (a chi-square
    /// quantile 7e-9 apart) pass, and a bound changed in its sixth digit does not.
    #[test]
    fn interval_bounds_agree_within_the_quantile_tolerance_and_a_changed_bound_fails() {
        let mut next = uniform(11);
        let mut worst = 0f64;
        for i in 0..3000 {
            let (b, s, r) = (2 + i % 5, 1 + (i / 5) % 3, 1 + (i / 15) % 3);
            let y: Vec<Vec<Vec<f64>>> = (0..b)
                .map(|_| {
                    let blk = 0.2 * next();
                    (0..s).map(|_| (0..r).map(|_| 7.0 + blk + 0.05 * next() + 0.02 * next()).collect()).collect()
                })
                .collect();
            let Ok(theirs) = crate::stats::nested(&y) else { continue };
            for (l, c) in levels(&y, None).iter().zip(&theirs.components) {
                for (mine, their) in [(l.interval.0.sqrt(), c.sd_interval.0), (l.interval.1.sqrt(), c.sd_interval.1)] {
                    if mine != their {
                        worst = worst.max((mine - their).abs() / mine.abs().max(their.abs()));
                    }
                    assert!(close_quantile(mine, their), "{b}x{s}x{r}: {mine} against {their}");
                }
            }
        }
        assert!(worst < 1e-6, "{worst}");
        assert!(close_quantile(0.9946778259432294, 0.9946778327767134));
        assert!(!close_quantile(0.9946778259432294, 0.9946788259432294));
    }
}
