//! A dataset panel end to end: `harness run` on the real engine (synthetic model)
//! with a ShareGPT-format panel (a small hand-made file, encoded with the synthetic
//! model's byte-level tokenizer) and natural outputs capped by max_output_tokens.
//! Checks that every request sent its own panel entry's prompt and max_tokens with
//! EOS allowed, that no output exceeded its cap, that the cell summaries show the
//! length distributions, that replay passes, and that one changed byte of the panel
//! is named. No timed assertions.

use crate::common;

use std::collections::BTreeSet;

use common::tamper::*;
use common::*;
use harness::commands::replay::{Status, replay_dir};
use harness::metrics::CellSummary;
use harness::trace::Panel;

const CAP: u32 = 12;

/// Conversation i: a human prompt of 20 + 3i bytes, then an answer of 2 + 5i bytes
/// (byte tokens: one token per byte), so some answers are under the cap and some
/// over, and the one of 2 bytes is dropped by the 4-token filter.
fn sharegpt_file(dir: &std::path::Path) -> std::path::PathBuf {
    let convs: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#"{{"id": "t{i}", "conversations": [{{"from": "human", "value": "{}"}}, {{"from": "gpt", "value": "{}"}}]}}"#,
                "a".repeat(20 + 3 * i),
                "b".repeat(2 + 5 * i)
            )
        })
        .collect();
    let path = dir.join("dialogue.json");
    std::fs::write(&path, format!("[{}]\n", convs.join(",\n"))).expect("write dataset");
    path
}

#[test]
fn a_sharegpt_panel_with_natural_outputs_runs_and_replays_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let data = sharegpt_file(tmp.path());
    let tokenizer = model.join("tokenizer.json");
    assert!(tokenizer.is_file(), "the synthetic model ships a tokenizer.json");
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { blocks: 1, warmup_prompts: 2, ..TestPlan::new("panel-test", 3) };
    let fixed = plan.arm("f16", "control", &argv).closed("closed-2", "confirmation", 2, 9).render();
    let old = "output_tokens = 6\n\n[prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\n\
               lengths = [16]\ndocuments = 2\n";
    assert!(fixed.contains(old), "{fixed}");
    let new = format!(
        "output = \"natural\"\nmax_output_tokens = {CAP}\n\n[prompts]\nsource = \"sharegpt\"\npath = {:?}\n\
         tokenizer = {:?}\nnum_requests = 6\n",
        data.display().to_string(),
        tokenizer.display().to_string()
    );
    let text = fixed.replace(old, &new);
    let (out, _) = run_study_ok(tmp.path(), &text);

    // The panel: 6 of the 7 usable conversations, each with its own lengths.
    let panel = Panel::from_jsonl(&std::fs::read_to_string(out.join("inputs/prompts.jsonl")).unwrap()).unwrap();
    assert_eq!(panel.prompts.len(), 6);
    let sources: BTreeSet<&str> = panel.prompts.iter().map(|p| p.source.as_str()).collect();
    assert_eq!(sources.len(), 6, "sampled without replacement");
    assert!(!sources.iter().any(|s| s.ends_with("#0")), "the 2-token answer is filtered out");
    for p in &panel.prompts {
        let i: usize = p.source.rsplit('#').next().unwrap().parse().unwrap();
        assert_eq!((p.length as usize, p.output_tokens), (20 + 3 * i, Some(2 + 5 * i as u32)));
        assert_eq!((p.max_tokens, p.ignore_eos), (Some((2 + 5 * i as u32).min(CAP)), Some(false)));
    }

    // Every request: its entry's prompt length and max_tokens, round robin, EOS allowed.
    let records = read_records(&out.join("raw/b0/f16/closed-2.requests.jsonl"));
    assert_eq!(records.len(), 9);
    for r in &records {
        assert_eq!(r.prompt, r.index % 6, "round robin over the panel");
        let p = &panel.prompts[r.prompt as usize];
        assert!(r.is_valid(), "{r:?}");
        assert_eq!((r.prompt_tokens_intended, r.output_tokens_intended), (p.length, p.max_tokens.unwrap()));
        let usage = r.usage.expect("usage");
        assert_eq!(usage.prompt_tokens, p.length);
        assert!(usage.completion_tokens <= p.max_tokens.unwrap(), "natural output stays within its cap: {usage:?}");
    }
    let summary: CellSummary =
        serde_json::from_value(read_json(&out.join("results/cells/b0-f16-closed-2.summary.json"))).expect("summary");
    let lengths: Vec<f64> = records.iter().map(|r| f64::from(r.usage.unwrap().prompt_tokens)).collect();
    let min = lengths.iter().copied().fold(f64::INFINITY, f64::min);
    let max = lengths.iter().copied().fold(0.0, f64::max);
    assert_eq!((summary.input_tokens_min, summary.input_tokens_max), (Some(min), Some(max)));
    assert!(summary.output_tokens_max.unwrap() <= f64::from(CAP));

    // Replay passes; one changed byte of the panel is named.
    let o = replay_dir(&out).expect("replay");
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let bad = tmp.path().join("tampered");
    copy_dir(&out, &bad);
    flip_digit(&bad, "inputs/prompts.jsonl", 10);
    let o = replay_dir(&bad).expect("replay");
    assert!(!o.passed, "a changed panel byte passed");
    let catalog = o.check("inputs: traces and prompt panel against catalog.json").expect("catalog check");
    assert_eq!(catalog.status, Status::Fail);
    assert!(catalog.mismatches.iter().any(|m| m.file == "inputs/prompts.jsonl"), "{}", o.render_table(10));
}
