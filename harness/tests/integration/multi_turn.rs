//! Multi-turn sessions end to end: `harness run` on the real engine (synthetic model,
//! whose tokenizer carries a ChatML template) with `prompts.max_turns` over a
//! ShareGPT-format file on the chat endpoint: a closed cell of 2 session slots and a
//! constant-rate cell. Checks that the panel freezes every session's user turns and
//! max_tokens, that each later turn carried the earlier turns' actual replies in its
//! history (its recorded body hash is the body rebuilt from the panel and the
//! recorded replies, and the server counted the history as prompt tokens), that a
//! later turn is due when the turn before it ended, that the cell summary has one
//! row per turn index, that report.md and report.html show those rows per cell, that
//! replay passes, and that a changed stored per-turn row, one changed byte of a
//! recorded reply and of a frozen user turn are each named. No timed assertions.

use crate::common;

use common::tamper::*;
use common::*;
use harness::commands::replay::{Status, replay_dir};
use harness::evidence::request_record::RequestRecord;
use harness::load::SessionScript;
use harness::trace::Panel;

const TURNS: &str = "session turns: bodies rebuilt from the frozen turns and the recorded replies";
const CATALOG: &str = "inputs: traces and prompt panel against catalog.json";
const SUMMARIES: &str = "cell measures: summaries.json and results/cells/*.summary.json";

