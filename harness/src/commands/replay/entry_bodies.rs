//! The per-entry request bodies `run.json` records (`entry_body_sha256`) for every
//! cell whose trace sets each request's output length (`load = "trace"` with
//! `trace_lengths = true` in the frozen plan): entry i of the cell's frozen trace
//! (`inputs/traces/<cell>.trace.jsonl`, as `complete` reads it) is rebuilt with its
//! panel prompt (`inputs/prompts.jsonl`) and its row's `output_length` as
//! `max_tokens` through `load::stream_body_with` (the one body format; an entry
//! without an output length sends its prompt's own body, `load::stream_body`, as
//! the run does), and its SHA-256 compared with `entry_body_sha256.<cell>[i]`. A
//! mismatch names that entry; also named: a trace_lengths cell without hashes, a
//! hash count other than the trace's entry count, and a listed cell that is not a
//! trace_lengths cell. Evidence written before the key existed (`run.json` without
//! any `entry_body_sha256`) skips the check, as `units` and `requests` skip what
//! predates them: nothing recorded its per-entry bodies, and its trace rows are
//! still checked by `inputs` (catalog hashes) and `loads` (rows recomputed from the
//! copied trace file). Reads only the evidence directory; never writes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::inputs::Entry;
use super::read::{read_json, stream_lines};
use super::{Check, Mismatch};
use crate::evidence::{RunRecord, sha256_hex};
use crate::load::{stream_body, stream_body_with};
use crate::plan::{Load, Plan};
use crate::trace::Prompt;

pub const NAME: &str = "entry bodies: run.json hashes rebuilt per trace entry of trace_lengths cells";

const RUN: &str = crate::evidence::RUN_FILE;
const PANEL: &str = crate::evidence::PROMPTS_PATH;
const KEY: &str = "entry_body_sha256";

/// `run.json`'s per-entry body hashes by cell; `None` when the key is absent.
fn recorded(root: &Path) -> Result<Option<BTreeMap<String, Vec<String>>>, String> {
    let run: RunRecord = read_json(root, RUN)?;
    Ok(run.entry_body_sha256)
}

