//! The paired gate's history, the second tier: each `harness gate --paired DIR
//! --record-history H` appends the gate's per-block results to the store `H` (one
//! Parquet file per gate, named `<unix ms>-<candidate revision>.parquet`, written
//! whole and renamed into place), and `harness gate --history H` looks for change
//! points in each hypothesis's series of gate estimates (the mean worse-is-positive
//! log-ratio of each gate, in time order): a drift of a few percent over many
//! commits, each of which its own gate called within the margin, shows as a change
//! in level against the fixed baseline revision.
//!
//! Detection: circular binary segmentation (Olshen et al. 2004) with the
//! two-sample t statistic (pooled variance): the interval whose mean differs most
//! from the rest's, parts of at least 3 gates (an interval touching an end is one
//! change point, one inside is a bump with two); it is kept when a permutation
//! test (the series shuffled, seeded, the maximum statistic recomputed) gives p
//! below 0.01, and the parts are searched again, as Apache Otava's E-divisive
//! means does with its own statistic.
//!
//! Owns the store's columns and the detector. Reads and writes only the store.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use polars::prelude::{Column, DataFrame, DataType};
use polars_io::SerReader;
use polars_io::parquet::read::ParquetReader;
use polars_io::parquet::write::ParquetWriter;
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Uniform};
use serde::Serialize;

use super::GateError;
use super::paired::PairedReport;

/// Smallest segment on either side of a change point, in gates.
pub const MIN_SEGMENT: usize = 3;
/// Largest permutation p of a kept change point.
pub const MAX_P: f64 = 0.01;
const PERMUTATIONS: usize = 2000;

fn polars_err(path: &Path) -> impl Fn(polars::prelude::PolarsError) -> GateError + '_ {
    move |e| GateError::Json { path: path.to_path_buf(), message: e.to_string() }
}

/// Appends `report` to the store at `dir` (created when missing); returns the file.
pub fn append(dir: &Path, report: &PairedReport, unix_ms: i64) -> Result<PathBuf, GateError> {
    std::fs::create_dir_all(dir).map_err(|error| GateError::Io { path: dir.to_path_buf(), error })?;
    let rev = report
        .study
        .git
        .as_ref()
        .and_then(|g| g.get("revision"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    let short: String = rev.chars().filter(char::is_ascii_alphanumeric).take(12).collect();
    let id = format!("{unix_ms}-{short}");
    let sha = |role: &str| {
        report
            .arms
            .iter()
            .find(|a| a.role.as_deref() == Some(role))
            .and_then(|a| a.program_sha256.clone())
            .unwrap_or_default()
    };
    let (mut hyp, mut block, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for h in &report.hypotheses {
        for (b, x) in h.blocks.iter().zip(&h.worse_log_ratios) {
            hyp.push(h.name.clone());
            block.push(i64::from(*b));
            ratio.push(*x);
        }
    }
    let n = hyp.len();
    let cols = vec![
        Column::new("gate".into(), vec![id.clone(); n]),
        Column::new("unix_ms".into(), vec![unix_ms; n]),
        Column::new("candidate_revision".into(), vec![rev.clone(); n]),
        Column::new("baseline_sha256".into(), vec![sha("control"); n]),
        Column::new("candidate_sha256".into(), vec![sha("candidate"); n]),
        Column::new("verdict".into(), vec![report.verdict.to_string(); n]),
        Column::new("hypothesis".into(), hyp),
        Column::new("block".into(), block),
        Column::new("worse_log_ratio".into(), ratio),
    ];
    let path = dir.join(format!("{id}.parquet"));
    let mut df = DataFrame::new(n, cols).map_err(polars_err(&path))?;
    let mut buf = Vec::new();
    ParquetWriter::new(&mut buf).finish(&mut df).map_err(polars_err(&path))?;
    crate::evidence::write_bytes(&path, &buf)?;
    Ok(path)
}

/// One gate's estimate of one hypothesis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatePoint {
    pub gate: String,
    pub unix_ms: i64,
    pub candidate_revision: String,
    pub blocks: usize,
    /// Mean worse-is-positive log-ratio over the gate's blocks.
    pub mean: f64,
}

/// A kept change point: the series' level moves between `before` and `after` at
/// gate `at` (the first gate of the new level).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangePoint {
    pub at: usize,
    pub gate: String,
    pub before_mean: f64,
    pub after_mean: f64,
    pub p: f64,
}

/// One hypothesis's series and its change points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub hypothesis: String,
    pub points: Vec<GatePoint>,
    pub change_points: Vec<ChangePoint>,
}

/// `harness gate --history`'s report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    pub format: &'static str,
    pub store: String,
    pub gates: usize,
    pub series: Vec<Series>,
}

fn strings(df: &DataFrame, name: &str, path: &Path) -> Result<Vec<String>, GateError> {
    let c = df.column(name).map_err(polars_err(path))?.cast(&DataType::String).map_err(polars_err(path))?;
    let ca = c.str().map_err(polars_err(path))?;
    Ok((0..ca.len()).map(|i| ca.get(i).unwrap_or_default().to_string()).collect())
}

