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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use super::{ChatMessage, Entry, seed_of, too_few};
use crate::plan::ShareGptSpec;
use crate::trace::panel::io_err;
use crate::trace::seed::{below, rng};
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

/// The first human turn and the first assistant turn after it.
fn pair<'c, 'a>(c: &'c Conversation<'a>) -> Option<(&'c str, &'c str)> {
    let h = c.conversations.iter().position(|t| is_human(&t.from))?;
    let a = c.conversations[h + 1..].iter().find(|t| is_assistant(&t.from))?;
    Some((&*c.conversations[h].value, &*a.value))
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
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let what = path.display().to_string();
    let all: Vec<Conversation<'_>> = serde_json::from_str(&text).map_err(|e| TraceError::Malformed {
        what: what.clone(),
        message: format!("not a ShareGPT-format JSON array of {{\"conversations\": [..]}} objects: {e}"),
    })?;
    let mut candidates: Vec<(usize, &str, &str)> =
        all.iter().enumerate().filter_map(|(i, c)| pair(c).map(|(p, a)| (i, p, a))).collect();
    let unpaired = all.len() - candidates.len();
    let mut r = rng(seed_of(b"harness/sharegpt/v1\0", study_seed, None));
    for i in (1..candidates.len()).rev() {
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
        for &(_, p, a) in chunk {
            for t in [p, a] {
                if !known.contains_key(t) && queued.insert(t) {
                    fresh.push(t);
                }
            }
        }
        let encoded = enc.encode_batch(&fresh).map_err(|message| TraceError::Encode { file: what.clone(), message })?;
        if encoded.len() != fresh.len() {
            return Err(TraceError::Encode { file: what.clone(), message: "the encoder lost a text".into() });
        }
        known.extend(fresh.into_iter().zip(encoded));
        for &(i, human, answer) in chunk {
            let (Some(prompt), Some(answer)) = (known.get(human), known.get(answer)) else {
                return Err(TraceError::Encode { file: what.clone(), message: "the encoder lost a text".into() });
            };
            if out.len() >= n {
                break;
            }
            let (p, a) = (prompt.len(), answer.len());
            let min = spec.min_tokens as usize;
            if p < min || a < min {
                short += 1;
                continue;
            }
            let over = |cap: Option<u32>, v: usize| cap.is_some_and(|cap| v > cap as usize);
            if over(spec.max_prompt_tokens, p) || over(spec.max_total_tokens, p + a) {
                long += 1;
                continue;
            }
            out.push(Entry {
                tokens: prompt.clone(),
                output_tokens: Some(a as u32),
                source: format!("{}#{i}", spec.path),
                offset: 0,
                messages: chat.then(|| vec![ChatMessage { role: "user".into(), content: human.to_string() }]),
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
