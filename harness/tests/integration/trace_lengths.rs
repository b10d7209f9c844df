//! A trace-file cell with `trace_lengths = true` end to end: `harness run` on the
//! real engine (synthetic model) over real HTTP sends each trace row's output
//! length as that request's `max_tokens` and records each entry's body hash in
//! `run.json` `entry_body_sha256`. `harness replay` passes and prints the entry
//! bodies check; a changed recorded hash is named by its entry, and a changed
//! output length in the frozen trace changes the rebuilt body and is named by the
//! same entry (each behind a rewritten manifest). No timed assertions.

use crate::common;

use common::tamper::*;
use common::*;
use harness::commands::replay::{ReplayOutcome, Status, replay_dir};

const ENTRY_BODIES: &str = "entry bodies: run.json hashes rebuilt per trace entry of trace_lengths cells";

/// Six rows, each its own output length (none the plan's `output_tokens`, 6).
const ROWS: &str = "{\"timestamp\": 0, \"input_length\": 12, \"output_length\": 3}\n\
    {\"timestamp\": 20, \"input_length\": 40, \"output_length\": 5}\n\
    {\"timestamp\": 40, \"input_length\": 9, \"output_length\": 2}\n\
    {\"timestamp\": 60, \"input_length\": 30, \"output_length\": 4}\n\
    {\"timestamp\": 80, \"input_length\": 16, \"output_length\": 7}\n\
    {\"timestamp\": 100, \"input_length\": 20, \"output_length\": 1}\n";

fn entry_check(o: &ReplayOutcome) -> &harness::commands::replay::Check {
    o.check(ENTRY_BODIES).unwrap_or_else(|| panic!("no entry bodies check:\n{}", o.render_table(10)))
}

#[test]
fn trace_lengths_bodies_replay_and_a_changed_entry_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let trace = tmp.path().join("rows.jsonl");
    std::fs::write(&trace, ROWS).expect("write trace");
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { blocks: 1, ..TestPlan::new("trace-lengths", 3) };
    let text = plan
        .arm("f16", "control", &argv)
        .tail(&format!(
            "[[cells]]\nname = \"tr\"\nkind = \"confirmation\"\nload = \"trace\"\ntrace = {:?}\n\
             count = 6\ntrace_lengths = true\n",
            trace.display().to_string()
        ))
        .render();
    let (out, _) = run_study_ok(tmp.path(), &text);

    // One recorded hash per entry; each request asked for its row's output length.
    let run = read_json(&out.join("run.json"));
    let hashes: Vec<String> = serde_json::from_value(run["entry_body_sha256"]["tr"].clone()).expect("hashes");
    assert_eq!(hashes.len(), 6, "{run}");
    let mut records = read_records(&out.join("raw/b0/f16/tr.requests.jsonl"));
    records.sort_by_key(|r| r.index);
    let intended: Vec<u32> = records.iter().map(|r| r.output_tokens_intended).collect();
    assert_eq!(intended, [3, 5, 2, 4, 7, 1]);

    // Replay: clean (records ask for their rows' output lengths); the entry bodies
    // check passes, and `harness replay` prints it.
    let o = replay_dir(&out).expect("replay");
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let c = entry_check(&o);
    assert_eq!((c.status, c.detail.as_str()), (Status::Pass, "6 entry bodies of tr"), "{}", o.render_table(10));
    let cli = std::process::Command::new(harness_bin()).arg("replay").arg(&out).output().expect("harness replay");
    let table = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{table}");
    assert!(table.lines().any(|l| l.starts_with("pass") && l.contains(ENTRY_BODIES)), "{table}");

    // A changed recorded hash is named by its entry.
    let dir = tmp.path().join("hash-changed");
    copy_dir(&out, &dir);
    let forged = "0".repeat(64);
    let mut v = read_json(&dir.join("run.json"));
    v["entry_body_sha256"]["tr"][3] = forged.clone().into();
    std::fs::write(dir.join("run.json"), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).expect("replay");
    let c = entry_check(&o);
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
    let named: Vec<_> =
        c.mismatches.iter().map(|m| (m.field.as_str(), m.archived.as_str(), m.recomputed.as_str())).collect();
    assert_eq!(named, [("entry_body_sha256.tr[3]", forged.as_str(), hashes[3].as_str())]);

    // A changed output length in the frozen trace changes entry 3's rebuilt body.
    let dir = tmp.path().join("length-changed");
    copy_dir(&out, &dir);
    edit_lines(&dir, "inputs/traces/tr.trace.jsonl", |lines| {
        assert!(lines[3].contains("\"output_length\":4"), "{}", lines[3]);
        lines[3] = lines[3].replace("\"output_length\":4", "\"output_length\":40");
    });
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).expect("replay");
    let c = entry_check(&o);
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(10));
    let fields: Vec<&str> = c.mismatches.iter().map(|m| m.field.as_str()).collect();
    assert_eq!(fields, ["entry_body_sha256.tr[3]"]);
    assert_eq!(c.mismatches[0].archived, hashes[3]);
    assert_ne!(c.mismatches[0].recomputed, hashes[3]);
}
