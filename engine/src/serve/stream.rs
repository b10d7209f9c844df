//! SSE streaming of one request: the chat role marker first, then a chunk per
//! `stream_interval` tokens of a choice (usage on each with vLLM's
//! `continuous_usage_stats`), the final usage chunk when asked for, and
//! `[DONE]`. A server failure ends the stream with an OpenAI-shaped error
//! event and `[DONE]`, as vLLM does. Dropping the stream drops the event
//! receiver, which the engine loop notices and aborts at its next step.

use super::choice::{ChoiceState, Delta};
use super::engine_loop::Event;
use super::error::ApiError;
use super::response::{
    ChatChunkChoice, ChatDelta, ChoiceExtras, CompletionChoice, Envelope, Usage, chat_logprobs, completion_logprobs,
    finish_fields, prompt_logprobs,
};
use super::state::{Endpoint, Meta};
use crate::tokenizer::Tokenizer;
use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::StreamExt;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

struct StreamState {
    meta: Meta,
    choices: Vec<ChoiceState>,
    buffered: Vec<Delta>,
    rx: UnboundedReceiver<(usize, Event)>,
    tok: Arc<Tokenizer>,
    started: bool,
    done: bool,
}

fn sse<T: Serialize>(v: &T) -> SseEvent {
    // These bodies have only string map keys: serializing cannot fail.
    SseEvent::default().data(serde_json::to_string(v).unwrap_or_default())
}

impl StreamState {
    fn envelope<C>(&self, choices: Vec<C>, usage: Option<Usage>) -> Envelope<'_, C> {
        let object = match self.meta.endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat => "chat.completion.chunk",
        };
        Envelope { id: &self.meta.id, object, created: self.meta.created, model: &self.meta.model, choices, usage }
    }

    /// vLLM's `continuous_usage_stats`: the choice's usage so far on every chunk.
    fn chunk_usage(&self, index: usize) -> Option<Usage> {
        self.meta.continuous_usage.then(|| Usage::of_choice(&self.choices[index]))
    }

    fn chunk(&self, index: usize, d: &Delta, first: bool) -> SseEvent {
        let tok = &*self.tok;
        let c = &self.choices[index];
        let (finish_reason, stop_reason) = finish_fields(d.finish.as_ref());
        let extras = ChoiceExtras {
            token_ids: self.meta.return_token_ids.then(|| d.token_ids.clone()),
            prompt_token_ids: (self.meta.return_token_ids && first).then(|| c.prompt_ids.clone()),
            prompt_logprobs: c.prompt_logprobs.as_ref().filter(|_| first).map(|lp| prompt_logprobs(lp, tok)),
        };
        let usage = self.chunk_usage(index);
        match self.meta.endpoint {
            Endpoint::Completions => {
                let offset = c.text.len() - d.text.len();
                let choice = CompletionChoice {
                    index,
                    text: d.text.clone(),
                    finish_reason,
                    stop_reason,
                    logprobs: self.meta.logprobs.map(|_| completion_logprobs(&d.logprobs, tok, offset)),
                    extras,
                };
                sse(&self.envelope(vec![choice], usage))
            }
            Endpoint::Chat => {
                let content = (!(d.text.is_empty() && d.finish.is_some())).then(|| d.text.clone());
                let choice = ChatChunkChoice {
                    index,
                    delta: ChatDelta { role: None, content },
                    finish_reason,
                    stop_reason,
                    logprobs: self.meta.logprobs.map(|_| chat_logprobs(&d.logprobs, tok)),
                    extras,
                };
                sse(&self.envelope(vec![choice], usage))
            }
        }
    }

    /// The SSE events that follow the next engine event (possibly none).
    async fn next_events(&mut self) -> Option<Vec<SseEvent>> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            if self.meta.endpoint == Endpoint::Chat {
                for index in 0..self.choices.len() {
                    let c = ChatChunkChoice {
                        index,
                        delta: ChatDelta { role: Some("assistant"), content: Some(String::new()) },
                        finish_reason: None,
                        stop_reason: None,
                        logprobs: None,
                        extras: ChoiceExtras::default(),
                    };
                    out.push(sse(&self.envelope(vec![c], self.chunk_usage(index))));
                }
                return Some(out);
            }
        }
        if self.choices.iter().all(|c| c.is_finished()) {
            if self.meta.include_usage {
                let none: Vec<CompletionChoice> = Vec::new();
                out.push(sse(&self.envelope(none, Some(Usage::of(&self.choices)))));
            }
            out.push(SseEvent::default().data("[DONE]"));
            self.done = true;
            return Some(out);
        }
        let Some((i, ev)) = self.rx.recv().await else {
            // The engine dropped the request: end the stream without [DONE].
            self.done = true;
            return Some(out);
        };
        let first_for_choice = self.buffered[i].token_ids.is_empty() && self.choices[i].completion_tokens == 0;
        let d = self.choices[i].on_event(ev);
        if let Some(message) = self.choices[i].error.clone() {
            // As vLLM: an OpenAI-shaped error event, then [DONE], then the end.
            out.push(sse(&ApiError::Internal(message).body()));
            out.push(SseEvent::default().data("[DONE]"));
            self.done = true;
            return Some(out);
        }
        self.buffered[i].merge(d);
        let b = &self.buffered[i];
        if b.finish.is_some() || b.token_ids.len() >= self.meta.stream_interval {
            let d = std::mem::take(&mut self.buffered[i]);
            let first = first_for_choice || self.choices[i].completion_tokens == d.token_ids.len();
            out.push(self.chunk(i, &d, first));
        }
        Some(out)
    }
}

pub fn stream_response(
    meta: Meta,
    choices: Vec<ChoiceState>,
    rx: UnboundedReceiver<(usize, Event)>,
    tok: Arc<Tokenizer>,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let n = choices.len();
    let st = StreamState { meta, choices, buffered: vec![Delta::default(); n], rx, tok, started: false, done: false };
    let stream = futures_util::stream::unfold(st, |mut st| async move { st.next_events().await.map(|evs| (evs, st)) })
        .flat_map(|evs| futures_util::stream::iter(evs.into_iter().map(Ok)));
    Sse::new(stream)
}
