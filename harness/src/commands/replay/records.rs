//! Replay's own reading of raw request records and engine receipts: lean serde
//! types holding only what replay recomputes from (token IDs are skipped, unknown
//! keys ignored), in the formats `record::RequestRecord` and the engine's
//! `serve::receipts::Receipt` define. Must not compute anything.

use serde::Deserialize;

/// One SSE event of a request record (`token_ids` is not needed to recompute).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Event {
    pub t_ns: u64,
    pub tokens: u32,
    /// Of `tokens`, the reasoning ones (absent: 0).
    #[serde(default)]
    pub reasoning: u32,
}

/// `failure` of a record: its class tag and, for a timeout, when it fired.
#[derive(Debug, Clone, Deserialize)]
pub struct Failure {
    pub class: String,
    #[serde(default)]
    pub after_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    #[serde(default)]
    pub reasoning_tokens: Option<u32>,
}

/// One line of `<cell>.requests.jsonl`.
#[derive(Debug, Clone, Deserialize)]
pub struct Rec {
    pub id: String,
    pub cell: String,
    pub block: u32,
    pub arm: String,
    pub index: u64,
    pub prompt: u64,
    pub prompt_tokens_intended: u32,
    #[serde(default)]
    pub output_tokens_intended: u32,
    pub intended_ns: u64,
    pub dispatch_ns: Option<u64>,
    pub admitted_ns: Option<u64>,
    pub send_ns: Option<u64>,
    pub headers_ns: Option<u64>,
    pub events: Vec<Event>,
    pub done_ns: Option<u64>,
    /// The HTTP status, when a response came.
    #[serde(default)]
    pub status: Option<u16>,
    pub failure: Option<Failure>,
    pub usage: Option<Usage>,
    pub server_request_id: Option<String>,
    /// The light recorder kept only the first token-bearing event.
    #[serde(default)]
    pub light: bool,
    /// A multi-turn session's turn (`record::TurnRecord`).
    #[serde(default)]
    pub turn: Option<crate::evidence::request_record::TurnRecord>,
    /// The round of an interleaved block that sent it.
    #[serde(default)]
    pub round: Option<u32>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

impl Rec {
    /// Valid completed: no failure and a `[DONE]`.
    pub fn valid(&self) -> bool {
        self.failure.is_none() && self.done_ns.is_some()
    }

    /// The failure class, `incomplete_unclassified` when neither failed nor done.
    pub fn failure_class(&self) -> &str {
        self.failure.as_ref().map_or("incomplete_unclassified", |f| f.class.as_str())
    }
}

/// One line of `receipts.jsonl`: the ids a scheduler step admitted, resumed,
/// preempted and finished, its time and its token counts.
#[derive(Debug, Clone, Deserialize)]
pub struct Receipt {
    pub admitted: Vec<String>,
    pub resumed: Vec<String>,
    pub preempted: Vec<String>,
    #[serde(default)]
    pub step: u64,
    #[serde(default)]
    pub t_ns: u64,
    #[serde(default)]
    pub finished: Vec<String>,
    #[serde(default)]
    pub prefill_tokens: u64,
    #[serde(default)]
    pub decode_tokens: u64,
}
