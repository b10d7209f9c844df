//! The report's "Where the blocks ran" section, for a study whose blocks ran as
//! Slurm array tasks (`run.json` `executor`): how many machines ran them, each
//! block's machine, task and session, every hypothesis's effect in each block
//! grouped by machine, and the tasks that failed on the way (and were
//! resubmitted, or stopped the study). Nothing for a local study. Must not compute
//! an effect: they are the analysis's.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::text::pct;
use crate::analysis::Analysis;
use crate::analysis::study::Loaded;

pub fn section(o: &mut String, l: &Loaded, a: &Analysis) {
    let Some(e) = &l.executor else { return };
    let machines = e.machines();
    let by_block = e.machine_of_blocks();
    let jobs: Vec<&str> = e.submissions.iter().filter_map(|s| s.job_id.as_deref()).collect();
    let _ = writeln!(o, "\n## Where the blocks ran\n");
    let _ = writeln!(
        o,
        "The {} blocks ran as Slurm array tasks (job{} {}; script `{}`) on {} machine{}: {}. Each block ran whole \
         on one machine, all of its arms on one node, so every paired effect is taken within one machine: the \
         machine is a blocking factor and the blocks stay independent. {}\n",
        by_block.len(),
        if jobs.len() == 1 { "" } else { "s" },
        jobs.join(", "),
        e.script,
        machines.len(),
        if machines.len() == 1 { "" } else { "s" },
        machines.join(", "),
        if machines.len() > 1 {
            "With `analysis.noise`, the noise section splits the block level into machines and blocks within a machine."
        } else {
            "One machine ran every block."
        }
    );
    let mut header = "| machine | block | task | session | CPUs | ports |".to_string();
    let mut rule = "|---|---|---|---|---|---|".to_string();
    for h in &a.hypotheses {
        let _ = write!(header, " {} |", h.name);
        rule.push_str("---|");
    }
    let _ = writeln!(o, "Per-block effects by machine (positive: the candidate is better):\n\n{header}\n{rule}");
    let mut order: Vec<(&String, u32)> = by_block.iter().map(|(b, m)| (m, *b)).collect();
    order.sort();
    for (machine, block) in order {
        let Some(t) = e.kept(block) else { continue };
        let ports: Vec<String> = t.ports.iter().map(|(arm, p)| format!("{arm} {p}")).collect();
        let mut row = format!(
            "| {machine} | {block} | {}_{} | {} | {} | {} |",
            t.array_job_id,
            t.array_task,
            t.session,
            t.cpus.as_deref().unwrap_or("unpinned"),
            ports.join(", ")
        );
        for h in &a.hypotheses {
            let effect = h.blocks.iter().find(|b| b.block == block).and_then(|b| b.effect);
            let _ = write!(row, " {} |", effect.map_or("n/a".into(), pct));
        }
        let _ = writeln!(o, "{row}");
    }
    o.push('\n');
    if !e.failures.is_empty() {
        let _ = writeln!(o, "Tasks that ended without their block ({}):\n", e.failures.len());
        for f in &e.failures {
            let then = if f.resubmitted { "submitted again" } else { "the study stopped" };
            let _ = writeln!(
                o,
                "- block {} task {} on {}: {}{}; {then}",
                f.block,
                f.job,
                f.node.as_deref().unwrap_or("?"),
                f.state,
                f.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            );
        }
        o.push('\n');
    }
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for m in by_block.values() {
        *per.entry(m.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = per.iter().map(|(m, n)| format!("{m}: {n}")).collect();
    let _ = writeln!(o, "Blocks per machine: {}.\n", counts.join(", "));
}
