//! The paired gate's history, the second tier: each `harness gate --paired DIR
//! --record-history H` appends the gate's per-block results to the store `H` (one
//! Parquet file per gate, named `<unix ms>-<candidate revision>.parquet`, written
//! whole and renamed into place), and `harness gate --history H` looks for change
//! points in each hypothesis's series of gate estimates (the mean worse-is-positive
//! log-ratio of each gate, in time order): a drift of a few percent over many
//! commits, each of which its own gate called within the margin, shows as a change
//! in level against the fixed baseline revision.
//!
//! A gate is counted once, by its id (the `gate` column): copies of one gate's
//! file in the store are skipped and counted (`duplicates`).
//!
//! Detection: binary segmentation. The split whose two parts' means differ most
//! in standard errors, both parts at least 3 gates, the noise variance taken from
//! the series' successive differences (von Neumann: barely moved by the changes
//! themselves, so a bump is found as two splits, where a pooled variance hid it);
//! it is kept
//! when a permutation test (the series shuffled, seeded, the maximum statistic
//! recomputed, 2000 times) gives p below 0.01, and both parts are searched again,
//! as Apache Otava's E-divisive means does with its own statistic; at the end each
//! change point moves to the best split between its neighbours. (The circular
//! binary segmentation used before searched every interval: quadratic per
//! statistic, 104 s for 3,000 gates.) Each statistic is a few passes over the
//! series (O(n)); a permutation test runs its shuffles in seeded chunks on every
//! core and stops as soon as p can no longer fall below 0.01
//! (`bench/results/gate-history.json`, `examples/history_bench.rs`).
//!
//! Owns the store's columns and the detector. Reads and writes only the store.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use polars::prelude::{Column, DataFrame, DataType};
use polars_io::SerReader;
use polars_io::parquet::read::ParquetReader;
use polars_io::parquet::write::ParquetWriter;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
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
    /// Distinct gates (by id).
    pub gates: usize,
    /// Files skipped because an earlier file (by name) holds the same gate id.
    pub duplicates: Vec<String>,
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

/// One file's gate: its id and its points by hypothesis.
type FileGate = (String, Vec<(String, GatePoint)>);

/// Reads one gate file (a regular file only, never waited on).
fn read_file(path: &Path) -> Result<FileGate, GateError> {
    let bytes = crate::evidence::read_input(path).map_err(|error| GateError::Io { path: path.to_path_buf(), error })?;
    let df = ParquetReader::new(std::io::Cursor::new(bytes)).finish().map_err(polars_err(path))?;
    let (gate, rev, hyp) =
        (strings(&df, "gate", path)?, strings(&df, "candidate_revision", path)?, strings(&df, "hypothesis", path)?);
    let (ms, x) = (floats(&df, "unix_ms", path)?, floats(&df, "worse_log_ratio", path)?);
    let id = gate.first().cloned().unwrap_or_default();
    if let Some(other) = gate.iter().find(|g| **g != id) {
        return Err(GateError::Json {
            path: path.to_path_buf(),
            message: format!("holds two gates ({id:?} and {other:?}): a history file is one gate"),
        });
    }
    let mut names: Vec<&String> = hyp.iter().collect();
    names.dedup();
    let mut points = Vec::new();
    for name in names {
        let rows: Vec<usize> = (0..hyp.len()).filter(|&i| &hyp[i] == name && x[i].is_finite()).collect();
        if rows.is_empty() {
            continue;
        }
        points.push((
            name.clone(),
            GatePoint {
                gate: gate[rows[0]].clone(),
                unix_ms: ms[rows[0]] as i64,
                candidate_revision: rev[rows[0]].clone(),
                blocks: rows.len(),
                mean: rows.iter().map(|&i| x[i]).sum::<f64>() / rows.len() as f64,
            },
        ));
    }
    Ok((id, points))
}

/// One hypothesis's name and its gate estimates.
pub type HypothesisSeries = (String, Vec<GatePoint>);

