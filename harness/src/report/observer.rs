//! The observer-effect section of a report: for each descriptive cell recorded with
//! the light recorder (`recorder = "light"`: first token, `[DONE]` and usage only),
//! the full-recorder descriptive cell of the same load, count and prompt length, and
//! per arm the medians across blocks of throughput, TTFT and E2E under each
//! recorder with their difference, so a reader sees what recording every event
//! costs. Presentation only: the medians come from the analysis (`CellMedians`),
//! which replay checks. Must not compute measures.

use std::fmt::Write;

use super::analysis::{Analysis, CellMedians};
use super::load::Loaded;
use crate::plan::{CellKind, Recorder, ResolvedCell};

/// (field, label, decimals) compared between the recorders.
const COMPARED: [(&str, &str, usize); 5] = [
    ("request_throughput_rps", "requests/s", 3),
    ("ttft_p50_ms", "TTFT p50 ms", 2),
    ("ttft_mean_ms", "TTFT mean ms", 2),
    ("e2e_p50_ms", "E2E p50 ms", 2),
    ("e2e_mean_ms", "E2E mean ms", 2),
];

fn recorder_of(l: &Loaded, cell: &str) -> Recorder {
    l.frozen.plan.cell(cell).map_or(Recorder::Full, |c| c.recorder)
}

/// The full descriptive cell run like `light` (same load, count, prompt length).
fn twin<'a>(l: &'a Loaded, light: &ResolvedCell) -> Option<&'a ResolvedCell> {
    l.resolved.iter().find(|c| {
        c.kind == CellKind::Descriptive
            && recorder_of(l, &c.name) == Recorder::Full
            && c.load == light.load
            && c.count == light.count
            && c.input_tokens == light.input_tokens
    })
}

fn medians<'a>(a: &'a Analysis, cell: &str, arm: &str) -> Option<&'a CellMedians> {
    a.cells.iter().find(|m| m.cell == cell && m.arm == arm && !m.blocks.is_empty())
}

/// The section; nothing when no cell uses the light recorder.
pub fn markdown(o: &mut String, l: &Loaded, a: &Analysis) {
    let lights: Vec<&ResolvedCell> = l.resolved.iter().filter(|c| recorder_of(l, &c.name) == Recorder::Light).collect();
    if lights.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Observer effect: full vs light recorder\n");
    let _ = writeln!(
        o,
        "The full recorder keeps every SSE event's timestamp, token count and token IDs; the light one keeps the \
         first token-bearing event, `[DONE]` and usage only (every event is still parsed). Same arm, same load, \
         descriptive cells (never tested): the difference is what recording costs, within the block-to-block \
         noise of so few blocks. Values are medians across blocks; difference = light - full.\n"
    );
    for light in lights {
        let Some(full) = twin(l, light) else {
            let _ = writeln!(
                o,
                "- cell {}: no full-recorder descriptive cell with the same load, count and prompt length; nothing to \
                 compare.\n",
                light.name
            );
            continue;
        };
        let _ = writeln!(o, "### {} (full) vs {} (light)\n", full.name, light.name);
        let _ = writeln!(o, "| arm | measure | full | light | difference |\n| --- | --- | ---: | ---: | ---: |");
        for arm in &l.frozen.plan.arms {
            let (Some(f), Some(g)) = (medians(a, &full.name, &arm.name), medians(a, &light.name, &arm.name)) else {
                continue;
            };
            for (field, label, d) in COMPARED {
                let (x, y) = (f.get(field), g.get(field));
                let diff = match (x, y) {
                    (Some(x), Some(y)) if x != 0.0 => format!("{:+.d$} ({:+.2}%)", y - x, (y / x - 1.0) * 100.0),
                    (Some(x), Some(y)) => format!("{:+.d$}", y - x),
                    _ => "n/a".into(),
                };
                let v = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.d$}"));
                let _ = writeln!(o, "| {} | {label} | {} | {} | {diff} |", arm.name, v(x), v(y));
            }
        }
        o.push('\n');
    }
}
