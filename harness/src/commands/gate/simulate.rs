//! `harness gate --simulate DIR...`: what a paired sequential gate would decide on
//! noise like the recorded one. Pools the per-block worse-is-positive log-ratios of
//! every given study's last look (`sequential.json`), each study's own mean
//! removed (so the pool is noise around no change), and replays the first study's
//! rule on gates drawn from that pool: each simulated block is one recorded block
//! (all hypotheses together, so their correlation is kept), drawn with
//! replacement, shifted by ln(1 + s) in every hypothesis for a uniform slowdown s
//! (or only in those named by `--shift-only`: a slowdown that the other measures
//! do not see, the conservative case).
//! Reports, for s = 0 (an A/A), the margin and twice the margin: how often the gate
//! ended regressed, passed or inconclusive, and the mean blocks it used.
//!
//! Owns the resampling. The rule is `stats::run_sequential`; the draws are seeded.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Uniform};
use serde::Serialize;

use super::GateError;
use crate::analysis::sequential::SequentialRecord;
use crate::stats::{GateState, SequentialRule, run_sequential};

/// One simulated slowdown's outcome rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rates {
    /// The uniform slowdown, a fraction (0: an A/A).
    pub slowdown: f64,
    pub regressed: f64,
    pub passed: f64,
    pub inconclusive: f64,
    pub mean_blocks: f64,
}

/// The simulation's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulation {
    pub format: &'static str,
    pub studies: Vec<String>,
    /// Recorded blocks in the pool, and the hypotheses of each.
    pub pool_blocks: usize,
    pub hypotheses: Vec<String>,
    pub margins: Vec<f64>,
    /// The hypotheses the slowdown shifts.
    pub shifted: Vec<String>,
    /// Per hypothesis, the pooled residual SD of the worse log-ratios.
    pub pooled_sd: Vec<f64>,
    pub rule: SequentialRule,
    pub draws: usize,
    pub seed: u64,
    pub rates: Vec<Rates>,
}

/// The `sequential.json` of the finished study `dir`, opened through `evidence::Sealed`.
fn read(dir: &Path) -> Result<SequentialRecord, GateError> {
    super::paired::sequential_record(&crate::evidence::Sealed::open(dir)?)
}

