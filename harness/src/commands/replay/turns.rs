//! Multi-turn sessions (`prompts.max_turns`): what a later turn sent depends on the
//! replies before it, so each turn's body is rebuilt here from the frozen panel
//! (`inputs/prompts.jsonl`: the user turns, `max_tokens`, EOS flag) and the replies
//! recorded with the earlier turns, through the one body format the run used
//! (`load::SessionScript`), and its SHA-256 compared with the one recorded. Also
//! checks each session's records: every turn once, numbered from the session's
//! first record, a later turn due at the `[DONE]` of the turn before it and asking
//! for its own frozen lengths, and nothing sent after a failed turn (those turns
//! are `session_ended`). Must not touch anything but the evidence directory.

use std::collections::BTreeMap;
use std::path::Path;

use super::complete::Study;
use super::read::stream_lines;
use super::records::Rec;
use super::{Check, Mismatch};
use crate::evidence::sha256_hex;
use crate::load::SessionScript;
use crate::trace::Prompt;

pub const NAME: &str = "session turns: bodies rebuilt from the frozen turns and the recorded replies";

/// Each panel entry's session script (`Err`: why the panel cannot be read).
fn scripts(root: &Path, s: &Study<'_>) -> Result<Vec<Option<SessionScript>>, String> {
    let rel = crate::evidence::PROMPTS_PATH;
    let mut out = Vec::new();
    let read = stream_lines(root, rel, |_, l| {
        let p: Prompt = serde_json::from_slice(l).map_err(|e| e.to_string())?;
        out.push(SessionScript::new(s.plan, &p));
        Ok(())
    });
    match read {
        Ok((_, None)) => Ok(out),
        Ok((_, Some(e))) => Err(format!("{rel}: {e}")),
        Err(e) => Err(format!("{rel}: {e}")),
    }
}

/// Every session cell's records against their rebuilt bodies.
pub fn check(root: &Path, s: &Study<'_>) -> Check {
    let mut m = Vec::new();
    let scripts = match scripts(root, s) {
        Ok(v) => v,
        Err(e) => {
            m.push(Mismatch::new(crate::evidence::PROMPTS_PATH, "parse", "malformed", e));
            return Check::of(NAME, "no readable panel".into(), m);
        }
    };
    let (mut sessions, mut bodies) = (0u64, 0u64);
    for c in &s.cells {
        let Some(records) = c.records else { continue };
        let mut by_session: BTreeMap<u64, Vec<&Rec>> = BTreeMap::new();
        for r in records {
            match &r.turn {
                Some(t) => by_session.entry(t.session).or_default().push(r),
                None => m.push(Mismatch::new(&c.path, format!("request {}", r.index), "no turn", "a session turn")),
            }
        }
        for (session, mut turns) in by_session {
            sessions += 1;
            turns.sort_by_key(|r| r.turn.as_ref().map_or(0, |t| t.turn));
            let at = |k: usize| format!("session {session} turn {k}");
            let Some(script) =
                usize::try_from(turns[0].prompt).ok().and_then(|p| scripts.get(p)).and_then(Option::as_ref)
            else {
                m.push(Mismatch::new(&c.path, at(0), format!("prompt {}", turns[0].prompt), "a session of the panel"));
                continue;
            };
            if turns.len() != script.turns() as usize {
                m.push(Mismatch::new(
                    &c.path,
                    format!("session {session} records"),
                    turns.len().to_string(),
                    format!("{} turns", script.turns()),
                ));
            }
            let mut replies: Vec<&str> = Vec::new();
            for (k, r) in turns.iter().enumerate() {
                let Some(t) = &r.turn else { continue };
                let field = |f: &str| format!("{} {f}", at(k));
                if t.turn as usize != k || r.index != turns[0].index + k as u64 || r.prompt != turns[0].prompt {
                    let got = format!("turn {} index {} prompt {}", t.turn, r.index, r.prompt);
                    let want = format!("turn {k} index {} prompt {}", turns[0].index + k as u64, turns[0].prompt);
                    m.push(Mismatch::new(&c.path, field("numbering"), got, want));
                }
                let prev = k.checked_sub(1).map(|j| turns[j]);
                let prev_ok = prev.is_none_or(|p| p.valid());
                if k > 0 {
                    let lengths = (script.prompt_tokens(k as u32), script.max_tokens(k as u32));
                    if lengths != (Some(r.prompt_tokens_intended), Some(r.output_tokens_intended)) {
                        let got =
                            format!("{} prompt / {} max tokens", r.prompt_tokens_intended, r.output_tokens_intended);
                        m.push(Mismatch::new(&c.path, field("intended lengths"), got, format!("{lengths:?}")));
                    }
                    let due = match prev {
                        Some(p) if prev_ok => p.done_ns,
                        Some(p) => Some(p.intended_ns),
                        None => None,
                    };
                    if due != Some(r.intended_ns) {
                        let want = due.map_or("none".into(), |d| d.to_string());
                        m.push(Mismatch::new(&c.path, field("intended_ns"), r.intended_ns.to_string(), want));
                    }
                }
                match (&t.body_sha256, prev_ok) {
                    (Some(recorded), true) => {
                        bodies += 1;
                        let rebuilt = script.body(k as u32, &replies).map(|b| sha256_hex(&b));
                        if rebuilt.as_deref() != Some(recorded.as_str()) {
                            let want = rebuilt.unwrap_or_else(|| "no such turn".into());
                            m.push(Mismatch::new(&c.path, field("body_sha256"), recorded, want));
                        }
                    }
                    (Some(_), false) => {
                        m.push(Mismatch::new(&c.path, field("sent"), "sent", "never: an earlier turn failed"))
                    }
                    (None, ok) => {
                        let ended = r.failure.as_ref().is_some_and(|f| f.class == "session_ended");
                        if ok || !ended {
                            let got = format!("not sent ({})", r.failure_class());
                            m.push(Mismatch::new(
                                &c.path,
                                field("sent"),
                                got,
                                "sent, or session_ended after a failure",
                            ));
                        }
                    }
                }
                replies.push(t.reply.as_deref().unwrap_or(""));
            }
        }
    }
    Check::of(NAME, format!("{sessions} sessions, {bodies} turn bodies rebuilt"), m)
}
