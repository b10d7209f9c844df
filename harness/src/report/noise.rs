//! The report's "Where this study's noise comes from" section and `evidence.json`
//! `noise`: for a plan that names measures in `analysis.noise`, each measure's
//! variance split into blocks, servers and repeats (`crate::analysis::noise`), from the
//! summaries this report recomputed. Must not decompose anything itself.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::analysis::study::Loaded;

/// The decomposition of the plan's `analysis.noise` measures (`None`: it names none).
pub fn decomposition(l: &Loaded) -> Option<Result<crate::analysis::noise::NoiseReport, String>> {
    let metrics = &l.frozen.plan.noise;
    if metrics.is_empty() {
        return None;
    }
    let summary_of = |b: u32, arm: &str, cell: &str| {
        l.cells.iter().find(|c| c.block == b && c.arm == arm && c.cell == cell)?.summary.as_ref().ok().cloned()
    };
    let machines = l.executor.as_ref().map(|e| e.machine_of_blocks()).unwrap_or_default();
    Some(crate::analysis::noise::decompose(&l.frozen, metrics, &machines, summary_of))
}

/// `evidence.json` `noise`: the decomposition, or `{"error": why}`.
pub fn evidence(l: &Loaded) -> Option<Value> {
    Some(match l.noise.as_ref()? {
        Ok(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        Err(why) => json!({ "error": why }),
    })
}

pub fn section(o: &mut String, l: &Loaded) {
    let Some(noise) = &l.noise else { return };
    let _ = writeln!(o, "## Where this study's noise comes from (`analysis.noise`)\n");
    match noise {
        Err(why) => {
            let _ = writeln!(o, "No decomposition: {why}.\n");
        }
        Ok(r) => {
            let _ = writeln!(
                o,
                "Each measure's variance (log units, so an SD of 0.03 is about 3%) split into blocks (drift over time), \
                 fresh servers within a block and repeats of a cell on one server, every arm taken as a server of \
                 the block and the confirmation cells of one load shape as repeats (balanced nested ANOVA, Kalibera \
                 and Jones 2013; each cell's own level removed first). `harness noise DIR` prints the same; `harness \
                 replay` recomputes it from the raw records.\n"
            );
            let _ = writeln!(o, "```text\n{}```\n", r.render_text());
        }
    }
}
