//! `prompts.source = "sharegpt"`: the ShareGPT JSON format that vLLM bench and
//! guidellm read, `[{"conversations": [{"from": "human", "value": ".."}, {"from":
//! "gpt", "value": ".."}, ..]}, ..]` (`role`/`content` are accepted as the key names,
//! `user`/`assistant` as the roles; other keys are ignored). Sampling as vLLM's
//! `ShareGPTDataset`: the first human turn is the prompt (raw text, no chat
//! template, as token IDs for /v1/completions; with `chat`, also as one user
//! message for /v1/chat/completions, the server applying its template), the first
//! assistant turn
//! after it gives the output length (its token count); conversations are shuffled
//! with a seeded Fisher-Yates and taken in that order, dropping those whose prompt
//! or output has fewer than `min_tokens` tokens, whose prompt exceeds
//! `max_prompt_tokens` or whose prompt + output exceeds `max_total_tokens`, until
//! `num_requests` are kept. Must not oversample: too few is an error.
//!
//! Sessions (`prompts.max_turns = N`, chat endpoint only): an entry is the
//! conversation's first pair (as above) followed by up to N - 1 further pairs, each
//! the next turn when it is a human turn and the turn right after it an assistant
//! turn (the session stops at the first turn that breaks the alternation). Every
//! pair is a user turn (its text, sent as one user message after the history) and
//! that turn's output length (the answer's token count). The filters apply per
//! turn: a user turn or answer under `min_tokens` or a user turn over
//! `max_prompt_tokens` ends the session before that turn, and so does a running
//! total (every user turn and answer so far) over `max_total_tokens`; a
//! conversation whose first pair fails is dropped as in the single-turn case.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use super::{ChatMessage, Entry, SessionTurn, seed_of, too_few};
use crate::plan::ShareGptSpec;
use crate::plan::seed::{below, rng};
use crate::trace::panel::io_err;
use crate::trace::{Encoder, TraceError};

/// Conversations encoded per batch while sampling.
const BATCH: usize = 2048;

#[derive(Deserialize)]
struct Conversation<'a> {
    #[serde(borrow)]
    conversations: Vec<Turn<'a>>,
}

#[derive(Deserialize)]
struct Turn<'a> {
    #[serde(alias = "role", borrow)]
    from: Cow<'a, str>,
    #[serde(alias = "content", borrow)]
    value: Cow<'a, str>,
}

fn is_human(role: &str) -> bool {
    matches!(role, "human" | "user")
}

fn is_assistant(role: &str) -> bool {
    matches!(role, "gpt" | "assistant" | "chatgpt" | "bard" | "model")
}

/// The first human turn and the first assistant turn after it, then (up to
/// `max_turns` pairs in all) each following human turn with the assistant turn right
/// after it.
fn pairs<'c, 'a>(c: &'c Conversation<'a>, max_turns: usize) -> Vec<(&'c str, &'c str)> {
    let turns = &c.conversations;
    let Some(h) = turns.iter().position(|t| is_human(&t.from)) else { return Vec::new() };
    let Some(a) = turns[h + 1..].iter().position(|t| is_assistant(&t.from)).map(|k| h + 1 + k) else {
        return Vec::new();
    };
    let mut out = vec![(&*turns[h].value, &*turns[a].value)];
    let mut next = a + 1;
    while out.len() < max_turns && next + 1 < turns.len() {
        let (u, r) = (&turns[next], &turns[next + 1]);
        if !(is_human(&u.from) && is_assistant(&r.from)) {
            break;
        }
        out.push((&*u.value, &*r.value));
        next += 2;
    }
    out
}

/// Samples `n` requests from the ShareGPT-format file at `path`.
pub fn sharegpt(
    spec: &ShareGptSpec,
    path: &Path,
    enc: &dyn Encoder,
    study_seed: u64,
    n: usize,
    chat: bool,
) -> Result<Vec<Entry>, TraceError> {
    sharegpt_sessions(spec, path, enc, study_seed, n, chat, None)
}

