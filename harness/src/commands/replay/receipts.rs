//! Client records joined to the engine's per-step receipts (`receipts.jsonl`, one
//! line per scheduler step with the ids it admitted fresh, resumed and preempted)
//! through each record's `server_request_id`: per cell the fresh admissions,
//! resumptions and preemptions, and every client request the server never admitted
//! (or admitted twice). Arms without receipts (llama.cpp, external servers) are
//! reported as "no receipts", not as a failure; a completed server invocation of an
//! arm that declares receipts and kept none is a failure. Must not read anything
//! but the scan.

use std::collections::HashSet;

use serde::Serialize;

use super::complete::Study;
use super::files::Scan;
use super::{Check, Mismatch, Status};

pub const NAME: &str = "receipts: every client request admitted by the engine";

/// Receipt counts of one (block, arm, cell).
#[derive(Debug, Clone, Serialize)]
pub struct CellReceipts {
    pub block: u32,
    pub arm: String,
    pub cell: String,
    pub requests: u64,
    pub fresh_admissions: u64,
    pub resumptions: u64,
    pub preemptions: u64,
    /// Client requests with a server id that no receipt admitted.
    pub without_admission: u64,
}

/// The join, and its counts per cell.
pub fn check(s: &Study<'_>, scan: &Scan) -> (Check, Vec<CellReceipts>) {
    let mut m = Vec::new();
    let mut per_cell = Vec::new();
    let (mut with, mut without, mut other_admissions, mut steps) = (Vec::new(), Vec::new(), 0u64, 0u64);
    for u in &s.units {
        let dir = crate::evidence::unit_path(u.block, &u.arm);
        let declared = s.plan.arm(&u.arm).is_some_and(|a| a.receipts.is_some());
        let Some(idx) = scan.receipts.get(&dir) else {
            if declared && u.status.is_completed() && !scan.parse_errors.iter().any(|(p, _)| p.starts_with(&dir)) {
                m.push(Mismatch::new(
                    format!("{dir}/{}", crate::evidence::RECEIPTS_FILE),
                    "file",
                    "missing",
                    "the arm declares receipts",
                ));
            }
            without.push(format!("b{}/{}", u.block, u.arm));
            continue;
        };
        with.push(dir.clone());
        steps += idx.steps;
        let mut joined: HashSet<&str> = HashSet::new();
        for c in s.cells.iter().filter(|c| c.block == u.block && c.arm == u.arm) {
            let Some(records) = c.records else { continue };
            let mut cr = CellReceipts {
                block: c.block,
                arm: c.arm.clone(),
                cell: c.cell.clone(),
                requests: records.len() as u64,
                fresh_admissions: 0,
                resumptions: 0,
                preemptions: 0,
                without_admission: 0,
            };
            for r in records {
                let Some(id) = r.server_request_id.as_deref() else {
                    if r.valid() {
                        m.push(Mismatch::new(
                            &c.path,
                            format!("request {} server_request_id", r.index),
                            "null",
                            "the response id of a completed request",
                        ));
                    }
                    continue;
                };
                joined.insert(id);
                let [adm, res, pre] = idx.by_id.get(id).copied().unwrap_or_default();
                cr.fresh_admissions += u64::from(adm);
                cr.resumptions += u64::from(res);
                cr.preemptions += u64::from(pre);
                if adm == 0 {
                    cr.without_admission += 1;
                    m.push(Mismatch::new(
                        &c.path,
                        format!("request {} ({id})", r.index),
                        "no admission receipt",
                        format!("admitted in {dir}/receipts.jsonl"),
                    ));
                } else if adm > 1 {
                    m.push(Mismatch::new(
                        &c.path,
                        format!("request {} ({id})", r.index),
                        format!("admitted fresh {adm} times"),
                        "once",
                    ));
                }
                if res > pre {
                    m.push(Mismatch::new(
                        &c.path,
                        format!("request {} ({id})", r.index),
                        format!("resumed {res} times, preempted {pre}"),
                        "no resumption without a preemption",
                    ));
                }
            }
            per_cell.push(cr);
        }
        other_admissions += idx.by_id.iter().filter(|(id, v)| v[0] > 0 && !joined.contains(id.as_str())).count() as u64;
    }
    if with.is_empty() && m.is_empty() {
        return (Check::skip(NAME, format!("no receipts ({} server invocations)", without.len())), per_cell);
    }
    let admitted: u64 = per_cell.iter().map(|c| c.fresh_admissions).sum();
    let resumed: u64 = per_cell.iter().map(|c| c.resumptions).sum();
    let preempted: u64 = per_cell.iter().map(|c| c.preemptions).sum();
    let mut detail = format!(
        "{} invocations with receipts ({steps} steps): {admitted} fresh admissions, {resumed} resumptions, \
         {preempted} preemptions of client requests; {other_admissions} other admissions (warmup)",
        with.len()
    );
    if !without.is_empty() {
        detail.push_str(&format!("; no receipts: {}", without.join(", ")));
    }
    let mut check = Check::of(NAME, detail, m);
    if check.mismatches.is_empty() {
        check.status = Status::Pass;
    }
    (check, per_cell)
}
