//! The in-study pilots of a plan with `[pilots]`: every pilot run the pilot plan
//! schedules has its raw records at `pilots/raw/b<run>/<arm>/pilot.requests.jsonl`
//! with the size and SHA-256 that `pilots/derived.json` records; each pilot's rate
//! is recomputed from those records with replay's own measures (valid completed
//! requests over the observation interval, `measures::summarize`), must have no
//! failed request and equal the recorded rate; and the derived loads are recomputed
//! from the recomputed rates by the plan's `[derive]` formula (the plan layer's
//! exact decimal arithmetic, the one definition of the formula) and must equal the
//! recorded ones exactly. `pilots/inputs/` must match its catalog. Every difference
//! is named (file, field). Must not trust `derived.json`'s rates or loads, and must
//! not write anything.

use std::path::Path;

use super::measures::{Val, summarize};
use super::read::read_doc;
use super::records::Rec;
use super::{Check, Mismatch, close, num};
use crate::evidence::sha256_hex;
use crate::evidence::{
    CATALOG_FILE, DERIVED_PATH, INPUTS_DIR, PILOTS_DIR, PLAN_FILE, PilotRun, PilotsRecord,
    read_pilots_record as read_record, requests_path,
};
use crate::metrics::FIELD_NAMES;
use crate::plan::{PILOT_CELL, Plan, freeze, tenths_str};

pub const NAME: &str = "pilots: rates from pilots/ raw records, derived loads by the formula";

fn field(values: &[Val], name: &str) -> Option<f64> {
    let i = FIELD_NAMES.iter().position(|n| *n == name)?;
    match values.get(i)? {
        Val::Int(n) => Some(*n as f64),
        Val::Float(v) => *v,
    }
}

