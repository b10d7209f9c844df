//! Per-request output text and stop-string matching, owned by the engine loop.
//!
//! Why here and not in the HTTP task: the finish reason is then decided in one
//! place. A stop string ends the sequence in the same step that samples the
//! token completing it, so the metrics (`finished_reason="stop"`), the step
//! receipt, the usage and the client all say `stop`, and no token is generated
//! past it. (The alternative, the HTTP task matching and sending a command back,
//! races the engine: the request may already have finished as `length`, or run
//! more steps, by the time the command arrives.) The loop detokenizes each token
//! once, here, and sends the text with the token, so the HTTP task does not
//! detokenize again; it only holds back text that might begin a stop string
//! and cuts the text at the match.

use crate::tokenizer::{IncrementalDecoder, Tokenizer};

pub struct StopChecker {
    decoder: IncrementalDecoder,
    stops: Vec<String>,
    /// The last `longest stop - 1` bytes of text before the newest piece: a
    /// stop string completed by the newest piece starts inside it or later.
    tail: String,
    keep: usize,
}

impl StopChecker {
    pub fn new(stops: Vec<String>) -> Self {
        let keep = stops.iter().map(|s| s.len()).max().unwrap_or(1).saturating_sub(1);
        StopChecker { decoder: IncrementalDecoder::new(true), stops, tail: String::new(), keep }
    }

    /// The text `token` completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, token: u32) -> String {
        self.decoder.push(tok, token).unwrap_or_default()
    }

    /// Any text held back by the decoder (an incomplete character), at the end.
    pub fn flush(&mut self, tok: &Tokenizer) -> String {
        self.decoder.finish(tok).unwrap_or_default()
    }

    /// Looks for a stop string ending in `piece` (the newest text); returns the
    /// one that starts earliest (the first listed on a tie).
    pub fn check(&mut self, piece: &str) -> Option<String> {
        if self.stops.is_empty() {
            return None;
        }
        self.tail.push_str(piece);
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.tail.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
            .map(|(_, s)| s.clone());
        let mut cut = self.tail.len().saturating_sub(self.keep);
        while !self.tail.is_char_boundary(cut) {
            cut -= 1;
        }
        self.tail.drain(..cut);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_stop_string_split_across_pieces_and_prefers_the_earliest() {
        let mut c = StopChecker::new(vec!["ard".into(), "wiz".into()]);
        assert_eq!(c.check("a w"), None);
        assert_eq!(c.check("i"), None);
        assert_eq!(c.check("zard"), Some("wiz".into()), "wiz starts before ard");
        let mut c = StopChecker::new(vec![]);
        assert_eq!(c.check("anything"), None);
    }
}
