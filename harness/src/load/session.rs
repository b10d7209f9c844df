//! Multi-turn chat sessions (`prompts.max_turns`), as AIPerf runs them: a session is
//! one trace entry (its arrival time and closed-loop slot belong to the session);
//! turn 0 is sent at the session's dispatch, turn k+1 as soon as turn k completes,
//! with the assistant's reply as actually streamed in its history. Owns a session's
//! bodies (`SessionScript`: the frozen user turns plus the recorded replies, one body
//! format for the run and for replay) and the order of its turns. Zero retries: a
//! failed turn ends its session, and every later turn is recorded as never sent
//! (`Failure::SessionEnded`), so the cell counts it as failed.
//!
//! Records: turn k of the session at trace position s is record
//! `base(s) + k`, where `base(s)` is the number of turns of the sessions before it;
//! its `intended_ns` is the session's intended arrival for turn 0 and the `[DONE]`
//! stamp of turn k-1 for turn k (a turn is due when the one before it has ended); a
//! turn never sent has the intended time of the turn that failed.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use reqwest::header::HeaderValue;

use super::Counters;
use super::payload::chat_body;
use super::recorder::{RequestCtx, execute};
use crate::evidence::request_record::{Failure, RecordKey, RequestRecord, TurnRecord};
use crate::evidence::sha256_hex;
use crate::plan::{Plan, RequestSpec};
use crate::trace::{ChatMessage, Prompt, SessionTurn};

/// Everything a session's bodies are built from: the plan's request fields and one
/// panel entry's turns.
#[derive(Debug, Clone)]
pub struct SessionScript {
    request: RequestSpec,
    ignore_eos: bool,
    token_ids: bool,
    /// Turn 0's messages (an optional system message and the first user turn).
    first: Vec<ChatMessage>,
    first_length: u32,
    first_max_tokens: u32,
    next: Vec<SessionTurn>,
}

impl SessionScript {
    /// The script of a panel entry that is a session (`None` otherwise).
    pub fn new(plan: &Plan, p: &Prompt) -> Option<SessionScript> {
        let r = &plan.request;
        Some(SessionScript {
            request: r.clone(),
            ignore_eos: p.ignore_eos.unwrap_or(r.ignore_eos),
            token_ids: r.token_ids,
            first: p.messages.clone()?,
            first_length: p.length,
            first_max_tokens: p.max_tokens.unwrap_or(r.output_tokens),
            next: p.next_turns.clone()?,
        })
    }

    /// Requests the session sends when every turn succeeds.
    pub fn turns(&self) -> u32 {
        1 + self.next.len() as u32
    }

    /// The messages of turn `turn`: turn 0's, then for each later turn up to it the
    /// reply to the turn before (`replies[k]` answered turn k) and its user message.
    /// `None` when the session has no such turn or a reply is missing.
    pub fn messages(&self, turn: u32, replies: &[&str]) -> Option<Vec<ChatMessage>> {
        let k = turn as usize;
        if k > self.next.len() || replies.len() < k {
            return None;
        }
        let mut m = self.first.clone();
        for (reply, user) in replies[..k].iter().zip(&self.next[..k]) {
            m.push(ChatMessage { role: "assistant".into(), content: (*reply).to_string() });
            m.push(ChatMessage { role: "user".into(), content: user.content.clone() });
        }
        Some(m)
    }

    /// The body of turn `turn` (turn 0's is `load::stream_body`'s, byte for byte).
    pub fn body(&self, turn: u32, replies: &[&str]) -> Option<Vec<u8>> {
        let messages = self.messages(turn, replies)?;
        let max_tokens = self.max_tokens(turn)?;
        Some(chat_body(&self.request, &messages, max_tokens, self.ignore_eos, self.token_ids))
    }

    /// The `max_tokens` turn `turn` sends.
    pub fn max_tokens(&self, turn: u32) -> Option<u32> {
        match turn {
            0 => Some(self.first_max_tokens),
            k => self.next.get(k as usize - 1).map(|t| t.max_tokens.unwrap_or(self.first_max_tokens)),
        }
    }