/// Reads every gate of the store once by id (in parallel), per hypothesis in time
/// order; also the files skipped as copies of a gate already read.
pub fn read(dir: &Path) -> Result<(Vec<HypothesisSeries>, Vec<String>), GateError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| GateError::Io { path: dir.to_path_buf(), error })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<FileGate, GateError>>>> = files.iter().map(|_| Mutex::new(None)).collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(i) else { break };
                    if let Ok(mut slot) = slots[i].lock() {
                        *slot = Some(read_file(path));
                    }
                }
            });
        }
    });
    let mut seen = std::collections::HashSet::new();
    let mut duplicates = Vec::new();
    let mut series: Vec<HypothesisSeries> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (path, slot) in files.iter().zip(slots) {
        let Some(read) = slot.into_inner().ok().flatten() else { continue };
        let (id, points) = read?;
        if !seen.insert(id) {
            duplicates.push(path.display().to_string());
            continue;
        }
        for (name, point) in points {
            let i = *index.entry(name.clone()).or_insert_with(|| {
                series.push((name, Vec::new()));
                series.len() - 1
            });
            series[i].1.push(point);
        }
    }
    for (_, v) in series.iter_mut() {
        v.sort_by(|a, b| (a.unix_ms, &a.gate).cmp(&(b.unix_ms, &b.gate)));
    }
    Ok((series, duplicates))
}

/// Scratch space of one statistic: prefix sums.
#[derive(Default)]
struct Scratch {
    sums: Vec<f64>,
}

/// The series' noise variance from its successive differences (von Neumann's
/// estimator: the mean squared difference over 2), which a few changes of level
/// barely move: a bump does not inflate it as it inflates the pooled variance of a
/// split's two parts. 0 for a constant series.
fn noise_var(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let sum: f64 = xs.windows(2).map(|w| (w[1] - w[0]) * (w[1] - w[0])).sum();
    sum / (2 * (xs.len() - 1)) as f64
}

/// The split `k` of `xs` (parts `[0, k)` and `[k, n)`, each at least `MIN_SEGMENT`
/// long) whose means differ most, in standard errors of the difference (the noise
/// variance from successive differences; the pooled variance of the two parts when
/// that is 0): `(k, |z|)`, in two passes over the series (O(n)).
fn best_split(xs: &[f64], sc: &mut Scratch) -> Option<(usize, f64)> {
    let n = xs.len();
    if n < 2 * MIN_SEGMENT {
        return None;
    }
    let noise = noise_var(xs);
    let s = &mut sc.sums;
    s.clear();
    s.push(0.0);
    let mut ss = 0.0;
    for x in xs {
        s.push(s[s.len() - 1] + x);
        ss += x * x;
    }
    let total = s[n];
    let mut best: Option<(usize, f64)> = None;
    for (k, &sk) in s.iter().enumerate().take(n - MIN_SEGMENT + 1).skip(MIN_SEGMENT) {
        let (l, r) = (k as f64, (n - k) as f64);
        let (m_l, m_r) = (sk / l, (total - sk) / r);
        let var = if noise > 0.0 { noise } else { ((ss - l * m_l * m_l - r * m_r * m_r) / (n - 2) as f64).max(0.0) };
        let z = if var > 0.0 {
            (m_l - m_r).abs() / (var * (1.0 / l + 1.0 / r)).sqrt()
        } else if m_l != m_r {
            f64::INFINITY
        } else {
            0.0
        };
        if best.is_none_or(|(_, b)| z > b) {
            best = Some((k, z));
        }
    }
    best
}

/// A uniform index in `0..=k` (Lemire's multiply; the bias, below 2^-40 for any
/// series length, does not matter to a permutation test).
fn below(rng: &mut Xoshiro256PlusPlus, k: usize) -> usize {
    ((u128::from(rng.next_u64()) * (k as u128 + 1)) >> 64) as usize
}

/// Shuffles per chunk of a permutation test (each chunk its own seeded generator).
const CHUNK: usize = 100;

/// Exceedances of `t` among the shuffles of chunk `c` of the test of `xs[lo..hi]`.
fn chunk_exceedances(seg: &[f64], t: f64, seed: u64, lo: usize, c: usize) -> usize {
    let key = seed ^ (lo as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seg.len() as u64) << 40 ^ (c as u64) << 20;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(key);
    let mut shuffled = seg.to_vec();
    let mut sc = Scratch::default();
    let mut at_least = 0;
    for _ in 0..CHUNK {
        for k in (1..shuffled.len()).rev() {
            let m = below(&mut rng, k);
            shuffled.swap(k, m);
        }
        if best_split(&shuffled, &mut sc).is_some_and(|(_, u)| u >= t) {
            at_least += 1;
        }
    }
    at_least
}

