//! `[sequential]`: the stopping rule of a paired regression gate. The plan's
//! `blocks.count` is the cap; after each look (a completed block count) `harness
//! run` decides every hypothesis with `stats::SequentialRule` and stops the study
//! when all are decided (see `crate::analysis::sequential`). Owns the meaning and validation
//! of the keys and the hypothesis -> margin mapping. Must not run or read anything.
//!
//! Rules: looks strictly increasing, the first at least 3, the last equal to
//! `blocks.count`; no descriptive blocks (the study may stop before them); at least
//! one hypothesis; every hypothesis named in `margins` exists.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::types::{Blocks, Hypothesis};
use super::validate::Checker;
use crate::stats::SequentialRule;

/// The default margin: a slowdown of 5%.
pub const DEFAULT_MARGIN: f64 = 0.05;
pub const DEFAULT_ALPHA: f64 = 0.05;
pub const DEFAULT_BETA: f64 = 0.10;

/// `[sequential]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequentialFile {
    pub looks: Vec<i64>,
    pub margin: Option<f64>,
    #[serde(default)]
    pub margins: BTreeMap<String, f64>,
    pub alpha: Option<f64>,
    pub beta: Option<f64>,
    pub max_minutes: Option<f64>,
}

/// `[sequential]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequential {
    /// Block counts after which the rule looks; the last is `blocks.count`.
    pub looks: Vec<u32>,
    /// Default margin of every hypothesis (a fraction: 0.05 = 5%).
    pub margin: f64,
    /// Per-hypothesis margins, by hypothesis name.
    pub margins: BTreeMap<String, f64>,
    pub alpha: f64,
    pub beta: f64,
    /// Stop after the block that ends past this many minutes of blocks (inconclusive
    /// unless already decided); `None`: no time cap.
    pub max_minutes: Option<f64>,
}

impl Sequential {
    pub fn margin_of(&self, hypothesis: &str) -> f64 {
        self.margins.get(hypothesis).copied().unwrap_or(self.margin)
    }

    /// The statistics rule for a family of `family` hypotheses.
    pub fn rule(&self, family: usize) -> SequentialRule {
        SequentialRule { looks: self.looks.clone(), alpha: self.alpha, beta: self.beta, family }
    }
}

fn fraction(c: &mut Checker, key: &str, v: f64, max: f64) -> f64 {
    if !(v.is_finite() && v > 0.0 && v < max) {
        c.err(key, format!("must be in (0, {max}), got {v}"));
    }
    v
}

pub(super) fn validate(
    c: &mut Checker,
    f: Option<SequentialFile>,
    blocks: &Blocks,
    hypotheses: &[Hypothesis],
) -> Option<Sequential> {
    let f = f?;
    let mut looks = Vec::new();
    for (i, &l) in f.looks.iter().enumerate() {
        if let Some(v) = c.int(&format!("sequential.looks[{i}]"), l, 3, 100_000) {
            looks.push(v as u32);
        }
    }
    if f.looks.is_empty() {
        c.err("sequential.looks", "at least one look (a block count, the first at least 3)");
    } else if !looks.windows(2).all(|w| w[0] < w[1]) {
        c.err("sequential.looks", "must be strictly increasing");
    } else if looks.last() != Some(&blocks.count) {
        c.err(
            "sequential.looks",
            format!("the last look ({:?}) must equal blocks.count ({}), the cap", looks.last(), blocks.count),
        );
    }
    if blocks.descriptive > 0 {
        c.err("blocks.descriptive", "a sequential study may stop early: it has no descriptive blocks");
    }
    if hypotheses.is_empty() {
        c.err("sequential", "decides hypotheses: the plan states none");
    }
    let margin = fraction(c, "sequential.margin", f.margin.unwrap_or(DEFAULT_MARGIN), 1.0);
    for (name, &m) in &f.margins {
        fraction(c, &format!("sequential.margins.{name}"), m, 1.0);
        if !hypotheses.iter().any(|h| &h.name == name) {
            c.err(format!("sequential.margins.{name}"), format!("no hypothesis is named {name:?}"));
        }
    }
    let alpha = fraction(c, "sequential.alpha", f.alpha.unwrap_or(DEFAULT_ALPHA), 0.5);
    let beta = fraction(c, "sequential.beta", f.beta.unwrap_or(DEFAULT_BETA), 0.5);
    let max_minutes = f.max_minutes.and_then(|m| c.positive("sequential.max_minutes", m, false));
    Some(Sequential { looks, margin, margins: f.margins, alpha, beta, max_minutes })
}
