//! The summary block `harness bench` prints per cell once the study is written: a
//! heading naming the cell and its load, then the cell's block in `vllm bench serve`
//! layout and order (`metrics::render_vllm_block`, which owns the layout and says
//! where its definitions differ from vLLM's), and with `--verbose` this harness's
//! extra lines after it (`metrics::render_extras`), from the `CellSummary` that
//! replay recomputes from the raw records (and, for vLLM's `--metric-percentiles`,
//! the percentiles `metrics` computes from the same records). Must not compute a
//! measure or lay out a table of its own.

use std::collections::BTreeMap;
use std::path::Path;

use super::BenchArgs;
use crate::metrics::{
    BlockPercentiles, CellSummary, LoadFacts, latency_percentiles_ms, render_extras, render_vllm_block,
};
use crate::plan::{ResolvedCell, ResolvedLoad};

/// A measured cell of a study: (block, arm, cell).
pub type CellKey = (u32, String, String);

/// What a cell's block shows beyond its summary.
#[derive(Debug, Clone, Default)]
pub struct BlockExtras {
    /// vLLM's "Peak output token throughput", as the vLLM export computes it
    /// (`export::vllm_bench_results`).
    pub peak_output_tps: Option<f64>,
    /// The sections `--percentile-metrics` names and the percentile lines
    /// `--metric-percentiles` asks for (`metrics::latency_percentiles_ms`: the
    /// summary's nearest-rank definition, which the note under the block states).
    pub percentiles: BlockPercentiles,
}

/// The [`BlockExtras`] of each measured cell of the study in `dir`; a cell is
/// missing when its records cannot be read (its block then leaves the peak line
/// out and shows the summary's P95 and P99).
pub fn block_extras(dir: &Path, a: &BenchArgs) -> BTreeMap<CellKey, BlockExtras> {
    let levels =
        if a.metric_percentiles.is_some() { super::metric_percentiles(a).unwrap_or_default() } else { Vec::new() };
    // vLLM's default sections: ttft,tpot,itl.
    let metrics: Vec<String> =
        a.percentile_metrics.as_deref().unwrap_or("ttft,tpot,itl").split(',').map(|x| x.trim().to_string()).collect();
    let Ok(plan) = crate::export::read_plan(dir) else { return BTreeMap::new() };
    let Ok(cells) = crate::export::read_cells(dir, &plan) else { return BTreeMap::new() };
    cells
        .iter()
        .map(|c| {
            let peak = crate::export::vllm_bench_results(&plan.plan, std::slice::from_ref(c), None)
                .into_iter()
                .next()
                .map(|r| r.max_output_tokens_per_s);
            let lines = match latency_percentiles_ms(&c.records, &levels) {
                Ok(rows) => levels.iter().copied().zip(rows).collect(),
                Err(_) => Vec::new(),
            };
            let percentiles = BlockPercentiles { metrics: metrics.clone(), lines };
            ((c.block, c.arm.clone(), c.cell.clone()), BlockExtras { peak_output_tps: peak, percentiles })
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
/// poisson"), `facts` gives vLLM's load lines, `pct` its sections and percentile
/// lines; `verbose` adds the extra lines.
pub fn render_block(s: &CellSummary, label: &str, facts: LoadFacts, pct: &BlockPercentiles, verbose: bool) -> String {
    let extras = if verbose { render_extras(s, facts) } else { String::new() };
    let block = render_vllm_block(s, facts, pct);
    format!("cell {} (block {}, arm {}): {label}\n{block}{extras}", s.cell, s.block, s.arm)
}
