//! The summary block `harness bench` prints per cell once the study is written: a
//! heading naming the cell and its load, then the cell's table in `vllm bench serve`
//! layout (`metrics::render_table`, which owns the layout and says where its
//! definitions differ from vLLM's), from the `CellSummary` that replay recomputes
//! from the raw records. Must not compute a measure or lay out a table of its own.

use crate::metrics::{CellSummary, render_table};

/// The block for one cell; `load` describes it (e.g. "open-loop 2 req/s poisson").
pub fn render_block(s: &CellSummary, load: &str) -> String {
    format!("cell {} (block {}, arm {}): {load}\n{}", s.cell, s.block, s.arm, render_table(s))
}
