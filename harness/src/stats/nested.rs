//! Variance components of a balanced three-level nested design (Kalibera and Jones,
//! "Rigorous benchmarking in reasonable time", ISMM 2013): `y[b][s][r]`, B blocks,
//! S fresh servers per block, R repeats of the same cell per server, every value a
//! log (so the components are in log units: an SD of 0.03 is about 3%).
//!
//! The model is y = mu + cell_r + block_b + server_bs + repeat_bsr with independent
//! zero-mean parts of variances `sigma2_block`, `sigma2_server`, `sigma2_repeat`,
//! and a fixed effect per cell (repeat r is the same cell, with the same trace, in
//! every block and server: an open loop's arrivals differ from cell to cell), which
//! is removed first (each value minus its cell's mean plus the grand mean; it takes
//! R - 1 degrees of freedom from the repeat level).
//! The ANOVA (method of moments) estimators from the mean squares
//!   MS_repeat = sum (y_bsr - y_bs.)^2 / ((B S - 1) (R - 1))
//!   MS_server = R sum (y_bs. - y_b..)^2 / (B (S - 1))
//!   MS_block  = S R sum (y_b.. - y...)^2 / (B - 1)
//! are sigma2_repeat = MS_repeat, sigma2_server = (MS_server - MS_repeat) / R and
//! sigma2_block = (MS_block - MS_server) / (S R), each clamped at 0 (a negative
//! estimate says the level adds nothing measurable). Intervals (90%, two-sided):
//! exact chi-square for the repeat level; Satterthwaite's approximate degrees of
//! freedom for a difference of mean squares at the other two (for a clamped
//! estimate the lower end is 0 and the upper end is taken from the larger mean
//! square alone, which bounds the component from above).
//!
//! A level with one member (R = 1, S = 1) has no degrees of freedom: its variance
//! is folded into the level above and reported as such (`None`).
//!
//! Blocks that ran on several machines (`nested_by_machine`: a study whose blocks
//! were Slurm array tasks) add a level above the block: the machine. Machines ran
//! unequal numbers of blocks, so that level is the unbalanced one-way ANOVA of the
//! block means (Searle, Casella and McCulloch, "Variance Components", 1992, ch. 3):
//! with N blocks on M machines, n_i blocks on machine i,
//!   MS_machine = S R sum_i n_i (y_i.. - y....)^2 / (M - 1)
//!   MS_block   = S R sum_i sum_b (y_ib. - y_i..)^2 / (N - M)   (blocks within a machine)
//!   n0 = (N - sum_i n_i^2 / N) / (M - 1)
//! and sigma2_machine = (MS_machine - MS_block) / (S R n0), the block level taken
//! within machines. It needs M >= 2 and N - M >= 1 (some machine ran two blocks).

use statrs::distribution::{ChiSquared, ContinuousCDF};

use super::error::{Result, StatsError, check_finite};

/// Two-sided coverage of the component intervals.
pub const COMPONENT_COVERAGE: f64 = 0.9;

/// One level's variance estimate.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Component {
    /// `block`, `server` or `repeat`.
    pub level: &'static str,
    pub mean_square: f64,
    pub df: usize,
    /// The variance estimate (clamped at 0) and its SD.
    pub variance: f64,
    pub sd: f64,
    /// The interval for the SD at `COMPONENT_COVERAGE`.
    pub sd_interval: (f64, f64),
    /// True when the raw estimate was negative and set to 0.
    pub clamped: bool,
}

/// The decomposition of one measure.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Nested {
    pub blocks: usize,
    pub servers: usize,
    pub repeats: usize,
    /// Machines the blocks ran on, when the machine is a level (0: it is not).
    #[serde(skip_serializing_if = "is_zero")]
    pub machines: usize,
    /// Machine (when a level), block, server, repeat (a level without degrees of
    /// freedom is absent).
    pub components: Vec<Component>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Nested {
    pub fn component(&self, level: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.level == level)
    }

    /// The SD of the paired log-ratio of two servers compared within a block, each
    /// measured as the mean of `repeats` repeats: sqrt(2 (sigma2_server +
    /// sigma2_repeat / repeats)). The block level cancels in the pair.
    pub fn paired_sd(&self, repeats: usize) -> f64 {
        let v = |l: &str| self.component(l).map_or(0.0, |c| c.variance);
        (2.0 * (v("server") + v("repeat") / repeats.max(1) as f64)).sqrt()
    }
}

fn chi(df: f64, p: f64) -> Result<f64> {
    let d = ChiSquared::new(df).map_err(|_| StatsError::Numerical("chi-square degrees of freedom"))?;
    Ok(d.inverse_cdf(p))
}