/// Conversation i: 3 + (i % 2) human/gpt pairs (then a lone human turn, which ends
/// it); human turn t has 10 + t bytes, the answer to it 5 + 2t bytes (byte tokens).
fn dialogue(dir: &std::path::Path) -> std::path::PathBuf {
    let convs: Vec<String> = (0..4)
        .map(|i| {
            let mut turns = Vec::new();
            for t in 0..3 + i % 2 {
                turns.push(format!(r#"{{"from": "human", "value": "{}{}"}}"#, "h".repeat(9 + t), i));
                turns.push(format!(r#"{{"from": "gpt", "value": "{}"}}"#, "g".repeat(5 + 2 * t)));
            }
            turns.push(r#"{"from": "human", "value": "unanswered question"}"#.to_string());
            format!(r#"{{"id": "s{i}", "conversations": [{}]}}"#, turns.join(", "))
        })
        .collect();
    let path = dir.join("dialogue.json");
    std::fs::write(&path, format!("[{}]\n", convs.join(",\n"))).expect("write dataset");
    path
}

fn by_session(records: &[RequestRecord]) -> std::collections::BTreeMap<u64, Vec<&RequestRecord>> {
    let mut out: std::collections::BTreeMap<u64, Vec<&RequestRecord>> = Default::default();
    for r in records {
        out.entry(r.turn.as_ref().expect("every record is a turn").session).or_default().push(r);
    }
    out
}

#[test]
fn sessions_carry_their_replies_and_replay_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let data = dialogue(tmp.path());
    let tokenizer = model.join("tokenizer.json");
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { blocks: 1, warmup_prompts: 2, ..TestPlan::new("multi-turn-test", 5) };
    let fixed = plan
        .arm("f16", "control", &argv)
        .closed("closed-2", "confirmation", 2, 4)
        .tail("[[cells]]\nname = \"constant\"\nkind = \"confirmation\"\nload = \"constant\"\nrate = 4\ncount = 3\n")
        .render();
    let old = "output_tokens = 6\n\n[prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\n\
               lengths = [16]\ndocuments = 2\n";
    assert!(fixed.contains(old), "{fixed}");
    let new = format!(
        "output = \"natural\"\nmax_output_tokens = 8\nendpoint = \"chat\"\n\n[prompts]\nsource = \"sharegpt\"\n\
         path = {:?}\ntokenizer = {:?}\nnum_requests = 4\nmax_turns = 3\n",
        data.display().to_string(),
        tokenizer.display().to_string()
    );
    let (out, _) = run_study_ok(tmp.path(), &fixed.replace(old, &new));

    // The panel: 4 sessions of 3 turns (max_turns caps the 4-pair ones), every turn's
    // text and max_tokens frozen.
    let panel = Panel::from_jsonl(&std::fs::read_to_string(out.join("inputs/prompts.jsonl")).unwrap()).unwrap();
    assert_eq!(panel.prompts.len(), 4);
    for p in &panel.prompts {
        let next = p.next_turns.as_ref().expect("a session");
        assert_eq!(next.len(), 2, "{p:?}");
        for (t, turn) in next.iter().enumerate() {
            let t = t + 1;
            assert_eq!((turn.length as usize, turn.output_tokens), (10 + t, Some(5 + 2 * t as u32)));
            assert_eq!(turn.max_tokens, Some((5 + 2 * t as u32).min(8)));
        }
    }

    // A session study warms the chat route with each warmup session's first turn.
    let warm = read_json(&out.join("raw/b0/f16/warmup.json"));
    assert_eq!(
        (warm["endpoint"].as_str(), warm["calls"].as_u64(), warm["ok"].as_bool()),
        (Some("chat"), Some(2), Some(true))
    );

    let plan = harness::plan::parse(&std::fs::read_to_string(out.join("plan.toml")).unwrap()).unwrap();
    for (cell, sessions) in [("closed-2", 4), ("constant", 3)] {
        let records = read_records(&out.join(format!("raw/b0/f16/{cell}.requests.jsonl")));
        assert_eq!(records.len(), sessions * 3, "{cell}: every turn of every session");
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.index, i as u64, "turns numbered across the cell");
            assert!(r.is_valid(), "{r:?}");
        }
        for (s, turns) in by_session(&records) {
            let prompt = &panel.prompts[turns[0].prompt as usize];
            let script = SessionScript::new(&plan, prompt).expect("a session script");
            let mut replies: Vec<&str> = Vec::new();
            for (k, r) in turns.iter().enumerate() {
                let t = r.turn.as_ref().unwrap();
                assert_eq!((t.session, t.turn as usize), (s, k));
                let body = script.body(k as u32, &replies).unwrap();
                assert_eq!(t.body_sha256.as_deref(), Some(harness::evidence::sha256_hex(&body).as_str()));
                let text = String::from_utf8(body).unwrap();
                for reply in &replies {
                    assert!(
                        text.contains(&format!(r#"{{"role":"assistant","content":{}}}"#, serde_json::json!(reply)))
                    );
                }
                if k > 0 {
                    let prev = turns[k - 1];
                    assert_eq!(Some(r.intended_ns), prev.done_ns, "turn {k} is due when turn {} ended", k - 1);
                    assert!(r.send_ns.unwrap() >= prev.done_ns.unwrap());
                    let (now, before) = (r.usage.unwrap().prompt_tokens, prev.usage.unwrap().prompt_tokens);
                    // The server's prompt holds the earlier turns: at least this turn's
                    // 10 + k user bytes more than the turn before.
                    assert!(now >= before + 10 + k as u32, "the history was sent: {now} vs {before}");
                }
                replies.push(t.reply.as_deref().unwrap_or(""));
            }
        }
        let summary = read_json(&out.join(format!("results/cells/b0-f16-{cell}.summary.json")));
        let turns = summary["turns"].as_array().expect("per-turn rows");
        assert_eq!(turns.len(), 3, "{summary}");
        for (k, row) in turns.iter().enumerate() {
            assert_eq!((row["turn"].as_u64(), row["requests"].as_u64()), (Some(k as u64), Some(sessions as u64)));
            assert_eq!(row["failed"].as_u64(), Some(0));
            assert!(row["ttft_p50_ms"].is_number(), "{row}");
        }
    }

    // Replay passes, including the rebuilt bodies.
    let o = replay_dir(&out).expect("replay");
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let turns = o.check(TURNS).expect("the session check");
    assert_eq!(turns.status, Status::Pass);
    assert!(turns.detail.contains("7 sessions, 21 turn bodies rebuilt"), "{}", turns.detail);

    // report.md (and report.html, rendered from it) shows each session cell's per-turn
    // table, and the report's own summary check accepts the stored `turns` rows.
    let report = std::fs::read_to_string(out.join("results/report.md")).unwrap();
    assert!(report.contains("All 2 stored per-cell summaries equal"), "{report}");
    assert!(!report.contains("WARNING"), "{report}");
    let html = std::fs::read_to_string(out.join("results/report.html")).unwrap();
    for cell in ["closed-2", "constant"] {
        let section = &report[report.find(&format!("### {cell} (")).expect("the cell's section")..];
        let section = &section[..section[4..].find("\n### ").map_or(section.len(), |e| e + 4)];
        assert!(section.contains("Per turn of the multi-turn sessions"), "{section}");
        let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| 0 | f16 | ")).collect();
        assert_eq!(rows.len(), 3, "one row per turn index: {section}");
        for (k, row) in rows.iter().enumerate() {
            let sessions = if cell == "closed-2" { 4 } else { 3 };
            assert!(row.starts_with(&format!("| 0 | f16 | {k} | {sessions} | {sessions} | 0 | ")), "{row}");
        }
    }
    assert!(html.contains("<th>TTFT p99</th>") && html.contains("<th>input tokens p50</th>"), "{html}");
    assert_eq!(html.matches("<tr><td>0</td><td>f16</td>").count(), 6, "the per-turn rows in report.html");

    // A changed per-turn row of a stored summary (manifest re-sealed): replay's own
    // recomputation of the rows names it.
    let bad = tmp.path().join("turn-row");
    copy_dir(&out, &bad);
    let rel = "results/cells/b0-f16-closed-2.summary.json";
    let mut summary = read_json(&bad.join(rel));
    let was = summary["turns"][1]["ttft_p50_ms"].as_f64().unwrap();
    summary["turns"][1]["ttft_p50_ms"] = (was + 1.0).into();
    std::fs::write(bad.join(rel), serde_json::to_vec_pretty(&summary).unwrap()).unwrap();
    rewrite_manifest(&bad);
    let o = replay_dir(&bad).expect("replay");
    let check = o.check(SUMMARIES).expect("the summaries check");
    assert_eq!(check.status, Status::Fail, "{}", o.render_table(10));
    assert!(
        check.mismatches.iter().any(|m| m.file == rel && m.field == "summary turns[1] ttft_p50_ms"),
        "{}",
        o.render_table(10)
    );

    // One changed byte of a recorded reply: the next turn's rebuilt body is named.
    let bad = tmp.path().join("reply");
    copy_dir(&out, &bad);
    let rel = "raw/b0/f16/closed-2.requests.jsonl";
    let mut changed = None;
    edit_lines(&bad, rel, |lines| {
        for line in lines.iter_mut() {
            let mut r: RequestRecord = serde_json::from_str(line).unwrap();
            let t = r.turn.as_mut().unwrap();
            if let (0, Some(reply)) = (t.turn, t.reply.as_mut()) {
                let first = reply.remove(0);
                reply.insert(0, if first == 'x' { 'y' } else { 'x' });
                changed = Some(t.session);
                *line = serde_json::to_string(&r).unwrap();
                break;
            }
        }
    });
    let session = changed.expect("a turn-0 reply to change");
    let o = replay_dir(&bad).expect("replay");
    let check = o.check(TURNS).expect("the session check");
    assert_eq!(check.status, Status::Fail, "{}", o.render_table(10));
    assert!(
        check.mismatches.iter().any(|m| m.file == rel && m.field == format!("session {session} turn 1 body_sha256")),
        "{}",
        o.render_table(10)
    );

    // One changed byte of a frozen later user turn: the catalog and the bodies name it.
    let bad = tmp.path().join("panel");
    copy_dir(&out, &bad);
    let text = std::fs::read_to_string(bad.join("inputs/prompts.jsonl")).unwrap();
    let start = text.find("\"next_turns\"").expect("next turns");
    let at = start + text[start..].find("hhh").expect("a later user turn");
    flip(&bad, "inputs/prompts.jsonl", at, |b| b == b'h', |_| b'H');
    let o = replay_dir(&bad).expect("replay");
    let catalog = o.check(CATALOG).expect("catalog check");
    assert_eq!(catalog.status, Status::Fail, "{}", o.render_table(10));
    assert!(catalog.mismatches.iter().any(|m| m.file == "inputs/prompts.jsonl"));
    let check = o.check(TURNS).expect("the session check");
    assert!(check.mismatches.iter().any(|m| m.field.contains("body_sha256")), "{}", o.render_table(10));
}
