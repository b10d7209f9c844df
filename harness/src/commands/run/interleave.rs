//! One interleaved block (`blocks.rounds` = R >= 1): every arm's server of the
//! block is started and warmed up first (in the block's arm order), then each cell
//! runs in R rounds: round k sends the k-th contiguous slice of the cell's trace
//! (`plan::round_range`) to every live arm in turn (`plan::round_arms`: block order
//! in even rounds, reversed in odd ones), each round from its own start (the
//! slice's intended offsets rebased to its first entry). The two arms of a pair
//! thus meet the same minutes of the machine, and a drift of its speed over tens of
//! seconds, which separate servers run one after the other meet apart, weighs on
//! both alike. Settling happens before each arm's first round of a cell only.
//!
//! Evidence is the same as for sequential units: one directory per (block, arm)
//! with its own server, `<cell>.requests.jsonl` holding every round's records (each
//! with its `round`), written when the cell's last round is done, and
//! `arm_outcome.json`; the units are closed (servers stopped, records written) in
//! the block's arm order after the last cell. A server that dies leaves its later
//! rounds and cells unrun; the other arms go on. Must not retry or restart.

use std::collections::{BTreeMap, BTreeSet};

use super::cell::{Driven, not_run};
use super::unit::{Live, Started, start_unit};
use super::{RunError, Study};
use crate::evidence::UnitOutcome;
use crate::plan::{Arm, ScheduledBlock, round_arms, round_range};
use crate::trace::TraceEntry;

/// `entries` rebased so that the first is intended at offset 0.
fn rebased(entries: &[TraceEntry]) -> Vec<TraceEntry> {
    let first = entries.first().map_or(0, |e| e.offset_ns);
    entries.iter().map(|e| TraceEntry { offset_ns: e.offset_ns - first, ..*e }).collect()
}

/// A unit of the block: running, or closed (started with a fault, or its server died).
enum Slot {
    Live(Box<Live>),
    Closed(Box<UnitOutcome>),
}

/// Runs block `block` interleaved; returns each arm's outcome and cell summaries, in
/// the block's arm order.
pub(super) async fn run_block(
    s: &Study<'_>,
    block: &ScheduledBlock,
    arms: &[&Arm],
    done: &mut u64,
) -> Result<Vec<(UnitOutcome, Vec<serde_json::Value>)>, RunError> {
    let rounds = s.frozen.plan.blocks.rounds.max(1);
    let b = block.index;
    let mut slots: Vec<(String, Slot, Vec<serde_json::Value>)> = Vec::with_capacity(arms.len());
    for arm in arms {
        let slot = match start_unit(s, block, arm).await? {
            Started::Live(live) => Slot::Live(live),
            Started::Fault(out) => Slot::Closed(out),
        };
        slots.push((arm.name.clone(), slot, Vec::new()));
    }
    for (ci, cell_name) in block.cells.iter().enumerate() {
        let (Some(cell), Some(trace)) = (s.resolved.iter().find(|c| &c.name == cell_name), s.inputs.trace(cell_name))
        else {
            continue;
        };
        // Per arm: the records so far, the first round's start and the last one's end.
        let mut driven: BTreeMap<String, Driven> = BTreeMap::new();
        // Arms whose server was gone before their first round of this cell.
        let mut dead_before: BTreeSet<String> = BTreeSet::new();
        for k in 0..rounds {
            let range = round_range(trace.entries.len(), rounds, k);
            if range.is_empty() {
                continue;
            }
            let entries = rebased(&trace.entries[range]);
            for arm_name in round_arms(&block.arms, k) {
                let Some((_, Slot::Live(live), _)) = slots.iter().find(|(n, _, _)| *n == arm_name) else { continue };
                if driven.get(&arm_name).is_some_and(|d| d.died.is_some()) || dead_before.contains(&arm_name) {
                    continue;
                }
                let first = !driven.contains_key(&arm_name);
                match live.cell_run(s, b).drive(cell, &entries, Some(k), first, done).await? {
                    None => {
                        let died = live.ctx.server_exit.borrow().clone();
                        match driven.get_mut(&arm_name) {
                            Some(d) => d.died = died.or_else(|| Some("the server exited".into())),
                            None => {
                                dead_before.insert(arm_name.clone());
                            }
                        }
                    }
                    Some(part) => match driven.get_mut(&arm_name) {
                        None => {
                            driven.insert(arm_name.clone(), part);
                        }
                        Some(d) => {
                            d.records.extend(part.records);
                            d.end_ns = part.end_ns;
                            d.died = part.died;
                        }
                    },
                }
            }
        }
        // Close the cell on every arm that ran it, in the block's arm order.
        for (arm_name, slot, summaries) in slots.iter_mut() {
            let Slot::Live(live) = slot else { continue };
            let died = match driven.remove(arm_name.as_str()) {
                Some(d) => {
                    let (outcome, summary, died) = live.cell_run(s, b).finish(cell_name, d)?;
                    live.out.cells.push(outcome);
                    summaries.push(summary);
                    died.map(|d| (d, ci + 1))
                }
                None if dead_before.contains(arm_name.as_str()) => {
                    Some((live.ctx.server_exit.borrow().clone().unwrap_or_default(), ci))
                }
                None => None,
            };
            if let Some((detail, from)) = died {
                live.out.status = crate::evidence::UnitStatus::ServerDied;
                live.out.detail = Some(detail);
                live.out.cells.extend(not_run(&block.cells[from..]));
                let Slot::Live(live) =
                    std::mem::replace(slot, Slot::Closed(Box::new(UnitOutcome::new(b, arm_name, s.session))))
                else {
                    unreachable!("matched as live above")
                };
                *slot = Slot::Closed(Box::new(live.finish(s).await?));
            }
        }
    }
    let mut out = Vec::with_capacity(slots.len());
    for (_, slot, summaries) in slots {
        let outcome = match slot {
            Slot::Live(live) => live.finish(s).await?,
            Slot::Closed(o) => *o,
        };
        out.push((outcome, summaries));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_starts_at_its_own_first_entry() {
        let e =
            |index, offset_ns| TraceEntry { index, offset_ns, prompt: index, input_length: None, output_length: None };
        let r = rebased(&[e(4, 1_000), e(5, 1_500), e(6, 4_000)]);
        assert_eq!(r.iter().map(|e| (e.index, e.offset_ns)).collect::<Vec<_>>(), [(4, 0), (5, 500), (6, 3_000)]);
        assert!(rebased(&[]).is_empty());
    }
}
