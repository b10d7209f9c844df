//! What the frozen plan says should exist, and whether it does: the schedule's
//! server invocations (with their `arm_outcome.json` status), each one's cells and
//! request files; the check that every planned request appears exactly once (a unit
//! that `arm_outcome.json` marks as faulted is reported as faulted, not as missing
//! requests) and the check that every record follows its trace (prompt, prompt
//! length, intended arrival = cell start + trace offset). Owns `Study`. Must not
//! compute measures.

use std::collections::HashMap;
use std::path::Path;

use super::files::Scan;
use super::inputs::{Entry, read_prompt_lengths, read_prompt_outputs, read_prompt_turns, read_traces};
use super::read::read_json;
use super::records::Rec;
use super::{Check, Mismatch};
use crate::evidence::{ARM_OUTCOME_FILE, UnitOutcome, UnitState};
use crate::plan::{CellKind, Plan, ResolvedCell};

pub const NAME: &str = "completeness: every planned request exactly once";
pub const TRACE_NAME: &str = "records follow their traces and prompts";

/// One scheduled (block, arm, cell).
pub struct CellRun<'a> {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub kind: CellKind,
    /// `raw/b<block>/<arm>/<cell>.requests.jsonl`.
    pub path: String,
    /// The parsed records (`None`: no file, or a file that did not parse whole).
    pub records: Option<&'a [Rec]>,
    /// Why the file did not parse whole.
    pub broken: Option<String>,
    pub planned: u64,
}

/// One scheduled server invocation.
pub struct Unit {
    pub block: u32,
    pub arm: String,
    /// `arm_outcome.json` status (`missing` without one, `malformed` if it does not parse).
    pub status: UnitState,
    pub detail: Option<String>,
    /// `arm_outcome.json` `session` (studies written before sessions have none).
    pub session: Option<u32>,
}

/// The plan's view of the evidence.
pub struct Study<'a> {
    pub plan: &'a Plan,
    pub resolved: Vec<ResolvedCell>,
    pub units: Vec<Unit>,
    /// Schedule order: block, start order, cell order.
    pub cells: Vec<CellRun<'a>>,
    pub traces: HashMap<String, Result<Vec<Entry>, String>>,
    pub prompt_lengths: Result<Vec<u32>, String>,
    /// The `max_tokens` each panel prompt's request asks for (`read_prompt_outputs`).
    pub prompt_outputs: Result<Vec<u32>, String>,
    pub scan: &'a Scan,
    /// Problems found while reading arm outcomes.
    pub problems: Vec<Mismatch>,
    /// The cell summaries carry the engine's decode measures (`run.json` is
    /// `harness-run/3`): their fields are expected in every table.
    pub engine_measures: bool,
}

impl<'a> Study<'a> {
    pub fn new(root: &Path, plan: &'a Plan, scan: &'a Scan) -> Study<'a> {
        let mut problems = Vec::new();
        let resolved = plan.resolved_cells().unwrap_or_else(|e| {
            problems.push(Mismatch::new(crate::evidence::PLAN_FILE, "cells", "not resolved", e.to_string()));
            Vec::new()
        });
        let traces = read_traces(root, plan);
        // A session panel: a cell plans every turn of every session.
        let turns = plan.prompts.max_turns.map(|_| read_prompt_turns(root));
        let planned = |cell: &str, count: u64| -> u64 {
            match (&turns, traces.get(cell)) {
                (Some(Ok(turns)), Some(Ok(entries))) => {
                    entries.iter().map(|e| u64::from(turns.get(e.prompt as usize).copied().unwrap_or(1))).sum()
                }
                _ => count,
            }
        };
        let mut units = Vec::new();
        let mut cells = Vec::new();
        for b in &plan.schedule().blocks {
            for arm in &b.arms {
                let rel = format!("{}/{ARM_OUTCOME_FILE}", crate::evidence::unit_path(b.index, arm));
                let (status, detail, session) = if root.join(&rel).symlink_metadata().is_ok() {
                    match read_json::<UnitOutcome>(root, &rel) {
                        Ok(o) => (UnitState::Ended(o.status), o.detail, Some(o.session)),
                        Err(e) => {
                            problems.push(Mismatch::new(&rel, "parse", "malformed", e));
                            (UnitState::Malformed, None, None)
                        }
                    }
                } else {
                    (UnitState::Missing, None, None)
                };
                units.push(Unit { block: b.index, arm: arm.clone(), status, detail, session });
                for cell in &b.cells {
                    let Some(rc) = resolved.iter().find(|c| &c.name == cell) else { continue };
                    let path = crate::evidence::requests_path(b.index, arm, cell);
                    let broken = scan.parse_errors.iter().find(|(p, _)| p == &path).map(|(_, e)| e.clone());
                    let records = if broken.is_some() { None } else { scan.requests.get(&path).map(Vec::as_slice) };
                    cells.push(CellRun {
                        block: b.index,
                        arm: arm.clone(),
                        cell: cell.clone(),
                        kind: rc.kind,
                        path,
                        records,
                        broken,
                        planned: planned(cell, rc.count),
                    });
                }
            }
        }
        Study {
            plan,
            resolved,
            units,
            cells,
            traces,
            prompt_lengths: read_prompt_lengths(root),
            prompt_outputs: read_prompt_outputs(root, plan),
            scan,
            problems,
            engine_measures: super::units::engine_measures(root),
        }
    }

    pub fn unit(&self, block: u32, arm: &str) -> Option<&Unit> {
        self.units.iter().find(|u| u.block == block && u.arm == arm)
    }
}