/// The permutation p of the statistic `t` of `xs[lo..hi]`: (exceedances + 1) /
/// (PERMUTATIONS + 1), the shuffles in seeded chunks run in parallel (the same
/// result on any number of threads). Stops once p can no longer fall below
/// `MAX_P` (the split is then not kept, whatever the other shuffles would give).
fn permutation_p(xs: &[f64], lo: usize, hi: usize, t: f64, seed: u64) -> f64 {
    let seg = &xs[lo..hi];
    let enough = (MAX_P * (PERMUTATIONS + 1) as f64).ceil() as usize;
    let chunks = PERMUTATIONS.div_ceil(CHUNK);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8);
    let (mut at_least, mut done) = (0usize, 0usize);
    while done < chunks {
        let round: Vec<usize> = (done..chunks.min(done + threads)).collect();
        at_least += std::thread::scope(|s| {
            let handles: Vec<_> =
                round.iter().map(|&c| s.spawn(move || chunk_exceedances(seg, t, seed, lo, c))).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(CHUNK)).sum::<usize>()
        });
        done += round.len();
        if at_least + 1 >= enough {
            return (at_least + 1) as f64 / (done * CHUNK + 1) as f64;
        }
    }
    (at_least + 1) as f64 / (PERMUTATIONS + 1) as f64
}

/// Change points of `xs` (indices of the first value of each new level), by binary
/// segmentation with a seeded permutation test per split.
pub fn change_points(xs: &[f64], seed: u64) -> Vec<(usize, f64)> {
    let mut found = Vec::new();
    let mut stack = vec![(0usize, xs.len())];
    let mut sc = Scratch::default();
    while let Some((lo, hi)) = stack.pop() {
        let Some((k, t)) = best_split(&xs[lo..hi], &mut sc) else { continue };
        let p = permutation_p(xs, lo, hi, t, seed);
        if p < MAX_P {
            found.push((lo + k, p));
            stack.push((lo, lo + k));
            stack.push((lo + k, hi));
        }
    }
    found.sort_by_key(|(i, _)| *i);
    refine(xs, &mut found, &mut sc);
    found
}