/// Parses a pilot's records; `Err` names the line.
fn records(bytes: &[u8], rel: &str) -> Result<Vec<Rec>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("{rel}: {e}"))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str::<Rec>(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

pub fn check(root: &Path) -> Check {
    let frozen = match read_doc(root, PLAN_FILE).and_then(|b| freeze(b).map_err(|e| e.to_string())) {
        Ok(f) => f,
        Err(_) => return Check::skip(NAME, "no valid plan (the plan check says why)"),
    };
    let plan = &frozen.plan;
    let on_disk = root.join(PILOTS_DIR).exists();
    let Some(pilot_plan) = plan.pilot_plan() else {
        if on_disk {
            let m = Mismatch::new(PILOTS_DIR, "directory", "present", "the plan declares no [pilots]");
            return Check::of(NAME, "pilots/ without [pilots]".into(), vec![m]);
        }
        return Check::skip(NAME, "the plan declares no [pilots] (hand-written [derive] rates, or none)");
    };
    let mut m = Vec::new();
    let rec = match read_record(root) {
        Ok(r) => r,
        Err(e) => {
            m.push(Mismatch::new(DERIVED_PATH, "file", "the pilots' record", e));
            return Check::of(NAME, "no pilots record".into(), m);
        }
    };
    if rec.plan_sha256 != frozen.sha256 {
        m.push(Mismatch::new(DERIVED_PATH, "plan_sha256", &rec.plan_sha256, &frozen.sha256));
    }
    if let Err(e) = crate::trace::verify_catalog(&root.join(PILOTS_DIR).join(INPUTS_DIR)) {
        m.push(Mismatch::new(
            format!("{PILOTS_DIR}/{INPUTS_DIR}/{CATALOG_FILE}"),
            "catalog",
            "every file as listed",
            e.to_string(),
        ));
    }
    let want_count = plan.pilots.as_ref().map_or(0, |p| p.count);
    let schedule = pilot_plan.schedule();
    let mut rates = Vec::new();
    let mut expected = 0;
    for block in &schedule.blocks {
        for arm in &block.arms {
            expected += 1;
            let rel = format!("{PILOTS_DIR}/{}", requests_path(block.index, arm, PILOT_CELL));
            let Some(p) = rec.pilots.iter().find(|p| p.run == block.index && &p.arm == arm) else {
                m.push(Mismatch::new(DERIVED_PATH, format!("pilots b{}/{arm}", block.index), "missing", "a pilot run"));
                continue;
            };
            if let Some(rate) = check_pilot_run(&mut m, root, p, &rel, plan, want_count) {
                rates.push(rate);
            }
        }
    }
    if rec.pilots.len() != expected {
        m.push(Mismatch::new(
            DERIVED_PATH,
            "pilots",
            format!("{} runs", rec.pilots.len()),
            format!("{expected} scheduled"),
        ));
    }
    let recorded: Vec<f64> = rec.pilots.iter().map(|p| p.rate_rps).collect();
    if recorded.len() != rec.pilot_rates.len() || recorded.iter().zip(&rec.pilot_rates).any(|(a, b)| a != b) {
        m.push(Mismatch::new(DERIVED_PATH, "pilot_rates", format!("{:?}", rec.pilot_rates), format!("{recorded:?}")));
    }
    check_derived(&mut m, plan, &rec, &rates);
    let loads: Vec<String> = rec.rates_rps.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let detail = format!(
        "{expected} pilot run(s), rates {:?} req/s -> {}{}",
        rates.iter().map(|r| (r * 1e4).round() / 1e4).collect::<Vec<_>>(),
        loads.join(", "),
        rec.count.map(|c| format!(", count {c}")).unwrap_or_default()
    );
    Check::of(NAME, detail, m)
}

/// One pilot run: its records file as recorded (path, size, SHA-256), recomputed
/// into its rate, with no failure and the planned count; returns the rate replay
/// computes (0 when the records give none), or `None` when they cannot be read.
fn check_pilot_run(
    m: &mut Vec<Mismatch>,
    root: &Path,
    p: &PilotRun,
    rel: &str,
    plan: &Plan,
    want_count: u64,
) -> Option<f64> {
    if p.records != *rel {
        m.push(Mismatch::new(DERIVED_PATH, format!("pilots b{}/{} records", p.run, p.arm), &p.records, rel));
    }
    let bytes = match read_doc(root, rel) {
        Ok(b) => b,
        Err(e) => {
            m.push(Mismatch::new(rel, "file", "the pilot's raw records", e));
            return None;
        }
    };
    let sha = sha256_hex(&bytes);
    if sha != p.sha256 || bytes.len() as u64 != p.bytes {
        m.push(Mismatch::new(
            rel,
            "sha256",
            format!("{} ({} bytes) in {DERIVED_PATH}", p.sha256, p.bytes),
            format!("{sha} ({} bytes)", bytes.len()),
        ));
    }
    let values = match records(&bytes, rel).and_then(|r| summarize(&r, plan.slo.as_ref())) {
        Ok(v) => v,
        Err(e) => {
            m.push(Mismatch::new(rel, "records", "a pilot cell", e));
            return None;
        }
    };
    let rate = field(&values, "request_throughput_rps");
    let failed = field(&values, "failed").unwrap_or(0.0);
    let requests = field(&values, "requests").unwrap_or(0.0);
    if !rate.is_some_and(|r| close(r, p.rate_rps)) {
        m.push(Mismatch::new(rel, "rate_rps", num(Some(p.rate_rps)), num(rate)));
    }
    if failed > 0.0 {
        m.push(Mismatch::new(rel, "failed", "0 (a pilot gives a rate only without failures)", num(Some(failed))));
    }
    if requests != want_count as f64 {
        m.push(Mismatch::new(rel, "requests", num(Some(requests)), want_count.to_string()));
    }
    Some(rate.unwrap_or(0.0))
}

/// The loads `[derive]`'s formula gives from replay's own pilot rates against the
/// recorded ones (rates in tenths, their text, the count).
fn check_derived(m: &mut Vec<Mismatch>, plan: &Plan, rec: &PilotsRecord, rates: &[f64]) {
    match plan.with_pilot_rates(rates) {
        Err(e) => m.push(Mismatch::new(DERIVED_PATH, "derived loads", "the formula's output", e.to_string())),
        Ok((_, loads)) => {
            let names: std::collections::BTreeSet<&String> =
                loads.rates_tenths.keys().chain(rec.rates_tenths.keys()).collect();
            for name in names {
                let (a, b) = (rec.rates_tenths.get(name), loads.rates_tenths.get(name));
                if a != b {
                    let show = |t: Option<&u64>| t.map_or("absent".to_string(), |&t| tenths_str(t));
                    m.push(Mismatch::new(DERIVED_PATH, format!("derived {name}"), show(a), show(b)));
                }
                let text = rec.rates_rps.get(name).map(String::as_str);
                if b.map(|&t| tenths_str(t)).as_deref() != text {
                    m.push(Mismatch::new(
                        DERIVED_PATH,
                        format!("rates_rps {name}"),
                        text.unwrap_or("absent"),
                        b.map_or("absent".into(), |&t| tenths_str(t)),
                    ));
                }
            }
            if rec.count != loads.count {
                m.push(Mismatch::new(
                    DERIVED_PATH,
                    "derived count",
                    format!("{:?}", rec.count),
                    format!("{:?}", loads.count),
                ));
            }
        }
    }
}
