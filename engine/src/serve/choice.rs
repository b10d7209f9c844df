//! One choice's output as it streams: incremental detokenization, stop-string
//! matching (text that could still become a stop string is held back until it
//! cannot), and the pieces each endpoint formats into chunks or a response.

use super::engine_loop::{Event, FinishReason};
use super::sampling::TokenLogprob;
use crate::tokenizer::{IncrementalDecoder, Tokenizer};

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
    decoder: IncrementalDecoder,
    stop: Vec<String>,
    holdback: usize,
    /// Decoded text not yet released (may start a stop string).
    pending: String,
    pub text: String,
    pub completion_tokens: usize,
    pub finish: Option<FinishReason>,
    pub prompt_logprobs: Option<Vec<TokenLogprob>>,
    /// Whether a stop string ended it (the engine must be told to stop).
    pub stopped_by_string: bool,
}

impl ChoiceState {
    pub fn new(request_id: String, prompt_ids: Vec<u32>, stop: Vec<String>) -> Self {
        let holdback = stop.iter().map(|s| s.len()).max().unwrap_or(1).saturating_sub(1);
        ChoiceState {
            request_id,
            prompt_ids,
            decoder: IncrementalDecoder::new(true),
            stop,
            holdback,
            pending: String::new(),
            text: String::new(),
            completion_tokens: 0,
            finish: None,
            prompt_logprobs: None,
            stopped_by_string: false,
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Applies one engine event; returns what to emit (possibly empty).
    pub fn on_event(&mut self, ev: Event, tok: &Tokenizer) -> Delta {
        let mut d = Delta::default();
        if self.finish.is_some() {
            return d; // after a stop string, late tokens are dropped
        }
        match ev {
            Event::PromptLogprobs(lp) => self.prompt_logprobs = Some(lp),
            Event::Aborted => {
                d.text = self.release_all(tok);
                self.finish = Some(FinishReason::Abort);
                d.finish = self.finish;
            }
            Event::Token { token, logprob, finish } => {
                self.completion_tokens += 1;
                d.token_ids.push(token);
                d.logprobs.extend(logprob);
                let piece = self.decoder.push(tok, token).unwrap_or_default();
                self.pending.push_str(&piece);
                if let Some(cut) = self.find_stop() {
                    self.pending.truncate(cut);
                    d.text = std::mem::take(&mut self.pending);
                    self.finish = Some(FinishReason::Stop);
                    self.stopped_by_string = finish.is_none();
                } else if finish.is_some() {
                    d.text = self.release_all(tok);
                    self.finish = finish;
                } else {
                    d.text = self.release_safe();
                }
                d.finish = self.finish;
            }
        }
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

    fn release_all(&mut self, tok: &Tokenizer) -> String {
        let tail = self.decoder.finish(tok).unwrap_or_default();
        self.pending.push_str(&tail);
        if let Some(cut) = self.find_stop() {
            self.pending.truncate(cut);
        }
        std::mem::take(&mut self.pending)
    }
}
