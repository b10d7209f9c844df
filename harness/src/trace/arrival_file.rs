//! Arrival trace files (`load = "trace"`): the Mooncake trace JSONL (one object per
//! line: `timestamp` in milliseconds, `input_length`, `output_length`, `hash_ids`)
//! and the Azure LLM inference trace CSV (header with `TIMESTAMP`, `ContextTokens`,
//! `GeneratedTokens`; timestamps are datetimes such as `2023-11-16 18:15:46.6805900`).
//! Owns the parsing of both shapes into rows of (offset from the first row in
//! nanoseconds, input length, output length). Must not scale, sort, repair or skip
//! rows: a missing column, an unparsable value, a timestamp earlier than the row
//! before it, or a file without rows is an error naming the file and line.
//!
//! - Mooncake: offset = (timestamp - first timestamp) ms, exactly (integer
//!   milliseconds are multiplied by 1,000,000; a fractional value is rounded to
//!   whole nanoseconds). `hash_ids`, when present, must be an array of integers; it
//!   is not used (prefix sharing is the panel's business).
//! - Azure: columns are found by header name, in any order, extra columns ignored.
//!   A datetime is `YYYY-MM-DD HH:MM:SS[.fraction]` (`T` also accepted as the
//!   separator; a trailing `Z` or `+00:00` is accepted; any other offset is an
//!   error), read as UTC with up to 9 fractional digits; offset = datetime - first.

use serde::Deserialize;

use super::TraceError;

/// Which of the two shapes a file has (by extension: `.jsonl` or `.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalFormat {
    Mooncake,
    Azure,
}

impl ArrivalFormat {
    /// The format of a trace path by its extension, if it is one of the two.
    pub fn of_path(path: &str) -> Option<ArrivalFormat> {
        if path.ends_with(".jsonl") {
            Some(ArrivalFormat::Mooncake)
        } else if path.ends_with(".csv") {
            Some(ArrivalFormat::Azure)
        } else {
            None
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ArrivalFormat::Mooncake => "Mooncake trace JSONL",
            ArrivalFormat::Azure => "Azure LLM inference trace CSV",
        }
    }
}

/// One request of an arrival trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrivalRow {
    /// Nanoseconds after the file's first row (unscaled).
    pub offset_ns: u64,
    pub input_length: u32,
    pub output_length: u32,
}

fn bad(file: &str, line: usize, message: impl Into<String>) -> TraceError {
    TraceError::Malformed { what: format!("trace file {file}, line {line}"), message: message.into() }
}

/// Parses `text`, the content of `file` (named in errors), as `format`.
pub fn parse_arrivals(file: &str, text: &str, format: ArrivalFormat) -> Result<Vec<ArrivalRow>, TraceError> {
    // A leading byte order mark is not content, in either format (`read_input_text`).
    let text = text.strip_prefix(crate::evidence::BOM).unwrap_or(text);
    let stamps = match format {
        ArrivalFormat::Mooncake => mooncake(file, text)?,
        ArrivalFormat::Azure => azure(file, text)?,
    };
    let Some(&(first, _, _, _)) = stamps.first() else {
        return Err(TraceError::Malformed {
            what: format!("trace file {file}"),
            message: format!("no requests (an empty {})", format.label()),
        });
    };
    let mut rows = Vec::with_capacity(stamps.len());
    let mut previous = first;
    for &(t, line, input_length, output_length) in &stamps {
        if t < previous {
            return Err(bad(file, line, "timestamp is earlier than the row before it (timestamps must not decrease)"));
        }
        previous = t;
        let offset = t - first;
        let offset_ns = u64::try_from(offset).map_err(|_| bad(file, line, "offset does not fit in 64 bits of ns"))?;
        rows.push(ArrivalRow { offset_ns, input_length, output_length });
    }
    Ok(rows)
}

#[derive(Deserialize)]
struct MooncakeLine {
    timestamp: Option<serde_json::Number>,
    input_length: Option<u32>,
    output_length: Option<u32>,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
}

/// (timestamp in ns, line, input, output) per row.
type Stamp = (i128, usize, u32, u32);

