//! The observer-effect sections of a report: what the client's own choices cost the
//! measurement, each as pairs of descriptive cells that differ in that choice only
//! (same load, count, prompt length and route):
//! - the recorder: a cell with `recorder = "light"` (first token, `[DONE]` and usage
//!   only) against its full-recorder twin;
//! - asking for token IDs: a cell with `token_ids = false` (the body `vllm bench
//!   serve` sends) against its twin that asks for them (`return_token_ids`, which
//!   takes vLLM off its cheaper streaming path).
//!
//! Per arm, the medians across blocks of throughput, TTFT and E2E of each cell with
//! their difference. Presentation only: the medians come from the analysis
//! (`CellMedians`), which replay checks. Must not compute measures.

use std::fmt::Write;

use crate::analysis::claims::{Analysis, CellMedians};
use crate::analysis::study::Loaded;
use crate::plan::{Cell, CellKind, Recorder, ResolvedCell};

/// (field, label, decimals) compared between the two cells of a pair.
const COMPARED: [(&str, &str, usize); 5] = [
    ("request_throughput_rps", "requests/s", 3),
    ("ttft_p50_ms", "TTFT p50 ms", 2),
    ("ttft_mean_ms", "TTFT mean ms", 2),
    ("e2e_p50_ms", "E2E p50 ms", 2),
    ("e2e_mean_ms", "E2E mean ms", 2),
];

/// One client choice whose cost a pair of cells shows.
struct Axis {
    title: &'static str,
    intro: &'static str,
    /// Names of the usual setting and of the varied one (table columns).
    names: (&'static str, &'static str),
    /// Whether a cell has the varied setting.
    varied: fn(&Cell) -> bool,
    /// Whether two cells differ in nothing else this axis cares about.
    same_otherwise: fn(&Cell, &Cell) -> bool,
}

const AXES: [Axis; 2] = [
    Axis {
        title: "Observer effect: full vs light recorder",
        intro: "The full recorder keeps every SSE event's timestamp, token count and token IDs; the light one keeps \
                the first token-bearing event, `[DONE]` and usage only (every event is still parsed). Same arm, same \
                load, descriptive cells (never tested): the difference is what recording costs, within the \
                block-to-block noise of so few blocks. Values are medians across blocks; difference = light - full.",
        names: ("full", "light"),
        varied: |c| c.recorder == Recorder::Light,
        same_otherwise: |a, b| a.endpoint == b.endpoint && a.token_ids == b.token_ids,
    },
    Axis {
        title: "Observer effect: asking for token IDs",
        intro: "With token IDs the body asks for `return_token_ids` (each event's tokens counted from its IDs); \
                without, it is the body `vllm bench serve` sends (one token per non-empty text event, lengths from \
                usage), and vLLM keeps its cheaper streaming path. Same arm, same load, descriptive cells (never \
                tested): the difference is what asking for the IDs costs on this server, within the block-to-block \
                noise of so few blocks. Values are medians across blocks; difference = without - with.",
        names: ("with IDs", "without"),
        varied: |c| !c.token_ids,
        same_otherwise: |a, b| a.endpoint == b.endpoint && a.recorder == b.recorder,
    },
];

fn cell<'a>(l: &'a Loaded, name: &str) -> Option<&'a Cell> {
    l.frozen.plan.cell(name)
}

/// The descriptive cell run like `varied` with the usual setting of `axis`.
fn twin<'a>(l: &'a Loaded, axis: &Axis, varied: &ResolvedCell) -> Option<&'a ResolvedCell> {
    let v = cell(l, &varied.name)?;
    l.resolved.iter().find(|c| {
        c.kind == CellKind::Descriptive
            && c.load == varied.load
            && c.count == varied.count
            && c.input_tokens == varied.input_tokens
            && cell(l, &c.name).is_some_and(|t| !(axis.varied)(t) && (axis.same_otherwise)(t, v))
    })
}

fn medians<'a>(a: &'a Analysis, cell: &str, arm: &str) -> Option<&'a CellMedians> {
    a.cells.iter().find(|m| m.cell == cell && m.arm == arm && !m.blocks.is_empty())
}

/// The sections; nothing for a choice no cell varies.
pub fn markdown(o: &mut String, l: &Loaded, a: &Analysis) {
    for axis in &AXES {
        section(o, l, a, axis);
    }
}

fn section(o: &mut String, l: &Loaded, a: &Analysis, axis: &Axis) {
    let varied: Vec<&ResolvedCell> =
        l.resolved.iter().filter(|c| cell(l, &c.name).is_some_and(|c| (axis.varied)(c))).collect();
    // A study where every cell varies the choice (all light, or no IDs anywhere) has no pair.
    if varied.is_empty() || varied.len() == l.resolved.len() {
        return;
    }
    let (usual, other) = axis.names;
    let _ = writeln!(o, "## {}\n", axis.title);
    let _ = writeln!(o, "{}\n", axis.intro);
    for v in varied {
        let Some(t) = twin(l, axis, v) else {
            let _ = writeln!(
                o,
                "- cell {}: no {usual} descriptive cell with the same load, count and prompt length; nothing to \
                 compare.\n",
                v.name
            );
            continue;
        };
        let _ = writeln!(o, "### {} ({usual}) vs {} ({other})\n", t.name, v.name);
        let _ = writeln!(o, "| arm | measure | {usual} | {other} | difference |\n| --- | --- | ---: | ---: | ---: |");
        for arm in &l.frozen.plan.arms {
            let (Some(f), Some(g)) = (medians(a, &t.name, &arm.name), medians(a, &v.name, &arm.name)) else {
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

#[cfg(test)]
mod tests {
    #[test]
    fn every_compared_field_is_in_the_catalogue() {
        for (name, label, _) in super::COMPARED {
            assert!(crate::metrics::getter(name).is_some(), "{label}: {name} is not a summary field");
        }
    }
}
