//! The power of a study with in-study pilots, as the report shows it: per
//! hypothesis, the smallest true effect its rule supports with 80% (and 95%)
//! probability at the study's block count, from the noise of the control's repeated
//! pilot runs (`power::pilot_noise::power_summary`), with the model's
//! assumptions, so that "not supported" reads against what the study could see.
//! Three views of one `Loaded::power`: the summary section at the top of
//! `report.md` ([`section`]), the claims table's column beside every claim
//! ([`claims_column`]) and `evidence.json`'s `power` ([`evidence`], audited by
//! `replay::power`). After the study, each hypothesis also shows the realised noise:
//! the SD of its confirmation blocks' paired log-ratios and what the rule supports
//! at it, with a warning when it is more than twice the pilots' assumption. Must
//! not compute anything but those log-ratios (it renders `Loaded::power`).

use std::fmt::Write;

use serde::Serialize;

use crate::analysis::Loaded;
use crate::analysis::claims::{Analysis, Claim, HypothesisReport};
use crate::analysis::power::noise::SD_UPPER_CONFIDENCE;
use crate::analysis::power::{Detectable, HypothesisPower, OPTIMISM_FACTOR, PowerReport, percent};

/// `evidence.json` `power.noise_source`.
pub const NOISE_SOURCE: &str = "pilots";

fn effect(x: Option<f64>) -> String {
    x.map_or_else(|| "no effect within the search".to_string(), percent)
}

/// The detectable effect of `h` for probability `p`, at the estimated SD or at its
/// upper bound (`None`: not within the search).
fn detectable(h: &HypothesisPower, upper: bool, p: f64) -> Option<&Detectable> {
    h.detectable.iter().find(|d| (d.sd == h.noise.sd_upper) == upper && d.probability == p)
}

fn rule(h: &HypothesisPower, upper: bool, p: f64) -> Option<f64> {
    detectable(h, upper, p).and_then(|d| d.rule_simulated)
}

/// The paired log-ratios ln(candidate / control) of `h`'s confirmation blocks that
/// have both values: what [`crate::analysis::power::PowerReport::add_realised`] takes.
pub fn realised_log_ratios(h: &HypothesisReport) -> Vec<f64> {
    h.blocks
        .iter()
        .filter_map(|b| match (b.control, b.candidate) {
            (Some(c), Some(x)) if c > 0.0 && x > 0.0 => Some((x / c).ln()),
            _ => None,
        })
        .collect()
}

fn realised_cell(h: &HypothesisPower) -> String {
    match &h.realised {
        None => "n/a (fewer than 2 blocks with both arms, or no spread)".into(),
        Some(r) => format!("{:.4} ({} blocks): {} with 80% probability", r.sd, r.df + 1, effect(r.detectable)),
    }
}

/// Appends the section when the study has pilots and hypotheses.
pub fn section(o: &mut String, l: &Loaded) {
    let Some(power) = &l.power else { return };
    let _ = writeln!(o, "## Power of this study (noise from its own pilots)\n");
    match power {
        Err(why) => {
            let _ = writeln!(o, "No power summary: {why}.\n");
        }
        Ok(r) => render(o, r),
    }
}

fn render(o: &mut String, r: &PowerReport) {
    let _ = writeln!(
        o,
        "How large a true effect this study's rule (sign test, Holm over the family of {} at alpha {}, median \
         screen) supports with 80% probability at its {} confirmation blocks, given the fresh-server noise of the \
         control's repeated pilot runs (`pilots/derived.json`, excluded from every test). A claim below that is \
         not supported reads against these figures: an effect smaller than them is likely to be missed.\n",
        r.family, r.alpha, r.blocks
    );
    let _ = writeln!(
        o,
        "| hypothesis | noise: SD of the paired log-ratio (90% upper bound) | pilot runs | supported with 80% probability | with 95% | realised: SD of the confirmation blocks' log-ratios, and what it supports |"
    );
    let _ = writeln!(o, "| --- | --- | --- | --- | --- | --- |");
    for h in &r.hypotheses {
        let _ = writeln!(
            o,
            "| {} ({} in {}) | {:.4} ({:.4}) from {} | {} of {} | this study could detect {} with 80% probability at {} \
             blocks ({} at the SD's upper bound) | {} ({}) | {} |",
            h.name,
            h.metric.as_str(),
            h.cell,
            h.noise.sd,
            h.noise.sd_upper,
            h.noise.cell,
            h.noise.blocks.len(),
            h.noise.control,
            effect(rule(h, false, 0.8)),
            r.blocks,
            effect(rule(h, true, 0.8)),
            effect(rule(h, false, 0.95)),
            effect(rule(h, true, 0.95)),
            realised_cell(h),
        );
    }
    for h in &r.hypotheses {
        let Some(real) = h.realised.as_ref().filter(|x| x.optimistic) else { continue };
        let _ = writeln!(
            o,
            "\n**The power statement above was optimistic for {}**: its confirmation blocks' paired log-ratios had SD \
             {:.4} ({} blocks), more than {OPTIMISM_FACTOR} times the pilots' {:.4}; with the realised noise this \
             study could detect {} with 80% probability. A claim not supported here says little about effects \
             below that.",
            h.name,
            real.sd,
            real.df + 1,
            h.noise.sd,
            effect(real.detectable),
        );
    }
    let _ = writeln!(o, "\nModel and assumptions:\n");
    for a in &r.assumptions {
        let _ = writeln!(o, "- {a}");
    }
    o.push('\n');
}

