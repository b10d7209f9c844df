//! The chat endpoint end to end: `harness run` on the real engine (synthetic model,
//! whose tokenizer carries a ChatML template) over real HTTP with
//! `request.endpoint = "chat"` and a `requests` panel of `{"messages": [..]}` and
//! `{"prompt": ..}` lines. Checks that the messages are frozen in
//! inputs/prompts.jsonl, that every body sent is the chat body of its entry, that the
//! server applied its template (usage counts more prompt tokens than the contents),
//! that the streamed chat deltas were counted as tokens, that the warmup went to the
//! chat route (one chat call per warmup entry), that replay passes, and
//! that one changed byte of a message is named. A second study puts a cell on
//! `/v1/completions` beside a cell on chat (`cells[].endpoint`): each sends its own
//! bodies to its own route, the warmup warms both, replay passes, and a changed
//! chat-cell body hash in `run.json` is named. No timed assertions.

use crate::common;

use common::tamper::*;
use common::*;
use harness::commands::replay::{Status, replay_dir};
use harness::plan::Endpoint;
use harness::trace::Panel;

const CATALOG: &str = "inputs: traces and prompt panel against catalog.json";
const BODIES: &str = "request bodies: run.json hashes rebuilt from the frozen panel, per cell endpoint";

#[test]
fn chat_messages_go_to_the_chat_endpoint_and_replay_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let data = tmp.path().join("chat.jsonl");
    std::fs::write(
        &data,
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Answer in verse.\"}, \
         {\"role\": \"user\", \"content\": \"Who is there?\"}], \"output_tokens\": 6}\n\
         {\"prompt\": \"Nay, answer me: stand, and unfold yourself.\", \"output_tokens\": 5}\n\
         {\"messages\": [{\"role\": \"user\", \"content\": \"Long live the king!\"}], \"output_tokens\": 7}\n",
    )
    .expect("write dataset");
    let tokenizer = model.join("tokenizer.json");
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { blocks: 1, warmup_prompts: 2, ..TestPlan::new("chat-test", 3) };
    let fixed = plan.arm("f16", "control", &argv).closed("closed-2", "confirmation", 2, 6).render();
    let old = "output_tokens = 6\n\n[prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\n\
               lengths = [16]\ndocuments = 2\n";
    assert!(fixed.contains(old), "{fixed}");
    let new = format!(
        "output = \"natural\"\nmax_output_tokens = 8\nendpoint = \"chat\"\n\n[prompts]\nsource = \"requests\"\n\
         path = {:?}\ntokenizer = {:?}\nnum_requests = 3\n",
        data.display().to_string(),
        tokenizer.display().to_string()
    );
    let (out, _) = run_study_ok(tmp.path(), &fixed.replace(old, &new));

    // The panel carries each entry's messages (a prompt line as one user message).
    let panel = Panel::from_jsonl(&std::fs::read_to_string(out.join("inputs/prompts.jsonl")).unwrap()).unwrap();
    let roles: Vec<Vec<&str>> = panel
        .prompts
        .iter()
        .map(|p| p.messages.as_ref().expect("messages").iter().map(|m| m.role.as_str()).collect())
        .collect();
    assert_eq!(roles, [vec!["system", "user"], vec!["user"], vec!["user"]]);
    assert_eq!(panel.prompts[1].messages.as_ref().unwrap()[0].content, "Nay, answer me: stand, and unfold yourself.");

    // Every body sent is its entry's chat body (run.json lists their hashes).
    let plan = harness::plan::parse(&std::fs::read_to_string(out.join("plan.toml")).unwrap()).unwrap();
    let run = read_json(&out.join("run.json"));
    for (i, p) in panel.prompts.iter().enumerate() {
        let body = harness::load::stream_body(&plan, plan.body_kind(harness::plan::Endpoint::Chat), p);
        let text = String::from_utf8(body.clone()).unwrap();
        assert!(text.contains("\"messages\":[") && !text.contains("\"prompt\""), "{text}");
        assert_eq!(run["request_body_sha256"]["chat"][i], harness::evidence::sha256_hex(&body), "{run}");
    }

    // The warmup warmed the chat route: one non-streaming chat call per warmup entry
    // (entries 0 and 1), sent together, every one answered.
    let warm = read_json(&out.join("raw/b0/f16/warmup.json"));
    assert_eq!((warm["endpoint"].as_str(), warm["calls"].as_u64()), (Some("chat"), Some(2)), "{warm}");
    assert_eq!((warm["ok"].as_bool(), warm["choices"].as_u64()), (Some(true), Some(2)), "{warm}");
    let entries: Vec<&[harness::trace::ChatMessage]> =
        panel.prompts[..2].iter().map(|p| p.messages.as_deref().unwrap()).collect();
    let mut bodies = Vec::new();
    for b in harness::load::warmup_chat_bodies(&plan, &entries) {
        assert!(String::from_utf8_lossy(&b).contains("\"stream\":false"));
        bodies.extend(b);
        bodies.push(b'\n');
    }
    assert_eq!(warm["body_sha256"], harness::evidence::sha256_hex(&bodies), "{warm}");

    // The server applied its chat template, and the chat deltas carried the tokens.
    let records = read_records(&out.join("raw/b0/f16/closed-2.requests.jsonl"));
    assert_eq!(records.len(), 6);
    for r in &records {
        assert!(r.is_valid(), "{r:?}");
        let p = &panel.prompts[r.prompt as usize];
        let usage = r.usage.expect("usage");
        assert!(usage.prompt_tokens > p.length, "template tokens: {usage:?} vs {} content tokens", p.length);
        let streamed: u32 = r.events.iter().map(|e| e.tokens).sum();
        assert!(streamed >= 1 && streamed == usage.completion_tokens, "{r:?}");
        assert!(r.events.iter().any(|e| e.tokens == 0), "the role-only first delta carries no token: {r:?}");
    }

    // Replay passes; one changed byte of a message is named.
    let o = replay_dir(&out).expect("replay");
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let bad = tmp.path().join("tampered");
    copy_dir(&out, &bad);
    let text = std::fs::read_to_string(bad.join("inputs/prompts.jsonl")).unwrap();
    let at = text.find("Who is there").expect("message in the panel");
    flip(&bad, "inputs/prompts.jsonl", at, |b| b == b'W', |_| b'H');
    let o = replay_dir(&bad).expect("replay");
    let catalog = o.check(CATALOG).expect("catalog check");
    assert_eq!(catalog.status, Status::Fail, "{}", o.render_table(10));
    assert!(catalog.mismatches.iter().any(|m| m.file == "inputs/prompts.jsonl"), "{}", o.render_table(10));
}