/// Moves each change point to the best split between its neighbours, until none
/// moves (a few rounds): binary segmentation places the first split of a bump by
/// the whole series, where noise near one edge can pull it a few gates off.
fn refine(xs: &[f64], found: &mut [(usize, f64)], sc: &mut Scratch) {
    for _ in 0..10 {
        let mut moved = false;
        for i in 0..found.len() {
            let lo = if i == 0 { 0 } else { found[i - 1].0 };
            let hi = found.get(i + 1).map_or(xs.len(), |c| c.0);
            if let Some((k, _)) = best_split(&xs[lo..hi], sc)
                && lo + k != found[i].0
            {
                found[i].0 = lo + k;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
}

/// Reads the store and finds each hypothesis's change points.
pub fn analyse(dir: &Path, seed: u64) -> Result<History, GateError> {
    let (series, duplicates) = read(dir)?;
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
    Ok(History { format: "harness-gate-history/1", store: dir.display().to_string(), gates, duplicates, series })
}

impl History {
    /// `harness gate --history DIR`: [`analyse`].
    pub fn analyse(dir: &Path, seed: u64) -> Result<History, GateError> {
        analyse(dir, seed)
    }
}

fn pct(log: f64) -> String {
    format!("{:+.2}%", log.exp_m1() * 100.0)
}

/// Estimates shown per hypothesis in the terminal (the latest); `--json` has all.
const SHOWN_ESTIMATES: usize = 12;
/// Change points shown per hypothesis in the terminal (the latest); `--json` has all.
const SHOWN_CHANGES: usize = 10;

/// The terminal text: a summary per hypothesis (its levels, the latest estimates
/// and change points), never the whole series.
pub fn render(h: &History) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gate history: {} gates in {}", h.gates, h.store);
    if !h.duplicates.is_empty() {
        let _ = writeln!(
            o,
            "  {} file(s) skipped: copies of a gate already counted (same gate id), e.g. {}",
            h.duplicates.len(),
            h.duplicates[0]
        );
    }
    for s in &h.series {
        let n = s.points.len();
        let _ = writeln!(o, "\n{} ({n} gates; + = candidate worse than the baseline):", s.hypothesis);
        let mean = s.points.iter().map(|p| p.mean).sum::<f64>() / n.max(1) as f64;
        let last_level = s.change_points.last().map_or(mean, |c| c.after_mean);
        let _ = writeln!(o, "  mean {}, current level {}", pct(mean), pct(last_level));
        let from = n.saturating_sub(SHOWN_ESTIMATES);
        let line: Vec<String> = s.points[from..].iter().map(|p| pct(p.mean)).collect();
        let more = if from > 0 { format!(" (the last {} of {n})", n - from) } else { String::new() };
        let _ = writeln!(o, "  estimates{more}: {}", line.join(" "));
        if s.change_points.is_empty() {
            let _ =
                writeln!(o, "  no change point (permutation p < {MAX_P}, segments of at least {MIN_SEGMENT} gates)");
        }
        let skip = s.change_points.len().saturating_sub(SHOWN_CHANGES);
        if skip > 0 {
            let _ = writeln!(o, "  {} change points; the last {SHOWN_CHANGES}:", s.change_points.len());
        }
        for c in &s.change_points[skip..] {
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
    if h.series.iter().any(|s| s.points.len() > SHOWN_ESTIMATES || s.change_points.len() > SHOWN_CHANGES) {
        let _ = writeln!(o, "\nevery estimate and change point: --json FILE");
    }
    o
}

#[cfg(test)]
mod tests {
    use rand_distr::{Distribution, Normal};

    use super::*;

    fn noisy(levels: &[f64], seed: u64) -> Vec<f64> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let n = Normal::new(0.0, 0.01).unwrap();
        levels.iter().map(|l| l + n.sample(&mut rng)).collect()
    }

    /// A gate file of the store's columns: `id`, at `unix_ms`, one hypothesis with
    /// these per-block worse log-ratios.
    fn gate_file(dir: &Path, name: &str, id: &str, unix_ms: i64, ratios: &[f64]) {
        let n = ratios.len();
        let cols = vec![
            Column::new("gate".into(), vec![id.to_string(); n]),
            Column::new("unix_ms".into(), vec![unix_ms; n]),
            Column::new("candidate_revision".into(), vec!["abc".to_string(); n]),
            Column::new("baseline_sha256".into(), vec![String::new(); n]),
            Column::new("candidate_sha256".into(), vec![String::new(); n]),
            Column::new("verdict".into(), vec!["passed".to_string(); n]),
            Column::new("hypothesis".into(), vec!["tput".to_string(); n]),
            Column::new("block".into(), (0..n as i64).collect::<Vec<_>>()),
            Column::new("worse_log_ratio".into(), ratios.to_vec()),
        ];
        let mut df = DataFrame::new(n, cols).unwrap();
        let mut buf = Vec::new();
        ParquetWriter::new(&mut buf).finish(&mut df).unwrap();
        std::fs::write(dir.join(name), buf).unwrap();
    }

    /// Issue 52 item 8: copies of one gate's file are one gate, not a series.
    #[test]
    fn copies_of_a_gate_file_count_once() {
        let tmp = tempfile::tempdir().unwrap();
        gate_file(tmp.path(), "1000-abc.parquet", "1000-abc", 1000, &[0.01, 0.02]);
        for i in 0..4 {
            std::fs::copy(tmp.path().join("1000-abc.parquet"), tmp.path().join(format!("copy{i}.parquet"))).unwrap();
        }
        gate_file(tmp.path(), "2000-def.parquet", "2000-def", 2000, &[0.0]);
        let h = analyse(tmp.path(), 1).unwrap();
        assert_eq!(h.gates, 2);
        assert_eq!(h.series.len(), 1);
        assert_eq!(h.series[0].points.len(), 2, "{:?}", h.series[0].points);
        assert_eq!(h.duplicates.len(), 4, "{:?}", h.duplicates);
        assert!(render(&h).contains("4 file(s) skipped: copies of a gate already counted"), "{}", render(&h));
    }

    /// Issue 52 item 13: the terminal gets a summary, not every estimate.
    #[test]
    fn the_terminal_shows_a_summary_of_a_long_history() {
        let tmp = tempfile::tempdir().unwrap();
        let levels: Vec<f64> = (0..300).map(|i| if i < 150 { 0.0 } else { 0.03 }).collect();
        for (i, x) in noisy(&levels, 2).into_iter().enumerate() {
            gate_file(tmp.path(), &format!("{i:05}.parquet"), &format!("{i:05}"), 1000 + i as i64, &[x]);
        }
        let h = analyse(tmp.path(), 1).unwrap();
        let text = render(&h);
        assert!(
            text.lines().all(|l| l.len() < 300),
            "a line of {} chars",
            text.lines().map(str::len).max().unwrap_or(0)
        );
        assert!(text.len() < 2000, "{} bytes:\n{text}", text.len());
        assert!(text.contains("estimates (the last 12 of 300)"), "{text}");
        assert!(text.contains("change point at gate 150"), "{text}");
        assert_eq!(h.series[0].change_points.len(), 1, "{text}");
        assert!(text.contains("--json FILE"), "{text}");
        assert_eq!(h.series[0].points.len(), 300, "the JSON keeps every estimate");
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
