//! The summary block `harness bench` prints per cell once the study is written: a
//! heading naming the cell and its load, then the cell's block in `vllm bench serve`
//! layout and order (`metrics::render_vllm_block`, which owns the layout and says
//! where its definitions differ from vLLM's), and with `--verbose` this harness's
//! extra lines after it (`metrics::render_extras`), from the `CellSummary` that
//! replay recomputes from the raw records. Must not compute a measure or lay out a
//! table of its own.

use crate::metrics::{CellSummary, LoadFacts, render_extras, render_vllm_block};
use crate::plan::ResolvedLoad;

/// What vLLM's block says about a cell's load.
pub fn load_facts(load: ResolvedLoad) -> LoadFacts {
    match load {
        ResolvedLoad::Closed { concurrency } => {
            LoadFacts { max_concurrency: Some(concurrency), rate_rps: None, closed: true }
        }
        ResolvedLoad::Open { rate_rps, .. } => {
            LoadFacts { max_concurrency: None, rate_rps: Some(rate_rps), closed: false }
        }
        _ => LoadFacts::default(),
    }
}

/// The block for one cell; `label` describes its load (e.g. "open-loop 2 req/s
/// poisson"), `facts` gives vLLM's load lines; `verbose` adds the extra lines.
pub fn render_block(s: &CellSummary, label: &str, facts: LoadFacts, verbose: bool) -> String {
    let extras = if verbose { render_extras(s, facts) } else { String::new() };
    format!("cell {} (block {}, arm {}): {label}\n{}{extras}", s.cell, s.block, s.arm, render_vllm_block(s, facts))
}