    /// Token count of the user text turn `turn` adds (turn 0: all its message contents).
    pub fn prompt_tokens(&self, turn: u32) -> Option<u32> {
        match turn {
            0 => Some(self.first_length),
            k => self.next.get(k as usize - 1).map(|t| t.length),
        }
    }
}

/// The record of turn `turn` (> 0) of the session whose turn-0 record is `first`,
/// due at `intended_ns`, with no stamps.
fn turn_record(first: &RequestRecord, script: &SessionScript, turn: u32, intended_ns: u64) -> RequestRecord {
    let index = first.index + u64::from(turn);
    let session = first.turn.as_ref().map_or(first.index, |t| t.session);
    let key = RecordKey { cell: &first.cell, block: first.block, arm: &first.arm, index };
    let tokens = (script.prompt_tokens(turn).unwrap_or(0), script.max_tokens(turn).unwrap_or(0));
    RequestRecord {
        light: first.light,
        turn: Some(TurnRecord { session, turn, body_sha256: None, reply: None }),
        ..RequestRecord::planned(key, first.prompt, tokens, intended_ns)
    }
}

/// The records of the turns after `failed` (whose record is `at`), never sent.
pub fn not_sent(first: &RequestRecord, at: &RequestRecord, script: &SessionScript, failed: u32) -> Vec<RequestRecord> {
    (failed + 1..script.turns())
        .map(|k| {
            let mut r = turn_record(first, script, k, at.intended_ns);
            r.failure = Some(Failure::SessionEnded { failed_turn: failed });
            r
        })
        .collect()
}

/// Runs one admitted session: `first` is turn 0's record (stamped up to admission,
/// `turn` set) and `body` its body; every turn carries the session's `request_id`
/// (its panel entry's). Returns every turn's record, in order.
pub async fn run_session(
    mut first: RequestRecord,
    body: Bytes,
    request_id: Option<HeaderValue>,
    script: Arc<SessionScript>,
    ctx: &RequestCtx,
    counters: &Counters,
) -> Vec<RequestRecord> {
    if let Some(t) = first.turn.as_mut() {
        t.body_sha256 = Some(sha256_hex(&body));
    }
    execute(&mut first, body, request_id.clone(), ctx).await;
    count(counters, &first);
    let template = first.clone();
    let mut out = vec![first];
    let mut replies: Vec<String> = Vec::new();
    for turn in 1..script.turns() {
        let Some(prev) = out.last() else { break };
        let (Some(done), true) = (prev.done_ns, prev.is_valid()) else {
            let rest = not_sent(&template, prev, &script, turn - 1);
            counters.failed.fetch_add(rest.len() as u64, Ordering::Relaxed);
            out.extend(rest);
            break;
        };
        replies.push(prev.turn.as_ref().and_then(|t| t.reply.clone()).unwrap_or_default());
        let mut rec = turn_record(&template, &script, turn, done);
        let texts: Vec<&str> = replies.iter().map(String::as_str).collect();
        let Some(body) = script.body(turn, &texts) else { break };
        if let Some(t) = rec.turn.as_mut() {
            t.body_sha256 = Some(sha256_hex(&body));
        }
        let now = ctx.clock.now_ns();
        rec.dispatch_ns = Some(now);
        rec.admitted_ns = Some(now);
        counters.sent.fetch_add(1, Ordering::Relaxed);
        execute(&mut rec, Bytes::from(body), request_id.clone(), ctx).await;
        count(counters, &rec);
        out.push(rec);
    }
    out
}

