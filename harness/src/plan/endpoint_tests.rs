//! Validation of `cells[].endpoint` beside `request.endpoint`: which cells send
//! where, and the exact error of each plan that cannot work (a chat cell on a
//! token-ID panel, a session panel with a cell on /v1/completions, an unknown value).

use super::validate_tests::{BASE, edit};
use super::*;

/// `BASE` on a `requests` panel (no files are read by validation).
fn dataset(extra_request: &str) -> String {
    edit(
        "lengths = [64]\ndocuments = 4\nmax_token_id = 255",
        "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 4",
    )
    .replacen("source = \"random\"\n", "", 1)
    .replacen("output_tokens = 16", &format!("output_tokens = 16{extra_request}"), 1)
}

/// `text` with `line` added to the cell named `cell`.
fn on_cell(text: &str, cell: &str, line: &str) -> String {
    let at = format!("name = \"{cell}\"\n");
    assert!(text.contains(&at), "no cell {cell}");
    text.replacen(&at, &format!("{at}{line}\n"), 1)
}

fn issues(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("the plan validated"),
        Err(e) => e.issues().iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_cell_overrides_the_study_endpoint() {
    // Default completions, one cell on chat: both routes, each cell its own.
    let plan = parse(&on_cell(&dataset(""), "open", "endpoint = \"chat\"")).unwrap();
    assert_eq!(plan.request.endpoint, Endpoint::Completions);
    assert_eq!((plan.endpoint_of("closed"), plan.endpoint_of("open")), (Endpoint::Completions, Endpoint::Chat));
    assert_eq!(plan.endpoints(), [Endpoint::Completions, Endpoint::Chat]);
    assert!(plan.render_check("0").contains(
        "endpoint per cell: /v1/completions (token IDs): closed; /v1/chat/completions (chat messages): open"
    ));
    // The study on chat, one cell back on completions.
    let plan = parse(&on_cell(&dataset("\nendpoint = \"chat\""), "closed", "endpoint = \"completions\"")).unwrap();
    assert_eq!((plan.endpoint_of("closed"), plan.endpoint_of("open")), (Endpoint::Completions, Endpoint::Chat));
    // Every cell on chat: one route, whatever request.endpoint says.
    let both = on_cell(&on_cell(&dataset(""), "open", "endpoint = \"chat\""), "closed", "endpoint = \"chat\"");
    assert_eq!(parse(&both).unwrap().endpoints(), [Endpoint::Chat]);
    // A sweep's cells keep the sweep's endpoint.
    let sweep = on_cell(&dataset(""), "open", "endpoint = \"chat\"").replacen("rate = 2.5", "rate = [1, 2]", 1);
    let plan = parse(&sweep).unwrap();
    assert_eq!((plan.endpoint_of("open-r1"), plan.endpoint_of("open-r2")), (Endpoint::Chat, Endpoint::Chat));
}

#[test]
fn a_chat_cell_needs_a_panel_of_text_or_messages() {
    let e = issues(&on_cell(BASE, "open", "endpoint = \"chat\""));
    assert_eq!(
        e,
        [
            "cells[1].endpoint: cell \"open\" sends chat messages: prompts.source must be \"sharegpt\", \"requests\" or \"synthetic\" cut from texts"
        ]
    );
    // Every cell back on completions: a chat default nobody takes is not judged.
    let text = on_cell(
        &on_cell(
            &edit("output_tokens = 16", "output_tokens = 16\nendpoint = \"chat\""),
            "open",
            "endpoint = \"completions\"",
        ),
        "closed",
        "endpoint = \"completions\"",
    );
    assert_eq!(parse(&text).unwrap().endpoints(), [Endpoint::Completions]);
    // ... but a cell that takes it is.
    let text = on_cell(
        &edit("output_tokens = 16", "output_tokens = 16\nendpoint = \"chat\""),
        "open",
        "endpoint = \"completions\"",
    );
    assert_eq!(
        issues(&text),
        [
            "request.endpoint: \"chat\" sends chat messages: prompts.source must be \"sharegpt\", \"requests\" or \"synthetic\" cut from texts"
        ]
    );
    let e = issues(&on_cell(&dataset(""), "closed", "endpoint = \"grpc\""));
    assert_eq!(e, ["cells[0].endpoint: unknown value \"grpc\" (use \"completions\" or \"chat\")"]);
}

#[test]
fn a_session_panel_needs_every_cell_on_chat() {
    let sessions = |request: &str| dataset(request).replacen("num_requests = 4", "num_requests = 4\nmax_turns = 3", 1);
    // The study on chat, one cell on completions: named at that cell.
    let e = issues(&on_cell(&sessions("\nendpoint = \"chat\""), "closed", "endpoint = \"completions\""));
    assert_eq!(
        e,
        ["cells[0].endpoint: cell \"closed\": a session panel (prompts.max_turns) sends chat history, so every cell \
          must be on the chat endpoint (token IDs cannot carry replies)"]
    );
    // One cell on chat, the other taking the completions default: named at the panel.
    let e = issues(&on_cell(&sessions(""), "open", "endpoint = \"chat\""));
    assert_eq!(
        e,
        ["prompts.max_turns: multi-turn sessions send chat history: set request.endpoint = \"chat\" (token-ID panels \
          cannot carry replies)"]
    );
    // Every cell on chat by its own key: valid.
    let all = on_cell(&on_cell(&sessions(""), "open", "endpoint = \"chat\""), "closed", "endpoint = \"chat\"");
    assert_eq!(parse(&all).unwrap().endpoints(), [Endpoint::Chat]);
    // Turns are built from [request]: a cell cannot leave out token IDs on its own.
    let e = issues(&on_cell(&sessions("\nendpoint = \"chat\""), "closed", "token_ids = false"));
    assert_eq!(
        e,
        ["cells[0].token_ids: a session panel's turns are built from [request]: set request.token_ids instead"]
    );
}
