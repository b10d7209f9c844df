//! The frozen plan and the inputs: `plan.toml` parsed through the plan layer (the
//! one parser of the format), its SHA-256 against every place that records it
//! (manifest, `run.json`, the catalog, `evidence.json`), and `inputs/` against
//! `inputs/catalog.json` (size, SHA-256, no unlisted file, trace lengths equal to
//! the plan's counts). Also reads the traces and prompt lengths that `complete`
//! checks records against. Must not regenerate traces or prompts.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::files::Scan;
use super::read::{read_doc, read_json, stream_lines};
use super::{Check, Mismatch};
use crate::evidence::{
    CATALOG_PATH, EVIDENCE_FILE, INPUTS_DIR, MANIFEST_FILE, Manifest, PLAN_FILE, PROMPTS_PATH, RUN_FILE, trace_path,
};
use crate::plan::{FrozenPlan, Plan, freeze};
use crate::trace::Catalog;

pub const PLAN_NAME: &str = "plan hash: plan.toml, manifest, run.json, catalog, evidence.json";
pub const CATALOG_NAME: &str = "inputs: traces and prompt panel against catalog.json";

/// Parses `plan.toml`; `Err` says why it is not a valid plan.
pub fn read_plan(root: &Path, _scan: &Scan) -> Result<FrozenPlan, String> {
    let bytes = read_doc(root, PLAN_FILE).map_err(|e| format!("{PLAN_FILE}: {e}"))?;
    let frozen = freeze(bytes).map_err(|e| format!("{PLAN_FILE}: {e}"))?;
    // A plan with [pilots]: the loads recorded in pilots/derived.json, which the
    // pilots check (`pilots`) recomputes from the pilots' raw records.
    crate::analysis::pilot::evidence_plan(root, frozen)
}

#[derive(Deserialize)]
struct PlanSha {
    plan_sha256: Option<String>,
}

/// Every recorded plan hash equals the SHA-256 of `plan.toml`.
pub fn plan_hash_check(root: &Path, manifest: &Manifest, plan: &Result<FrozenPlan, String>, scan: &Scan) -> Check {
    let mut m = Vec::new();
    let Some(actual) = scan.files.get(PLAN_FILE).map(|d| d.sha256.clone()) else {
        let why = scan.unreadable.iter().find(|(p, _)| p == PLAN_FILE).map_or("missing", |(_, w)| w.as_str());
        m.push(Mismatch::new(PLAN_FILE, "file", why, "the frozen plan"));
        return Check::of(PLAN_NAME, "no plan.toml".into(), m);
    };
    if let Err(why) = plan {
        m.push(Mismatch::new(PLAN_FILE, "plan", "not a valid plan", why.clone()));
    }
    if manifest.plan_sha256 != actual {
        m.push(Mismatch::new(MANIFEST_FILE, "plan_sha256", &manifest.plan_sha256, &actual));
    }
    if let Ok(p) = plan
        && manifest.study != p.plan.study.name
    {
        m.push(Mismatch::new(MANIFEST_FILE, "study", &manifest.study, &p.plan.study.name));
    }
    let mut seen = vec![MANIFEST_FILE];
    for rel in [RUN_FILE, CATALOG_PATH, EVIDENCE_FILE] {
        if root.join(rel).symlink_metadata().is_err() {
            continue;
        }
        match read_json::<PlanSha>(root, rel) {
            Ok(PlanSha { plan_sha256: Some(h) }) if h == actual => seen.push(rel),
            Ok(PlanSha { plan_sha256: Some(h) }) => m.push(Mismatch::new(rel, "plan_sha256", h, &actual)),
            Ok(PlanSha { plan_sha256: None }) => m.push(Mismatch::new(rel, "plan_sha256", "absent", &actual)),
            Err(e) => m.push(Mismatch::new(rel, "parse", "malformed", e)),
        }
    }
    Check::of(PLAN_NAME, format!("sha256 {actual}, recorded in {}", seen.join(", ")), m)
}