fn count(counters: &Counters, rec: &RequestRecord) {
    let counter = if rec.is_valid() { &counters.completed } else { &counters.failed };
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/e2e-synthetic.toml")).unwrap();
        let random = "source = \"random\"\nmin_token_id = 0\nmax_token_id = 255\nlengths = [32]\ndocuments = 4\n";
        let sessions = "source = \"requests\"\npath = \"r.jsonl\"\nnum_requests = 4\nmax_turns = 3\n";
        let text =
            text.replace("output_tokens = 8\n", "output_tokens = 8\nendpoint = \"chat\"\noutput = \"natural\"\n");
        crate::plan::parse(&text.replace(random, sessions)).unwrap()
    }

    fn session() -> Prompt {
        let turn = |content: &str, max: u32| SessionTurn {
            length: 2,
            output_tokens: Some(max),
            max_tokens: Some(max),
            content: content.into(),
        };
        Prompt {
            index: 0,
            length: 3,
            doc: 0,
            source: "r.jsonl:1".into(),
            offset: 0,
            output_tokens: Some(5),
            max_tokens: Some(5),
            ignore_eos: Some(false),
            tokens: vec![1, 2, 3],
            messages: Some(vec![ChatMessage { role: "user".into(), content: "Who's there?".into() }]),
            next_turns: Some(vec![turn("Long live the king!", 4), turn("Bernardo?", 6)]),
        }
    }

    #[test]
    fn turn_zero_is_the_panel_body_and_later_turns_carry_the_replies() {
        let (plan, p) = (plan(), session());
        let s = SessionScript::new(&plan, &p).unwrap();
        assert_eq!(s.turns(), 3);
        assert_eq!(
            s.body(0, &[]).unwrap(),
            crate::load::stream_body(&plan, plan.body_kind(crate::plan::Endpoint::Chat), &p)
        );
        let body = String::from_utf8(s.body(2, &["Nay, answer me.", "He."]).unwrap()).unwrap();
        assert_eq!(
            body,
            r#"{"model":"synth","messages":[{"role":"user","content":"Who's there?"},{"role":"assistant","content":"Nay, answer me."},{"role":"user","content":"Long live the king!"},{"role":"assistant","content":"He."},{"role":"user","content":"Bernardo?"}],"max_tokens":6,"ignore_eos":false,"temperature":0.0,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}"#
        );
        assert_eq!((s.max_tokens(1), s.prompt_tokens(1), s.max_tokens(3)), (Some(4), Some(2), None));
        // A turn past the session, or without the replies before it, has no body.
        assert!(s.body(3, &["a", "b", "c"]).is_none() && s.body(2, &["a"]).is_none());
        // A single-request entry is no session.
        assert!(SessionScript::new(&plan, &Prompt { next_turns: None, ..p }).is_none());
    }

    #[test]
    fn a_failed_turn_records_the_rest_as_never_sent() {
        let s = SessionScript::new(&plan(), &session()).unwrap();
        let first = RequestRecord {
            id: "c/b0/a/7".into(),
            cell: "c".into(),
            block: 0,
            arm: "a".into(),
            index: 7,
            prompt: 0,
            prompt_tokens_intended: 3,
            output_tokens_intended: 5,
            intended_ns: 100,
            dispatch_ns: Some(101),
            admitted_ns: Some(101),
            send_ns: Some(102),
            headers_ns: None,
            events: Vec::new(),
            done_ns: None,
            status: None,
            failure: Some(Failure::Timeout { after_ns: 9 }),
            usage: None,
            finish_reason: None,
            server_request_id: None,
            light: false,
            turn: Some(TurnRecord { session: 4, turn: 0, body_sha256: Some("h".into()), reply: None }),
            round: None,
        };
        let rest = not_sent(&first, &first, &s, 0);
        let shape: Vec<(String, u64, u32, u64, Option<u64>)> = rest
            .iter()
            .map(|r| (r.id.clone(), r.index, r.turn.as_ref().unwrap().turn, r.intended_ns, r.send_ns))
            .collect();
        assert_eq!(shape, [("c/b0/a/8".into(), 8, 1, 100, None), ("c/b0/a/9".into(), 9, 2, 100, None)]);
        assert!(rest.iter().all(|r| r.failure == Some(Failure::SessionEnded { failed_turn: 0 })));
        assert_eq!((rest[1].prompt_tokens_intended, rest[1].output_tokens_intended), (2, 6));
        assert!(
            rest.iter()
                .all(|r| r.turn.as_ref().unwrap().session == 4 && r.turn.as_ref().unwrap().body_sha256.is_none())
        );
    }
}
