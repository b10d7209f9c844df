//! One choice's output as it streams: the text pieces the engine loop sends
//! (it detokenizes and decides stop-string finishes, see `stop`), held back
//! while they could still begin a stop string and cut at the match, and the
//! pieces each endpoint formats into chunks or a response.

use super::engine_loop::{Event, FinishReason, StopReason};
use super::sampling::TokenLogprob;

/// What a choice adds since the last delta.
#[derive(Debug, Default, Clone)]
pub struct Delta {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<TokenLogprob>,
    pub finish: Option<FinishReason>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.token_ids.is_empty() && self.finish.is_none()
    }

    pub fn merge(&mut self, other: Delta) {
        self.text.push_str(&other.text);
        self.token_ids.extend(other.token_ids);
        self.logprobs.extend(other.logprobs);
        if other.finish.is_some() {
            self.finish = other.finish;
        }
    }
}

pub struct ChoiceState {
    pub request_id: String,
    pub prompt_ids: Vec<u32>,
    stop: Vec<String>,
    holdback: usize,
    /// Decoded text not yet released (may start a stop string).
    pending: String,
    pub text: String,
    pub completion_tokens: usize,
    pub finish: Option<FinishReason>,
    pub prompt_logprobs: Option<Vec<TokenLogprob>>,
    /// Why the server failed it (finish `error`).
    pub error: Option<String>,
    /// Prompt tokens served from the prefix cache at its first admission.
    pub cached_tokens: usize,
}

impl ChoiceState {
    pub fn new(request_id: String, prompt_ids: Vec<u32>, stop: Vec<String>) -> Self {
        let holdback = stop.iter().map(|s| s.len()).max().unwrap_or(1).saturating_sub(1);
        ChoiceState {
            request_id,
            prompt_ids,
            stop,
            holdback,
            pending: String::new(),
            text: String::new(),
            completion_tokens: 0,
            finish: None,
            prompt_logprobs: None,
            error: None,
            cached_tokens: 0,
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Applies one engine event; returns what to emit (possibly empty).
    pub fn on_event(&mut self, ev: Event) -> Delta {
        let mut d = Delta::default();
        if self.finish.is_some() {
            return d;
        }
        match ev {
            Event::PromptLogprobs(lp) => self.prompt_logprobs = Some(lp),
            Event::Admitted { cached_tokens } => self.cached_tokens = cached_tokens,
            Event::Aborted => {
                d.text = std::mem::take(&mut self.pending);
                self.finish = Some(FinishReason::Abort);
            }
            Event::Failed(message) => {
                d.text = std::mem::take(&mut self.pending);
                self.finish = Some(FinishReason::Error);
                self.error = Some(message);
            }
            Event::Token { token, text, logprob, finish } => {
                self.completion_tokens += 1;
                d.token_ids.push(token);
                d.logprobs.extend(logprob);
                self.pending.push_str(&text);
                d.text = match &finish {
                    Some(FinishReason::Stop(StopReason::String(_))) => {
                        let cut = self.find_stop().unwrap_or(self.pending.len());
                        self.pending.truncate(cut);
                        std::mem::take(&mut self.pending)
                    }
                    Some(_) => std::mem::take(&mut self.pending),
                    None => self.release_safe(),
                };
                self.finish = finish;
            }
        }
        d.finish = self.finish.clone();
        self.text.push_str(&d.text);
        d
    }

    fn find_stop(&self) -> Option<usize> {
        self.stop.iter().filter_map(|s| self.pending.find(s.as_str())).min()
    }

    /// Releases pending text except the last `holdback` bytes (on a char boundary).
    fn release_safe(&mut self) -> String {
        if self.stop.is_empty() {
            return std::mem::take(&mut self.pending);
        }
        let mut keep_from = self.pending.len().saturating_sub(self.holdback);
        while !self.pending.is_char_boundary(keep_from) {
            keep_from -= 1;
        }
        let rest = self.pending.split_off(keep_from);
        std::mem::replace(&mut self.pending, rest)
    }
}