/// The interval for a variance with `df` (possibly fractional) degrees of freedom
/// around the estimate `v`.
fn variance_interval(v: f64, df: f64) -> Result<(f64, f64)> {
    let tail = (1.0 - COMPONENT_COVERAGE) / 2.0;
    Ok((df * v / chi(df, 1.0 - tail)?, df * v / chi(df, tail)?))
}

/// A component estimated as (ms1 - ms2) / c, with its Satterthwaite interval.
fn difference(level: &'static str, ms1: f64, df1: usize, ms2: f64, df2: usize, c: f64) -> Result<Component> {
    let raw = (ms1 - ms2) / c;
    let (variance, clamped) = if raw > 0.0 { (raw, false) } else { (0.0, true) };
    let interval = if raw > 0.0 {
        // Satterthwaite's degrees of freedom, at least 1: below that the chi-square
        // quantiles put the lower end above the estimate.
        let df = ((ms1 - ms2).powi(2) / (ms1.powi(2) / df1 as f64 + ms2.powi(2) / df2 as f64)).max(1.0);
        variance_interval(raw, df)?
    } else {
        // Upper end from ms1 alone: sigma2 <= ms1 / c.
        (0.0, variance_interval(ms1 / c, df1 as f64)?.1)
    };
    Ok(Component {
        level,
        mean_square: ms1,
        df: df1,
        variance,
        sd: variance.sqrt(),
        sd_interval: (interval.0.sqrt(), interval.1.sqrt()),
        clamped,
    })
}

/// Decomposes `y[b][s][r]` (see the module doc). Errors on an unbalanced or empty
/// design, a non-finite value, or fewer than 2 blocks.
pub fn nested(y: &[Vec<Vec<f64>>]) -> Result<Nested> {
    let b = y.len();
    let s = y.first().map_or(0, Vec::len);
    let r = y.first().and_then(|x| x.first()).map_or(0, Vec::len);
    if b < 2 || s == 0 || r == 0 {
        return Err(StatsError::Empty { what: "nested design (at least 2 blocks, 1 server, 1 repeat)" });
    }
    if y.iter().any(|blk| blk.len() != s || blk.iter().any(|srv| srv.len() != r)) {
        return Err(StatsError::OutOfRange {
            name: "nested design",
            value: f64::NAN,
            allowed: "a balanced design (the same servers per block and repeats per server)",
        });
    }
    let flat: Vec<f64> = y.iter().flatten().flatten().copied().collect();
    check_finite("nested design values", &flat)?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    // Repeat r is the same cell everywhere (crossed with blocks and servers): its
    // own level (an open loop's arrival trace differs from cell to cell) is a fixed
    // effect, removed first.
    let all = mean(&flat);
    let cell_means: Vec<f64> =
        (0..r).map(|k| mean(&y.iter().flat_map(|blk| blk.iter().map(move |srv| srv[k])).collect::<Vec<_>>())).collect();
    let y: Vec<Vec<Vec<f64>>> = y
        .iter()
        .map(|blk| {
            blk.iter().map(|srv| srv.iter().enumerate().map(|(k, v)| v - cell_means[k] + all).collect()).collect()
        })
        .collect();
    let server_means: Vec<Vec<f64>> = y.iter().map(|blk| blk.iter().map(|srv| mean(srv)).collect()).collect();
    let block_means: Vec<f64> = server_means.iter().map(|m| mean(m)).collect();
    let grand = mean(&block_means);

    let mut ss_repeat = 0.0;
    let mut ss_server = 0.0;
    for (bi, blk) in y.iter().enumerate() {
        for (si, srv) in blk.iter().enumerate() {
            ss_repeat += srv.iter().map(|v| (v - server_means[bi][si]).powi(2)).sum::<f64>();
            ss_server += r as f64 * (server_means[bi][si] - block_means[bi]).powi(2);
        }
    }
    let ss_block: f64 = block_means.iter().map(|m| (s * r) as f64 * (m - grand).powi(2)).sum();
    // The cell effects took r - 1 degrees of freedom from the repeat level.
    let df_repeat = (b * s - 1) * (r - 1);
    let df_server = b * (s - 1);
    let df_block = b - 1;
    let ms = |ss: f64, df: usize| if df > 0 { ss / df as f64 } else { f64::NAN };
    let (ms_repeat, ms_server, ms_block) = (ms(ss_repeat, df_repeat), ms(ss_server, df_server), ms(ss_block, df_block));

    let mut components = Vec::new();
    // The level below a given one: its mean square and df, skipping absent levels.
    let mut below: Option<(f64, usize, usize)> = None; // (ms, df, size of a member)
    if df_repeat > 0 {
        let (lo, hi) = variance_interval(ms_repeat, df_repeat as f64)?;
        components.push(Component {
            level: "repeat",
            mean_square: ms_repeat,
            df: df_repeat,
            variance: ms_repeat,
            sd: ms_repeat.sqrt(),
            sd_interval: (lo.sqrt(), hi.sqrt()),
            clamped: false,
        });
        below = Some((ms_repeat, df_repeat, 1));
    }
    if df_server > 0 {
        let c = match below {
            Some((ms_lo, df_lo, _)) => difference("server", ms_server, df_server, ms_lo, df_lo, r as f64)?,
            None => {
                // R = 1: the server level holds the repeat variance too.
                let (lo, hi) = variance_interval(ms_server, df_server as f64)?;
                Component {
                    level: "server",
                    mean_square: ms_server,
                    df: df_server,
                    variance: ms_server,
                    sd: ms_server.sqrt(),
                    sd_interval: (lo.sqrt(), hi.sqrt()),
                    clamped: false,
                }
            }
        };
        components.push(c);
        below = Some((ms_server, df_server, r));
    }
    let block = match below {
        Some((ms_lo, df_lo, _)) => difference("block", ms_block, df_block, ms_lo, df_lo, (s * r) as f64)?,
        None => {
            let (lo, hi) = variance_interval(ms_block, df_block as f64)?;
            Component {
                level: "block",
                mean_square: ms_block,
                df: df_block,
                variance: ms_block,
                sd: ms_block.sqrt(),
                sd_interval: (lo.sqrt(), hi.sqrt()),
                clamped: false,
            }
        }
    };
    components.insert(0, block);
    // Block, server, repeat: from the slowest level to the fastest.
    components.sort_by_key(|c| ["block", "server", "repeat"].iter().position(|l| *l == c.level));
    Ok(Nested { blocks: b, servers: s, repeats: r, machines: 0, components })
}

