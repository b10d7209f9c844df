//! The bounds every plan value and generated trace stays within, stated once.
//! Owns the limits on durations, rates and trace spans. Must not check anything
//! itself: validation (`validate::Checker`) and trace generation refer to them, so
//! a value that would overflow a `Duration` or an offset in nanoseconds is refused
//! as bad input (exit 2) before anything runs or is written.

/// The longest duration a plan may set (timeouts, settle, grace, spacing): 7 days.
/// `Duration::from_secs_f64` panics past about 1.8e19 s; a study never waits a week.
pub const MAX_SECONDS: f64 = 7.0 * 86_400.0;

/// The longest span of one cell's arrival trace, first to last intended arrival:
/// 7 days, in nanoseconds.
pub const MAX_TRACE_NS: u64 = 7 * 86_400 * 1_000_000_000;

/// The slowest request rate a plan may set: one request every 1,000 s.
pub const MIN_RATE_RPS: f64 = 1e-3;

/// The fastest request rate a plan may set (an open loop beyond it is a burst).
pub const MAX_RATE_RPS: f64 = 1e6;

/// Whether `span_ns` (first to last intended arrival) is within [`MAX_TRACE_NS`];
/// else the message that says so.
pub fn check_trace_span(span_ns: u64) -> Result<(), String> {
    if span_ns <= MAX_TRACE_NS {
        Ok(())
    } else {
        Err(format!(
            "its arrivals span {:.3e} s, beyond the bound of {} s (7 days): lower the count or raise the rate",
            span_ns as f64 / 1e9,
            MAX_TRACE_NS / 1_000_000_000
        ))
    }
}
