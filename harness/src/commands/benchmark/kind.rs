//! guidellm's registry option values (`--profile kind=constant,rate=10`,
//! `--backend kind=openai_http,target=http://..`, or a JSON object), as
//! guidellm 0.8's `arg_string` reads them: comma-separated `key=value` pairs
//! (commas inside `[..]` belong to the value), values typed as YAML scalars
//! would be (integers, floats, true/false, else strings), `[a,b]` lists; a value
//! that starts with `{` is JSON. Owns the syntax only; must not know any kind.

use serde_json::{Map, Number, Value};

/// A scalar as guidellm types it (YAML's safe_load of the text).
fn scalar(text: &str) -> Value {
    let t = text.trim();
    if let Ok(i) = t.parse::<i64>() {
        return i.into();
    }
    if let Some(n) = t.parse::<f64>().ok().and_then(Number::from_f64) {
        return Value::Number(n);
    }
    match t {
        "true" | "True" => true.into(),
        "false" | "False" => false.into(),
        "null" | "~" | "" => Value::Null,
        _ => Value::String(t.trim_matches(['"', '\'']).to_string()),
    }
}

/// Splits on commas outside brackets and braces.
fn split_top(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// The option's value as an object; `flag` names it in errors.
pub fn parse(flag: &str, text: &str) -> Result<Map<String, Value>, String> {
    let t = text.trim();
    if t.starts_with('{') {
        return match serde_json::from_str(t) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(format!("{flag} {text:?}: not a JSON object")),
        };
    }
    let mut m = Map::new();
    for item in split_top(t).into_iter().filter(|s| !s.trim().is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| format!("{flag} {text:?}: expected kind=...,key=value"))?;
        let v = v.trim();
        let value = match v.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(list) => {
                Value::Array(split_top(list).into_iter().filter(|s| !s.trim().is_empty()).map(scalar).collect())
            }
            None => scalar(v),
        };
        m.insert(k.trim().to_string(), value);
    }
    if !m.contains_key("kind") {
        return Err(format!("{flag} {text:?}: missing required key 'kind'"));
    }
    Ok(m)
}

/// A value that is one number or a list of numbers.
pub fn numbers(flag: &str, key: &str, v: &Value) -> Result<Vec<f64>, String> {
    let one = |x: &Value| x.as_f64().ok_or_else(|| format!("{flag}: {key} must be a number, got {x}"));
    match v {
        Value::Array(items) => items.iter().map(one).collect(),
        x => Ok(vec![one(x)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_strings_and_json_read_as_guidellm_reads_them() {
        let m = parse("--profile", "kind=constant,rate=10").unwrap();
        assert_eq!(Value::Object(m), serde_json::json!({"kind": "constant", "rate": 10}));
        let m = parse("--profile", "kind=concurrent,streams=[1,2,4]").unwrap();
        assert_eq!(m["streams"], serde_json::json!([1, 2, 4]));
        let m = parse("--backend", "kind=openai_http,target=http://localhost:8000").unwrap();
        assert_eq!(m["target"], "http://localhost:8000");
        let m = parse("--data", r#"{"kind": "synthetic_text", "prompt_tokens": 8}"#).unwrap();
        assert_eq!(m["prompt_tokens"], 8);
        assert!(parse("--profile", "rate=10").unwrap_err().contains("missing required key 'kind'"));
        assert!(parse("--profile", "kind").unwrap_err().contains("expected kind="));
    }
}
