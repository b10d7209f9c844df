//! Evidence written by `harness compare` (docs/compare.md): recognised by
//! `compare.json` with the `harness-compare/` format and no `run.json`. Its layout
//! differs from a run's (`raw/parity/<arm>/`, `raw/noise<r>/<arm>.a|.b/`,
//! `raw/b<block>/<arm>/`, each with compare's own `unit.json`; no `run.json`), so the
//! run-specific checks are skipped and this one check audits `compare.json`:
//! - every cell observation (phase, round, arm, cell) against replay's own
//!   recomputation from the raw records (`measures::summarize`): failed requests,
//!   total and output tok/s, TTFT and ITL p50/p99; the record count against the
//!   plan's cell count; each record's block/arm/cell against its file; the per-cell
//!   summary `results/cells/<tag>-<label>-<cell>.summary.json` field by field;
//! - every request file and per-cell summary is observed, and (status `complete`)
//!   every planned cell of every completed server is observed;
//! - the server observations (cold start, peak RSS) against each server's
//!   `unit.json`, and `compare.json` `units[]` against those files;
//! - the parity verdict recounted from `raw/parity/<arm>/parity.jsonl` (token IDs
//!   per prompt as recorded, within the prefix rule when the plan sets one) and the
//!   status that follows from it.
//!
//! Not recomputed: the rows (medians over rounds, ratios, noise band, verdicts) and
//! the token IDs' extraction from the raw answer bodies (the dialects). Must not call
//! the analysis path (`metrics`, `stats`, `compare::band`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::files::Scan;
use super::measures::{CellMeasures, summarize};
use super::read::{read_json, stream_lines};
use super::records::Rec;
use super::tables::compare_summary;
use super::{Check, Mismatch, close, num};
use crate::evidence::{
    CELLS_DIR, DISCARDED_DIR, PARITY_FILE, PARITY_PHASE, RAW_DIR, REQUESTS_SUFFIX, RESULTS_DIR, RUN_FILE,
    SUMMARY_SUFFIX, UNIT_FILE, requests_file, summary_path,
};
use crate::evidence::{COMPARE_FILE as FILE, CompareRecord, CompareStatus, Measure, NoiseArms, Obs, Phase};
use crate::metrics::FIELD_NAMES;
use crate::plan::{Plan, ResolvedCell, ResolvedLoad};

pub const NAME: &str = "compare.json: per-cell measures recomputed";

/// The format prefix that marks a comparison's `compare.json`.
const FORMAT_PREFIX: &str = "harness-compare/";

/// Why this is a compare evidence directory (`None`: it is not one).
pub fn layout(root: &Path, scan: &Scan) -> Option<String> {
    let run_json = scan.files.contains_key(RUN_FILE) || root.join(RUN_FILE).symlink_metadata().is_ok();
    if run_json || !scan.files.contains_key(FILE) {
        return None;
    }
    #[derive(Deserialize)]
    struct Marker {
        format: String,
    }
    let format = read_json::<Marker>(root, FILE).ok()?.format;
    format.starts_with(FORMAT_PREFIX).then(|| format!("compare evidence layout ({FILE} {format}, no run.json)"))
}

/// One line of `parity.jsonl` (only what the verdict needs).
#[derive(Deserialize)]
struct Answer {
    prompt: u64,
    tokens: Vec<u32>,
    error: Option<String>,
}

/// One server start that ran the ladder: (phase, round, second, arm).
type Server = (Phase, u32, bool, String);

/// Label, raw directory and summary tag of a server start.
fn where_of((phase, round, second, arm): &Server) -> (String, String, String) {
    if *phase == Phase::Noise {
        let label = format!("{arm}.{}", if *second { "b" } else { "a" });
        (label.clone(), format!("{RAW_DIR}/noise{round}/{label}"), format!("noise{round}"))
    } else {
        (arm.clone(), crate::evidence::unit_path(*round, arm), format!("b{round}"))
    }
}

fn opt(v: Option<f64>) -> String {
    num(v)
}

