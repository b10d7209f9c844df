//! Tests of multi-turn session panels (`prompts.max_turns`): ShareGPT sessions
//! (alternation, the per-turn filters, the cap), `{"turns": [..]}` request lines
//! (and their errors), the frozen panel lines and the plan's refusals.

use super::tests::{Words, plan_text, spec, words, write};
use super::*;
use crate::plan::{self, Plan, ShareGptSpec};
use crate::trace::{Panel, build_panel};

fn turn(from: &str, n: usize) -> String {
    format!(r#"{{"from": "{from}", "value": "{}"}}"#, words(n))
}

#[test]
fn sharegpt_sessions_take_alternating_pairs_up_to_max_turns() {
    let tmp = tempfile::tempdir().unwrap();
    // 0: 3 pairs then a lone human turn; 1: a pair, then two human turns in a row
    // (the session stops); 2: the second answer is under min_tokens (stops there);
    // 3: the running total passes max_total_tokens at the third pair.
    let convs = [
        [
            turn("human", 4),
            turn("gpt", 5),
            turn("human", 6),
            turn("gpt", 7),
            turn("human", 8),
            turn("gpt", 9),
            turn("human", 4),
        ]
        .join(", "),
        [turn("human", 5), turn("gpt", 5), turn("human", 5), turn("human", 5), turn("gpt", 5)].join(", "),
        [turn("human", 6), turn("gpt", 6), turn("human", 6), turn("gpt", 2), turn("human", 6), turn("gpt", 6)]
            .join(", "),
        [turn("human", 10), turn("gpt", 10), turn("human", 10), turn("gpt", 10), turn("human", 10), turn("gpt", 10)]
            .join(", "),
    ];
    let text: Vec<String> = convs.iter().map(|c| format!(r#"{{"conversations": [{c}]}}"#)).collect();
    let path = write(tmp.path(), "sg.json", &format!("[{}]", text.join(",\n")));
    let s = ShareGptSpec { max_total_tokens: Some(50), ..spec("sg.json") };
    let mut got = sharegpt_sessions(&s, &path, &Words, 1, 4, true, Some(3)).unwrap();
    got.sort_by(|a, b| a.source.cmp(&b.source));
    type Shape = (usize, Option<u32>, Vec<(u32, Option<u32>)>);
    let shape: Vec<Shape> = got
        .iter()
        .map(|e| (e.tokens.len(), e.output_tokens, e.next_turns.iter().map(|t| (t.length, t.output_tokens)).collect()))
        .collect();
    assert_eq!(
        shape,
        [
            (4, Some(5), vec![(6, Some(7)), (8, Some(9))]),
            (5, Some(5), vec![]),
            (6, Some(6), vec![]),
            (10, Some(10), vec![(10, Some(10))]),
        ]
    );
    assert_eq!(got[0].next_turns[0].content, words(6));
    assert_eq!(got[0].messages.as_ref().unwrap()[0].content, words(4));
    assert!(got.iter().all(|e| e.next_turns.iter().all(|t| t.max_tokens.is_none())));
    // max_turns = 2 caps conversation 0; without max_turns every entry is one turn.
    let two = sharegpt_sessions(&s, &path, &Words, 1, 4, true, Some(2)).unwrap();
    assert!(two.iter().all(|e| e.next_turns.len() <= 1));
    let single = sharegpt(&s, &path, &Words, 1, 4, true).unwrap();
    assert!(single.iter().all(|e| e.next_turns.is_empty()));
}

#[test]
fn request_sessions_read_turn_lines_and_name_bad_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "r.jsonl",
        "{\"system\": \"be brief\", \"turns\": [{\"prompt\": \"a bb\", \"output_tokens\": 3}, {\"prompt\": \"ccc dddd e\"}, \
         {\"prompt\": \"f\"}]}\n{\"turns\": [{\"prompt\": \"x yy\"}]}\n",
    );
    let got =
        requests_sessions(&path, "r.jsonl", Some(&Words), 2, &LineRoutes::single(true, "cell \"c\""), Some(2)).unwrap();
    let m = got[0].messages.as_ref().unwrap();
    assert_eq!((m[0].role.as_str(), m[1].role.as_str(), m[1].content.as_str()), ("system", "user", "a bb"));
    assert_eq!((got[0].tokens.len(), got[0].output_tokens), (4, Some(3)), "system and first turn encoded");
    assert_eq!(got[0].next_turns.len(), 1, "max_turns = 2 keeps two turns");
    assert_eq!((got[0].next_turns[0].length, got[0].next_turns[0].content.as_str()), (3, "ccc dddd e"));
    assert!(got[1].next_turns.is_empty());
    let err = |text: &str, max: Option<u32>| {
        let path = write(tmp.path(), "bad.jsonl", text);
        requests_sessions(&path, "bad.jsonl", Some(&Words), 1, &LineRoutes::single(true, "cell \"c\""), max)
            .unwrap_err()
            .to_string()
    };
    let e = err("{\"prompt\": \"a\"}\n", Some(2));
    assert!(e.contains("line 1") && e.contains("prompts.max_turns makes every line a session"), "{e}");
    let e = err("{\"turns\": [{\"prompt\": \"a\"}]}\n", None);
    assert!(e.contains("needs prompts.max_turns"), "{e}");
    let e = err("{\"turns\": []}\n", Some(2));
    assert!(e.contains("\"turns\" is empty"), "{e}");
    let e = err("{\"turns\": [{\"prompt\": \"a\"}, {\"prompt\": \"b\", \"output_tokens\": 0}]}\n", Some(2));
    assert!(e.contains("turn 1") && e.contains("at least 1"), "{e}");
    let e = err("{\"turns\": [{\"prompt\": \"a\", \"extra\": 1}]}\n", Some(2));
    assert!(e.contains("extra"), "{e}");
    let e = err("{\"turns\": [{\"prompt\": \"a\"}], \"prompt\": \"b\"}\n", Some(2));
    assert!(e.contains("\"turns\" (and optionally \"system\") only"), "{e}");
}

fn session_plan(request: &str) -> Result<Plan, String> {
    let prompts =
        "source = \"sharegpt\"\npath = \"sg.json\"\ntokenizer = \"tok.json\"\nnum_requests = 2\nmax_turns = 3";
    plan::parse(&plan_text(request, prompts)).map_err(|e| e.to_string())
}

#[test]
fn a_session_panel_freezes_every_turns_max_tokens_and_needs_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let convs: Vec<String> = (0..2)
        .map(|i| {
            let t = [
                turn("human", 4 + i),
                turn("gpt", 20),
                turn("human", 5),
                turn("gpt", 6),
                turn("human", 7),
                turn("gpt", 30),
            ];
            format!(r#"{{"conversations": [{}]}}"#, t.join(", "))
        })
        .collect();
    write(tmp.path(), "sg.json", &format!("[{}]", convs.join(",")));
    let plan = session_plan("output = \"natural\"\nmax_output_tokens = 12\nendpoint = \"chat\"").unwrap();
    let panel = build_panel(&plan, tmp.path(), Some(&Words)).unwrap();
    for p in &panel.prompts {
        assert_eq!(p.max_tokens, Some(12));
        let next = p.next_turns.as_ref().unwrap();
        let max: Vec<Option<u32>> = next.iter().map(|t| t.max_tokens).collect();
        assert_eq!(max, [Some(6), Some(12)]);
        assert_eq!(p.turns(), 3);
    }
    panel.check(&plan).unwrap();
    let back = Panel::from_jsonl(&panel.to_jsonl()).unwrap();
    assert_eq!(back, panel);
    // A changed max_tokens of a later turn, or a session in a single-turn plan, is refused.
    let mut bad = panel.clone();
    bad.prompts[1].next_turns.as_mut().unwrap()[1].max_tokens = Some(11);
    let e = bad.check(&plan).unwrap_err().to_string();
    assert!(e.contains("prompt 1: turn 2 sends max_tokens Some(11); the plan gives 12"), "{e}");
    let single = plan::parse(&plan_text(
        "output = \"natural\"\nmax_output_tokens = 12\nendpoint = \"chat\"",
        "source = \"sharegpt\"\npath = \"sg.json\"\ntokenizer = \"tok.json\"\nnum_requests = 2",
    ))
    .unwrap();
    assert!(panel.check(&single).unwrap_err().to_string().contains("no prompts.max_turns"));
    // Sessions need the chat endpoint (token-ID panels cannot carry replies).
    let e = session_plan("output = \"natural\"\nmax_output_tokens = 12").unwrap_err();
    assert!(e.contains("prompts.max_turns") && e.contains("request.endpoint = \"chat\""), "{e}");
}

#[test]
fn only_sharegpt_and_requests_panels_hold_sessions() {
    let synthetic = "source = \"synthetic\"\ntexts = \"t\"\ntokenizer = \"tok.json\"\nnum_requests = 2\nmax_turns = 2\n\
                     input_tokens = { dist = \"fixed\", value = 4 }\noutput_tokens = { dist = \"fixed\", value = 4 }";
    let e = plan::parse(&plan_text("endpoint = \"chat\"\noutput_tokens = 4", synthetic)).unwrap_err().to_string();
    assert!(e.contains("prompts.max_turns"), "{e}");
    let random = "source = \"random\"\nmin_token_id = 0\nmax_token_id = 9\nlengths = [4]\ndocuments = 2\nmax_turns = 2";
    let e = plan::parse(&plan_text("output_tokens = 4", random)).unwrap_err().to_string();
    assert!(e.contains("prompts.max_turns"), "{e}");
}

/// A `requests` panel whose cells use both endpoints: a `prompt` line serves both
/// (its token IDs and one user message), a `tokens` line is refused for the chat
/// cell and a `messages` line for the completions cell, each error naming the line
/// and the cell.
#[test]
fn a_panel_of_cells_on_both_endpoints_serves_both_or_names_the_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let chat_cell = "\n[[cells]]\nname = \"talk\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\n\
                     count = 2\nendpoint = \"chat\"\n";
    let text =
        plan_text("output_tokens = 4", "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 2") + chat_cell;
    let plan = plan::parse(&text).unwrap();
    write(tmp.path(), "r.jsonl", "{\"prompt\": \"a bb\"}\n{\"prompt\": \"ccc\"}\n");
    let panel = build_panel(&plan, tmp.path(), Some(&Words)).unwrap();
    let m = |content: &str| Some(vec![ChatMessage { role: "user".into(), content: content.into() }]);
    assert_eq!((panel.prompts[0].tokens.clone(), panel.prompts[0].messages.clone()), (vec![1, 2], m("a bb")));
    write(tmp.path(), "r.jsonl", "{\"prompt\": \"a bb\"}\n{\"tokens\": [1, 2]}\n");
    let e = build_panel(&plan, tmp.path(), Some(&Words)).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "r.jsonl, line 2: \"tokens\" cannot be sent to the chat endpoint, where cell \"talk\" sends (endpoint = \
         \"chat\"): give \"messages\" or \"prompt\" text"
        ),
        "{e}"
    );
    write(tmp.path(), "r.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n{\"prompt\": \"x\"}\n");
    let e = build_panel(&plan, tmp.path(), Some(&Words)).unwrap_err().to_string();
    assert!(e.ends_with(
        "r.jsonl, line 1: \"messages\" needs the chat endpoint, but cell \"c\" sends to /v1/completions (endpoint = \
         \"completions\"; set endpoint = \"chat\"): the harness has no chat template to turn them into token IDs"
    ), "{e}");
    // With every cell on completions the panel carries no messages.
    let plain =
        plan::parse(&plan_text("output_tokens = 4", "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 2"))
            .unwrap();
    write(tmp.path(), "r.jsonl", "{\"prompt\": \"a bb\"}\n{\"tokens\": [1, 2]}\n");
    assert!(build_panel(&plain, tmp.path(), Some(&Words)).unwrap().prompts.iter().all(|p| p.messages.is_none()));
}
