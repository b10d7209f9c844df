//! The request bodies `run.json` records (`request_body_sha256`): for each kind of
//! body the cells send (`Plan::body_kinds`: the cell's endpoint and whether it asks
//! for token IDs, keyed `completions`, `chat`, `completions-no-token-ids`, ...),
//! every panel entry's body rebuilt from the frozen plan and
//! `inputs/prompts.jsonl` through `load::stream_body` (the one body format, as
//! `turns` rebuilds session turns through `load::SessionScript`) and its SHA-256
//! compared with `request_body_sha256.<key>[i]`; a mismatch names the entry and
//! the cells that send that body. A kind no cell sends must not be listed.
//! Evidence written before cells chose their endpoint holds one array, the study
//! endpoint's. Reads only the evidence directory; never writes.

use std::collections::BTreeMap;
use std::path::Path;

use super::read::{read_json, stream_lines};
use super::{Check, Mismatch};
use crate::evidence::{RunRecord, sha256_hex};
use crate::load::stream_body;
use crate::plan::{BodyKind, Plan};
use crate::trace::Prompt;

pub const NAME: &str = "request bodies: run.json hashes rebuilt from the frozen panel, per cell endpoint";

const RUN: &str = crate::evidence::RUN_FILE;
const PANEL: &str = crate::evidence::PROMPTS_PATH;

/// `run.json`'s body hashes by endpoint name (an older array: the study endpoint's).
fn recorded(root: &Path, plan: &Plan) -> Result<BTreeMap<String, Vec<String>>, String> {
    let run: RunRecord = read_json(root, RUN)?;
    Ok(run.request_body_sha256.by_kind(plan.request.endpoint.as_str()))
}

/// Every panel entry's body on each endpoint in use, against `run.json`.
pub fn check(root: &Path, plan: &Plan) -> Check {
    let mut m = Vec::new();
    let recorded = match recorded(root, plan) {
        Ok(r) => r,
        Err(e) => {
            m.push(Mismatch::new(RUN, "request_body_sha256", "unreadable", e));
            return Check::of(NAME, "no readable body hashes".into(), m);
        }
    };
    let kinds = plan.body_kinds();
    let mut rebuilt: BTreeMap<BodyKind, Vec<String>> = kinds.iter().map(|&k| (k, Vec::new())).collect();
    let read = stream_lines(root, PANEL, |_, l| {
        let p: Prompt = serde_json::from_slice(l).map_err(|e| e.to_string())?;
        for (&k, hashes) in rebuilt.iter_mut() {
            hashes.push(sha256_hex(&stream_body(plan, k, &p)));
        }
        Ok(())
    });
    match read {
        Ok((_, None)) => {}
        Ok((_, Some(e))) => {
            m.push(Mismatch::new(PANEL, "parse", "malformed", e));
            return Check::of(NAME, "no readable panel".into(), m);
        }
        Err(e) => {
            m.push(Mismatch::new(PANEL, "read", "unreadable", e.to_string()));
            return Check::of(NAME, "no readable panel".into(), m);
        }
    }
    for name in recorded.keys() {
        if !kinds.iter().any(|k| &k.key() == name) {
            m.push(Mismatch::new(RUN, format!("request_body_sha256.{name}"), "listed", "no cell sends such a body"));
        }
    }
    let mut bodies = 0usize;
    for (k, want) in &rebuilt {
        let cells: Vec<&str> =
            plan.cells.iter().filter(|c| plan.body_kind_of(&c.name) == *k).map(|c| c.name.as_str()).collect();
        let key = format!("request_body_sha256.{}", k.key());
        let Some(have) = recorded.get(&k.key()) else {
            m.push(Mismatch::new(RUN, key, "absent", format!("{} bodies sent by {}", want.len(), cells.join(", "))));
            continue;
        };
        if have.len() != want.len() {
            m.push(Mismatch::new(RUN, &key, format!("{} hashes", have.len()), format!("{} panel entries", want.len())));
        }
        for (i, (h, w)) in have.iter().zip(want).enumerate() {
            if h != w {
                let field = format!("{key}[{i}] (cells {})", cells.join(", "));
                m.push(Mismatch::new(RUN, field, h, w));
            }
        }
        bodies += want.len();
    }
    let names: Vec<String> = kinds.iter().map(|k| k.key()).collect();
    Check::of(NAME, format!("{bodies} bodies on {}", names.join(" and ")), m)
}