fn mooncake(file: &str, text: &str) -> Result<Vec<Stamp>, TraceError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let l: MooncakeLine = serde_json::from_str(line).map_err(|e| bad(file, line_no, e.to_string()))?;
        let missing = |k: &str| bad(file, line_no, format!("missing field {k:?}"));
        let ts = l.timestamp.ok_or_else(|| missing("timestamp"))?;
        let input = l.input_length.ok_or_else(|| missing("input_length"))?;
        let output = l.output_length.ok_or_else(|| missing("output_length"))?;
        let _ = l.hash_ids;
        let ns = match ts.as_i64() {
            Some(ms) => i128::from(ms) * 1_000_000,
            None => match ts.as_f64() {
                Some(ms) if ms.is_finite() => (ms * 1e6).round() as i128,
                _ => return Err(bad(file, line_no, format!("timestamp {ts} is not a number of milliseconds"))),
            },
        };
        out.push((ns, line_no, input, output));
    }
    Ok(out)
}

fn azure(file: &str, text: &str) -> Result<Vec<Stamp>, TraceError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else { return Ok(Vec::new()) };
    let names: Vec<&str> = header.split(',').map(|h| h.trim().trim_matches('"')).collect();
    let column = |name: &str| {
        names
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| bad(file, 1, format!("no {name:?} column (header {names:?})")))
    };
    let (ts_col, in_col, out_col) = (column("TIMESTAMP")?, column("ContextTokens")?, column("GeneratedTokens")?);
    let mut out = Vec::new();
    for (n, line) in lines {
        let line_no = n + 1;
        let fields: Vec<&str> = line.split(',').map(|f| f.trim().trim_matches('"')).collect();
        let field = |i: usize, name: &str| {
            fields.get(i).copied().ok_or_else(|| bad(file, line_no, format!("no value for {name:?}")))
        };
        let ns = datetime_ns(field(ts_col, "TIMESTAMP")?).map_err(|m| bad(file, line_no, m))?;
        let int = |i: usize, name: &str| -> Result<u32, TraceError> {
            let v = field(i, name)?;
            v.parse::<u32>().map_err(|_| bad(file, line_no, format!("{name} {v:?} is not a token count")))
        };
        out.push((ns, line_no, int(in_col, "ContextTokens")?, int(out_col, "GeneratedTokens")?));
    }
    Ok(out)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Nanoseconds since the Unix epoch of `YYYY-MM-DD HH:MM:SS[.fraction]` (UTC).
