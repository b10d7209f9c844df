//! Tuning studies (`[tuning]`): a baseline configuration (a control arm) against N
//! candidate configurations (candidate arms), each measured over the rate profile
//! (the plan's confirmation cells, e.g. a `rate = [..]` sweep) in the plan's
//! counterbalanced blocks with fresh servers. The table is plan sugar: it expands
//! into one ordinary hypothesis per (metric, cell, candidate), `tuning:<metric>:
//! <cell>:<candidate>` with the baseline as control, appended to the plan's
//! `[[hypotheses]]`, so the paired effects, the sign tests, Holm over the whole
//! family, the medians and their intervals, blocking and replay are exactly those
//! of any other hypothesis. Owns the `[tuning]` keys, their validation and the
//! expansion, and `Tuning` (what the report's tuning section reads: the baseline,
//! the candidates in plan order, the primary metric and how the configurations were
//! chosen). Must not touch files or compute anything from measurements.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::types::{Arm, ArmRole, Cell, CellKind, Hypothesis, Metric, Slo};
use super::validate::Checker;

/// `[tuning]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningFile {
    pub baseline: String,
    pub candidates: Option<Vec<String>>,
    pub cells: Option<Vec<String>>,
    pub metrics: Option<Vec<Metric>>,
    pub threshold: f64,
    pub selection: String,
    /// Per candidate: the physical reason it should matter here, stated before the run.
    #[serde(default)]
    pub rationale: BTreeMap<String, String>,
}

/// A validated `[tuning]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuning {
    /// The control arm every candidate is paired with.
    pub baseline: String,
    /// Candidate arms (configurations), in plan order.
    pub candidates: Vec<String>,
    /// The rate profile: confirmation cells, in plan order.
    pub cells: Vec<String>,
    /// Metrics tested; the first is the primary one the recommendation uses.
    pub metrics: Vec<Metric>,
    /// Median screen of every tuning hypothesis.
    pub threshold: f64,
    /// How the configurations were chosen (printed in the report).
    pub selection: String,
    /// Candidate -> why it should matter on this hardware (stated before the run,
    /// printed beside its result; `tuning.rationale`).
    pub rationale: BTreeMap<String, String>,
}

/// The default metric: mean end-to-end latency (the tuning table's "mean latency").
pub const DEFAULT_TUNING_METRIC: Metric = Metric::E2eMean;

impl Tuning {
    /// The primary metric (the first listed).
    pub fn primary(&self) -> Metric {
        self.metrics.first().copied().unwrap_or(DEFAULT_TUNING_METRIC)
    }

    /// Name of the hypothesis for (`metric`, `cell`, `candidate`).
    pub fn hypothesis_name(metric: Metric, cell: &str, candidate: &str) -> String {
        format!("tuning:{}:{cell}:{candidate}", metric.as_str())
    }
}

fn no_duplicates(c: &mut Checker, key: &str, names: &[String]) -> bool {
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            c.err(key, format!("lists {n:?} twice"));
            return false;
        }
    }
    true
}

/// Validates `[tuning]` and returns it with its hypotheses (to append to the
/// plan's). `explicit`: the plan's own hypotheses (names must not clash).
pub(super) fn tuning(
    c: &mut Checker,
    f: Option<TuningFile>,
    arms: &[Arm],
    cells: &[Cell],
    explicit: &[Hypothesis],
    alpha: Option<f64>,
    slo: Option<&Slo>,
) -> (Option<Tuning>, Vec<Hypothesis>) {
    let Some(f) = f else { return (None, Vec::new()) };
    if alpha.is_none() {
        c.err("analysis.alpha", "required with [tuning] (the Holm family's level)");
    }
    match arms.iter().find(|a| a.name == f.baseline) {
        None => c.err("tuning.baseline", format!("unknown arm {:?}", f.baseline)),
        Some(a) if a.role != ArmRole::Control => {
            c.err("tuning.baseline", format!("arm {:?} has role {}, not control", f.baseline, a.role.as_str()))
        }
        Some(_) => {}
    }
    let candidates = f
        .candidates
        .unwrap_or_else(|| arms.iter().filter(|a| a.role == ArmRole::Candidate).map(|a| a.name.clone()).collect());
    if candidates.is_empty() {
        c.err("tuning.candidates", "no candidate configuration (no arm with role candidate)");
    }
    no_duplicates(c, "tuning.candidates", &candidates);
    for name in &candidates {
        match arms.iter().find(|a| &a.name == name) {
            None => c.err("tuning.candidates", format!("unknown arm {name:?}")),
            Some(a) if a.role != ArmRole::Candidate => {
                c.err("tuning.candidates", format!("arm {name:?} has role {}, not candidate", a.role.as_str()))
            }
            Some(_) => {}
        }
    }
    let profile = f
        .cells
        .unwrap_or_else(|| cells.iter().filter(|x| x.kind == CellKind::Confirmation).map(|x| x.name.clone()).collect());
    if profile.is_empty() {
        c.err("tuning.cells", "no confirmation cell to measure the configurations over");
    }
    no_duplicates(c, "tuning.cells", &profile);
    for name in &profile {
        match cells.iter().find(|x| &x.name == name) {
            None => c.err("tuning.cells", format!("unknown cell {name:?} (a sweep's cells are <name>-r<rate>)")),
            Some(x) if x.kind != CellKind::Confirmation => {
                c.err("tuning.cells", format!("{name:?} is a descriptive cell; tuning tests confirmation cells"))
            }
            Some(_) => {}
        }
    }
    let metrics = f.metrics.unwrap_or_else(|| vec![DEFAULT_TUNING_METRIC]);
    if metrics.is_empty() {
        c.err("tuning.metrics", "list at least one metric (the first is the primary one)");
    }
    for (i, m) in metrics.iter().enumerate() {
        if metrics[..i].contains(m) {
            c.err("tuning.metrics", format!("lists {} twice", m.as_str()));
        }
        if *m == Metric::GoodputRps && slo.is_none() {
            c.err("tuning.metrics", "goodput_rps needs an [slo] table");
        }
    }
    if !(f.threshold.is_finite() && (0.0..1.0).contains(&f.threshold)) {
        c.err("tuning.threshold", format!("must be in [0, 1) (a fraction: 0.05 = 5%), got {}", f.threshold));
    }
    if f.selection.trim().is_empty() {
        c.err("tuning.selection", "say how the configurations were chosen (the report prints it)");
    }
    for name in f.rationale.keys() {
        if !candidates.contains(name) {
            c.err(format!("tuning.rationale.{name}"), format!("{name:?} is not one of tuning.candidates"));
        }
    }
    let mut hypotheses = Vec::new();
    for &metric in &metrics {
        for cell in &profile {
            for cand in &candidates {
                let name = Tuning::hypothesis_name(metric, cell, cand);
                if explicit.iter().any(|h| h.name == name) {
                    c.err("tuning", format!("expands to hypothesis {name:?}, which [[hypotheses]] also names"));
                }
                hypotheses.push(Hypothesis {
                    name,
                    metric,
                    cell: cell.clone(),
                    candidate: cand.clone(),
                    control: f.baseline.clone(),
                    threshold: f.threshold,
                });
            }
        }
    }
    let t = Tuning {
        baseline: f.baseline,
        candidates,
        cells: profile,
        metrics,
        threshold: f.threshold,
        selection: f.selection,
        rationale: f.rationale,
    };
    (Some(t), hypotheses)
}

