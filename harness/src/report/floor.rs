//! The report's measurement-floor section, beside the latency tables: each
//! session's floor ("this client's measurement floor here: p99 X us") and a warning
//! for every latency hypothesis whose threshold, in milliseconds of the control's
//! block-median value, and every `[slo]` latency target, lies within
//! `evidence::FLOOR_MARGIN` times the floor (the client's own error could then
//! decide it). Owns those sentences. Must not measure or change a decision.

use std::fmt::Write as _;

use crate::analysis::study::Loaded;
use crate::evidence::{FLOOR_MARGIN, MeasurementFloor};
use crate::plan::{Metric, MetricKind};

/// The highest floor p99 of the study's sessions (the one every warning uses).
fn worst(l: &Loaded) -> Option<&MeasurementFloor> {
    l.sessions.iter().filter_map(|s| s.measurement_floor.as_ref()).max_by(|a, b| a.p99_us().total_cmp(&b.p99_us()))
}

/// The sample median of a hypothesis control's per-block values, in ms.
fn control_median_ms(l: &Loaded, cell: &str, arm: &str, metric: Metric) -> Option<f64> {
    let mut v: Vec<f64> = l
        .cells
        .iter()
        .filter(|c| c.cell == cell && c.arm == arm)
        .filter_map(|c| c.summary.as_ref().ok()?.metric(metric))
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Thresholds within `FLOOR_MARGIN` floors, as sentences.
pub fn warnings(l: &Loaded) -> Vec<String> {
    let Some(floor) = worst(l) else { return Vec::new() };
    let p99 = floor.p99_us();
    let plan = &l.frozen.plan;
    let mut out = Vec::new();
    for h in &plan.hypotheses {
        // The engine's TPOT comes from its receipts, not from this client's clock.
        if h.metric.kind() != MetricKind::Latency || h.metric == Metric::EngineTpot {
            continue;
        }
        if let Some(ms) = control_median_ms(l, &h.cell, &h.control, h.metric).map(|m| m * h.threshold)
            && floor.too_close(ms)
        {
            out.push(format!(
                "hypothesis {}: its threshold ({} of {}'s {} in {}, {:.0} us) is within {FLOOR_MARGIN}x this \
                 client's measurement floor (p99 {p99:.0} us): the client's own error could decide it",
                h.name,
                h.threshold,
                h.control,
                h.metric.as_str(),
                h.cell,
                ms * 1e3
            ));
        }
    }
    if let Some(slo) = &plan.slo {
        for (name, target) in [("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms)] {
            if let Some(ms) = target.filter(|ms| floor.too_close(*ms)) {
                out.push(format!(
                    "[slo] {name} = {ms} is within {FLOOR_MARGIN}x this client's measurement floor (p99 {p99:.0} us)"
                ));
            }
        }
    }
    out
}

/// The section, placed just before the per-cell latency tables.
pub fn markdown(o: &mut String, l: &Loaded) {
    let floors: Vec<(u32, &MeasurementFloor)> =
        l.sessions.iter().filter_map(|s| Some((s.session, s.measurement_floor.as_ref()?))).collect();
    let _ = writeln!(o, "## Measurement floor\n");
    if floors.is_empty() {
        let _ = writeln!(o, "Not measured (the study was run before sessions measured it).\n");
        return;
    }
    if let Some(w) = worst(l) {
        let _ = writeln!(o, "This client's measurement floor here: p99 {:.0} us.\n", w.p99_us());
    }
    let _ = writeln!(
        o,
        "Measured at each session's start against an in-process mock whose write times are known: per \
         request, the client's TTFT and E2E minus the mock's true ones (the overhead of connect, request, \
         parse and read this client adds), the dispatcher's wake-up lateness and the clock's resolution. \
         Latency effects near this size are the client's, not the server's.\n"
    );
    let _ = writeln!(
        o,
        "| session | rate (req/s) | requests | TTFT overhead p50 / p99 / max (us) | E2E overhead p99 (us) | \
         dispatch wake p99 (us) | sleep wake p99 (us) | clock step (ns) | load avg |"
    );
    let _ = writeln!(o, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (s, f) in &floors {
        let t = &f.ttft_overhead;
        let _ = writeln!(
            o,
            "| {s} | {} | {} ({} failed) | {:.0} / {:.0} / {:.0} | {:.0} | {:.1} | {:.0} | {} | {} |",
            f.rate_rps,
            f.requests,
            f.failed,
            t.p50_us,
            t.p99_us,
            t.max_us,
            f.e2e_overhead.p99_us,
            f.dispatch_lateness.p99_us,
            f.sleep_lateness.p99_us,
            f.clock_step_ns,
            f.loadavg_1m.map_or("-".to_string(), |v| format!("{v:.2}"))
        );
    }
    o.push('\n');
    for w in warnings(l) {
        let _ = writeln!(o, "- warning: {w}");
    }
    o.push('\n');
}
