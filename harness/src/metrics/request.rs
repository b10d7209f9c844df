//! Per-request measures of one valid completed request (definitions in `metrics`).
//! Owns `measure_request` and the timestamp-order checks it applies. Must not
//! aggregate across requests or accept a failed record: a failure has no latency.

use serde::{Deserialize, Serialize};

use super::MetricsError;
use crate::evidence::request_record::{Failure, RequestRecord};

/// Where a request's output token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputTokenSource {
    /// `usage.completion_tokens` (preferred when present).
    Usage,
    /// The sum of `StreamEvent::tokens` (no usage in the record).
    Events,
}

/// The measures of one valid completed request, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestMeasures {
    pub index: u64,
    /// `usage.prompt_tokens` when present, else `prompt_tokens_intended`.
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub output_tokens_source: OutputTokenSource,
    /// Sum of event tokens (equals `output_tokens` unless usage disagrees).
    pub event_tokens: u64,
    /// First token-bearing event - HTTP send; `None` without a token-bearing event.
    pub ttft_ns: Option<u64>,
    /// First token-bearing event - intended arrival.
    pub ttft_intended_ns: Option<u64>,
    /// Time to first content token: the first event with a content token (one
    /// whose tokens are not all reasoning) - HTTP send (AIPerf's "time to first
    /// output token"); equals `ttft_ns` without reasoning.
    #[serde(default)]
    pub ttfc_ns: Option<u64>,
    /// Reasoning tokens: `usage.completion_tokens_details.reasoning_tokens` when
    /// reported, else the sum of the events' reasoning tokens. Part of `output_tokens`.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// (last - first token-bearing event) / (output tokens - 1); `None` when output
    /// tokens < 2 or there is no token-bearing event.
    pub tpot_ns: Option<f64>,
    /// `[DONE]` - HTTP send.
    pub e2e_ns: u64,
    /// `[DONE]` - intended arrival.
    pub e2e_intended_ns: u64,
    /// Gaps between consecutive token-bearing events (ITL), in stream order.
    pub gaps_ns: Vec<u64>,
    /// All received events (`[DONE]` excluded).
    pub events: u64,
    /// Events with `tokens == 0` (role-only, empty, usage-only).
    pub empty_events: u64,
    /// Events with `tokens > 1`.
    pub multi_token_events: u64,
    /// Dispatch - intended arrival (negative if dispatched early).
    pub dispatch_lag_ns: i64,
    /// A light record (`RequestRecord::light`): no TPOT, no gaps, and its single
    /// event's tokens are not compared with usage.
    #[serde(default)]
    pub light: bool,
}

/// `later - earlier`, or an `OutOfOrder` error naming both timestamps.
fn elapsed(id: &str, earlier: (&'static str, u64), later: (&'static str, u64)) -> Result<u64, MetricsError> {
    later.1.checked_sub(earlier.1).ok_or_else(|| MetricsError::OutOfOrder {
        id: id.to_string(),
        earlier: earlier.0,
        earlier_ns: earlier.1,
        later: later.0,
        later_ns: later.1,
    })
}

fn required(r: &RequestRecord, field: &'static str, value: Option<u64>) -> Result<u64, MetricsError> {
    value.ok_or_else(|| MetricsError::MissingTimestamp { id: r.id.clone(), field })
}

/// The latest timestamp recorded for a request, valid or failed: `[DONE]`, the last
/// event, headers, send, admission, dispatch, the moment a timeout fired (send +
/// `Timeout::after_ns`), else the intended arrival. It is where the observation
/// interval of the request's cell ends at the latest.
pub fn last_seen_ns(r: &RequestRecord) -> u64 {
    let timed_out = match (&r.failure, r.send_ns) {
        (Some(Failure::Timeout { after_ns }), Some(send)) => Some(send.saturating_add(*after_ns)),
        _ => None,
    };
    [r.done_ns, r.events.iter().map(|e| e.t_ns).max(), r.headers_ns, r.send_ns, r.admitted_ns, r.dispatch_ns, timed_out]
        .into_iter()
        .flatten()
        .fold(r.intended_ns, u64::max)
}

