//! Python's text of a value, for files a Python tool writes with `str()` and
//! `json.dumps` (guidellm's CSV and HTML): `repr(float)` (the shortest digits that
//! read back, scientific below 1e-4 and from 1e16, as `1e-05`, `2.5e+16`),
//! `json.dumps` with its default separators (`", "`, `": "`) and `ensure_ascii`,
//! and Python's `csv` writer (QUOTE_MINIMAL, `\r\n`). Owns the formatting only.

use serde_json::Value;

/// `repr(x)` of a Python float.
pub fn float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // Python's repr: the fewest digits that read back (Rust's `{:e}` finds how
    // many), correctly rounded from the exact binary value, a tie to even (Rust's
    // precision formatting; `{:e}` alone can pick the odd one of a tie).
    let shortest = format!("{:e}", x.abs());
    let n = shortest.split_once('e').map_or(1, |(m, _)| m.chars().filter(char::is_ascii_digit).count());
    let sci = format!("{:.*e}", n.saturating_sub(1), x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    let body = if exp < 0 {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else if exp + 1 >= n {
        format!("{digits}{}.0", "0".repeat((exp + 1 - n) as usize))
    } else {
        let (int, frac) = digits.split_at((exp + 1) as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

/// Python's text of a JSON number: an integer as written, a float by `repr`.
pub fn number(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => i.to_string(),
        (None, Some(u)) => u.to_string(),
        _ => float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// A Python value as `json.dumps` sees it: dicts keep their insertion order.
#[derive(Debug, Clone, PartialEq)]
pub enum Py {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Py>),
    Dict(Vec<(String, Py)>),
}

impl Py {
    /// A dict from (key, value) pairs, in this order.
    pub fn dict<const N: usize>(items: [(&str, Py); N]) -> Py {
        Py::Dict(items.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// A float, or None.
    pub fn opt(x: Option<f64>) -> Py {
        x.map_or(Py::None, Py::Float)
    }
}

impl From<&Value> for Py {
    /// A JSON value as Python's `json.load` reads it (objects in file order).
    fn from(v: &Value) -> Py {
        match v {
            Value::Null => Py::None,
            Value::Bool(b) => Py::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Py::Int(i),
                None => Py::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Py::Str(s.clone()),
            Value::Array(items) => Py::List(items.iter().map(Py::from).collect()),
            Value::Object(m) => Py::Dict(m.iter().map(|(k, v)| (k.clone(), Py::from(v))).collect()),
        }
    }
}

/// `json.dumps(s)` of a string; `ascii`: other characters as `\uXXXX`.
fn string(s: &str, ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ascii && (c as u32) > 0x7e) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// How `json.dumps` was called: its separators and `ensure_ascii`.
#[derive(Clone, Copy)]
pub struct Dumps {
    pub item: &'static str,
    pub key: &'static str,
    pub ascii: bool,
}

/// `json.dumps(v)`'s defaults.
pub const DEFAULT: Dumps = Dumps { item: ", ", key: ": ", ascii: true };

fn dumps_into(v: &Py, how: Dumps, out: &mut String) {
    match v {
        Py::None => out.push_str("null"),
        Py::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Py::Int(i) => out.push_str(&i.to_string()),
        Py::Float(x) if x.is_nan() => out.push_str("NaN"),
        Py::Float(x) if x.is_infinite() => out.push_str(if *x > 0.0 { "Infinity" } else { "-Infinity" }),
        Py::Float(x) => out.push_str(&float(*x)),
        Py::Str(s) => string(s, how.ascii, out),
        Py::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(how.item);
                }
                dumps_into(item, how, out);
            }
            out.push(']');
        }
        Py::Dict(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(how.item);
                }
                string(k, how.ascii, out);
                out.push_str(how.key);
                dumps_into(item, how, out);
            }
            out.push('}');
        }
    }
}

/// `json.dumps(v, ...)` as `how` says.
pub fn dumps_with(v: &Py, how: Dumps) -> String {
    let mut out = String::new();
    dumps_into(v, how, &mut out);
    out
}

/// `json.dumps(v)` of a loaded JSON value, with Python's defaults.
pub fn dumps(v: &Value) -> String {
    dumps_with(&Py::from(v), DEFAULT)
}

/// `json.dumps(v, separators=(",", ":"))`.
pub fn dumps_compact(v: &Value) -> String {
    dumps_with(&Py::from(v), Dumps { item: ",", key: ":", ascii: true })
}

/// One row as Python's `csv.writer` writes it (QUOTE_MINIMAL, `\r\n`).
pub fn csv_row(cells: &[String]) -> String {
    let quoted: Vec<String> = cells
        .iter()
        .map(|c| if c.contains([',', '"', '\r', '\n']) { format!("\"{}\"", c.replace('"', "\"\"")) } else { c.clone() })
        .collect();
    let mut line = quoted.join(",");
    if cells.len() == 1 && cells[0].is_empty() {
        line = "\"\"".into();
    }
    line + "\r\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each printed by `python3 -c 'print(repr(x))'`.
    #[test]
    #[allow(clippy::excessive_precision)] // the exact binary value of a tie, on purpose
    fn floats_read_as_python_prints_them() {
        for (x, want) in [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (-1.0, "-1.0"),
            (16.0, "16.0"),
            (0.1, "0.1"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (8.3933122864225e-05, "8.3933122864225e-05"),
            (0.011412620544433594, "0.011412620544433594"),
            (1796646145.8445024, "1796646145.8445024"),
            (1e16, "1e+16"),
            (2.5e16, "2.5e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (123.456, "123.456"),
            (1e22, "1e+22"),
            (-2.5e-7, "-2.5e-07"),
            // Exactly halfway between two 17-digit decimals: Python keeps the even one.
            (0.0122089385986328125, "0.012208938598632812"),
        ] {
            assert_eq!(float(x), want, "{x:e}");
        }
    }

    #[test]
    fn json_dumps_and_csv_rows_as_python_writes_them() {
        let v = serde_json::json!({"a": 1, "b": [1.0, 1e-05, null, true], "c": "é\"x"});
        assert_eq!(dumps(&v), r#"{"a": 1, "b": [1.0, 1e-05, null, true], "c": "\u00e9\"x"}"#);
        let row = csv_row(&["a".into(), "b,c".into(), "say \"hi\"".into(), String::new()]);
        assert_eq!(row, "a,\"b,c\",\"say \"\"hi\"\"\",\r\n");
    }
}