fn same(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// The records of `rel`: from the scan when it parsed them, else read here.
fn records(root: &Path, scan: &Scan, rel: &str) -> Result<Vec<Rec>, String> {
    if let Some((_, e)) = scan.parse_errors.iter().find(|(p, _)| p == rel) {
        return Err(e.clone());
    }
    if let Some(r) = scan.requests.get(rel) {
        return Ok(r.clone());
    }
    if !scan.files.contains_key(rel) {
        return Err("missing".into());
    }
    let mut out = Vec::new();
    let parse = |_: usize, l: &[u8]| serde_json::from_slice::<Rec>(l).map(|r| out.push(r)).map_err(|e| e.to_string());
    match stream_lines(root, rel, parse) {
        Ok((_, None)) => Ok(out),
        Ok((_, Some(e))) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

fn answers(root: &Path, scan: &Scan, rel: &str) -> Result<Vec<Answer>, String> {
    if !scan.files.contains_key(rel) {
        return Err("missing".into());
    }
    let mut out = Vec::new();
    let parse =
        |_: usize, l: &[u8]| serde_json::from_slice::<Answer>(l).map(|a| out.push(a)).map_err(|e| e.to_string());
    match stream_lines(root, rel, parse) {
        Ok((_, None)) => Ok(out),
        Ok((_, Some(e))) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

/// First differing position of the compared tokens (or the shorter length).
fn first_difference(a: &[u32], b: &[u32], limit: Option<usize>) -> Option<usize> {
    let cut = |t: &[u32]| limit.map_or(t.len(), |n| n.min(t.len()));
    let (a, b) = (&a[..cut(a)], &b[..cut(b)]);
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// Recounts parity; returns the number of prompts compared.
fn parity(m: &mut Vec<Mismatch>, root: &Path, scan: &Scan, r: &CompareRecord) -> usize {
    let s = &r.spec;
    let rel = |arm: &str| format!("{RAW_DIR}/{PARITY_PHASE}/{arm}/{PARITY_FILE}");
    let (ref_rel, cand_rel) = (rel(&s.reference), rel(&s.candidate));
    let (refs, cands) = match (answers(root, scan, &ref_rel), answers(root, scan, &cand_rel)) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            for (f, e) in [(&ref_rel, a.err()), (&cand_rel, b.err())] {
                if let Some(e) = e {
                    m.push(Mismatch::new(f, "parity answers", e, "one answer per parity prompt"));
                }
            }
            return 0;
        }
    };
    let prefix = s.parity_prefix_tokens.map(|n| n as usize);
    // prompt -> first difference (None: an arm failed or did not answer).
    let (mut decisive, mut beyond) = (BTreeMap::new(), BTreeMap::new());
    for a in &refs {
        let c = cands.iter().find(|c| c.prompt == a.prompt);
        match c {
            Some(c) if a.error.is_none() && c.error.is_none() => {
                if let Some(d) = first_difference(&a.tokens, &c.tokens, prefix) {
                    decisive.insert(a.prompt, Some(d));
                } else if prefix.is_some()
                    && let Some(d) = first_difference(&a.tokens, &c.tokens, None)
                {
                    beyond.insert(a.prompt, Some(d));
                }
            }
            _ => {
                decisive.insert(a.prompt, None);
            }
        }
    }
    let pass = decisive.is_empty() && refs.len() == s.parity_prompts as usize;
    if r.parity.pass != pass {
        m.push(Mismatch::new(FILE, "parity.pass", r.parity.pass.to_string(), pass.to_string()));
    }
    let want = if pass { CompareStatus::Complete } else { CompareStatus::ParityFailed };
    if r.status != want {
        m.push(Mismatch::new(FILE, "status", r.status.name(), want.name()));
    }
    let text = |v: &BTreeMap<u64, Option<usize>>| {
        let parts: Vec<String> =
            v.iter().map(|(p, d)| format!("{p}@{}", d.map_or("failed".into(), |d| d.to_string()))).collect();
        format!("[{}]", parts.join(", "))
    };
    for (field, archived, mine) in [
        ("parity.mismatches (prompt@first difference)", &r.parity.mismatches, &decisive),
        ("parity.full_output_differences (prompt@first difference)", &r.parity.full_output_differences, &beyond),
    ] {
        let archived: BTreeMap<u64, Option<usize>> = archived.iter().map(|x| (x.prompt, x.first_difference)).collect();
        if archived != *mine {
            m.push(Mismatch::new(FILE, field, text(&archived), text(mine)));
        }
    }
    refs.len()
}

/// Compare's `unit.json` of `dir`.
fn unit_json(root: &Path, scan: &Scan, dir: &str) -> Result<Value, String> {
    let rel = format!("{dir}/{UNIT_FILE}");
    if !scan.files.contains_key(&rel) {
        return Err("missing".into());
    }
    read_json::<Value>(root, rel)
}

/// The server measures a `unit.json` gives: cold start (s) and peak RSS (MiB).
fn server_values(u: &Value) -> (Option<f64>, Option<f64>) {
    let ns = |k: &str| u.get(k).and_then(Value::as_u64);
    let cold = ns("healthy_ns").zip(ns("spawned_ns")).map(|(h, s)| h.saturating_sub(s) as f64 / 1e9);
    let rss = ns("peak_rss_bytes").map(|b| b as f64 / (1024.0 * 1024.0));
    (cold, rss)
}

/// The compare check.
pub fn check(root: &Path, scan: &Scan, plan: &Plan) -> Check {
    let mut m = Vec::new();
    let r: CompareRecord = match read_json(root, FILE) {
        Ok(r) => r,
        Err(e) => return Check::of(NAME, String::new(), vec![Mismatch::new(FILE, "parse", "malformed", e)]),
    };
    if r.format != crate::evidence::COMPARE_FORMAT {
        m.push(Mismatch::new(FILE, "format", &r.format, crate::evidence::COMPARE_FORMAT));
    }
    let prompts = parity(&mut m, root, scan, &r);
    let unit_status = check_units(&mut m, root, scan, &r);

    // Observations grouped by server start and key.
    let mut groups: Groups<'_> = BTreeMap::new();
    for o in &r.observations {
        let server = (o.phase, o.round, o.second, o.arm.clone());
        groups.entry((server, o.key.clone())).or_default().push(o);
    }
    let resolved = plan.resolved_cells().unwrap_or_default();
    let (mut cells, mut servers, mut values) = (0usize, 0usize, 0usize);
    let mut seen_files: BTreeSet<String> = BTreeSet::new();
    for ((server, key), obs) in &groups {
        let (label, dir, tag) = where_of(server);
        let at = format!("{}{} {label} {key}", server.0.name(), server.1);
        let mut by_measure: BTreeMap<Measure, &Obs> = BTreeMap::new();
        for o in obs {
            if by_measure.insert(o.measure, o).is_some() {
                m.push(Mismatch::new(FILE, format!("{at} {}", o.measure.name()), "observed twice", "once"));
            }
        }
        let wanted: &[Measure] = if key == "server" { &Measure::SERVER } else { &Measure::CELL };
        for w in wanted {
            if !by_measure.contains_key(w) {
                m.push(Mismatch::new(FILE, format!("{at} {}", w.name()), "absent", "observed"));
            }
        }
        for k in by_measure.keys().filter(|k| !wanted.contains(k)) {
            m.push(Mismatch::new(FILE, format!("{at} {}", k.name()), "present", "not a measure of this key"));
        }
        if key == "server" {
            servers += 1;
            values += check_server(&mut m, root, scan, &dir, &at, &by_measure);
        } else {
            cells += 1;
            let cell = CellAt { server, key, label: &label, dir: &dir, tag: &tag, at: &at };
            values += check_cell(&mut m, root, scan, &resolved, &cell, &by_measure, &mut seen_files);
        }
    }
    check_every_file_observed(&mut m, scan, &seen_files);
    if r.status == CompareStatus::Complete {
        check_every_planned_cell_observed(&mut m, &r, plan, &resolved, &groups, &unit_status);
    }
    let detail = format!(
        "{} ({}): parity recounted from {prompts} prompts; {cells} cells recomputed from raw records \
         (failed, total and output tok/s, TTFT and ITL p50/p99, record count; results/cells summaries x {} fields); \
         {servers} servers (cold start, peak RSS from unit.json); {values} observations compared; \
         rows (medians, ratios, noise band, verdicts) not recomputed",
        FILE,
        r.status.name(),
        FIELD_NAMES.len()
    );
    Check::of(NAME, detail, m)
}

/// compare.json's observations by server start and key.
type Groups<'a> = BTreeMap<(Server, String), Vec<&'a Obs>>;

/// Where one cell's observations belong.
struct CellAt<'a> {
    server: &'a Server,
    key: &'a str,
    label: &'a str,
    dir: &'a str,
    tag: &'a str,
    /// How mismatches name it.
    at: &'a str,
}

/// compare.json `units[]` against each server's unit.json, key by key; returns each
/// server directory's status.
fn check_units(
    m: &mut Vec<Mismatch>,
    root: &Path,
    scan: &Scan,
    r: &CompareRecord,
) -> BTreeMap<String, crate::evidence::UnitStatus> {
    let mut unit_status: BTreeMap<String, crate::evidence::UnitStatus> = BTreeMap::new();
    // As written (not through the typed record, which would drop an extra key and
    // fill an absent optional one), so that every differing key is named.
    #[derive(Deserialize)]
    struct WrittenUnits {
        units: Vec<Value>,
    }
    let written = read_json::<WrittenUnits>(root, FILE).map(|w| w.units).unwrap_or_default();
    for (i, (unit, u)) in r.units.iter().zip(&written).enumerate() {
        let dir = unit.dir.as_str();
        unit_status.insert(dir.to_string(), unit.status);
        match unit_json(root, scan, dir) {
            Err(e) => m.push(Mismatch::new(format!("{dir}/{UNIT_FILE}"), "file", e, format!("{FILE} units[{i}]"))),
            Ok(v) if v != *u => {
                let keys: BTreeSet<&String> =
                    u.as_object().into_iter().chain(v.as_object()).flat_map(|o| o.keys()).collect();
                for k in keys.into_iter().filter(|k| u.get(k.as_str()) != v.get(k.as_str())) {
                    let t = |x: Option<&Value>| x.map_or("absent".into(), Value::to_string);
                    let field = format!("units[{i}].{k} (against {dir}/unit.json)");
                    m.push(Mismatch::new(FILE, field, t(u.get(k.as_str())), t(v.get(k.as_str()))));
                }
            }
            Ok(_) => {}
        }
    }
    unit_status
}

/// A server's observations (cold start, peak RSS) against its unit.json; returns
/// how many values were compared.
fn check_server(
    m: &mut Vec<Mismatch>,
    root: &Path,
    scan: &Scan,
    dir: &str,
    at: &str,
    by_measure: &BTreeMap<Measure, &Obs>,
) -> usize {
    let mut values = 0;
    let (cold, rss) = match unit_json(root, scan, dir) {
        Ok(u) => server_values(&u),
        Err(e) => {
            m.push(Mismatch::new(format!("{dir}/{UNIT_FILE}"), "file", e, "the server record"));
            return 0;
        }
    };
    for (measure, mine) in [(Measure::ColdStartS, cold), (Measure::PeakRssMib, rss)] {
        let name = measure.name();
        if let Some(o) = by_measure.get(&measure) {
            values += 1;
            if !same(o.value, mine) || o.failed != 0 {
                let a = format!("{} (failed {})", opt(o.value), o.failed);
                m.push(Mismatch::new(FILE, format!("{at} {name}"), a, format!("{} (failed 0)", opt(mine))));
            }
        }
    }
    values
}

/// A cell's observations against its raw records, recomputed, and its stored
/// summary; returns how many values were compared.
fn check_cell(
    m: &mut Vec<Mismatch>,
    root: &Path,
    scan: &Scan,
    resolved: &[ResolvedCell],
    cell: &CellAt<'_>,
    by_measure: &BTreeMap<Measure, &Obs>,
    seen_files: &mut BTreeSet<String>,
) -> usize {
    let CellAt { server, key, label, dir, tag, at } = *cell;
    let mut values = 0;
    let rel = format!("{dir}/{}", requests_file(key));
    seen_files.insert(rel.clone());
    let recs = match records(root, scan, &rel) {
        Ok(v) => v,
        Err(e) => {
            m.push(Mismatch::new(&rel, "records", e, format!("the records of {FILE} {at}")));
            return 0;
        }
    };
    let strays = recs.iter().filter(|x| x.block != server.1 || x.arm != label || x.cell != key).count();
    if strays > 0 {
        let want = format!("block {}, arm {label}, cell {key}", server.1);
        m.push(Mismatch::new(&rel, "block/arm/cell", format!("{strays} records of another"), want));
    }
    if let Some(rc) = resolved.iter().find(|c| c.name == key) {
        if rc.count != recs.len() as u64 {
            let a = format!("{} planned (plan.toml)", rc.count);
            m.push(Mismatch::new(&rel, "requests", a, recs.len().to_string()));
        }
    } else {
        m.push(Mismatch::new(FILE, at, "observed", "not a cell of plan.toml"));
    }
    let mut failed_by_class = BTreeMap::new();
    for x in recs.iter().filter(|x| !x.valid()) {
        *failed_by_class.entry(x.failure_class().to_string()).or_insert(0u64) += 1;
    }
    let failed = recs.iter().filter(|x| !x.valid()).count() as u64;
    let c = CellMeasures {
        block: server.1,
        arm: label.to_string(),
        cell: key.to_string(),
        values: summarize(&recs, None),
        failed_by_class,
        failures: Vec::new(),
        turns: super::turn_rows::rows(&recs),
    };
    for (measure, o) in by_measure {
        let Some(field) = measure.summary_field() else { continue };
        let measure = measure.name();
        values += 1;
        if o.failed != failed {
            m.push(Mismatch::new(FILE, format!("{at} {measure} failed"), o.failed.to_string(), failed.to_string()));
        }
        let mine = c.float(field);
        if !same(o.value, mine) {
            m.push(Mismatch::new(FILE, format!("{at} {measure}"), opt(o.value), opt(mine)));
        }
    }
    let summary = summary_path(&format!("{tag}-{label}-{key}"));
    seen_files.insert(summary.clone());
    if !scan.files.contains_key(&summary) {
        m.push(Mismatch::new(&summary, "file", "missing", "a stored summary"));
    } else {
        match read_json::<Value>(root, &summary) {
            Ok(v) => compare_summary(m, &summary, "summary", &v, &c),
            Err(e) => m.push(Mismatch::new(&summary, "parse", "malformed", e)),
        }
    }
    values
}

/// Every request file and per-cell summary is observed.
fn check_every_file_observed(m: &mut Vec<Mismatch>, scan: &Scan, seen_files: &BTreeSet<String>) {
    for p in scan.files.keys() {
        let parts: Vec<&str> = p.split('/').collect();
        let cell_file = match parts.as_slice() {
            [RAW_DIR, phase, _, name] => *phase != PARITY_PHASE && name.ends_with(REQUESTS_SUFFIX),
            [RESULTS_DIR, CELLS_DIR, name] => name.ends_with(SUMMARY_SUFFIX),
            _ => false,
        };
        if cell_file && !seen_files.contains(p) {
            m.push(Mismatch::new(p, "file", "present", format!("no observation in {FILE}")));
        }
    }
}

/// With parity passed, every planned cell of every completed server is observed.
fn check_every_planned_cell_observed(
    m: &mut Vec<Mismatch>,
    r: &CompareRecord,
    plan: &Plan,
    resolved: &[ResolvedCell],
    groups: &Groups<'_>,
    unit_status: &BTreeMap<String, crate::evidence::UnitStatus>,
) {
    let closed: Vec<&str> =
        resolved.iter().filter(|c| matches!(c.load, ResolvedLoad::Closed { .. })).map(|c| c.name.as_str()).collect();
    let noise_arms: Vec<&str> = match r.spec.noise_arms {
        NoiseArms::Both => vec![&r.spec.reference, &r.spec.candidate],
        NoiseArms::Reference => vec![&r.spec.reference],
    };
    let mut expected: Vec<(Server, Vec<&str>)> = Vec::new();
    for round in 0..r.spec.noise_rounds {
        for second in [false, true] {
            for arm in &noise_arms {
                expected.push(((Phase::Noise, round, second, arm.to_string()), closed.clone()));
            }
        }
    }
    let schedule = plan.schedule();
    for b in &schedule.blocks {
        for arm in b.arms.iter().filter(|a| **a == r.spec.reference || **a == r.spec.candidate) {
            let cs: Vec<&str> = b.cells.iter().map(String::as_str).filter(|c| closed.contains(c)).collect();
            expected.push(((Phase::Round, b.index, false, arm.clone()), cs));
        }
    }
    for (server, cs) in expected {
        let (label, dir, _) = where_of(&server);
        let completed = unit_status.get(&dir).is_none_or(|s| *s == crate::evidence::UnitStatus::Completed);
        for key in std::iter::once("server").chain(cs.iter().copied().filter(|_| completed)) {
            if !groups.contains_key(&(server.clone(), key.to_string())) {
                let at = format!("{}{} {label} {key}", server.0.name(), server.1);
                m.push(Mismatch::new(FILE, at, "no observations", "planned (plan.toml, [compare])"));
            }
        }
    }
}

/// `harness compare` never moves anything aside: a `discarded/` there fails.
pub fn discarded_check(scan: &Scan, name: &str, why: &str) -> Check {
    let m: Vec<Mismatch> = scan
        .files
        .keys()
        .filter(|p| p.strip_prefix(DISCARDED_DIR).is_some_and(|r| r.starts_with('/')))
        .map(|p| Mismatch::new(p, "file", "present", "nothing discarded (harness compare does not resume)"))
        .collect();
    if m.is_empty() {
        return Check::skip(name, format!("{why}: nothing discarded"));
    }
    Check::of(name, format!("{why}: compare writes no discarded/"), m)
}