#[cfg(test)]
mod tests {
    use crate::plan::validate_tests::BASE;
    use crate::plan::{Metric, parse};

    const TUNING: &str = "\n[tuning]\nbaseline = \"ctrl\"\nthreshold = 0.05\nselection = \"by hand\"\n";

    #[test]
    fn expands_into_one_hypothesis_per_metric_cell_and_candidate_after_the_plans_own() {
        let own = parse(BASE).unwrap().hypotheses.len();
        let plan = parse(&format!("{BASE}{TUNING}")).unwrap();
        let t = plan.tuning.clone().unwrap();
        assert_eq!(
            (t.baseline.as_str(), t.candidates.clone(), t.primary()),
            ("ctrl", vec!["cand".into()], Metric::E2eMean)
        );
        assert_eq!(t.cells, ["closed", "open"]);
        let added: Vec<_> = plan.hypotheses[own..].iter().map(|h| (h.name.as_str(), h.cell.as_str())).collect();
        assert_eq!(added, [("tuning:e2e_mean:closed:cand", "closed"), ("tuning:e2e_mean:open:cand", "open")]);
        assert!(plan.hypotheses[own..].iter().all(|h| h.control == "ctrl" && h.threshold == 0.05));

        let two = format!("{BASE}{TUNING}metrics = [\"ttft_mean\", \"e2e_p95\"]\ncells = [\"open\"]\n");
        let plan = parse(&two).unwrap();
        let names: Vec<_> = plan.hypotheses[own..].iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["tuning:ttft_mean:open:cand", "tuning:e2e_p95:open:cand"]);
        assert_eq!(plan.tuning.unwrap().primary(), Metric::TtftMean);
    }

    #[test]
    fn bad_tables_name_their_keys() {
        let cases = [
            (TUNING.replace("\"ctrl\"", "\"cand\""), "tuning.baseline: arm \"cand\" has role candidate, not control"),
            (TUNING.replace("\"ctrl\"", "\"nope\""), "tuning.baseline: unknown arm \"nope\""),
            (format!("{TUNING}candidates = [\"ctrl\"]\n"), "tuning.candidates: arm \"ctrl\" has role control"),
            (format!("{TUNING}candidates = [\"cand\", \"cand\"]\n"), "tuning.candidates: lists \"cand\" twice"),
            (format!("{TUNING}cells = [\"open-r4\"]\n"), "tuning.cells: unknown cell \"open-r4\""),
            (format!("{TUNING}metrics = []\n"), "tuning.metrics: list at least one metric"),
            (format!("{TUNING}metrics = [\"goodput_rps\"]\n"), "tuning.metrics: goodput_rps needs an [slo] table"),
            (TUNING.replace("0.05", "1.5"), "tuning.threshold: must be in [0, 1)"),
            (TUNING.replace("\"by hand\"", "\" \""), "tuning.selection: say how the configurations were chosen"),
            (format!("{TUNING}rationale = {{ ctrl = \"x\" }}\n"), "tuning.rationale.ctrl: \"ctrl\" is not one of"),
        ];
        for (table, want) in cases {
            let err = parse(&format!("{BASE}{table}")).unwrap_err().to_string();
            assert!(err.contains(want), "{table}\n{err}");
        }
    }
}
