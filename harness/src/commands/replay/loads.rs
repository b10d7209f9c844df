//! The arrival laws replay can recompute without a seed: every constant cell's
//! offsets (round(i * 1e9 / rate) ns, docs/plan.md) and every trace-file cell's
//! offsets, prompts and lengths, from the exact copy of its file under
//! `inputs/arrivals/` (parsed with the trace layer's file parser, the one reader of
//! those formats) and the plan's `count`, `time_scale` and `trace_lengths`.
//! Seeded laws (Poisson, gamma) are covered by the catalog's hashes. Must not
//! regenerate any file or call the trace generator: the rules are restated here.

use std::path::Path;

use serde::Deserialize;

use super::read::{read_doc, stream_lines};
use super::{Check, Mismatch};
use crate::plan::{Arrival, Load, Plan, ResolvedLoad};
use crate::trace::{ArrivalFormat, parse_arrivals};

pub const NAME: &str = "loads: constant and trace-file arrivals recomputed";

#[derive(Deserialize)]
struct Line {
    offset_ns: u64,
    prompt: u64,
    #[serde(default)]
    input_length: Option<u32>,
    #[serde(default)]
    output_length: Option<u32>,
}

/// What request i of a recomputable cell must be: offset, and (trace lengths) the
/// prompt and the row's lengths.
type Want = (u64, Option<(u64, u32, u32)>);

fn nearest(lengths: &[u32], want: u32) -> Option<usize> {
    (0..lengths.len()).min_by_key(|&i| (lengths[i].abs_diff(want), lengths[i]))
}

fn expected(root: &Path, plan: &Plan, cell: &str, load: ResolvedLoad, count: u64) -> Result<Option<Vec<Want>>, String> {
    match load {
        ResolvedLoad::Open { rate_rps, arrival: Arrival::Constant } => {
            Ok(Some((0..count).map(|i| (((i as f64) * 1e9 / rate_rps).round() as u64, None)).collect()))
        }
        ResolvedLoad::Trace { time_scale, lengths } => {
            let Some(Load::Trace { path, .. }) = plan.cell(cell).map(|c| &c.load) else { return Ok(None) };
            let ext = if path.ends_with(".csv") { "csv" } else { "jsonl" };
            let rel = crate::evidence::arrivals_path(cell, ext);
            let bytes = read_doc(root, &rel).map_err(|e| format!("{rel}: {e}"))?;
            let text = String::from_utf8(bytes).map_err(|e| format!("{rel}: {e}"))?;
            let format = ArrivalFormat::of_path(path).ok_or_else(|| format!("{path}: not a trace file"))?;
            let rows = parse_arrivals(&rel, &text, format).map_err(|e| e.to_string())?;
            let n = plan.prompts.documents as u64;
            let mut out = Vec::new();
            for (i, r) in rows.iter().take(count as usize).enumerate() {
                let offset =
                    if time_scale == 1.0 { r.offset_ns } else { (r.offset_ns as f64 * time_scale).round() as u64 };
                let extra = match (lengths, nearest(&plan.prompts.lengths, r.input_length)) {
                    (true, Some(li)) => Some((li as u64 * n + i as u64 % n, r.input_length, r.output_length)),
                    _ => None,
                };
                out.push((offset, extra));
            }
            Ok(Some(out))
        }
        _ => Ok(None),
    }
}

/// Recomputes every constant and trace-file cell's trace and compares it line by line.
pub fn check(root: &Path, plan: &Plan) -> Check {
    let mut m = Vec::new();
    let mut checked = 0u64;
    for cell in plan.resolved_cells().unwrap_or_default() {
        let rel = crate::evidence::trace_path(&cell.name);
        let want = match expected(root, plan, &cell.name, cell.load, cell.count) {
            Ok(Some(w)) => w,
            Ok(None) => continue,
            Err(e) => {
                m.push(Mismatch::new(&rel, "source", e, "a readable trace file copy"));
                continue;
            }
        };
        let mut lines = Vec::new();
        let r = stream_lines(root, &rel, |_, l| {
            lines.push(serde_json::from_slice::<Line>(l).map_err(|e| e.to_string())?);
            Ok(())
        });
        let broken = match r {
            Err(e) => Some(e.to_string()),
            Ok((_, e)) => e,
        };
        if let Some(e) = broken {
            m.push(Mismatch::new(&rel, "parse", e, "a trace"));
            continue;
        }
        if lines.len() != want.len() {
            m.push(Mismatch::new(&rel, "requests", lines.len().to_string(), want.len().to_string()));
        }
        for (i, (l, (offset, extra))) in lines.iter().zip(&want).enumerate() {
            checked += 1;
            if l.offset_ns != *offset {
                m.push(Mismatch::new(
                    &rel,
                    format!("line {} offset_ns", i + 1),
                    l.offset_ns.to_string(),
                    offset.to_string(),
                ));
            }
            if let Some((prompt, input, output)) = extra {
                let got = (l.prompt, l.input_length, l.output_length);
                if got != (*prompt, Some(*input), Some(*output)) {
                    m.push(Mismatch::new(
                        &rel,
                        format!("line {} prompt, input_length, output_length", i + 1),
                        format!("{got:?}"),
                        format!("({prompt}, Some({input}), Some({output}))"),
                    ));
                }
            }
        }
    }
    Check::of(NAME, format!("{checked} requests of constant and trace-file cells"), m)
}