fn ranges(idx: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < idx.len() && parts.len() < 8 {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { idx[i].to_string() } else { format!("{}-{}", idx[i], idx[j]) });
        i = j + 1;
    }
    if i < idx.len() {
        parts.push("...".into());
    }
    parts.join(",")
}

/// Every planned request of every completed unit exactly once; nothing unplanned.
pub fn completeness_check(s: &Study<'_>) -> Check {
    let mut m = s.problems.clone();
    let (mut planned, mut found, mut faulted) = (0u64, 0u64, Vec::new());
    for u in s.units.iter().filter(|u| !u.status.is_completed()) {
        faulted.push(format!("b{}/{} {}", u.block, u.arm, u.status));
    }
    for c in &s.cells {
        planned += c.planned;
        let unit_ok = s.unit(c.block, &c.arm).is_some_and(|u| u.status.is_completed());
        if let Some(e) = &c.broken {
            m.push(Mismatch::new(&c.path, "records", "unparseable", e.clone()));
            continue;
        }
        let Some(records) = c.records else {
            if unit_ok {
                m.push(Mismatch::new(&c.path, "file", "missing", format!("{} planned requests", c.planned)));
            }
            continue;
        };
        let mut seen = vec![0u32; c.planned as usize];
        for (line, r) in records.iter().enumerate() {
            found += 1;
            let want = format!("{}/b{}/{}/{}", c.cell, c.block, c.arm, r.index);
            if (r.cell.as_str(), r.block, r.arm.as_str()) != (c.cell.as_str(), c.block, c.arm.as_str()) {
                let got = format!("{}/b{}/{}", r.cell, r.block, r.arm);
                m.push(Mismatch::new(&c.path, format!("line {} cell/block/arm", line + 1), got, "this file's cell"));
            }
            if r.id != want {
                m.push(Mismatch::new(&c.path, format!("line {} id", line + 1), &r.id, want));
            }
            match seen.get_mut(r.index as usize) {
                Some(n) => *n += 1,
                None => m.push(Mismatch::new(
                    &c.path,
                    format!("request index {}", r.index),
                    "recorded",
                    format!("beyond the plan's count {}", c.planned),
                )),
            }
        }
        let dup: Vec<u64> = (0..c.planned).filter(|&i| seen[i as usize] > 1).collect();
        let missing: Vec<u64> = (0..c.planned).filter(|&i| seen[i as usize] == 0).collect();
        for &i in &dup {
            let n = seen[i as usize];
            m.push(Mismatch::new(&c.path, format!("request index {i}"), format!("{n} records"), "exactly 1"));
        }
        if !missing.is_empty() && unit_ok {
            m.push(Mismatch::new(
                &c.path,
                format!("request indices {}", ranges(&missing)),
                format!("{} of {} planned requests missing", missing.len(), c.planned),
                "every planned request",
            ));
        }
    }
    let planned_paths: std::collections::HashSet<&str> = s.cells.iter().map(|c| c.path.as_str()).collect();
    let mut unplanned: Vec<&String> = s.scan.requests.keys().filter(|p| !planned_paths.contains(p.as_str())).collect();
    unplanned.sort();
    for p in unplanned {
        m.push(Mismatch::new(p, "file", "request records", "not in the plan's schedule"));
    }
    let mut detail = format!("{planned} planned requests in {} cells, {found} records", s.cells.len());
    if !faulted.is_empty() {
        detail.push_str(&format!("; faulted units (not counted as missing): {}", faulted.join(", ")));
    }
    Check::of(NAME, detail, m)
}

/// The round of entry `i` of `n` cut into `rounds` contiguous slices, entries
/// n*k/R .. n*(k+1)/R for round k (`None`: past the trace). Starts from i*R/n, at
/// most one slice off, and steps to the slice that holds `i`.
fn round_of(i: u64, n: u64, rounds: u64) -> Option<u64> {
    if i >= n || rounds == 0 {
        return None;
    }
    let lo = |k: u64| n * k / rounds;
    let mut k = (i * rounds / n).min(rounds - 1);
    while k > 0 && lo(k) > i {
        k -= 1;
    }
    while k + 1 < rounds && lo(k + 1) <= i {
        k += 1;
    }
    Some(k)
}

