//! Dataset panel sources: turn a ShareGPT-format file, a JSONL of requests, named
//! length distributions over natural text, groups sharing a prefix of natural
//! text, vLLM's random dataset (NumPy's generator, `numpy_random`), or vLLM's
//! burstgpt and prefix_repetition datasets (NumPy's legacy and Python's
//! Mersenne Twister, `mt19937`) into an ordered list of entries
//! (prompt token IDs, the entry's own output length when the source has one, and
//! where it came from). Owns each format's reading, its filters and its seeded
//! sampling, and each entry's chat messages when the plan sends them to the chat
//! endpoint. Must not link a tokenizer (text goes through the caller's `Encoder`),
//! must not decide `max_tokens` or the EOS flag (the panel applies the plan), and
//! must never pad a short dataset: fewer entries than asked is an error that says
//! how many there are.
//!
//! Seeds (shared_prefix: see its module): the ShareGPT shuffle uses SHA-256 of `b"harness/sharegpt/v1\0"` and the
//! study seed (8 bytes LE); synthetic entry i uses SHA-256 of
//! `b"harness/synthetic/v1\0"`, the study seed and i (8 bytes LE each); both seed
//! xoshiro256++ as in `seed`.

mod mt19937;
mod numpy_random;
mod requests;
mod shared_prefix;
mod sharegpt;
mod synthetic;
mod vllm_burstgpt;
mod vllm_prefix_repetition;
mod vllm_random;

#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;

use sha2::{Digest, Sha256};

pub use crate::trace::panel::{ChatMessage, SessionTurn};

pub use requests::{LineRoutes, requests, requests_sessions};
pub use shared_prefix::shared_prefix;
pub use sharegpt::{sharegpt, sharegpt_sessions};
pub use synthetic::{draw_length, synthetic, synthetic_random};
pub use vllm_burstgpt::vllm_burstgpt;
pub use vllm_prefix_repetition::vllm_prefix_repetition;
pub use vllm_random::vllm_random;

/// One request of a dataset panel, before the plan's output settings apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub tokens: Vec<u32>,
    /// The entry's own output length, when the source gives one.
    pub output_tokens: Option<u32>,
    /// `<path>#<conversation>`, `<path>:<line>` or a text file's name.
    pub source: String,
    /// Token offset of a cut from natural text (0 otherwise).
    pub offset: u64,
    /// Chat messages, for `request.endpoint = "chat"` (`sharegpt`: the first human
    /// turn as one user message; `requests`: a line's `messages`, or its `prompt` as
    /// one user message). `None` otherwise.
    pub messages: Option<Vec<ChatMessage>>,
    /// A session's user turns after the first (`prompts.max_turns`), each with its
    /// own output length; empty for a single request.
    pub next_turns: Vec<SessionTurn>,
}

/// A 32-byte seed from a tag, the study seed and an index.
fn seed_of(tag: &[u8], study_seed: u64, index: Option<u64>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tag);
    h.update(study_seed.to_le_bytes());
    if let Some(i) = index {
        h.update(i.to_le_bytes());
    }
    h.finalize().into()
}

/// Too few entries: always says how many there are and why the rest went.
fn too_few(what: &str, want: usize, got: usize, why: &str) -> super::TraceError {
    super::TraceError::Malformed {
        what: what.to_string(),
        message: format!("{want} requests asked (prompts.num_requests), only {got} available{why}"),
    }
}