/// Simulates `draws` gates per slowdown from the studies at `dirs`.
/// `plan`: take the rule and margins from this plan's `[sequential]` instead of the
/// first study's (its hypotheses must be the studies' own, by name).
pub fn simulate(
    dirs: &[PathBuf],
    draws: usize,
    seed: u64,
    shift_only: &[String],
    plan: Option<&std::path::Path>,
) -> Result<Simulation, GateError> {
    let first = read(dirs.first().ok_or_else(|| GateError::Args("--simulate needs a study".into()))?)?;
    let last = first.looks.last().ok_or_else(|| GateError::Args("the first study has no look".into()))?;
    let names: Vec<String> = last.hypotheses.iter().map(|h| h.name.clone()).collect();
    let mut margins: Vec<f64> = last.hypotheses.iter().map(|h| h.margin).collect();
    let mut rule = first.rule.clone();
    if let Some(path) = plan {
        let p = crate::plan::load(path).map_err(|e| GateError::Args(format!("{}: {e}", path.display())))?;
        let seq =
            p.sequential.as_ref().ok_or_else(|| GateError::Args(format!("{}: no [sequential]", path.display())))?;
        let theirs: Vec<String> = p.hypotheses.iter().map(|h| h.name.clone()).collect();
        if theirs != names {
            return Err(GateError::Args(format!(
                "{}: hypotheses {theirs:?}, the studies' are {names:?}",
                path.display()
            )));
        }
        margins = names.iter().map(|n| seq.margin_of(n)).collect();
        rule = seq.rule(names.len());
    }
    if let Some(bad) = shift_only.iter().find(|n| !names.contains(n)) {
        return Err(GateError::Args(format!("--shift-only {bad:?}: the hypotheses are {names:?}")));
    }
    let shifted: Vec<bool> = names.iter().map(|n| shift_only.is_empty() || shift_only.contains(n)).collect();
    let mut pool: Vec<Vec<f64>> = Vec::new();
    for dir in dirs {
        let rec = read(dir)?;
        let look =
            rec.looks.last().ok_or_else(|| GateError::NotEvidence { path: dir.clone(), message: "no look".into() })?;
        let hs: Vec<String> = look.hypotheses.iter().map(|h| h.name.clone()).collect();
        if hs != names {
            return Err(GateError::NotEvidence {
                path: dir.clone(),
                message: format!("hypotheses {hs:?}, the first study's are {names:?}"),
            });
        }
        // Blocks where every hypothesis has a pair; each hypothesis centred on its mean.
        let blocks: Vec<u32> = look.hypotheses[0]
            .blocks
            .iter()
            .copied()
            .filter(|b| look.hypotheses.iter().all(|h| h.blocks.contains(b)))
            .collect();
        let column = |j: usize| -> Vec<f64> {
            let h = &look.hypotheses[j];
            blocks.iter().map(|b| h.worse_log_ratios[h.blocks.iter().position(|x| x == b).unwrap_or(0)]).collect()
        };
        let cols: Vec<Vec<f64>> = (0..names.len()).map(column).collect();
        let means: Vec<f64> = cols.iter().map(|c| c.iter().sum::<f64>() / c.len().max(1) as f64).collect();
        for i in 0..blocks.len() {
            pool.push(cols.iter().zip(&means).map(|(c, m)| c[i] - m).collect());
        }
    }
    if pool.len() < 3 {
        return Err(GateError::Args(format!("{} recorded blocks: too few to resample", pool.len())));
    }
    let pooled_sd: Vec<f64> = (0..names.len())
        .map(|j| (pool.iter().map(|b| b[j] * b[j]).sum::<f64>() / (pool.len() - dirs.len()).max(1) as f64).sqrt())
        .collect();
    let cap = *rule.looks.last().unwrap_or(&0) as usize;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let pick = Uniform::new(0, pool.len()).map_err(|e| GateError::Args(e.to_string()))?;
    let margin = margins.iter().zip(&shifted).filter(|(_, s)| **s).map(|(m, _)| *m).fold(f64::INFINITY, f64::min);
    let mut rates = Vec::new();
    for slowdown in [0.0, margin, 2.0 * margin] {
        let shift = slowdown.ln_1p();
        let (mut counts, mut blocks) = ([0usize; 3], 0usize);
        for _ in 0..draws {
            let gate: Vec<Vec<f64>> = (0..cap)
                .map(|_| {
                    let b = &pool[pick.sample(&mut rng)];
                    b.iter().zip(&shifted).map(|(x, s)| if *s { x + shift } else { *x }).collect()
                })
                .collect();
            let end = run_sequential(&rule, &margins, &gate).map_err(|e| GateError::Args(e.to_string()))?;
            blocks += end.blocks as usize;
            counts[match end.state {
                GateState::Regressed => 0,
                GateState::Passed => 1,
                _ => 2,
            }] += 1;
        }
        let f = |c: usize| c as f64 / draws as f64;
        rates.push(Rates {
            slowdown,
            regressed: f(counts[0]),
            passed: f(counts[1]),
            inconclusive: f(counts[2]),
            mean_blocks: blocks as f64 / draws as f64,
        });
    }
    Ok(Simulation {
        format: "harness-gate-simulation/1",
        studies: dirs.iter().map(|d| d.display().to_string()).collect(),
        pool_blocks: pool.len(),
        shifted: names.iter().zip(&shifted).filter(|(_, s)| **s).map(|(n, _)| n.clone()).collect(),
        hypotheses: names,
        margins,
        pooled_sd,
        rule,
        draws,
        seed,
        rates,
    })
}

/// The terminal text.
pub fn render(s: &Simulation) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gate simulation: {} recorded blocks from {} studies, each study's mean removed; {} gates per slowdown, seed {}",
        s.pool_blocks,
        s.studies.len(),
        s.draws,
        s.seed
    );
    let _ = writeln!(o, "rule: looks {:?}, alpha {}, beta {}", s.rule.looks, s.rule.alpha, s.rule.beta);
    let _ = writeln!(o, "the slowdown shifts: {}", s.shifted.join(", "));
    for ((h, m), sd) in s.hypotheses.iter().zip(&s.margins).zip(&s.pooled_sd) {
        let _ = writeln!(o, "  {h}: margin {:.0}%, pooled paired SD {sd:.4}", m * 100.0);
    }
    let _ = writeln!(
        o,
        "\n{:>9} {:>10} {:>8} {:>13} {:>12}",
        "slowdown", "regressed", "passed", "inconclusive", "mean blocks"
    );
    for r in &s.rates {
        let _ = writeln!(
            o,
            "{:>8.1}% {:>9.1}% {:>7.1}% {:>12.1}% {:>12.2}",
            r.slowdown * 100.0,
            r.regressed * 100.0,
            r.passed * 100.0,
            r.inconclusive * 100.0,
            r.mean_blocks
        );
    }
    o
}