/// The claims table's power column: its header and one cell per hypothesis of `a`
/// (plan order); `None` when the study has no noise source (no `[pilots]`).
pub fn claims_column(l: &Loaded, a: &Analysis) -> Option<(String, Vec<String>)> {
    let power = l.power.as_ref()?;
    let header =
        format!("detectable with 80% probability at {} blocks (at the SD's upper bound)", a.confirmation_blocks);
    let cells = a
        .hypotheses
        .iter()
        .map(|h| {
            let Ok(r) = power else { return "n/a: no noise estimate (see Power of this study)".to_string() };
            let Some(p) = r.hypotheses.iter().find(|p| p.name == h.name) else {
                return "n/a".to_string();
            };
            let at = rule(p, false, 0.8);
            let mut cell = format!("{} ({})", effect(at), effect(rule(p, true, 0.8)));
            if let (Claim::NotSupported { .. }, Some(at)) = (&h.claim, at) {
                let _ = write!(cell, "; a true effect below {} is missed more than 20% of the time", percent(at));
            }
            cell
        })
        .collect();
    Some((header, cells))
}

/// One detectable effect in `evidence.json`.
#[derive(Debug, Serialize)]
pub struct DetectableOut {
    pub probability: f64,
    /// "estimate" or "upper_bound": which SD it is computed at.
    pub sd_basis: &'static str,
    pub sd: f64,
    /// Exact: the sign test alone at `level` (fraction; null: none up to the search's limit).
    pub sign_test_exact: Option<f64>,
    /// Simulated: the whole rule (sign test, Holm, median screen), seed and draws above.
    pub rule_simulated: Option<f64>,
}

/// One hypothesis's power in `evidence.json`.
#[derive(Debug, Serialize)]
pub struct HypothesisPowerOut {
    pub name: String,
    pub metric: crate::plan::Metric,
    pub cell: String,
    /// The arm whose pilot runs give the noise (the hypothesis's control).
    pub noise_arm: String,
    /// Its pilot runs (indices under `pilots/raw/`) and the metric's value in each.
    pub pilot_runs: Vec<u32>,
    pub pilot_values: Vec<f64>,
    /// SD of the paired log-ratio: sqrt(2) x the sample SD of ln(value) over the runs.
    pub noise_sd: f64,
    /// Degrees of freedom of that SD: runs - 1.
    pub noise_df: usize,
    /// Its one-sided upper bound at `sd_upper_confidence`.
    pub noise_sd_upper: f64,
    /// True when the cell is not the pilots' load shape (closed loop at the pilot concurrency).
    pub proxy: bool,
    /// alpha / m, the level of the exact part.
    pub level: f64,
    pub critical_wins: Option<u64>,
    pub detectable: Vec<DetectableOut>,
    /// After the study: the SD of the confirmation blocks' paired log-ratios
    /// ln(candidate / control) (null: fewer than 2 blocks with both values, or no
    /// spread), its degrees of freedom, the smallest effect the rule supports with
    /// 80% probability at it, and whether it is more than twice `noise_sd`.
    pub realised_sd: Option<f64>,
    pub realised_df: Option<usize>,
    pub realised_detectable_80: Option<f64>,
    pub realised_optimistic: Option<bool>,
}

/// `evidence.json` `power`: absent without `[pilots]` and hypotheses; `unavailable`
/// says why there is no estimate.
#[derive(Debug, Serialize)]
pub struct PowerEvidence {
    pub noise_source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draws: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sd_upper_confidence: Option<f64>,
    pub hypotheses: Vec<HypothesisPowerOut>,
}

fn hypothesis_out(l: &Loaded, h: &HypothesisPower) -> HypothesisPowerOut {
    let concurrency = l.frozen.plan.pilots.as_ref().map_or(0, |p| p.concurrency);
    HypothesisPowerOut {
        name: h.name.clone(),
        metric: h.metric,
        cell: h.cell.clone(),
        noise_arm: h.noise.control.clone(),
        pilot_runs: h.noise.blocks.clone(),
        pilot_values: h.noise.values.clone(),
        noise_sd: h.noise.sd,
        noise_df: h.noise.blocks.len().saturating_sub(1),
        noise_sd_upper: h.noise.sd_upper,
        proxy: !crate::analysis::power::pilot_noise::same_shape(&l.frozen.plan, &h.cell, concurrency),
        level: h.level,
        critical_wins: h.critical_wins,
        detectable: h
            .detectable
            .iter()
            .map(|d| DetectableOut {
                probability: d.probability,
                sd_basis: if d.sd == h.noise.sd_upper { "upper_bound" } else { "estimate" },
                sd: d.sd,
                sign_test_exact: d.sign_test_exact,
                rule_simulated: d.rule_simulated,
            })
            .collect(),
        realised_sd: h.realised.as_ref().map(|r| r.sd),
        realised_df: h.realised.as_ref().map(|r| r.df),
        realised_detectable_80: h.realised.as_ref().and_then(|r| r.detectable),
        realised_optimistic: h.realised.as_ref().map(|r| r.optimistic),
    }
}

/// The `power` object of `evidence.json` (`None`: no noise source).
pub fn evidence(l: &Loaded) -> Option<PowerEvidence> {
    let power = l.power.as_ref()?;
    let empty = PowerEvidence {
        noise_source: NOISE_SOURCE,
        unavailable: None,
        blocks: None,
        alpha: None,
        family: None,
        seed: None,
        draws: None,
        sd_upper_confidence: None,
        hypotheses: Vec::new(),
    };
    Some(match power {
        Err(why) => PowerEvidence { unavailable: Some(why.clone()), ..empty },
        Ok(r) => PowerEvidence {
            blocks: Some(r.blocks),
            alpha: Some(r.alpha),
            family: Some(r.family),
            seed: Some(r.seed),
            draws: Some(r.draws),
            sd_upper_confidence: Some(SD_UPPER_CONFIDENCE),
            hypotheses: r.hypotheses.iter().map(|h| hypothesis_out(l, h)).collect(),
            ..empty
        },
    })
}