/// [`sharegpt`], with `max_turns`: each entry a session of up to that many turns.
pub fn sharegpt_sessions(
    spec: &ShareGptSpec,
    path: &Path,
    enc: &dyn Encoder,
    study_seed: u64,
    n: usize,
    chat: bool,
    max_turns: Option<u32>,
) -> Result<Vec<Entry>, TraceError> {
    let max_turns = max_turns.map_or(1, |m| m.max(1) as usize);
    let text = crate::evidence::read_input_text(path).map_err(io_err(path))?;
    let what = path.display().to_string();
    let all: Vec<Conversation<'_>> = serde_json::from_str(&text).map_err(|e| TraceError::Malformed {
        what: what.clone(),
        message: format!("not a ShareGPT-format JSON array of {{\"conversations\": [..]}} objects: {e}"),
    })?;
    let mut candidates: Vec<(usize, Vec<(&str, &str)>)> =
        all.iter().enumerate().map(|(i, c)| (i, pairs(c, max_turns))).filter(|(_, p)| !p.is_empty()).collect();
    let unpaired = all.len() - candidates.len();
    let mut r = rng(seed_of(b"harness/sharegpt/v1\0", study_seed, None));
    for i in (1..if spec.shuffle { candidates.len() } else { 0 }).rev() {
        let j = below(&mut r, i as u64 + 1) as usize;
        candidates.swap(i, j);
    }
    let (mut short, mut long) = (0usize, 0usize);
    let mut out = Vec::with_capacity(n);
    // Each distinct text is encoded once (a speech is often one conversation's
    // answer and the next one's prompt; datasets repeat prompts).
    let mut known: HashMap<&str, Vec<u32>> = HashMap::new();
    for chunk in candidates.chunks(BATCH) {
        if out.len() >= n {
            break;
        }
        let mut fresh: Vec<&str> = Vec::new();
        let mut queued: HashSet<&str> = HashSet::new();
        for (_, session) in chunk {
            for &(p, a) in session {
                for t in [p, a] {
                    if !known.contains_key(t) && queued.insert(t) {
                        fresh.push(t);
                    }
                }
            }
        }
        let encoded = enc.encode_batch(&fresh).map_err(|message| TraceError::Encode { file: what.clone(), message })?;
        if encoded.len() != fresh.len() {
            return Err(TraceError::Encode { file: what.clone(), message: "the encoder lost a text".into() });
        }
        known.extend(fresh.into_iter().zip(encoded));
        for (i, session) in chunk {
            if out.len() >= n {
                break;
            }
            let lost = || TraceError::Encode { file: what.clone(), message: "the encoder lost a text".into() };
            let mut kept: Vec<(&str, &Vec<u32>, usize)> = Vec::new();
            let mut total = 0usize;
            // Why the session stopped early: `Some(true)` too short, `Some(false)` too long.
            let mut first_fail: Option<bool> = None;
            for &(human, answer) in session {
                let (prompt, reply) = (known.get(human).ok_or_else(lost)?, known.get(answer).ok_or_else(lost)?);
                let (p, a) = (prompt.len(), reply.len());
                total += p + a;
                let min = spec.min_tokens as usize;
                let over = |cap: Option<u32>, v: usize| cap.is_some_and(|cap| v > cap as usize);
                if p < min || a < min {
                    first_fail = Some(true);
                } else if over(spec.max_prompt_tokens, p) || over(spec.max_total_tokens, total) {
                    first_fail = Some(false);
                }
                if first_fail.is_some() {
                    break;
                }
                kept.push((human, prompt, a));
            }
            if kept.is_empty() {
                match first_fail {
                    Some(true) => short += 1,
                    _ => long += 1,
                }
                continue;
            }
            let (human, prompt, a) = kept[0];
            let next_turns = kept[1..]
                .iter()
                .map(|&(text, tokens, a)| SessionTurn {
                    length: tokens.len() as u32,
                    output_tokens: Some(a as u32),
                    max_tokens: None,
                    content: text.to_string(),
                })
                .collect();
            out.push(Entry {
                tokens: prompt.clone(),
                output_tokens: Some(a as u32),
                source: format!("{}#{i}", spec.path),
                offset: 0,
                messages: chat.then(|| vec![ChatMessage { role: "user".into(), content: human.to_string() }]),
                next_turns,
            });
        }
    }
    if out.len() < n {
        let why = format!(
            " (of {} conversations: {unpaired} without a human turn followed by an assistant turn, {short} with a \
             prompt or output under prompts.min_tokens = {}, {long} over prompts.max_prompt_tokens = {} or \
             max_total_tokens = {})",
            all.len(),
            spec.min_tokens,
            spec.max_prompt_tokens.map_or("none".into(), |v| v.to_string()),
            spec.max_total_tokens.map_or("none".into(), |v| v.to_string()),
        );
        return Err(too_few(&what, n, out.len(), &why));
    }
    Ok(out)
}