pub fn datetime_ns(s: &str) -> Result<i128, String> {
    let why = || format!("TIMESTAMP {s:?} is not a datetime YYYY-MM-DD HH:MM:SS[.fraction]");
    let body = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00")).unwrap_or(s);
    let (date, time) = body.split_once([' ', 'T']).ok_or_else(why)?;
    let num = |t: &str, len: usize| -> Result<i64, String> {
        if t.len() == len && t.bytes().all(|b| b.is_ascii_digit()) { t.parse().map_err(|_| why()) } else { Err(why()) }
    };
    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d[..] else { return Err(why()) };
    let (y, mo, da) = (num(y, 4)?, num(mo, 2)?, num(da, 2)?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = hms.split(':').collect();
    let [h, mi, se] = t[..] else { return Err(why()) };
    let (h, mi, se) = (num(h, 2)?, num(mi, 2)?, num(se, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return Err(why());
    }
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(why());
    }
    let frac_ns: i128 = if frac.is_empty() { 0 } else { format!("{frac:0<9}").parse().map_err(|_| why())? };
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se;
    Ok(i128::from(secs) * 1_000_000_000 + frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOONCAKE: &str = "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47]}\n\
        {\"timestamp\": 27, \"input_length\": 100, \"output_length\": 8, \"hash_ids\": []}\n\
        {\"timestamp\": 27, \"input_length\": 12, \"output_length\": 3}\n";

    #[test]
    fn mooncake_offsets_are_exact_milliseconds() {
        let rows = parse_arrivals("m.jsonl", MOONCAKE, ArrivalFormat::Mooncake).unwrap();
        assert_eq!(
            rows,
            [
                ArrivalRow { offset_ns: 0, input_length: 6955, output_length: 52 },
                ArrivalRow { offset_ns: 27_000_000, input_length: 100, output_length: 8 },
                ArrivalRow { offset_ns: 27_000_000, input_length: 12, output_length: 3 },
            ]
        );
        // Offsets are relative to the first row.
        let shifted = MOONCAKE.replace("\"timestamp\": 0,", "\"timestamp\": 5,").replace("27", "30");
        let rows = parse_arrivals("m.jsonl", &shifted, ArrivalFormat::Mooncake).unwrap();
        assert_eq!(rows[1].offset_ns, 25_000_000);
    }

    #[test]
    fn azure_offsets_come_from_datetimes() {
        let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                   2023-11-16 18:15:46.6805900,374,44\n\
                   2023-11-16 18:15:50.9951690,396,109\n\
                   2023-11-17 00:00:00,1,2\n";
        let rows = parse_arrivals("a.csv", csv, ArrivalFormat::Azure).unwrap();
        assert_eq!(rows[0], ArrivalRow { offset_ns: 0, input_length: 374, output_length: 44 });
        assert_eq!(rows[1].offset_ns, 4_314_579_000);
        // 18:15:46.68059 to midnight: 5 h 44 min 13.31941 s.
        assert_eq!(rows[2].offset_ns, (5 * 3600 + 44 * 60 + 13) * 1_000_000_000 + 319_410_000);
        // Columns by name, in any order, extra columns ignored.
        let csv =
            "GeneratedTokens,Extra,TIMESTAMP,ContextTokens\n7,x,2024-05-10T00:00:01Z,9\n3,y,2024-05-10T00:00:02.5Z,4\n";
        let rows = parse_arrivals("a.csv", csv, ArrivalFormat::Azure).unwrap();
        assert_eq!(rows[1], ArrivalRow { offset_ns: 1_500_000_000, input_length: 4, output_length: 3 });
        assert_eq!(datetime_ns("1970-01-02 00:00:00").unwrap(), 86_400_000_000_000);
        assert_eq!(datetime_ns("2000-03-01 00:00:00").unwrap(), 951_868_800 * 1_000_000_000);
    }

    #[test]
    fn a_leading_byte_order_mark_is_ignored_in_both_formats() {
        // One rule for every text input: the Mooncake JSONL reader refused it while
        // the Azure CSV reader accepted it.
        let with_bom = format!("\u{feff}{MOONCAKE}");
        assert_eq!(
            parse_arrivals("m.jsonl", &with_bom, ArrivalFormat::Mooncake).unwrap(),
            parse_arrivals("m.jsonl", MOONCAKE, ArrivalFormat::Mooncake).unwrap()
        );
        let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10T00:00:01Z,9,7\n2024-05-10T00:00:02Z,4,3\n";
        let with_bom = format!("\u{feff}{csv}");
        assert_eq!(
            parse_arrivals("a.csv", &with_bom, ArrivalFormat::Azure).unwrap(),
            parse_arrivals("a.csv", csv, ArrivalFormat::Azure).unwrap()
        );
    }

    fn err(text: &str, format: ArrivalFormat) -> String {
        parse_arrivals("f", text, format).unwrap_err().to_string()
    }

    #[test]
    fn bad_files_are_named_by_line() {
        use ArrivalFormat::{Azure, Mooncake};
        assert!(err("", Mooncake).contains("trace file f: no requests"));
        assert!(err("\n", Azure).contains("trace file f: no requests"));
        assert!(err("TIMESTAMP,ContextTokens,GeneratedTokens\n", Azure).contains("no requests"));
        let e = err("{\"timestamp\": 0, \"output_length\": 1}\n", Mooncake);
        assert!(e.contains("line 1: missing field \"input_length\""), "{e}");
        let e = err(
            "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1}\n",
            Mooncake,
        );
        assert!(e.contains("line 2: timestamp is earlier"), "{e}");
        let e = err("{\"timestamp\": \"x\", \"input_length\": 1, \"output_length\": 1}\n", Mooncake);
        assert!(e.contains("line 1:"), "{e}");
        let e = err("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", Azure);
        assert!(e.contains("line 1: no \"GeneratedTokens\" column"), "{e}");
        let e =
            err("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,3,4\n2023-11-16 18:15:46,3,4\n", Azure);
        assert!(e.contains("line 3: timestamp is earlier"), "{e}");
        let e = err("TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023 18:15,3,4\n", Azure);
        assert!(e.contains("line 2: TIMESTAMP \"16/11/2023 18:15\" is not a datetime"), "{e}");
        let e = err("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,4\n", Azure);
        assert!(e.contains("line 2: ContextTokens \"-3\" is not a token count"), "{e}");
        let e = err("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3\n", Azure);
        assert!(e.contains("line 2: no value for \"GeneratedTokens\""), "{e}");
    }
}