/// Every record's prompt, prompt length, intended output length (a trace_lengths
/// entry's row `output_length`, else its prompt's `max_tokens`) and intended arrival
/// follow its trace.
pub fn trace_check(_root: &Path, s: &Study<'_>) -> Check {
    let mut m = Vec::new();
    let lengths = match &s.prompt_lengths {
        Ok(l) => Some(l),
        Err(e) => {
            m.push(Mismatch::new(crate::evidence::PROMPTS_PATH, "parse", "malformed", e.clone()));
            None
        }
    };
    let outputs = match &s.prompt_outputs {
        Ok(o) => Some(o),
        Err(e) => {
            m.push(Mismatch::new(crate::evidence::PROMPTS_PATH, "max_tokens", "as the plan gives", e.clone()));
            None
        }
    };
    let mut checked = 0u64;
    for c in &s.cells {
        let Some(records) = c.records else { continue };
        let entries = match s.traces.get(&c.cell) {
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                m.push(Mismatch::new(crate::evidence::trace_path(&c.cell), "parse", "malformed", e.clone()));
                continue;
            }
            None => continue,
        };
        // Each round of an interleaved block starts anew: one cell start per round.
        let mut base: std::collections::BTreeMap<Option<u32>, i128> = std::collections::BTreeMap::new();
        let rounds = u64::from(s.plan.blocks.rounds);
        let n = entries.len() as u64;
        for r in records {
            let round = (rounds > 0 && r.turn.is_none())
                .then(|| round_of(r.index, n, rounds))
                .flatten()
                .and_then(|k| u32::try_from(k).ok());
            if round != r.round {
                m.push(Mismatch::new(
                    &c.path,
                    format!("request {} round", r.index),
                    format!("{:?}", r.round),
                    format!("{round:?} (blocks.rounds = {rounds})"),
                ));
            }
            // A session's later turns are checked by `turns`; its first against the trace
            // entry of the session.
            let at = match &r.turn {
                Some(t) if t.turn > 0 => continue,
                Some(t) => t.session,
                None => r.index,
            };
            let Some(e) = entries.get(at as usize) else { continue };
            checked += 1;
            let field = |f: &str| format!("request {} {f}", r.index);
            if e.index != at {
                m.push(Mismatch::new(&c.path, field("trace index"), e.index.to_string(), at.to_string()));
            }
            if r.prompt != e.prompt {
                m.push(Mismatch::new(&c.path, field("prompt"), r.prompt.to_string(), e.prompt.to_string()));
            }
            if let Some(len) = lengths.and_then(|l| l.get(e.prompt as usize))
                && *len != r.prompt_tokens_intended
            {
                m.push(Mismatch::new(
                    &c.path,
                    field("prompt_tokens_intended"),
                    r.prompt_tokens_intended.to_string(),
                    len.to_string(),
                ));
            }
            let max_tokens = e.output_length.or_else(|| outputs.and_then(|o| o.get(e.prompt as usize)).copied());
            if let Some(max_tokens) = max_tokens
                && max_tokens != r.output_tokens_intended
            {
                m.push(Mismatch::new(
                    &c.path,
                    field("output_tokens_intended"),
                    r.output_tokens_intended.to_string(),
                    max_tokens.to_string(),
                ));
            }
            let start = i128::from(r.intended_ns) - i128::from(e.offset_ns);
            match base.get(&r.round).copied() {
                None => {
                    base.insert(r.round, start);
                }
                Some(b) if b != start => m.push(Mismatch::new(
                    &c.path,
                    field("intended_ns"),
                    r.intended_ns.to_string(),
                    format!("cell start {b} + trace offset {} = {}", e.offset_ns, b + i128::from(e.offset_ns)),
                )),
                Some(_) => {}
            }
        }
    }
    Check::of(TRACE_NAME, format!("{checked} records against their trace entries"), m)
}

#[cfg(test)]
mod tests {
    use super::round_of;

    #[test]
    fn each_entry_falls_in_the_slice_that_holds_it() {
        for (n, rounds) in [(96, 4), (97, 4), (3, 4), (10, 1), (7, 3), (1000, 999), (5, 1000)] {
            for i in 0..n {
                let k = round_of(i, n, rounds).expect("inside");
                assert!(n * k / rounds <= i && i < n * (k + 1) / rounds, "{i} of {n} in {rounds}: {k}");
            }
            assert_eq!(round_of(n, n, rounds), None);
        }
    }
}