/// `nested(y)` with block `b` run on machine `machine[b]` (see the module doc): a
/// machine level above the block when at least two machines ran blocks and one of
/// them ran two or more; otherwise exactly `nested(y)`.
pub fn nested_by_machine(y: &[Vec<Vec<f64>>], machine: &[usize]) -> Result<Nested> {
    let mut out = nested(y)?;
    if machine.len() != y.len() {
        return Err(StatsError::OutOfRange {
            name: "machines of the blocks",
            value: machine.len() as f64,
            allowed: "one machine per block",
        });
    }
    let mut groups: Vec<usize> = machine.to_vec();
    groups.sort_unstable();
    groups.dedup();
    let (n, m) = (y.len(), groups.len());
    if m < 2 || n <= m {
        return Ok(out);
    }
    let (s, r) = (out.servers, out.repeats);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    // Block means are unchanged by removing the cells' own levels (balanced design).
    let block_means: Vec<f64> = y.iter().map(|blk| mean(&blk.iter().flatten().copied().collect::<Vec<_>>())).collect();
    let grand = mean(&block_means);
    let (mut ss_machine, mut ss_within, mut sum_sq) = (0.0, 0.0, 0.0);
    for g in &groups {
        let members: Vec<f64> = (0..n).filter(|&b| machine[b] == *g).map(|b| block_means[b]).collect();
        let mm = mean(&members);
        ss_machine += members.len() as f64 * (mm - grand).powi(2);
        ss_within += members.iter().map(|v| (v - mm).powi(2)).sum::<f64>();
        sum_sq += (members.len() * members.len()) as f64;
    }
    let sr = (s * r) as f64;
    let (df_machine, df_within) = (m - 1, n - m);
    let (ms_machine, ms_within) = (sr * ss_machine / df_machine as f64, sr * ss_within / df_within as f64);
    let n0 = (n as f64 - sum_sq / n as f64) / df_machine as f64;
    let below =
        out.components.iter().find(|c| c.level == "server" || c.level == "repeat").map(|c| (c.mean_square, c.df));
    let block = match below {
        Some((ms_lo, df_lo)) => difference("block", ms_within, df_within, ms_lo, df_lo, sr)?,
        None => {
            let (lo, hi) = variance_interval(ms_within, df_within as f64)?;
            Component {
                level: "block",
                mean_square: ms_within,
                df: df_within,
                variance: ms_within,
                sd: ms_within.sqrt(),
                sd_interval: (lo.sqrt(), hi.sqrt()),
                clamped: false,
            }
        }
    };
    let machine_level = difference("machine", ms_machine, df_machine, ms_within, df_within, sr * n0)?;
    out.components.retain(|c| c.level != "block");
    out.components.insert(0, block);
    out.components.insert(0, machine_level);
    out.machines = m;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, Normal};

    use super::*;

    #[test]
    fn mean_squares_match_a_hand_computed_design() {
        // 2 blocks x 2 servers x 2 repeats.
        let y = vec![vec![vec![1.0, 3.0], vec![5.0, 7.0]], vec![vec![2.0, 2.0], vec![4.0, 8.0]]];
        let n = nested(&y).unwrap();
        // Cell means 3 (repeat 0) and 5 (repeat 1), grand 4: removing them gives
        // [[2, 2], [6, 6]], [[3, 1], [5, 7]].
        // Server means 2, 6 | 2, 6; block means 4, 4.
        // SS_repeat = 0 + 0 + 2 + 2 = 4 over df (4 - 1)(2 - 1) = 3.
        // SS_server = 2 * (4 + 4 + 4 + 4) = 32 over df 2 -> 16.
        // SS_block = 0 over df 1 -> 0.
        let c = |l| n.component(l).unwrap().clone();
        assert_eq!((c("repeat").mean_square, c("repeat").df), (4.0 / 3.0, 3));
        assert_eq!((c("server").mean_square, c("server").df), (16.0, 2));
        assert_eq!((c("block").mean_square, c("block").df), (0.0, 1));
        assert_eq!(c("server").variance, (16.0 - 4.0 / 3.0) / 2.0);
        assert!(c("block").clamped && c("block").variance == 0.0);
        let levels: Vec<&str> = n.components.iter().map(|c| c.level).collect();
        assert_eq!(levels, ["block", "server", "repeat"]);
        assert!((n.paired_sd(2) - (2.0f64 * ((16.0 - 4.0 / 3.0) / 2.0 + 2.0 / 3.0)).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn known_injected_components_are_recovered_within_their_intervals() {
        let (sb, ss, sr) = (0.10, 0.05, 0.02);
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(31);
        let mut covered = [0usize; 3];
        let trials = 200;
        for _ in 0..trials {
            let (nb, ns, nr) = (12, 3, 3);
            let y: Vec<Vec<Vec<f64>>> = (0..nb)
                .map(|_| {
                    let blk = Normal::new(0.0, sb).unwrap().sample(&mut rng);
                    (0..ns)
                        .map(|_| {
                            let srv = Normal::new(0.0, ss).unwrap().sample(&mut rng);
                            // Cell k's own level (0.3 k) must not read as repeat noise.
                            (0..nr)
                                .map(|k| {
                                    1.0 + 0.3 * k as f64 + blk + srv + Normal::new(0.0, sr).unwrap().sample(&mut rng)
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect();
            let n = nested(&y).unwrap();
            for (i, (level, truth)) in [("block", sb), ("server", ss), ("repeat", sr)].into_iter().enumerate() {
                let c = n.component(level).unwrap();
                if c.sd_interval.0 <= truth && truth <= c.sd_interval.1 {
                    covered[i] += 1;
                }
            }
        }
        // Nominal 90%: the exact interval within Monte Carlo error, the
        // Satterthwaite ones approximately (at least 80% here).
        for (i, c) in covered.iter().enumerate() {
            let rate = *c as f64 / trials as f64;
            assert!(rate >= if i == 2 { 0.84 } else { 0.80 }, "level {i}: coverage {rate}");
            assert!(rate <= 0.97, "level {i}: coverage {rate} (intervals too wide)");
        }
        // One large design recovers the three SDs closely.
        let y: Vec<Vec<Vec<f64>>> = (0..2000)
            .map(|_| {
                let blk = Normal::new(0.0, sb).unwrap().sample(&mut rng);
                (0..3)
                    .map(|_| {
                        let srv = Normal::new(0.0, ss).unwrap().sample(&mut rng);
                        (0..3).map(|_| blk + srv + Normal::new(0.0, sr).unwrap().sample(&mut rng)).collect()
                    })
                    .collect()
            })
            .collect();
        let n = nested(&y).unwrap();
        for (level, truth) in [("block", sb), ("server", ss), ("repeat", sr)] {
            let c = n.component(level).unwrap();
            assert!((c.sd / truth - 1.0).abs() < 0.06, "{level}: {} vs {truth}", c.sd);
            assert!(c.sd_interval.0 <= c.sd && c.sd <= c.sd_interval.1, "{level}: {c:?}");
        }
        // A level whose true variance is 0 (no server effect): the interval holds 0
        // and the estimate, and its lower end never exceeds the estimate.
        for seed in 0..50 {
            let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(seed);
            let y: Vec<Vec<Vec<f64>>> = (0..4)
                .map(|_| {
                    let blk = Normal::new(0.0, 0.02).unwrap().sample(&mut rng);
                    (0..3)
                        .map(|_| (0..2).map(|_| blk + Normal::new(0.0, 0.02).unwrap().sample(&mut rng)).collect())
                        .collect()
                })
                .collect();
            let c = nested(&y).unwrap().component("server").unwrap().clone();
            assert!(c.sd_interval.0 <= c.sd && c.sd <= c.sd_interval.1, "seed {seed}: {c:?}");
        }
    }

    #[test]
    fn a_machine_level_matches_a_hand_computed_unbalanced_design() {
        // 5 blocks x 1 server x 1 repeat: block means are the values. Machines a
        // (blocks 0, 1, 2: 1, 2, 3) and b (blocks 3, 4: 7, 9).
        let y: Vec<Vec<Vec<f64>>> = [1.0, 2.0, 3.0, 7.0, 9.0].iter().map(|v| vec![vec![*v]]).collect();
        let n = nested_by_machine(&y, &[0, 0, 0, 1, 1]).unwrap();
        // grand 4.4; machine means 2 and 8: SS_machine = 3 (2 - 4.4)^2 + 2 (8 - 4.4)^2
        // = 17.28 + 25.92 = 43.2 over df 1; SS_within = (1 + 0 + 1) + (1 + 1) = 4 over
        // df 3; n0 = (5 - (9 + 4) / 5) / 1 = 2.4.
        let c = |l| n.component(l).unwrap().clone();
        assert_eq!(n.machines, 2);
        assert!((c("machine").mean_square - 43.2).abs() < 1e-12 && c("machine").df == 1);
        assert!((c("block").mean_square - 4.0 / 3.0).abs() < 1e-12 && c("block").df == 3);
        assert!((c("machine").variance - (43.2 - 4.0 / 3.0) / 2.4).abs() < 1e-12);
        let levels: Vec<&str> = n.components.iter().map(|c| c.level).collect();
        assert_eq!(levels, ["machine", "block"]);
        // One machine, or every block on its own machine: no machine level.
        assert_eq!(nested_by_machine(&y, &[0; 5]).unwrap(), nested(&y).unwrap());
        assert_eq!(nested_by_machine(&y, &[0, 1, 2, 3, 4]).unwrap().machines, 0);
        assert!(nested_by_machine(&y, &[0, 1]).is_err(), "a machine per block");
    }

    #[test]
    fn an_injected_machine_effect_is_recovered() {
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(5);
        let (sm, sb) = (0.2, 0.02);
        let machines: Vec<usize> = (0..600).map(|b| b % 30).collect();
        let offsets: Vec<f64> = (0..30).map(|_| Normal::new(0.0, sm).unwrap().sample(&mut rng)).collect();
        let y: Vec<Vec<Vec<f64>>> = machines
            .iter()
            .map(|&m| {
                let blk = offsets[m] + Normal::new(0.0, sb).unwrap().sample(&mut rng);
                (0..2)
                    .map(|_| (0..2).map(|_| blk + Normal::new(0.0, 0.01).unwrap().sample(&mut rng)).collect())
                    .collect()
            })
            .collect();
        let n = nested_by_machine(&y, &machines).unwrap();
        let machine = n.component("machine").unwrap();
        assert!((machine.sd / sm - 1.0).abs() < 0.35, "{machine:?}");
        assert!(machine.sd_interval.0 <= machine.sd && machine.sd <= machine.sd_interval.1);
        assert!((n.component("block").unwrap().sd / sb - 1.0).abs() < 0.15, "{:?}", n.component("block"));
    }

    #[test]
    fn a_level_with_one_member_folds_into_the_level_above_and_bad_designs_are_refused() {
        let y = vec![vec![vec![1.0], vec![2.0]], vec![vec![1.5], vec![2.5]], vec![vec![1.0], vec![1.0]]];
        let n = nested(&y).unwrap();
        assert!(n.component("repeat").is_none() && n.component("server").is_some());
        assert!(nested(&[vec![vec![1.0]]]).is_err(), "one block");
        assert!(nested(&[vec![vec![1.0, 2.0]], vec![vec![1.0]]]).is_err(), "unbalanced");
        assert!(nested(&[vec![vec![1.0]], vec![vec![f64::NAN]]]).is_err(), "not finite");
    }
}
