//! In-study pilots (`[pilots]`): their validation, the pilot plan (the view of the
//! frozen plan that the pilot phase runs: the pilot arms, one closed-loop pilot cell,
//! one descriptive block per pilot run), and the plan with the loads the pilots'
//! rates give by the `[derive]` formula. Owns the meaning of the `[pilots]` keys.
//! Must not run anything, read files or write the plan: what the pilots measure is a
//! result in the evidence (`pilots/derived.json`), never a change to `plan.toml`.
//!
//! Rules: pilots run control arms only (candidate outcomes do not select rates or
//! counts); the plan needs `[derive]` (the formula's constants) without
//! `pilot_rates`, and no `[derived]` table.

use super::derive::{DerivedLoads, compute};
use super::error::{Issue, PlanError};
use super::schema::PilotsFile;
use super::types::{Arm, ArmRole, Blocks, Cell, CellKind, Count, Load, Order, PanelSpec, Pilots, Plan, Recorder};
use super::validate::Checker;

/// The name of the pilot cell (its records: `pilots/raw/b<run>/<arm>/pilot.requests.jsonl`).
pub const PILOT_CELL: &str = "pilot";

/// Most pilot runs per arm.
const MAX_RUNS: i64 = 100;

pub(super) fn validate(
    c: &mut Checker,
    f: Option<PilotsFile>,
    arms: &[Arm],
    panel: &PanelSpec,
    has_derive: bool,
    has_derived: bool,
) -> Option<Pilots> {
    let f = f?;
    let controls: Vec<&str> = arms.iter().filter(|a| a.role == ArmRole::Control).map(|a| a.name.as_str()).collect();
    let names: Vec<String> = match f.arms {
        Some(names) => names,
        None => controls.iter().map(|s| s.to_string()).collect(),
    };
    if names.is_empty() {
        c.err("pilots.arms", "no control arm to pilot: pilots run control arms only");
    }
    for (i, name) in names.iter().enumerate() {
        match arms.iter().find(|a| &a.name == name) {
            None => c.err(format!("pilots.arms[{i}]"), format!("unknown arm {name:?}")),
            Some(a) if a.role != ArmRole::Control => c.err(
                format!("pilots.arms[{i}]"),
                format!(
                    "arm {name:?} is a {}: pilots run control arms only (candidate outcomes do not select \
                     rates or counts)",
                    a.role.as_str()
                ),
            ),
            Some(_) => {}
        }
        if names[..i].contains(name) {
            c.err(format!("pilots.arms[{i}]"), format!("arm {name:?} is listed twice"));
        }
    }
    let concurrency = c.int("pilots.concurrency", f.concurrency, 1, 1 << 16).unwrap_or(1) as u32;
    let count = c.int("pilots.count", f.count, 1, super::derive::MAX_REQUESTS as i64).unwrap_or(1);
    let runs = c.int("pilots.runs", f.runs.unwrap_or(1), 1, MAX_RUNS).unwrap_or(1) as u32;
    let input_tokens = match f.input_tokens {
        Some(_) if panel.source.is_dataset() => {
            c.err("pilots.input_tokens", "a dataset panel's entries have their own lengths; leave it out");
            None
        }
        None if panel.source.is_dataset() => None,
        Some(l) => {
            let l = c.int("pilots.input_tokens", l, 1, 1 << 24).unwrap_or(0) as u32;
            if l != 0 && !panel.lengths.contains(&l) {
                c.err("pilots.input_tokens", format!("{l} is not one of prompts.lengths {:?}", panel.lengths));
            }
            Some(l)
        }
        None if panel.lengths.len() == 1 => Some(panel.lengths[0]),
        None => {
            c.err("pilots.input_tokens", "required when prompts.lengths lists several lengths");
            None
        }
    };
    if !has_derive {
        c.err("pilots", "needs a [derive] table (near_fraction, fractions, count rule) for the pilots' rates");
    }
    if has_derived {
        c.err(
            "derived",
            "a plan with [pilots] derives its loads when it runs: the values are a result in the evidence \
             (pilots/derived.json), never written into the plan; remove [derived]",
        );
    }
    let arms = arms.iter().filter(|a| names.contains(&a.name)).map(|a| a.name.clone()).collect();
    Some(Pilots { arms, concurrency, count, runs, input_tokens })
}

