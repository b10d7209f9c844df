//! The raw evidence of one request: its client-side timeline on the study's
//! monotonic clock (nanoseconds since study start), what came back, and how it
//! failed if it did. One JSON line per request in `<cell>.requests.jsonl`.
//! Everything the analysis and replay compute starts from these records; this
//! module defines the format only (no I/O, no aggregation).

use serde::{Deserialize, Serialize};

/// Why a request did not complete validly. Zero retries: every failure stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "class")]
pub enum Failure {
    /// TCP connect failed.
    Connect { detail: String },
    /// The connection was reset or closed before response headers.
    BeforeHeaders { detail: String },
    /// A non-2xx status.
    HttpStatus { status: u16, body: String },
    /// The stream broke after headers (reset, truncated, no [DONE]).
    AfterHeaders { detail: String },
    /// The request exceeded the plan's request timeout.
    Timeout { after_ns: u64 },
    /// An event that is not valid JSON or not a completion chunk.
    MalformedStream { detail: String },
    /// Fewer output tokens than forced (ignore_eos + max_tokens).
    ShortOutput { expected: u32, got: u32 },
    /// usage.prompt_tokens differs from the panel's exact length.
    PromptLengthMismatch { expected: u32, got: u32 },
    /// The arm's server process died while the request was outstanding.
    ServerDied { detail: String },
    /// A later turn of a multi-turn session that was never sent, because turn
    /// `failed_turn` of its session failed (zero retries: the session ends there).
    SessionEnded { failed_turn: u32 },
}

impl Failure {
    /// A stable short name for tables.
    pub fn class(&self) -> &'static str {
        match self {
            Failure::Connect { .. } => "connect",
            Failure::BeforeHeaders { .. } => "before_headers",
            Failure::HttpStatus { .. } => "http_status",
            Failure::AfterHeaders { .. } => "after_headers",
            Failure::Timeout { .. } => "timeout",
            Failure::MalformedStream { .. } => "malformed_stream",
            Failure::ShortOutput { .. } => "short_output",
            Failure::PromptLengthMismatch { .. } => "prompt_length_mismatch",
            Failure::ServerDied { .. } => "server_died",
            Failure::SessionEnded { .. } => "session_ended",
        }
    }
}

/// One received SSE event (`[DONE]` is recorded as `done_ns`, not here).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StreamEvent {
    pub t_ns: u64,
    /// Tokens this event carries: the length of its `token_ids` when the server
    /// returns them, else 1 for a delta with non-empty text (content, or reasoning:
    /// `delta.reasoning` / `delta.reasoning_content`) and 0 otherwise. Role-only,
    /// empty and usage-only events carry 0.
    pub tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// Of `tokens`, how many are reasoning: all of them when the delta carries
    /// reasoning text and no content, else 0. Absent (0) in records written before
    /// reasoning was recorded and for every non-reasoning event.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    /// `completion_tokens_details.reasoning_tokens` when the server reports it
    /// (vLLM, OpenAI): the part of `completion_tokens` spent reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// `<cell>/b<block>/<arm>/<index>`: unique within a study.
    pub id: String,
    pub cell: String,
    pub block: u32,
    pub arm: String,
    /// Position in the cell's trace.
    pub index: u64,
    /// Prompt panel entry sent.
    pub prompt: u64,
    pub prompt_tokens_intended: u32,
    pub output_tokens_intended: u32,
    pub intended_ns: u64,
    pub dispatch_ns: Option<u64>,
    /// Closed loop: when the semaphore admitted it (open loop: equals dispatch).
    pub admitted_ns: Option<u64>,
    pub send_ns: Option<u64>,
    pub headers_ns: Option<u64>,
    pub events: Vec<StreamEvent>,
    pub done_ns: Option<u64>,
    pub status: Option<u16>,
    pub failure: Option<Failure>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// The response `id` (joins to the engine's receipts).
    pub server_request_id: Option<String>,
    /// Recorded by the light recorder (a cell with `recorder = "light"`): `events`
    /// holds only the first token-bearing event; `[DONE]` and usage as always. TPOT
    /// and inter-token gaps are not measured from such a record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub light: bool,
    /// A turn of a multi-turn session (`prompts.max_turns`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnRecord>,
    /// Interleaved blocks (`blocks.rounds` >= 1): the round of the cell that sent
    /// it; the cell's duration is the sum of its rounds' spans. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
}

/// Where a request sits in its multi-turn session, what it sent and what came back.
/// `index` of such a record counts turns across the cell (sessions in trace order,
/// each session's turns in order); `prompt` is the session's panel entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The session's position in the cell's trace.
    pub session: u64,
    /// 0 for the session's first request.
    pub turn: u32,
    /// SHA-256 of the body sent (none when the turn was never sent): the frozen user
    /// turns plus the replies recorded for the earlier turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// The assistant's reply as streamed (its text deltas joined), which the next
    /// turn carries in its history; absent when nothing was streamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
}

/// Where a record sits in the study: its cell, block, arm and position in the cell.
#[derive(Debug, Clone, Copy)]
pub struct RecordKey<'a> {
    pub cell: &'a str,
    pub block: u32,
    pub arm: &'a str,
    pub index: u64,
}

impl RecordKey<'_> {
    /// The record's `id`: `<cell>/b<block>/<arm>/<index>`.
    pub fn id(&self) -> String {
        format!("{}/b{}/{}/{}", self.cell, self.block, self.arm, self.index)
    }
}

impl RequestRecord {
    /// A planned request with no stamps yet: the one constructor of a record (the
    /// load generator fills in the stamps as the request runs).
    pub fn planned(key: RecordKey<'_>, prompt: u64, tokens_intended: (u32, u32), intended_ns: u64) -> RequestRecord {
        RequestRecord {
            id: key.id(),
            cell: key.cell.to_string(),
            block: key.block,
            arm: key.arm.to_string(),
            index: key.index,
            prompt,
            prompt_tokens_intended: tokens_intended.0,
            output_tokens_intended: tokens_intended.1,
            intended_ns,
            dispatch_ns: None,
            admitted_ns: None,
            send_ns: None,
            headers_ns: None,
            events: Vec::new(),
            done_ns: None,
            status: None,
            failure: None,
            usage: None,
            finish_reason: None,
            server_request_id: None,
            light: false,
            turn: None,
            round: None,
        }
    }

    pub fn is_valid(&self) -> bool {
        self.failure.is_none() && self.done_ns.is_some()
    }
}
