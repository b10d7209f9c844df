//! guidellm's sweep profile (`harness benchmark --profile kind=sweep`) as two studies: the anchors (a closed loop of one,
//! guidellm's synchronous run, and every request at once, its throughput run),
//! then the sweep itself: the two anchors again and constant-rate cells evenly
//! spaced between the anchors' measured rates. The second plan carries the
//! throughput rate in `[derive]` (`pilot_rates`, near_fraction 1; the note names
//! both anchors' rates and their evidence) and the points in `[derived]` through
//! the plan's own formula (each a `fractions` entry of the throughput rate, kept to
//! 4 decimals; rates in tenths of req/s, rounded down), so `plan check` and `harness replay` hold the
//! plan to them like any pilot-derived load, and the anchors' study replays on its
//! own. Owns the point spacing and the second plan's text. Must not run anything.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::{BenchArgs, BenchError, BenchPlan};
use crate::metrics::CellSummary;
use crate::plan::{DeriveSpec, compute_derived, derived_table_text};

/// guidellm's default number of sweep benchmarks.
pub const DEFAULT_BENCHMARKS: u32 = 10;

/// Where the anchors' study goes: beside the sweep's, `-anchors` appended.
pub fn anchors_out(out: &Path) -> PathBuf {
    let name = out.file_name().map_or("bench".into(), |n| n.to_string_lossy().into_owned());
    out.with_file_name(format!("{name}-anchors"))
}

/// The synchronous and throughput rates (req/s) of the anchors' study.
fn anchor_rates(a: &BenchArgs, summaries: &[CellSummary]) -> Result<(f64, f64), BenchError> {
    let all = u32::try_from(a.num_prompts).unwrap_or(u32::MAX);
    let rate = |c: u32| {
        let name = crate::plan::concurrency_cell_name("closed", i64::from(c));
        summaries.iter().find(|s| s.cell == name).map(|s| s.request_throughput_rps).filter(|r| *r > 0.0)
    };
    match (rate(1), rate(all)) {
        (Some(s), Some(t)) if t > s => Ok((s, t)),
        (Some(s), Some(t)) => Err(BenchError::Args(format!(
            "--profile kind=sweep: the throughput run ({t:.3} req/s) is not faster than the synchronous one ({s:.3}): \
             nothing to sweep between them"
        ))),
        _ => {
            Err(BenchError::Args("--profile kind=sweep: the anchors' study measured no rate (failed requests?)".into()))
        }
    }
}

/// The sweep's plan: the anchors' plan (`prepared`'s args) with the constant-rate
/// points between the measured `summaries`' rates appended.
pub fn prepare_sweep(
    a: &BenchArgs,
    summaries: &[CellSummary],
    anchors_dir: &Path,
    port: impl FnOnce() -> u16,
    now_unix_s: u64,
) -> Result<BenchPlan, BenchError> {
    let (sync, thr) = anchor_rates(a, summaries)?;
    let n = a.sweep.unwrap_or(DEFAULT_BENCHMARKS);
    let round4 = |x: f64| (x * 1e4).round() / 1e4;
    let (sync4, thr4) = (round4(sync), round4(thr));
    // The formula's near load is the throughput rate (near_fraction 1); each point
    // is a fraction of it.
    let near = (thr4 * 10.0).floor() / 10.0;
    if near <= 0.0 || sync4 < 0.1 {
        return Err(BenchError::Args(format!(
            "--profile kind=sweep: the synchronous rate {sync:.4} req/s is below the 0.1 req/s resolution of derived rates"
        )));
    }
    let points = n - 2;
    let fractions: std::collections::BTreeMap<String, f64> = (1..=points)
        .map(|i| {
            let target = sync4 + f64::from(i) * (thr4 - sync4) / f64::from(points + 1);
            (format!("s{i:02}"), round4(target / near))
        })
        .collect();
    let spec = DeriveSpec {
        pilot_rates: vec![thr4],
        near_fraction: 1.0,
        fractions: fractions.clone(),
        count: None,
        note: None,
    };
    let loads = compute_derived(&spec).map_err(|e| {
        BenchError::Args(format!(
            "--profile kind=sweep: {}",
            e.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("; ")
        ))
    })?;
    let mut text = super::plan_text(a, port)?;
    let note = format!(
        "sweep anchors measured by harness bench in {}: synchronous {sync4} req/s, throughput {thr4} req/s",
        anchors_dir.display()
    );
    let _ = write!(text, "\n[derive]\npilot_rates = [{thr4:?}]\nnear_fraction = 1.0\nnote = {}\n", toml_str(&note));
    let _ = writeln!(text, "[derive.fractions]");
    for (name, f) in &fractions {
        let _ = writeln!(text, "{name} = {f:?}");
    }
    for name in fractions.keys() {
        let rate = loads.rate(name).unwrap_or(0.0);
        let count = match a.max_seconds {
            Some(s) => {
                let c = (rate * s).ceil().max(1.0) as u64;
                a.max_requests.map_or(c, |cap| c.min(cap))
            }
            None => a.num_prompts,
        };
        let _ = write!(
            text,
            "\n[[cells]]\nname = \"constant-{name}\"\nkind = \"descriptive\"\nload = \"constant\"\n\
             rate = \"derived:{name}\"\ncount = {count}\n"
        );
    }
    text.push('\n');
    text.push_str(&derived_table_text(&loads));
    let frozen = crate::plan::freeze(text.clone().into_bytes())?;
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from(format!("reports/bench-{now_unix_s}")));
    Ok(BenchPlan { text, frozen, out })
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