fn floats(df: &DataFrame, name: &str, path: &Path) -> Result<Vec<f64>, GateError> {
    let c = df.column(name).map_err(polars_err(path))?.cast(&DataType::Float64).map_err(polars_err(path))?;
    let ca = c.f64().map_err(polars_err(path))?;
    Ok((0..ca.len()).map(|i| ca.get(i).unwrap_or(f64::NAN)).collect())
}

/// Reads every gate of the store, per hypothesis in time order.
pub fn read(dir: &Path) -> Result<Vec<(String, Vec<GatePoint>)>, GateError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| GateError::Io { path: dir.to_path_buf(), error })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet") && p.is_file())
        .collect();
    files.sort();
    let mut series: Vec<(String, Vec<GatePoint>)> = Vec::new();
    for path in &files {
        let bytes = crate::evidence::read_input(path).map_err(|error| GateError::Io { path: path.clone(), error })?;
        let df = ParquetReader::new(std::io::Cursor::new(bytes)).finish().map_err(polars_err(path))?;
        let (gate, rev, hyp) =
            (strings(&df, "gate", path)?, strings(&df, "candidate_revision", path)?, strings(&df, "hypothesis", path)?);
        let (ms, x) = (floats(&df, "unix_ms", path)?, floats(&df, "worse_log_ratio", path)?);
        let mut names: Vec<&String> = hyp.iter().collect();
        names.dedup();
        for name in names {
            let rows: Vec<usize> = (0..hyp.len()).filter(|&i| &hyp[i] == name && x[i].is_finite()).collect();
            if rows.is_empty() {
                continue;
            }
            let point = GatePoint {
                gate: gate[rows[0]].clone(),
                unix_ms: ms[rows[0]] as i64,
                candidate_revision: rev[rows[0]].clone(),
                blocks: rows.len(),
                mean: rows.iter().map(|&i| x[i]).sum::<f64>() / rows.len() as f64,
            };
            match series.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => v.push(point),
                None => series.push((name.clone(), vec![point])),
            }
        }
    }
    for (_, v) in series.iter_mut() {
        v.sort_by(|a, b| (a.unix_ms, &a.gate).cmp(&(b.unix_ms, &b.gate)));
    }
    Ok(series)
}

/// The interval `[i, j)` of `xs` whose mean differs most from the rest's, by the
/// two-sample t statistic (pooled variance), both parts at least `MIN_SEGMENT`
/// long (circular binary segmentation: an interval touching an end is a single
/// change point, one inside is a bump with two): `(i, j, |t|)`.
fn best_interval(xs: &[f64]) -> Option<(usize, usize, f64)> {
    let n = xs.len();
    if n < 2 * MIN_SEGMENT {
        return None;
    }
    let mut s = vec![0.0; n + 1];
    let mut ss = 0.0;
    for (k, x) in xs.iter().enumerate() {
        s[k + 1] = s[k] + x;
        ss += x * x;
    }
    let total = s[n];
    let mut best: Option<(usize, usize, f64)> = None;
    // Every part (before, inside, after) is empty or at least MIN_SEGMENT long.
    let part = |len: usize| len == 0 || len >= MIN_SEGMENT;
    for i in (0..n).filter(|&i| part(i)) {
        for j in (i + MIN_SEGMENT)..=n {
            let len = j - i;
            if n - len < MIN_SEGMENT {
                break;
            }
            if !part(n - j) {
                continue;
            }
            let (l, r) = (len as f64, (n - len) as f64);
            let (m_in, m_out) = ((s[j] - s[i]) / l, (total - (s[j] - s[i])) / r);
            let var = ((ss - l * m_in * m_in - r * m_out * m_out) / (n - 2) as f64).max(0.0);
            let t = if var > 0.0 {
                (m_in - m_out).abs() / (var * (1.0 / l + 1.0 / r)).sqrt()
            } else if m_in != m_out {
                f64::INFINITY
            } else {
                0.0
            };
            if best.is_none_or(|(_, _, b)| t > b) {
                best = Some((i, j, t));
            }
        }
    }
    best
}

/// Change points of `xs` (indices of the first value of each new level), by
/// circular binary segmentation with a seeded permutation test per split.
pub fn change_points(xs: &[f64], seed: u64) -> Vec<(usize, f64)> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut found = Vec::new();
    let mut stack = vec![(0usize, xs.len())];
    while let Some((lo, hi)) = stack.pop() {
        let seg = &xs[lo..hi];
        let Some((i, j, t)) = best_interval(seg) else { continue };
        let mut shuffled = seg.to_vec();
        let mut at_least = 0usize;
        for _ in 0..PERMUTATIONS {
            for k in (1..shuffled.len()).rev() {
                let m = Uniform::new_inclusive(0, k).map(|u| u.sample(&mut rng)).unwrap_or(0);
                shuffled.swap(k, m);
            }
            if best_interval(&shuffled).is_some_and(|(_, _, u)| u >= t) {
                at_least += 1;
            }
        }
        let p = (at_least + 1) as f64 / (PERMUTATIONS + 1) as f64;
        if p < MAX_P {
            let cuts: Vec<usize> = [i, j].into_iter().filter(|&c| c > 0 && c < seg.len()).collect();
            let mut edges = vec![lo];
            for c in cuts {
                found.push((lo + c, p));
                edges.push(lo + c);
            }
            edges.push(hi);
            for w in edges.windows(2) {
                stack.push((w[0], w[1]));
            }
        }
    }
    found.sort_by_key(|(i, _)| *i);
    found
}