/// Measures one valid completed request. Errors on a failed record, a missing
/// dispatch or send time, or timestamps out of order (events must not decrease, the
/// first token must not precede the send, `[DONE]` must not precede any event).
pub fn measure_request(r: &RequestRecord) -> Result<RequestMeasures, MetricsError> {
    let done = match (r.is_valid(), r.done_ns) {
        (true, Some(done)) => done,
        _ => return Err(MetricsError::NotValid { id: r.id.clone() }),
    };
    let id = r.id.as_str();
    let dispatch = required(r, "dispatch_ns", r.dispatch_ns)?;
    let send = required(r, "send_ns", r.send_ns)?;
    elapsed(id, ("dispatch", dispatch), ("HTTP send", send))?;
    let e2e_ns = elapsed(id, ("HTTP send", send), ("[DONE]", done))?;
    let e2e_intended_ns = elapsed(id, ("intended arrival", r.intended_ns), ("[DONE]", done))?;
    let dispatch_lag_ns =
        i64::try_from(i128::from(dispatch) - i128::from(r.intended_ns)).map_err(|_| MetricsError::OutOfOrder {
            id: id.to_string(),
            earlier: "intended arrival",
            earlier_ns: r.intended_ns,
            later: "dispatch",
            later_ns: dispatch,
        })?;

    let (mut events, mut empty_events, mut multi_token_events, mut event_tokens) = (0u64, 0u64, 0u64, 0u64);
    let mut previous: Option<u64> = None;
    let (mut first_token, mut last_token): (Option<u64>, Option<u64>) = (None, None);
    let mut gaps_ns = Vec::new();
    let (mut first_content, mut event_reasoning): (Option<u64>, u64) = (None, 0);
    for e in &r.events {
        event_reasoning += u64::from(e.reasoning.min(e.tokens));
        if e.tokens > e.reasoning {
            first_content.get_or_insert(e.t_ns);
        }
        if let Some(p) = previous {
            elapsed(id, ("previous event", p), ("event", e.t_ns))?;
        }
        previous = Some(e.t_ns);
        events += 1;
        event_tokens += u64::from(e.tokens);
        match e.tokens {
            0 => empty_events += 1,
            1 => {}
            _ => multi_token_events += 1,
        }
        if e.tokens > 0 {
            if let (Some(last), false) = (last_token, r.light) {
                gaps_ns.push(elapsed(id, ("previous token event", last), ("token event", e.t_ns))?);
            }
            first_token.get_or_insert(e.t_ns);
            last_token = Some(e.t_ns);
        }
    }
    if let Some(p) = previous {
        elapsed(id, ("last event", p), ("[DONE]", done))?;
    }

    let (output_tokens, output_tokens_source) = match r.usage {
        Some(u) => (u64::from(u.completion_tokens), OutputTokenSource::Usage),
        None => (event_tokens, OutputTokenSource::Events),
    };
    let prompt_tokens = u64::from(r.usage.map_or(r.prompt_tokens_intended, |u| u.prompt_tokens));

    let reasoning_tokens = r.usage.and_then(|u| u.reasoning_tokens).map_or(event_reasoning, u64::from);
    let (mut ttft_ns, mut ttft_intended_ns, mut tpot_ns) = (None, None, None);
    if let (Some(first), Some(last)) = (first_token, last_token) {
        ttft_ns = Some(elapsed(id, ("HTTP send", send), ("first token", first))?);
        ttft_intended_ns = Some(elapsed(id, ("intended arrival", r.intended_ns), ("first token", first))?);
        if output_tokens >= 2 && !r.light {
            tpot_ns = Some(last.saturating_sub(first) as f64 / (output_tokens - 1) as f64);
        }
    }

    // After TTFT: a token before the send is named as the first token's fault.
    let ttfc_ns = first_content.map(|t| elapsed(id, ("HTTP send", send), ("first content token", t))).transpose()?;
    Ok(RequestMeasures {
        index: r.index,
        prompt_tokens,
        output_tokens,
        output_tokens_source,
        event_tokens,
        ttft_ns,
        ttft_intended_ns,
        ttfc_ns,
        reasoning_tokens,
        tpot_ns,
        e2e_ns,
        e2e_intended_ns,
        gaps_ns,
        events,
        empty_events,
        multi_token_events,
        dispatch_lag_ns,
        light: r.light,
    })
}