impl Plan {
    /// The pilot plan: the pilot arms (plan order), the closed-loop pilot cell
    /// (descriptive), one block per pilot run with the arms in plan order, no
    /// hypotheses, derive, qualification, tuning or pilots. Everything else (request,
    /// panel, warmup, timing, limits) is this plan's. `None` without `[pilots]`.
    pub fn pilot_plan(&self) -> Option<Plan> {
        let p = self.pilots.as_ref()?;
        let mut v = self.clone();
        v.arms.retain(|a| p.arms.contains(&a.name));
        v.cells = vec![Cell {
            name: PILOT_CELL.into(),
            kind: CellKind::Descriptive,
            load: Load::Closed { concurrency: p.concurrency },
            count: Count::Fixed(p.count),
            input_tokens: p.input_tokens,
            retries: 0,
            recorder: Recorder::Full,
            endpoint: self.request.endpoint,
            token_ids: self.request.token_ids,
            max_concurrency: None,
        }];
        v.blocks = Blocks {
            count: 0,
            descriptive: p.runs,
            arm_order: Order::Fixed,
            cell_order: Order::Fixed,
            rounds: 0,
            randomize_setup: v.blocks.randomize_setup,
        };
        v.alpha = None;
        v.hypotheses.clear();
        v.derive = None;
        v.derived = None;
        v.qualification = None;
        v.tuning = None;
        v.pilots = None;
        v.sequential = None;
        Some(v)
    }