/// Reads the store and finds each hypothesis's change points.
pub fn analyse(dir: &Path, seed: u64) -> Result<History, GateError> {
    let series = read(dir)?;
    let mut gates: Vec<&str> = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.gate.as_str())).collect();
    gates.sort();
    gates.dedup();
    let gates = gates.len();
    let series = series
        .into_iter()
        .map(|(hypothesis, points)| {
            let xs: Vec<f64> = points.iter().map(|p| p.mean).collect();
            let cps = change_points(&xs, seed);
            let bounds: Vec<usize> =
                std::iter::once(0).chain(cps.iter().map(|c| c.0)).chain(std::iter::once(xs.len())).collect();
            let level = |a: usize, b: usize| xs[a..b].iter().sum::<f64>() / (b - a).max(1) as f64;
            let change_points = cps
                .iter()
                .enumerate()
                .map(|(i, &(at, p))| ChangePoint {
                    at,
                    gate: points[at].gate.clone(),
                    before_mean: level(bounds[i], at),
                    after_mean: level(at, bounds[i + 2]),
                    p,
                })
                .collect();
            Series { hypothesis, points, change_points }
        })
        .collect();
    Ok(History { format: "harness-gate-history/1", store: dir.display().to_string(), gates, series })
}

fn pct(log: f64) -> String {
    format!("{:+.2}%", log.exp_m1() * 100.0)
}

/// The terminal text.
pub fn render(h: &History) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gate history: {} gates in {}", h.gates, h.store);
    for s in &h.series {
        let _ = writeln!(
            o,
            "\n{} ({} gates; estimates, + = candidate worse than the baseline):",
            s.hypothesis,
            s.points.len()
        );
        let line: Vec<String> = s.points.iter().map(|p| pct(p.mean)).collect();
        let _ = writeln!(o, "  {}", line.join(" "));
        if s.change_points.is_empty() {
            let _ =
                writeln!(o, "  no change point (permutation p < {MAX_P}, segments of at least {MIN_SEGMENT} gates)");
        }
        for c in &s.change_points {
            let _ = writeln!(
                o,
                "  change point at gate {} ({}): {} -> {} (p {:.4})",
                c.at,
                c.gate,
                pct(c.before_mean),
                pct(c.after_mean),
                c.p
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use rand_distr::Normal;

    use super::*;

    fn noisy(levels: &[f64], seed: u64) -> Vec<f64> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let n = Normal::new(0.0, 0.01).unwrap();
        levels.iter().map(|l| l + n.sample(&mut rng)).collect()
    }

    #[test]
    fn a_flat_history_has_no_change_point() {
        for seed in 0..5 {
            let xs = noisy(&[0.0; 24], seed);
            assert!(change_points(&xs, 9).is_empty(), "seed {seed}: {xs:?}");
        }
    }

    #[test]
    fn a_step_of_three_percent_is_found_where_it_is() {
        let levels: Vec<f64> = (0..20).map(|i| if i < 12 { 0.0 } else { 0.03f64.ln_1p() }).collect();
        for seed in 0..5 {
            let cps = change_points(&noisy(&levels, seed), 9);
            assert_eq!(cps.len(), 1, "seed {seed}: {cps:?}");
            assert!((11..=13).contains(&cps[0].0), "seed {seed}: {cps:?}");
        }
    }

    #[test]
    fn a_drift_of_three_percent_over_ten_gates_is_found_though_each_step_is_small() {
        // 0.3% per gate for ten gates (each gate "within +-5%"), flat before and after.
        let levels: Vec<f64> = (0..26).map(|i| (0.003 * f64::from((i - 8).clamp(0, 10))).ln_1p()).collect();
        let cps = change_points(&noisy(&levels, 3), 9);
        assert!(!cps.is_empty(), "{cps:?}");
        assert!(cps.iter().all(|c| (8..=18).contains(&c.0)), "inside the drift: {cps:?}");
    }

    #[test]
    fn two_steps_are_both_found() {
        let levels: Vec<f64> = (0..30)
            .map(|i| {
                if i < 10 {
                    0.0
                } else if i < 20 {
                    0.04
                } else {
                    0.0
                }
            })
            .collect();
        let cps: Vec<usize> = change_points(&noisy(&levels, 5), 9).iter().map(|c| c.0).collect();
        assert_eq!(cps.len(), 2, "{cps:?}");
        assert!((9..=11).contains(&cps[0]) && (19..=21).contains(&cps[1]), "{cps:?}");
    }
}