#[test]
fn a_completions_cell_beside_a_chat_cell_each_take_their_route_and_replay_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = synth_model(tmp.path());
    let data = tmp.path().join("prompts.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"Who is there?\", \"output_tokens\": 6}\n\
         {\"prompt\": \"Nay, answer me: stand, and unfold yourself.\", \"output_tokens\": 5}\n\
         {\"prompt\": \"Long live the king!\", \"output_tokens\": 7}\n",
    )
    .expect("write dataset");
    let tokenizer = model.join("tokenizer.json");
    let argv = serve_argv(&model, &["--kv-format", "f16"], &[]);
    let plan = TestPlan { blocks: 1, warmup_prompts: 2, ..TestPlan::new("mixed-endpoints", 4) };
    let fixed = plan
        .arm("f16", "control", &argv)
        .closed("tokens", "confirmation", 2, 6)
        .tail(
            "[[cells]]\nname = \"talk\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 2\ncount = 3\n\
             endpoint = \"chat\"\n",
        )
        .render();
    let old = "output_tokens = 6\n\n[prompts]\nsource = \"random\"\nmin_token_id = 0\nmax_token_id = 255\n\
               lengths = [16]\ndocuments = 2\n";
    assert!(fixed.contains(old), "{fixed}");
    let new = format!(
        "output = \"natural\"\nmax_output_tokens = 8\n\n[prompts]\nsource = \"requests\"\npath = {:?}\n\
         tokenizer = {:?}\nnum_requests = 3\n",
        data.display().to_string(),
        tokenizer.display().to_string()
    );
    let (out, _) = run_study_ok(tmp.path(), &fixed.replace(old, &new));
    let panel = Panel::from_jsonl(&std::fs::read_to_string(out.join("inputs/prompts.jsonl")).unwrap()).unwrap();
    let plan = harness::plan::parse(&std::fs::read_to_string(out.join("plan.toml")).unwrap()).unwrap();

    // run.json: one body per entry for each route, each the entry's body on it.
    let run = read_json(&out.join("run.json"));
    for (i, p) in panel.prompts.iter().enumerate() {
        for e in [Endpoint::Completions, Endpoint::Chat] {
            let body = harness::load::stream_body(&plan, plan.body_kind(e), p);
            assert_eq!(run["request_body_sha256"][e.as_str()][i], harness::evidence::sha256_hex(&body), "{run}");
        }
    }

    // The warmup warmed both routes: the batched completions call, then K chat calls.
    let warm = read_json(&out.join("raw/b0/f16/warmup.json"));
    assert_eq!(
        (warm["endpoint"].as_str(), warm["calls"].as_u64(), warm["ok"].as_bool()),
        (Some("completions"), Some(1), Some(true)),
        "{warm}"
    );
    let chat = &warm["more_endpoints"][0];
    assert_eq!(
        (chat["endpoint"].as_str(), chat["calls"].as_u64(), chat["ok"].as_bool()),
        (Some("chat"), Some(2), Some(true)),
        "{warm}"
    );
    assert_eq!(warm["more_endpoints"].as_array().map(Vec::len), Some(1), "{warm}");

    // The completions cell sent token IDs (the server counted exactly the panel's
    // tokens, checked per request); the chat cell sent messages (the template adds
    // tokens, and that check is not made there). Every request is valid.
    let records = read_records(&out.join("raw/b0/f16/tokens.requests.jsonl"));
    assert_eq!(records.len(), 6);
    for r in &records {
        assert!(r.is_valid(), "{r:?}");
        assert_eq!(r.usage.expect("usage").prompt_tokens, panel.prompts[r.prompt as usize].length, "{r:?}");
    }
    let records = read_records(&out.join("raw/b0/f16/talk.requests.jsonl"));
    assert_eq!(records.len(), 3);
    for r in &records {
        assert!(r.is_valid(), "{r:?}");
        assert!(r.usage.expect("usage").prompt_tokens > panel.prompts[r.prompt as usize].length, "{r:?}");
    }

    // The report names each cell's route.
    let report = std::fs::read_to_string(out.join("results/report.md")).expect("report.md");
    for row in [
        "| tokens | confirmation | closed loop, concurrency 2 | /v1/completions |",
        "| talk | confirmation | closed loop, concurrency 2 | /v1/chat/completions |",
    ] {
        assert!(report.contains(row), "report.md lacks {row:?}:\n{report}");
    }

    // Replay rebuilds both sets of bodies and passes; a changed hash of a chat-cell
    // body is named with its cell.
    let o = replay_dir(&out).expect("replay");
    assert!(o.passed && o.all_passed(), "{}", o.render_table(10));
    let bodies = o.check(BODIES).expect("bodies check");
    assert_eq!((bodies.status, bodies.detail.as_str()), (Status::Pass, "6 bodies on completions and chat"));
    let bad = tmp.path().join("tampered");
    copy_dir(&out, &bad);
    let text = std::fs::read_to_string(bad.join("run.json")).unwrap();
    let want = run["request_body_sha256"]["chat"][1].as_str().unwrap();
    flip_digit(&bad, "run.json", text.find(want).expect("chat body hash"));
    let o = replay_dir(&bad).expect("replay");
    let bodies = o.check(BODIES).expect("bodies check");
    assert_eq!(bodies.status, Status::Fail, "{}", o.render_table(10));
    assert!(
        bodies.mismatches.iter().any(|m| m.file == "run.json" && m.field == "request_body_sha256.chat[1] (cells talk)"),
        "{}",
        o.render_table(10)
    );
}