    /// This plan with `[derive]`'s pilot rates set to `rates` (the in-study pilots'
    /// measured rates, in pilot order) and the formula's output as its derived
    /// loads; the plan text is not touched. Fails when the plan has no `[pilots]`
    /// or the formula refuses the rates (e.g. a near load of 0.0 req/s).
    pub fn with_pilot_rates(&self, rates: &[f64]) -> Result<(Plan, DerivedLoads), PlanError> {
        let (Some(_), Some(spec)) = (&self.pilots, &self.derive) else {
            return Err(PlanError::invalid("pilots", "the plan has no [pilots] and [derive] tables"));
        };
        let bad: Vec<Issue> = rates
            .iter()
            .enumerate()
            .filter(|(_, r)| !(r.is_finite() && **r > 0.0))
            .map(|(i, r)| Issue::new(format!("pilots[{i}]"), format!("pilot rate {r} is not positive and finite")))
            .collect();
        if rates.is_empty() || !bad.is_empty() {
            let mut issues = bad;
            if rates.is_empty() {
                issues.push(Issue::new("pilots", "no pilot rate"));
            }
            return Err(PlanError::Invalid(issues));
        }
        let mut spec = spec.clone();
        spec.pilot_rates = rates.to_vec();
        let loads = compute(&spec).map_err(PlanError::Invalid)?;
        let mut plan = self.clone();
        plan.derive = Some(spec);
        plan.derived = Some(loads.clone());
        Ok((plan, loads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[study]
name = "p"
seed = 1
[request]
model = "m"
output_tokens = 4
[prompts]
source = "random"
lengths = [8]
documents = 2
max_token_id = 99
[warmup]
prompts = 0
[timing]
settle_s = 0
request_timeout_s = 5
drain_timeout_s = 5
[blocks]
count = 2
arm_order = "fixed"
cell_order = "fixed"
[[arms]]
name = "cand"
role = "candidate"
argv = ["srv", "{port}"]
port = 9001
[[arms]]
name = "ctl"
role = "control"
argv = ["srv", "{port}"]
port = 9002
[[cells]]
name = "near"
kind = "confirmation"
load = "open"
rate = "derived:near"
count = "derived:count"
[derive]
near_fraction = 0.9
fractions = { low = 0.25 }
count_floor = 8
count_duration_s = 10.0
count_multiple = 4
"#;

    const PILOTS: &str = "[pilots]\nconcurrency = 4\ncount = 16\nruns = 2\n";

    fn errors(text: &str) -> String {
        match crate::plan::parse(text) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_pilots_table_defaults_to_every_control_arm_and_builds_the_pilot_plan() {
        let plan = crate::plan::parse(&format!("{BASE}{PILOTS}")).unwrap();
        let p = plan.pilots.as_ref().unwrap();
        assert_eq!(
            (p.arms.as_slice(), p.concurrency, p.count, p.runs, p.input_tokens),
            (&["ctl".to_string()][..], 4, 16, 2, Some(8))
        );
        assert!(plan.derived.is_none() && plan.derive.as_ref().unwrap().pilot_rates.is_empty());
        let pilot = plan.pilot_plan().unwrap();
        assert_eq!(pilot.arms.len(), 1);
        assert_eq!(pilot.cells[0].load, Load::Closed { concurrency: 4 });
        let schedule = pilot.schedule();
        assert_eq!(schedule.blocks.len(), 2);
        assert!(schedule.blocks.iter().all(|b| b.arms == ["ctl"] && b.cells == [PILOT_CELL]));
        assert!(pilot.hypotheses.is_empty() && pilot.pilots.is_none() && pilot.derive.is_none());
    }

    #[test]
    fn the_pilots_rates_give_the_formula_s_loads_without_touching_the_plan_text() {
        let plan = crate::plan::parse(&format!("{BASE}{PILOTS}")).unwrap();
        assert!(plan.resolved_cells().is_err(), "underived before the pilots");
        let (derived, loads) = plan.with_pilot_rates(&[3.2222222222, 4.0]).unwrap();
        assert_eq!(loads.rate("near"), Some(2.8));
        assert_eq!(loads.rate("low"), Some(0.7));
        assert_eq!(loads.count, Some(40));
        let cells = derived.resolved_cells().unwrap();
        assert_eq!(cells[0].count, 40);
        assert!(plan.with_pilot_rates(&[]).is_err());
        assert!(plan.with_pilot_rates(&[0.0]).is_err());
        let err = plan.with_pilot_rates(&[0.05]).unwrap_err().to_string();
        assert!(err.contains("rounds down to 0.0"), "{err}");
    }

    #[test]
    fn plan_derive_refuses_a_plan_whose_pilots_run_in_the_study() {
        let err = crate::plan::derive_text(&format!("{BASE}{PILOTS}")).unwrap_err().to_string();
        assert!(err.contains("pilots: the plan's [pilots] run inside the study"), "{err}");
        // Hand-written rates still derive.
        let hand = BASE.replace("near_fraction", "pilot_rates = [3.2222222222, 4.0]\nnear_fraction");
        let (_, loads) = crate::plan::derive_text(&hand).unwrap();
        assert_eq!(loads.rate("near"), Some(2.8));
    }

    #[test]
    fn candidate_arms_and_contradicting_tables_are_refused() {
        let cases = [
            (
                format!("{BASE}{PILOTS}arms = [\"cand\"]\n"),
                "pilots.arms[0]: arm \"cand\" is a candidate: pilots run control arms only",
            ),
            (format!("{BASE}{PILOTS}arms = [\"nope\"]\n"), "pilots.arms[0]: unknown arm \"nope\""),
            (
                BASE.replace("near_fraction", "pilot_rates = [2.0]\nnear_fraction") + PILOTS,
                "derive.pilot_rates: the plan has [pilots]",
            ),
            (format!("{BASE}{PILOTS}\n[derived]\nnear = 1.0\nlow = 0.2\ncount = 8\n"), "derived: a plan with [pilots]"),
            (BASE.to_string(), "derive.pilot_rates: required"),
            (format!("{BASE}{PILOTS}input_tokens = 16\n"), "pilots.input_tokens: 16 is not one of"),
            (format!("{BASE}[pilots]\nconcurrency = 0\ncount = 16\n"), "pilots.concurrency"),
        ];
        for (text, want) in cases {
            let got = errors(&text);
            assert!(got.contains(want), "want {want:?} in:\n{got}");
        }
        let no_derive =
            BASE.split("[derive]").next().unwrap().replace("\"derived:near\"", "2.0").replace("\"derived:count\"", "8");
        assert!(errors(&format!("{no_derive}{PILOTS}")).contains("pilots: needs a [derive] table"));
    }
}
