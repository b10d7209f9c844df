//! Streaming detokenization: token IDs in, text deltas out, for the server's
//! SSE stream. A delta never splits a multi-byte character (a token that ends
//! inside one holds back only that character's bytes, never complete text
//! before it), and the deltas plus `finish()` concatenate to exactly
//! `Tokenizer::decode` of all the IDs. Owns nothing but the decoding window; it
//! borrows the tokenizer per call so it can live in a `'static` stream.

use super::Tokenizer;
use crate::error::Result;

const REPLACEMENT: char = '\u{FFFD}';

/// Incremental decoder for one sequence.
///
/// It decodes a small window of recent IDs: the window starts with one
/// already-emitted context token (so decoders that treat the first token
/// specially, such as SentencePiece's leading-space rule, see their real
/// context), and `emitted` bytes of the window's text have been returned.
/// Text ending in U+FFFD is an incomplete character: it waits for more IDs.
#[derive(Debug, Clone)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    window_start: usize,
    emitted: usize,
    skip_special_tokens: bool,
}

impl IncrementalDecoder {
    pub fn new(skip_special_tokens: bool) -> Self {
        IncrementalDecoder { ids: Vec::new(), window_start: 0, emitted: 0, skip_special_tokens }
    }

    /// All IDs pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Adds one ID; returns the text it completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = tok.decode(&self.ids[self.window_start..], self.skip_special_tokens)?;
        let stable = text.trim_end_matches(REPLACEMENT).len();
        let mut delta = String::new();
        if stable > self.emitted
            && let Some(s) = text.get(self.emitted..stable)
        {
            delta.push_str(s);
            self.emitted = stable;
        }
        if stable == text.len() && self.emitted == text.len() {
            // Nothing pending: keep only the last ID as context, unless alone it
            // decodes to the tail of a character begun earlier.
            let last = self.ids.len() - 1;
            if last > self.window_start {
                let ctx = tok.decode(&self.ids[last..], self.skip_special_tokens)?;
                if !ctx.starts_with(REPLACEMENT) {
                    self.window_start = last;
                    self.emitted = ctx.len();
                }
            }
        }
        Ok(delta)
    }

    /// Ends the sequence: returns any held-back text (an incomplete character
    /// decodes as U+FFFD, as in a full decode).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String> {
        let text = tok.decode(&self.ids[self.window_start..], self.skip_special_tokens)?;
        let delta = text.get(self.emitted..).unwrap_or_default().to_string();
        self.emitted = text.len();
        Ok(delta)
    }
}