fn safe_relative(path: &str) -> bool {
    !path.is_empty() && Path::new(path).components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// `inputs/` against its catalog; with a plan, trace lengths against its counts.
pub fn catalog_check(root: &Path, scan: &Scan, plan: Option<&FrozenPlan>) -> Check {
    let mut m = Vec::new();
    let cat_rel = CATALOG_PATH;
    let catalog: Catalog = match read_json(root, cat_rel) {
        Ok(c) => c,
        Err(e) => {
            m.push(Mismatch::new(cat_rel, "parse", "malformed or missing", e));
            return Check::of(CATALOG_NAME, "no readable catalog".into(), m);
        }
    };
    for f in &catalog.files {
        if !safe_relative(&f.path) {
            m.push(Mismatch::new(cat_rel, "path", &f.path, "a relative path inside inputs/"));
            continue;
        }
        let rel = format!("{INPUTS_DIR}/{}", f.path);
        match scan.files.get(&rel) {
            None => m.push(Mismatch::new(&rel, "file", "listed in catalog.json", "missing")),
            Some(d) => {
                if d.bytes != f.bytes {
                    m.push(Mismatch::new(&rel, "bytes (catalog)", f.bytes.to_string(), d.bytes.to_string()));
                }
                if d.sha256 != f.sha256 {
                    m.push(Mismatch::new(&rel, "sha256 (catalog)", &f.sha256, &d.sha256));
                }
            }
        }
    }
    for rel in scan
        .files
        .keys()
        .filter(|p| p.strip_prefix(INPUTS_DIR).is_some_and(|r| r.starts_with('/')) && p.as_str() != cat_rel)
    {
        if !catalog.files.iter().any(|f| format!("{INPUTS_DIR}/{}", f.path) == *rel) {
            m.push(Mismatch::new(rel, "file", "not in catalog.json", "present"));
        }
    }
    if let Some(p) = plan {
        if catalog.study != p.plan.study.name {
            m.push(Mismatch::new(cat_rel, "study", &catalog.study, &p.plan.study.name));
        }
        if let Ok(cells) = p.plan.resolved_cells() {
            for c in &cells {
                match catalog.traces.iter().find(|t| t.cell == c.name) {
                    None => m.push(Mismatch::new(cat_rel, format!("traces[{}]", c.name), "absent", "a trace")),
                    Some(t) if t.requests != c.count => m.push(Mismatch::new(
                        cat_rel,
                        format!("traces[{}].requests", c.name),
                        t.requests.to_string(),
                        c.count.to_string(),
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    let detail = format!("{} files, {} traces", catalog.files.len(), catalog.traces.len());
    Check::of(CATALOG_NAME, detail, m)
}

/// One line of a trace file.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Entry {
    pub index: u64,
    pub offset_ns: u64,
    pub prompt: u64,
    /// A `trace_lengths` cell's row output length (the request's `max_tokens`).
    #[serde(default)]
    pub output_length: Option<u32>,
}

#[derive(Deserialize)]
struct PromptLine {
    index: u64,
    length: u32,
    tokens: Vec<u32>,
}

/// The trace of every plan cell (`Err`: why it cannot be read).
pub fn read_traces(root: &Path, plan: &Plan) -> HashMap<String, Result<Vec<Entry>, String>> {
    let mut out = HashMap::new();
    for c in &plan.cells {
        let rel = trace_path(&c.name);
        let mut entries = Vec::new();
        let r = stream_lines(root, &rel, |_, l| {
            let e: Entry = serde_json::from_slice(l).map_err(|e| e.to_string())?;
            entries.push(e);
            Ok(())
        });
        let v = match r {
            Ok((_, None)) => Ok(entries),
            Ok((_, Some(e))) => Err(format!("{rel}: {e}")),
            Err(e) => Err(format!("{rel}: {e}")),
        };
        out.insert(c.name.clone(), v);
    }
    out
}

/// The exact length of every panel prompt, by index; checks `length == tokens.len()`.
pub fn read_prompt_lengths(root: &Path) -> Result<Vec<u32>, String> {
    let rel = PROMPTS_PATH;
    let mut lengths = Vec::new();
    let r = stream_lines(root, rel, |_, l| {
        let p: PromptLine = serde_json::from_slice(l).map_err(|e| e.to_string())?;
        if p.index != lengths.len() as u64 {
            return Err(format!("index {} out of order", p.index));
        }
        if p.tokens.len() != p.length as usize {
            return Err(format!("prompt {}: length {} but {} tokens", p.index, p.length, p.tokens.len()));
        }
        lengths.push(p.length);
        Ok(())
    });
    match r {
        Ok((_, None)) => Ok(lengths),
        Ok((_, Some(e))) => Err(format!("{rel}: {e}")),
        Err(e) => Err(format!("{rel}: {e}")),
    }
}

#[derive(Deserialize)]
struct PromptOutput {
    index: u64,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    ignore_eos: Option<bool>,
}

/// The `max_tokens` every panel prompt's request asks for, by index: a dataset
/// panel's line states it (and its EOS flag), and both must be what the plan gives
/// the line's own output length; a fixed-length panel's line states neither and
/// sends the plan's `request.output_tokens`.
pub fn read_prompt_outputs(root: &Path, plan: &Plan) -> Result<Vec<u32>, String> {
    let rel = PROMPTS_PATH;
    let r = &plan.request;
    let dataset = plan.prompts.source.is_dataset();
    let mut out = Vec::new();
    let read = stream_lines(root, rel, |_, l| {
        let p: PromptOutput = serde_json::from_slice(l).map_err(|e| e.to_string())?;
        let want = r.max_tokens_for(p.output_tokens);
        match (dataset, p.max_tokens, p.ignore_eos) {
            (true, Some(m), Some(eos)) if m == want && eos == r.ignore_eos => out.push(m),
            (false, None, None) if p.output_tokens.is_none() => out.push(r.output_tokens),
            (true, ..) => {
                return Err(format!(
                    "prompt {}: max_tokens {:?} and ignore_eos {:?}, the plan gives {want} and {}",
                    p.index, p.max_tokens, p.ignore_eos, r.ignore_eos
                ));
            }
            (false, ..) => return Err(format!("prompt {}: dataset fields in a fixed-length panel", p.index)),
        }
        Ok(())
    });
    match read {
        Ok((_, None)) => Ok(out),
        Ok((_, Some(e))) => Err(format!("{rel}: {e}")),
        Err(e) => Err(format!("{rel}: {e}")),
    }
}

#[derive(Deserialize)]
struct PromptTurns {
    #[serde(default)]
    next_turns: Option<Vec<serde_json::Value>>,
}

/// Requests each panel entry sends: 1, or 1 + its later turns for a session.
pub fn read_prompt_turns(root: &Path) -> Result<Vec<u32>, String> {
    let rel = PROMPTS_PATH;
    let mut out = Vec::new();
    let read = stream_lines(root, rel, |_, l| {
        let p: PromptTurns = serde_json::from_slice(l).map_err(|e| e.to_string())?;
        out.push(1 + p.next_turns.map_or(0, |t| t.len() as u32));
        Ok(())
    });
    match read {
        Ok((_, None)) => Ok(out),
        Ok((_, Some(e))) => Err(format!("{rel}: {e}")),
        Err(e) => Err(format!("{rel}: {e}")),
    }
}
