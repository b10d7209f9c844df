//! The replay table for terminals and its JSON form. Owns the layout only; must not
//! decide pass or fail.

use super::ReplayOutcome;

fn flat(s: &str, max: usize) -> String {
    let s: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if s.chars().count() > max { format!("{}...", s.chars().take(max).collect::<String>()) } else { s }
}

/// The table: one line per check, then its first `max` mismatches indented, then
/// the receipt counts per cell when there are any.
pub fn table(o: &ReplayOutcome, max: usize) -> String {
    let failed = o.failed().len();
    let mut out = format!(
        "replay of {}: {} checks, {failed} failed ({} files, {} bytes read)\n\n",
        o.dir.display(),
        o.checks.len(),
        o.files_read,
        o.bytes_read
    );
    let width = o.checks.iter().map(|c| c.name.len()).max().unwrap_or(10);
    out.push_str(&format!("{:<6}  {:<width$}  detail\n", "result", "check"));
    for c in &o.checks {
        out.push_str(&format!("{:<6}  {:<width$}  {}\n", c.status.label(), c.name, flat(&c.detail, 400)));
        for mm in c.mismatches.iter().take(max) {
            out.push_str(&format!(
                "          {}  {}: archived {}, recomputed {}\n",
                mm.file,
                flat(&mm.field, 200),
                flat(&mm.archived, 200),
                flat(&mm.recomputed, 200)
            ));
        }
        if c.mismatches.len() > max {
            out.push_str(&format!("          ... and {} more\n", c.mismatches.len() - max));
        }
    }
    if !o.receipts.is_empty() {
        out.push_str("\nreceipts per cell (client requests joined by server_request_id):\n");
        out.push_str(
            "block  arm                cell                 requests  admitted  resumed  preempted  unadmitted\n",
        );
        for r in &o.receipts {
            out.push_str(&format!(
                "{:<5}  {:<17}  {:<19}  {:>8}  {:>8}  {:>7}  {:>9}  {:>10}\n",
                r.block,
                r.arm,
                r.cell,
                r.requests,
                r.fresh_admissions,
                r.resumptions,
                r.preemptions,
                r.without_admission
            ));
        }
    }
    out.push_str(&format!("\nreplay {}\n", if o.passed { "PASSED: every check passes" } else { "FAILED" }));
    out
}

/// Pretty JSON of the whole outcome.
pub fn json(o: &ReplayOutcome) -> String {
    serde_json::to_string_pretty(o).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