/// Every panel prompt, in panel order.
fn panel(root: &Path) -> Result<Vec<Prompt>, String> {
    let mut prompts = Vec::new();
    let read = stream_lines(root, PANEL, |_, l| {
        prompts.push(serde_json::from_slice(l).map_err(|e| e.to_string())?);
        Ok(())
    });
    match read {
        Ok((_, None)) => Ok(prompts),
        Ok((_, Some(e))) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

/// The SHA-256 of each entry's body, in trace order (`Err`: the entry's prompt is
/// not in the panel).
fn rebuild(plan: &Plan, cell: &str, entries: &[Entry], prompts: &[Prompt]) -> Vec<Result<String, String>> {
    let kind = plan.body_kind_of(cell);
    let body = |e: &Entry| {
        let p = usize::try_from(e.prompt).ok().and_then(|i| prompts.get(i)).ok_or_else(|| {
            format!("no body: trace entry {} names prompt {}, the panel holds {}", e.index, e.prompt, prompts.len())
        })?;
        Ok(sha256_hex(&match e.output_length {
            Some(n) => stream_body_with(plan, kind, p, n),
            None => stream_body(plan, kind, p),
        }))
    };
    entries.iter().map(body).collect()
}

/// Every trace_lengths cell's per-entry bodies against `run.json`.
pub fn check(root: &Path, plan: &Plan, traces: &HashMap<String, Result<Vec<Entry>, String>>) -> Check {
    let cells: Vec<&str> = plan
        .cells
        .iter()
        .filter(|c| matches!(c.load, Load::Trace { lengths: true, .. }))
        .map(|c| c.name.as_str())
        .collect();
    let mut m = Vec::new();
    let recorded = match recorded(root) {
        Ok(Some(r)) => r,
        Ok(None) if cells.is_empty() => {
            return Check::skip(NAME, "no trace_lengths cell: every request sends its panel prompt's body");
        }
        Ok(None) => {
            return Check::skip(
                NAME,
                format!(
                    "run.json has no {KEY} (written before per-entry body hashes): the bodies of {} are unrecorded; \
                     their trace rows are checked by inputs and loads",
                    cells.join(", ")
                ),
            );
        }
        Err(e) => {
            m.push(Mismatch::new(RUN, KEY, "unreadable", e));
            return Check::of(NAME, "no readable entry body hashes".into(), m);
        }
    };
    for name in recorded.keys().filter(|n| !cells.contains(&n.as_str())) {
        m.push(Mismatch::new(RUN, format!("{KEY}.{name}"), "listed", "not a trace_lengths cell of the plan"));
    }
    if cells.is_empty() {
        return Check::of(NAME, "no trace_lengths cell".into(), m);
    }
    let prompts = match panel(root) {
        Ok(p) => p,
        Err(e) => {
            m.push(Mismatch::new(PANEL, "parse", "unreadable", e));
            return Check::of(NAME, "no readable panel".into(), m);
        }
    };
    let mut bodies = 0usize;
    for &cell in &cells {
        let key = format!("{KEY}.{cell}");
        let trace = crate::evidence::trace_path(cell);
        let entries = match traces.get(cell) {
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                m.push(Mismatch::new(trace, "parse", "unreadable", e.clone()));
                continue;
            }
            None => {
                m.push(Mismatch::new(trace, "file", "not read", "the cell's trace"));
                continue;
            }
        };
        let Some(have) = recorded.get(cell) else {
            if !entries.is_empty() {
                m.push(Mismatch::new(RUN, key, "absent", format!("{} entry bodies of {trace}", entries.len())));
            }
            continue;
        };
        if have.len() != entries.len() {
            m.push(Mismatch::new(
                RUN,
                &key,
                format!("{} hashes", have.len()),
                format!("{} trace entries", entries.len()),
            ));
        }
        for (i, (h, w)) in have.iter().zip(rebuild(plan, cell, entries, &prompts)).enumerate() {
            match w {
                Ok(w) if *h == w => {}
                Ok(w) | Err(w) => m.push(Mismatch::new(RUN, format!("{key}[{i}]"), h, w)),
            }
        }
        bodies += entries.len();
    }
    Check::of(NAME, format!("{bodies} entry bodies of {}", cells.join(", ")), m)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::Value;

    use super::*;
    use crate::commands::replay::Status;
    use crate::commands::replay::inputs::read_traces;

    /// A trace_lengths cell `tr` of five rows (each its own output length) beside a
    /// constant cell `c`.
    const PLAN: &str = "[study]\nname = \"t\"\nseed = 1\n[request]\nmodel = \"m\"\noutput_tokens = 4\n\
         [prompts]\nsource = \"random\"\nlengths = [8, 16]\ndocuments = 2\nmin_token_id = 0\nmax_token_id = 9\n\
         [warmup]\nprompts = 0\n[timing]\nsettle_s = 0\nrequest_timeout_s = 5\ndrain_timeout_s = 5\n\
         [blocks]\ncount = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\
         [[arms]]\nname = \"a\"\nrole = \"control\"\nargv = [\"srv\", \"{port}\"]\nport = 9000\n\
         [[cells]]\nname = \"tr\"\nkind = \"confirmation\"\nload = \"trace\"\ntrace = \"arr.jsonl\"\n\
         count = 5\ntrace_lengths = true\n\
         [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 1\ncount = 2\ninput_tokens = 8\n";

    const ROWS: &str = "{\"timestamp\": 0, \"input_length\": 7, \"output_length\": 5}\n\
         {\"timestamp\": 9, \"input_length\": 30, \"output_length\": 2}\n\
         {\"timestamp\": 10, \"input_length\": 9, \"output_length\": 7}\n\
         {\"timestamp\": 12, \"input_length\": 15, \"output_length\": 3}\n\
         {\"timestamp\": 20, \"input_length\": 4, \"output_length\": 6}\n";

    /// An evidence directory's inputs and `run.json` hashes, both written by the run's
    /// own code (`inputs::prepare`); returns the directory and the plan.
    fn evidence(tmp: &Path, plan_text: &str) -> (PathBuf, Plan) {
        std::fs::write(tmp.join("arr.jsonl"), ROWS).unwrap();
        let plan = crate::plan::parse(plan_text).unwrap();
        let root = tmp.join("ev");
        let inputs = crate::inputs::prepare(&plan, "abc", tmp, &root.join("inputs")).unwrap();
        let git = crate::evidence::GitInfo { revision: "t".into(), dirty: None };
        let run = RunRecord {
            entry_body_sha256: Some(inputs.entry_body_sha256).filter(|m| !m.is_empty()),
            ..RunRecord::new("t", "abc", git)
        };
        run.write(&root).unwrap();
        (root, plan)
    }

    fn replay(root: &Path, plan: &Plan) -> Check {
        check(root, plan, &read_traces(root, plan))
    }

    fn edit_run(root: &Path, f: impl FnOnce(&mut Value)) {
        let mut v: Value = serde_json::from_slice(&std::fs::read(root.join(RUN)).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(root.join(RUN), serde_json::to_vec(&v).unwrap()).unwrap();
    }

    fn hashes(root: &Path) -> Vec<String> {
        let v: Value = serde_json::from_slice(&std::fs::read(root.join(RUN)).unwrap()).unwrap();
        serde_json::from_value(v[KEY]["tr"].clone()).unwrap()
    }

    fn fields(c: &Check) -> Vec<&str> {
        c.mismatches.iter().map(|m| m.field.as_str()).collect()
    }

    #[test]
    fn untampered_entry_bodies_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, plan) = evidence(tmp.path(), PLAN);
        assert_eq!(hashes(&root).len(), 5);
        let c = replay(&root, &plan);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert_eq!(c.detail, "5 entry bodies of tr");
    }

    #[test]
    fn a_changed_entry_hash_is_named_by_its_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, plan) = evidence(tmp.path(), PLAN);
        let was = hashes(&root)[3].clone();
        let forged = "0".repeat(64);
        edit_run(&root, |v| v[KEY]["tr"][3] = forged.clone().into());
        let c = replay(&root, &plan);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.mismatches, [Mismatch::new(RUN, "entry_body_sha256.tr[3]", forged, was)]);
    }

    #[test]
    fn a_changed_trace_output_length_changes_the_rebuilt_body() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, plan) = evidence(tmp.path(), PLAN);
        let rel = root.join("inputs/traces/tr.trace.jsonl");
        let text = std::fs::read_to_string(&rel).unwrap();
        assert!(text.lines().nth(3).unwrap().contains("\"output_length\":3"), "{text}");
        let lines: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, l)| if i == 3 { l.replace("\"output_length\":3", "\"output_length\":30") } else { l.into() })
            .collect();
        std::fs::write(&rel, lines.join("\n") + "\n").unwrap();
        let c = replay(&root, &plan);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(fields(&c), ["entry_body_sha256.tr[3]"]);
        let m = &c.mismatches[0];
        assert_eq!(m.archived, hashes(&root)[3]);
        // The body entry 3 would send now: its prompt with max_tokens 30.
        let prompts = panel(&root).unwrap();
        let entry = read_traces(&root, &plan)["tr"].as_ref().unwrap()[3];
        let body = stream_body_with(&plan, plan.body_kind_of("tr"), &prompts[entry.prompt as usize], 30);
        assert_eq!(m.recomputed, sha256_hex(&body));
    }

    #[test]
    fn a_missing_cell_a_short_list_and_a_listed_other_cell_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, plan) = evidence(tmp.path(), PLAN);
        let all = hashes(&root);
        edit_run(&root, |v| v[KEY] = serde_json::json!({"c": ["ab"]}));
        let c = replay(&root, &plan);
        assert_eq!(fields(&c), ["entry_body_sha256.c", "entry_body_sha256.tr"]);
        assert_eq!(
            (c.mismatches[1].archived.as_str(), c.mismatches[0].recomputed.as_str()),
            ("absent", "not a trace_lengths cell of the plan")
        );
        edit_run(&root, |v| v[KEY] = serde_json::json!({"tr": &all[..4]}));
        let c = replay(&root, &plan);
        assert_eq!(c.mismatches, [Mismatch::new(RUN, "entry_body_sha256.tr", "4 hashes", "5 trace entries")]);
    }

    /// Evidence written before `entry_body_sha256` existed skips the check (and so
    /// does a plan without trace_lengths cells); a malformed key fails it.
    #[test]
    fn evidence_before_the_key_skips_and_a_malformed_key_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, plan) = evidence(tmp.path(), PLAN);
        edit_run(&root, |v| {
            v.as_object_mut().unwrap().remove(KEY);
        });
        let c = replay(&root, &plan);
        assert_eq!(c.status, Status::Skip);
        assert!(c.detail.contains("written before per-entry body hashes") && c.detail.contains("tr"), "{}", c.detail);
        edit_run(&root, |v| v[KEY] = serde_json::json!(["ab"]));
        assert_eq!(fields(&replay(&root, &plan)), [KEY]);

        let tmp = tempfile::tempdir().unwrap();
        let (root, plan) = evidence(tmp.path(), &PLAN.replace("trace_lengths = true", "input_tokens = 8"));
        let c = replay(&root, &plan);
        assert_eq!(
            (c.status, c.detail.as_str()),
            (Status::Skip, "no trace_lengths cell: every request sends its panel prompt's body")
        );
    }
}
