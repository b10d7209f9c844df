//! Plan warnings: a valid plan that can never deliver what it asks for. Owns three
//! checks, each an `Issue` named by the plan key to change (a warning, never a
//! validation error: such a plan still runs, and its report says why a claim or a
//! gate could not succeed):
//! - a Holm family that can never reach alpha: with n blocks the smallest one-sided
//!   sign-test p is 2^-n, so the smallest Holm-adjusted p of a family of m is
//!   m x 2^-n; warned when that exceeds alpha;
//! - a quality gate that can never pass: with N paired items and no loss at all the
//!   one-sided Clopper-Pearson upper bound is 1 - (1 - confidence)^(1/N); the gate
//!   passes only below its limit, so it is warned when the zero-loss bound reaches the
//!   limit (a GSM gate without `subset` reads its item count from the file, so it is
//!   not checked here);
//! - an open-loop load above the pilot rate it came from: with a `[derive]` table, an
//!   open cell whose rate exceeds the slower pilot's completed rate offers more than the
//!   control sustained, so the cell measures queueing, not near-load latency.
//!
//! Must not read files or reject a plan: `harness plan check` prints these and
//! `harness report` puts them in `report.md`.

use super::error::Issue;
use super::resolve::ResolvedLoad;
use super::types::{CellKind, Plan};

/// The zero-loss one-sided Clopper-Pearson upper bound for `n` items.
pub fn zero_loss_upper(n: u64, confidence: f64) -> f64 {
    1.0 - (1.0 - confidence).powf(1.0 / n as f64)
}

/// The fewest items whose zero-loss bound is below `limit` (`None`: over 10^9).
pub fn items_needed(limit: f64, confidence: f64) -> Option<u64> {
    if limit.is_nan() || limit <= 0.0 {
        return None;
    }
    // Closed form, then a local search that settles float rounding either way.
    let guess = ((1.0 - confidence).ln() / (1.0 - limit).ln()).ceil();
    if !guess.is_finite() || guess > 1e9 {
        return None;
    }
    let mut n = (guess as u64).max(1);
    while n > 1 && zero_loss_upper(n - 1, confidence) < limit {
        n -= 1;
    }
    while zero_loss_upper(n, confidence) >= limit {
        n += 1;
    }
    Some(n)
}

/// The fewest blocks at which a family of `m` can reach `alpha` (m x 2^-n <= alpha).
pub fn blocks_needed(m: usize, alpha: f64) -> u32 {
    (0..=1100).find(|&n| m as f64 * 0.5f64.powi(n as i32) <= alpha).unwrap_or(u32::MAX)
}

fn holm(plan: &Plan, out: &mut Vec<Issue>) {
    let (m, n) = (plan.hypotheses.len(), plan.blocks.count);
    let Some(alpha) = plan.alpha.filter(|_| m > 0) else { return };
    let smallest = m as f64 * 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    if smallest > alpha {
        out.push(Issue::new(
            "blocks.count",
            format!(
                "the Holm family of {m} hypotheses can never reach alpha {alpha} with {n} blocks: the smallest \
                 sign-test p is 2^-{n} and the smallest Holm-adjusted p is {m} x 2^-{n} = {smallest:.6}; no claim can \
                 be supported (it needs at least {} blocks)",
                blocks_needed(m, alpha)
            ),
        ));
    }
}

fn gate(key: &str, items: u64, limit: f64, confidence: f64, out: &mut Vec<Issue>) {
    if items == 0 {
        return;
    }
    let bound = zero_loss_upper(items, confidence);
    if bound >= limit {
        let needed = items_needed(limit, confidence).map_or("more than 10^9".to_string(), |n| n.to_string());
        out.push(Issue::new(
            key,
            format!(
                "this gate can never pass: with {items} items and zero losses the one-sided {}% Clopper-Pearson upper \
                 bound is {:.4}%, not below the limit {}%; it needs at least {needed} items",
                confidence * 100.0,
                bound * 100.0,
                limit * 100.0
            ),
        ));
    }
}

fn gates(plan: &Plan, out: &mut Vec<Issue>) {
    let Some(q) = &plan.qualification else { return };
    if let Some(g) = &q.gsm
        && let Some(n) = g.subset
    {
        gate("qualification.gsm.subset", u64::from(n), g.max_loss_rate, q.confidence, out);
    }
    if let Some(r) = &q.retrieval {
        gate("qualification.retrieval.prompts", u64::from(r.prompts), r.max_loss_rate, q.confidence, out);
    }
}

fn open_loads(plan: &Plan, out: &mut Vec<Issue>) {
    let Some(derive) = &plan.derive else { return };
    let slower = derive.pilot_rates.iter().copied().fold(f64::INFINITY, f64::min);
    if !slower.is_finite() {
        return;
    }
    let Ok(cells) = plan.resolved_cells() else { return };
    for (i, cell) in cells.iter().enumerate() {
        if let ResolvedLoad::Open { rate_rps, .. } = cell.load
            && rate_rps > slower
        {
            let kind = if cell.kind == CellKind::Confirmation { "confirmation" } else { "descriptive" };
            out.push(Issue::new(
                format!("cells[{i}].rate"),
                format!(
                    "{kind} cell {} offers {rate_rps} req/s, above the slower pilot rate {slower} req/s it came from: \
                     the control could not sustain it, so the cell measures queueing (overload), not near-load latency",
                    cell.name
                ),
            ));
        }
    }
}

