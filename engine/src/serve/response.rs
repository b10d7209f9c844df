//! Typed response bodies (OpenAI's shapes with vLLM's extras): completion and
//! chat responses, stream chunks, usage (with cached prompt tokens),
//! completions-style and chat-style logprobs, and vLLM's prompt_logprobs. The
//! builders turn engine results (`TokenLogprob`, `FinishReason`) into them.

use super::choice::ChoiceState;
use super::sampling::TokenLogprob;
use crate::finish::{FinishReason, StopReason};
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

impl Usage {
    pub fn new(prompt: usize, completion: usize, cached: usize) -> Self {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: cached },
        }
    }

    /// One choice so far (`continuous_usage_stats`).
    pub fn of_choice(c: &ChoiceState) -> Self {
        Usage::new(c.prompt_ids.len(), c.completion_tokens, c.cached_tokens)
    }

    /// A whole request.
    pub fn of(choices: &[ChoiceState]) -> Self {
        let sum = |f: fn(&ChoiceState) -> usize| choices.iter().map(f).sum();
        Usage::new(sum(|c| c.prompt_ids.len()), sum(|c| c.completion_tokens), sum(|c| c.cached_tokens))
    }
}

/// vLLM's `stop_reason`: the stop string that matched or the stop token ID.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StopReasonOut {
    Token(u32),
    String(String),
}

/// `finish_reason` and `stop_reason` of a (possibly unfinished) choice.
pub fn finish_fields(f: Option<&FinishReason>) -> (Option<&'static str>, Option<StopReasonOut>) {
    let stop = match f {
        Some(FinishReason::Stop(StopReason::Token(t))) => Some(StopReasonOut::Token(*t)),
        Some(FinishReason::Stop(StopReason::String(s))) => Some(StopReasonOut::String(s.clone())),
        _ => None,
    };
    (f.map(FinishReason::as_str), stop)
}

#[derive(Debug, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f64>,
    /// Per position: the top k and, when it is not among them, the sampled token.
    pub top_logprobs: Vec<BTreeMap<String, f64>>,
    pub text_offset: Vec<usize>,
}

#[derive(Debug, Serialize)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Serialize)]
pub struct PromptLogprob {
    pub logprob: f64,
    pub rank: usize,
    pub decoded_token: String,
}

/// vLLM's format: `[null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]`.
pub type PromptLogprobs = Vec<Option<BTreeMap<String, PromptLogprob>>>;

/// vLLM's extras on a choice, present only when asked for.
#[derive(Debug, Default, Serialize)]
pub struct ChoiceExtras {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

#[derive(Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonOut>,
    pub logprobs: Option<CompletionLogprobs>,
    #[serde(flatten)]
    pub extras: ChoiceExtras,
}

#[derive(Debug, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: Message,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonOut>,
    pub logprobs: Option<ChatLogprobs>,
    #[serde(flatten)]
    pub extras: ChoiceExtras,
}

#[derive(Debug, Default, Serialize)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub finish_reason: Option<&'static str>,
    pub stop_reason: Option<StopReasonOut>,
    pub logprobs: Option<ChatLogprobs>,
    #[serde(flatten)]
    pub extras: ChoiceExtras,
}

/// A response or a stream chunk: `choices` of one kind, and usage when due.
#[derive(Debug, Serialize)]
pub struct Envelope<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

/// Completions-style logprobs; `offset` is the text length before these tokens.
pub fn completion_logprobs(lps: &[TokenLogprob], tok: &Tokenizer, offset: usize) -> CompletionLogprobs {
    let mut text_offset = Vec::with_capacity(lps.len());
    let mut at = offset;
    let tokens: Vec<String> = lps
        .iter()
        .map(|l| {
            let t = token_text(tok, l.token);
            text_offset.push(at);
            at += t.len();
            t
        })
        .collect();
    let top = |l: &TokenLogprob| {
        let mut m: BTreeMap<String, f64> = l.top.iter().map(|(id, lp)| (token_text(tok, *id), *lp)).collect();
        if !l.top.iter().any(|(id, _)| *id == l.token) {
            // As vLLM: the sampled token is an extra entry when not in the top k.
            m.entry(token_text(tok, l.token)).or_insert(l.logprob);
        }
        m
    };
    CompletionLogprobs {
        tokens,
        token_logprobs: lps.iter().map(|l| l.logprob).collect(),
        top_logprobs: lps.iter().map(top).collect(),
        text_offset,
    }
}

pub fn chat_logprobs(lps: &[TokenLogprob], tok: &Tokenizer) -> ChatLogprobs {
    let top = |id: u32, logprob: f64| {
        let token = token_text(tok, id);
        ChatTopLogprob { bytes: token.as_bytes().to_vec(), token, logprob }
    };
    let content = lps
        .iter()
        .map(|l| {
            let token = token_text(tok, l.token);
            ChatTokenLogprob {
                bytes: token.as_bytes().to_vec(),
                token,
                logprob: l.logprob,
                top_logprobs: l.top.iter().map(|(id, lp)| top(*id, *lp)).collect(),
            }
        })
        .collect();
    ChatLogprobs { content }
}

pub fn prompt_logprobs(lps: &[TokenLogprob], tok: &Tokenizer) -> PromptLogprobs {
    let mut out = vec![None];
    for l in lps {
        let mut m = BTreeMap::new();
        m.insert(
            l.token.to_string(),
            PromptLogprob { logprob: l.logprob, rank: l.rank, decoded_token: token_text(tok, l.token) },
        );
        for (rank, (id, lp)) in l.top.iter().enumerate() {
            m.entry(id.to_string()).or_insert_with(|| PromptLogprob {
                logprob: *lp,
                rank: rank + 1,
                decoded_token: token_text(tok, *id),
            });
        }
        out.push(Some(m));
    }
    out
}
