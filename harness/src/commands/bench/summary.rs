//! The summary block `harness bench` prints per cell once the study is written: a
//! heading naming the cell and its load, then the cell's block in `vllm bench serve`
//! layout and order (`metrics::render_vllm_block`, which owns the layout and says
//! where its definitions differ from vLLM's), and with `--verbose` this harness's
//! extra lines after it (`metrics::render_extras`), from the `CellSummary` that
//! replay recomputes from the raw records. Must not compute a measure or lay out a
//! table of its own.

use std::path::Path;

use crate::metrics::{CellSummary, LoadFacts, render_extras, render_vllm_block};
use crate::plan::{ResolvedCell, ResolvedLoad};

/// vLLM's "Peak output token throughput" of each (block, arm, cell) of the study in
/// `dir`, as the vLLM export computes it (`export::vllm_bench_results`); empty when
/// the records cannot be read (the block then leaves the line out).
pub fn vllm_peaks(dir: &Path) -> Vec<((u32, String, String), f64)> {
    let Ok(plan) = crate::export::read_plan(dir) else { return Vec::new() };
    let Ok(cells) = crate::export::read_cells(dir, &plan) else { return Vec::new() };
    cells
        .iter()
        .filter_map(|c| {
            let r = crate::export::vllm_bench_results(&plan.plan, std::slice::from_ref(c), None).into_iter().next()?;
            Some(((c.block, c.arm.clone(), c.cell.clone()), r.max_output_tokens_per_s))
        })
        .collect()
}

/// What vLLM's block says about a cell's load.
pub fn load_facts(c: &ResolvedCell) -> LoadFacts {
    let max_concurrency = c.in_flight_cap();
    match c.load {
        ResolvedLoad::Closed { .. } => {
            LoadFacts { max_concurrency, rate_rps: None, closed: true, peak_output_tps: None }
        }
        ResolvedLoad::Open { rate_rps, .. } => {
            LoadFacts { max_concurrency, rate_rps: Some(rate_rps), closed: false, peak_output_tps: None }
        }
        _ => LoadFacts { max_concurrency, ..LoadFacts::default() },
    }
}

/// The block for one cell; `label` describes its load (e.g. "open-loop 2 req/s
/// poisson"), `facts` gives vLLM's load lines; `verbose` adds the extra lines.
pub fn render_block(s: &CellSummary, label: &str, facts: LoadFacts, verbose: bool) -> String {
    let extras = if verbose { render_extras(s, facts) } else { String::new() };
    format!("cell {} (block {}, arm {}): {label}\n{}{extras}", s.cell, s.block, s.arm, render_vllm_block(s, facts))
}