impl Plan {
    /// Everything this plan can never deliver (see the module doc); empty when fine.
    pub fn warnings(&self) -> Vec<Issue> {
        let mut out = Vec::new();
        holm(self, &mut out);
        gates(self, &mut out);
        open_loads(self, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::validate_tests::{BASE, DERIVE};
    use super::*;

    fn warnings_of(text: &str) -> Vec<String> {
        parse(text).unwrap_or_else(|e| panic!("{e}\n{text}")).warnings().iter().map(|w| w.to_string()).collect()
    }

    /// BASE with `blocks.count = blocks` and, when `two`, a second hypothesis.
    fn family(blocks: u32, two: bool) -> String {
        let mut t = BASE.replacen("count = 2\narm_order", &format!("count = {blocks}\narm_order"), 1);
        if two {
            t.push_str(
                "\n[[hypotheses]]\nmetric = \"e2e_p95\"\ncell = \"open\"\ncandidate = \"cand\"\ncontrol = \"ctrl\"\n\
                 threshold = 0.05\n",
            );
        }
        t
    }

    #[test]
    fn holm_family_that_can_never_reach_alpha() {
        // One hypothesis: 2^-4 = 0.0625 > 0.05 warns, 2^-5 = 0.03125 does not.
        let w = warnings_of(&family(4, false));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("blocks.count: the Holm family of 1 hypotheses can never reach alpha 0.05 with 4"));
        assert!(w[0].contains("needs at least 5 blocks"), "{w:?}");
        assert!(warnings_of(&family(5, false)).is_empty());
        // Two: 2 x 2^-5 = 0.0625 > 0.05 warns; 2 x 2^-6 = 0.03125 does not.
        let w = warnings_of(&family(5, true));
        assert!(w[0].contains("2 x 2^-5 = 0.062500"), "{w:?}");
        assert!(w[0].contains("needs at least 6 blocks"), "{w:?}");
        assert!(warnings_of(&family(6, true)).is_empty());
        // No hypotheses: nothing to warn about.
        let none = family(1, false);
        let none = none.split("[analysis]").next().unwrap_or_default().to_string();
        assert!(warnings_of(&none).is_empty());
    }

    fn with_gate(gate: &str) -> String {
        format!("{}\n[qualification]\ntokenizer = \"tok.json\"\ntexts = \"texts\"\n{gate}", family(5, false))
    }

    #[test]
    fn quality_gate_that_can_never_pass() {
        // The default retrieval gate: 100 prompts at 2% needs 149.
        let w = warnings_of(&with_gate("[qualification.retrieval]\ncontext_tokens = 256\n"));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("qualification.retrieval.prompts: this gate can never pass: with 100 items"), "{w:?}");
        assert!(w[0].contains("2.9513%") && w[0].contains("needs at least 149 items"), "{w:?}");
        assert!(warnings_of(&with_gate("[qualification.retrieval]\ncontext_tokens = 256\nprompts = 149\n")).is_empty());
        assert_eq!(
            warnings_of(&with_gate("[qualification.retrieval]\ncontext_tokens = 256\nprompts = 148\n")).len(),
            1
        );
        // A GSM subset is checked; 50 items at 6% can pass (5.82%), 50 at 5% cannot.
        let gsm = |rate: &str| {
            format!(
                "[qualification.gsm]\npath = \"g.jsonl\"\ndataset = \"gsm-style\"\nsubset = 50\nmax_loss_rate = {rate}\n"
            )
        };
        assert!(warnings_of(&with_gate(&gsm("0.06"))).is_empty());
        let w = warnings_of(&with_gate(&gsm("0.05")));
        assert!(w.len() == 1 && w[0].starts_with("qualification.gsm.subset: this gate can never pass"), "{w:?}");
        // Without a subset the item count is in the file: not checked here.
        let all = "[qualification.gsm]\npath = \"g.jsonl\"\ndataset = \"gsm-style\"\nmax_loss_rate = 0.001\n";
        assert!(warnings_of(&with_gate(all)).is_empty());
    }

    #[test]
    fn open_load_above_the_pilot_rate() {
        // Pilots 16.6504 and 16.8997: a fixed open rate of 17 exceeds the slower one.
        let base = format!("{}{DERIVE}", family(5, false));
        assert!(warnings_of(&base.replacen("rate = 2.5", "rate = 16.6", 1)).is_empty());
        let w = warnings_of(&base.replacen("rate = 2.5", "rate = 17.0", 1));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "cells[1].rate: confirmation cell open offers 17 req/s, above the slower pilot rate 16.6504"
            )
        );
        // Without pilots there is nothing to compare with.
        assert!(warnings_of(&family(5, false).replacen("rate = 2.5", "rate = 17.0", 1)).is_empty());
    }

    #[test]
    fn zero_loss_bound_and_items_needed() {
        // 100 prompts at 2%: 1 - 0.05^(1/100) = 2.95%, the gate can never pass.
        assert!((zero_loss_upper(100, 0.95) - 0.029513).abs() < 1e-6);
        assert!(zero_loss_upper(148, 0.95) >= 0.02);
        assert!(zero_loss_upper(149, 0.95) < 0.02);
        assert_eq!(items_needed(0.02, 0.95), Some(149));
        // Agrees with the gates' own Clopper-Pearson bound at zero losses.
        let cp = crate::stats::clopper_pearson_upper(0, 149, 0.95).unwrap();
        assert!((cp - zero_loss_upper(149, 0.95)).abs() < 1e-12, "{cp}");
        assert_eq!(items_needed(0.0, 0.95), None);
    }

    #[test]
    fn blocks_needed_for_a_family() {
        assert_eq!(blocks_needed(1, 0.05), 5); // 1/32 <= 0.05 < 1/16
        assert_eq!(blocks_needed(2, 0.05), 6); // 2/64 = 0.03125
        assert_eq!(blocks_needed(3, 0.05), 6); // 3/64 = 0.046875
        assert_eq!(blocks_needed(4, 0.05), 7);
    }
}
