//! A small parser of the Prometheus text exposition format (and OpenMetrics text):
//! `name{label="value",...} value [timestamp]` samples, `#` comment lines (HELP,
//! TYPE, UNIT) and an optional terminal `# EOF`. Owns the format's syntax only; a
//! ground floor under `commands/accept` (its server checks) and
//! `analysis/server_metrics.rs` (per-cell server metrics from the scrapes). Must not fetch anything or interpret what a metric
//! means.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

/// Parses a whole exposition. `Err` names the first bad line (1-based).
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    let mut eof_at: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r');
        if let Some(at) = eof_at
            && !line.trim().is_empty()
        {
            return Err(format!("line {n}: content after # EOF (line {at})"));
        }
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if comment.trim() == "EOF" {
                eof_at = Some(n);
            }
            continue;
        }
        out.push(sample(line).map_err(|e| format!("line {n}: {e}: {:?}", clip(line, 120)))?);
    }
    Ok(out)
}

/// `s` cut to `n` characters, saying how long it was.
fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}... ({} bytes in all)", &s[..i], s.len()),
        None => s.to_string(),
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if !name.starts_with(is_name_start) {
        return Err("a sample must start with a metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err("expected whitespace before the value".into());
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = number(value).ok_or_else(|| format!("{value:?} is not a number"))?;
    if let Some(ts) = fields.next()
        && number(ts).is_none()
    {
        return Err(format!("{ts:?} is not a timestamp"));
    }
    if let Some(extra) = fields.next() {
        // OpenMetrics exemplars start with '#'; anything else is garbage.
        if !extra.starts_with('#') {
            return Err(format!("unexpected {extra:?} after the value"));
        }
    }
    Ok(Sample { name: name.to_string(), labels, value })
}

type Labels = Vec<(String, String)>;

/// Parses `a="x",b="y"}` (after the opening brace); returns the labels and the rest.
fn label_set(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let end = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
        let key = &s[..end];
        if key.is_empty() || !key.starts_with(is_name_start) {
            return Err("bad label name".into());
        }
        s = s[end..].trim_start().strip_prefix('=').ok_or("expected = after a label name")?;
        s = s.trim_start().strip_prefix('"').ok_or("a label value must be quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    _ => return Err("bad escape in a label value".into()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        s = s[close + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

fn number(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse::<f64>().ok().filter(|v| v.is_finite()),
    }
}

/// The sum of a gauge over all its label sets; `None` when no sample has that name.
pub fn total(samples: &[Sample], name: &str) -> Option<f64> {
    let mut found = samples.iter().filter(|s| s.name == name).peekable();
    found.peek()?;
    Some(found.map(|s| s.value).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_and_openmetrics() {
        let text = "# HELP vllm:num_requests_running Requests\n# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{model_name=\"m\"} 2\n\
            vllm:num_requests_running{model_name=\"n\",x=\"a\\\"b\\\\c\\nd\"} 1.5 1700000000\n\
            plain_total 3e2\nh_bucket{le=\"+Inf\"} 7\nnan_metric NaN\n# EOF\n";
        let s = parse(text).expect("parses");
        assert_eq!(s.len(), 5);
        assert_eq!(s[1].labels[1], ("x".to_string(), "a\"b\\c\nd".to_string()));
        assert_eq!(total(&s, "vllm:num_requests_running"), Some(3.5));
        assert_eq!(total(&s, "plain_total"), Some(300.0));
        assert_eq!(total(&s, "missing"), None);
        assert_eq!(s[3].labels, vec![("le".to_string(), "+Inf".to_string())]);
    }

    #[test]
    fn rejects_bad_lines() {
        for bad in [
            "1abc 2",
            "m{a=b} 1",
            "m{a=\"b} 1",
            "m 1 2 3",
            "m notanumber",
            "m{a=\"b\"}1",
            "m",
            "m{a=\"x\" b=\"y\"} 1",
            "# EOF\nm 1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(parse("").expect("empty is fine").is_empty());
        let err = parse("ok 1\nbad line here").unwrap_err();
        assert!(err.starts_with("line 2"), "{err}");
    }
}
