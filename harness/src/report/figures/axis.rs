//! Tick labels people can read: thousands separators (`12,500`), no float noise
//! (`0.3`, never `0.30000000000000004`), and latency axes in seconds once their
//! values reach 10 s (the data stay in milliseconds; only the labels and the axis
//! description change). Owns the formatting of every axis the figures draw. Must not
//! change a value's position on its axis.

/// The largest value (ms) an axis may reach before it is labelled in seconds.
const SECONDS_FROM_MS: f64 = 10_000.0;

/// `v` with at most a few decimals (fewer for larger values, trailing zeros dropped)
/// and a comma between thousands: `1234.5` -> `1,234.5`, `0.125` -> `0.125`.
pub fn tick(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    let decimals = if a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        3
    };
    let text = format!("{a:.decimals$}");
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let frac = frac.trim_end_matches('0');
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let zero = grouped.chars().all(|c| c == '0' || c == ',') && frac.is_empty();
    let sign = if v < 0.0 && !zero { "-" } else { "" };
    if frac.is_empty() { format!("{sign}{grouped}") } else { format!("{sign}{grouped}.{frac}") }
}

/// A signed percentage tick for a fraction: `0.05` -> `+5%`, `-0.125` -> `-12.5%`.
pub fn pct_tick(v: f64) -> String {
    let t = tick(v * 100.0);
    if v > 0.0 && t != "0" { format!("+{t}%") } else { format!("{t}%") }
}

/// How a latency axis holding milliseconds is labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyAxis {
    seconds: bool,
}

impl LatencyAxis {
    /// Seconds when the axis reaches 10 s (`max_ms` is its upper end), else ms.
    pub fn for_max(max_ms: f64) -> LatencyAxis {
        LatencyAxis { seconds: max_ms >= SECONDS_FROM_MS }
    }

    pub fn unit(self) -> &'static str {
        if self.seconds { "s" } else { "ms" }
    }

    /// The label of a tick at `ms`.
    pub fn label(self, ms: f64) -> String {
        if self.seconds { tick(ms / 1000.0) } else { tick(ms) }
    }

    /// A value with its unit, for legends: `2,000 ms`, `12.5 s`.
    pub fn value(self, ms: f64) -> String {
        format!("{} {}", self.label(ms), self.unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_group_thousands_and_drop_float_noise() {
        assert_eq!(tick(0.1 + 0.2), "0.3");
        assert_eq!(tick(1234.4), "1,234");
        assert_eq!(tick(1235.6), "1,236");
        assert_eq!(tick(12_500.0), "12,500");
        assert_eq!(tick(1_234_567.0), "1,234,567");
        assert_eq!(tick(999.0), "999");
        assert_eq!(tick(12.34), "12.3");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(-0.0001), "0");
        assert_eq!(tick(-1500.0), "-1,500");
        assert_eq!(pct_tick(0.05), "+5%");
        assert_eq!(pct_tick(-0.125), "-12.5%");
        assert_eq!(pct_tick(0.0), "0%");
    }

    #[test]
    fn latency_axes_switch_to_seconds_at_ten_seconds() {
        let ms = LatencyAxis::for_max(9_999.0);
        assert_eq!((ms.unit(), ms.label(2_500.0), ms.value(2_000.0)), ("ms", "2,500".into(), "2,000 ms".into()));
        let s = LatencyAxis::for_max(10_000.0);
        assert_eq!((s.unit(), s.label(12_500.0), s.label(2_000.0)), ("s", "12.5".into(), "2".into()));
        assert_eq!(s.value(45_000.0), "45 s");
    }
}
