//! guidellm 0.8.1's file datasets (`--data kind=json_file|csv_file|text_file,path=P`)
//! read as its deserializers and its default `generative_column_mapper` read them,
//! into `requests` lines (`{"prompt": text, "output_tokens": n}`, the harness's own
//! dataset format, trace/sources/requests.rs). Owns the file reading (JSON Lines
//! or a JSON array of objects; CSV with a header row as pandas reads it; a text
//! file's lines, each with its newline, as Python's `readlines`), the column
//! choice and what is refused. Must not decide loads or counts.
//!
//! The column choice is guidellm's: the columns in the file's order (a key's first
//! appearance), the first whose name (any case) is one of `prompt, instruction,
//! question, input, context, content, conversation, turn, text`, plural (`s`,
//! `es`) and with an optional `_N`/`-N` turn suffix, is the prompt; the output
//! length is the `output_tokens_count` or `completion_tokens_count` column (empty,
//! null or 0: none, and guidellm then sends no `max_tokens`);
//! `prompt_tokens_count`/`input_tokens_count` only feed guidellm's statistics and
//! are ignored. Rows in file order, no shuffle (guidellm's data loader does not
//! shuffle by default). Refused, each with its reason: several prompt or output
//! columns (guidellm joins them or makes turns of them), the other columns
//! guidellm would send (prefixes, messages, media, tools, timings), a row with no
//! prompt text, and output lengths given for some rows only.

use std::fmt;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// guidellm's file kinds built here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Json,
    Csv,
    Text,
}

impl FileKind {
    /// The kind's `--data kind=` name.
    pub fn from_name(kind: &str) -> Option<FileKind> {
        match kind {
            "json_file" => Some(FileKind::Json),
            "csv_file" => Some(FileKind::Csv),
            "text_file" => Some(FileKind::Text),
            _ => None,
        }
    }

    /// The file name endings guidellm's deserializer accepts (lowercased).
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            FileKind::Json => &["json", "jsonl"],
            FileKind::Csv => &["csv"],
            FileKind::Text => &["txt", "text"],
        }
    }

    fn name(self) -> &'static str {
        match self {
            FileKind::Json => "json_file",
            FileKind::Csv => "csv_file",
            FileKind::Text => "text_file",
        }
    }
}

/// One request of the dataset: its prompt text and output length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub prompt: String,
    pub output_tokens: Option<u32>,
}

/// guidellm's `text_column` names, in its order.
const TEXT: &[&str] =
    &["prompt", "instruction", "question", "input", "context", "content", "conversation", "turn", "text"];
/// guidellm's `output_tokens_count_column` names.
const OUTPUT: &[&str] = &["output_tokens_count", "completion_tokens_count"];
/// guidellm's other columns, which it would send or act on: refused here.
const OTHER: &[(&str, &[&str])] = &[
    ("a prefix (system prompt)", &["system_prompt", "system", "prefix"]),
    ("chat messages", &["messages", "chat_messages"]),
    ("images", &["image", "picture", "photo", "img"]),
    ("video", &["video", "clip", "movie", "footage", "mp4", "mov", "avi"]),
    ("audio", &["audio", "sound", "voice", "speech", "wav", "mp3"]),
    (
        "tools",
        &["tools", "functions", "tool_definitions", "tool_response", "tool_result", "tool_output", "tool_choice"],
    ),
    ("request timings", &["relative_timestamp", "requeue_delay", "duration", "request_duration"]),
    ("conversation turns", &["conversation_turns"]),
];

/// pandas' default missing-value spellings (`read_csv`'s `na_values`).
const PANDAS_NA: &[&str] = &[
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA",
    "NULL", "NaN", "None", "n/a", "nan", "null",
];

/// `column` read as guidellm's pattern reads it against `name`: `name` (any case)
/// with an optional `s`/`es`, then an optional `_N`/`-N` turn suffix; the
/// matched name part and the turn number. Names hold no digits, so a column
/// ending in `_N` can only be read with the suffix.
fn matches(column: &str, name: &str) -> Option<(String, Option<u64>)> {
    let (stem, turn) = match column.rfind(['_', '-']) {
        Some(i) if i + 1 < column.len() && column[i + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            (&column[..i], Some(column[i + 1..].parse().ok()?))
        }
        _ => (column, None),
    };
    let (lower, n) = (stem.to_ascii_lowercase(), name.to_ascii_lowercase());
    [format!("{n}es"), format!("{n}s"), n].contains(&lower).then(|| (stem.to_string(), turn))
}

/// The columns of one of guidellm's categories: the first column (in file order)
/// matching any of `names`, then every column of that matched name, by turn.
fn category(columns: &[String], names: &[&str]) -> Vec<(u64, String)> {
    let Some(base) = columns.iter().find_map(|c| names.iter().find_map(|n| matches(c, n)).map(|(stem, _)| stem)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in columns {
        if let Some((_, turn)) = matches(c, &base) {
            out.push((turn.unwrap_or(out.len() as u64), c.clone()));
        }
    }
    out.sort();
    out
}

/// The prompt column and the output length column (if any) of a dataset.
fn choose(columns: &[String]) -> Result<(String, Option<String>), String> {
    for (what, names) in OTHER {
        if let Some((_, c)) = category(columns, names).first() {
            return Err(format!(
                "column {c:?} ({what}): refused: guidellm would send it, and this front door sends a prompt and \
                 an output length only"
            ));
        }
    }
    let text = category(columns, TEXT);
    let prompt = match text.as_slice() {
        [] => {
            return Err(format!(
                "no prompt column among {columns:?} (guidellm's: {}, plural or with a _N suffix)",
                TEXT.join(", ")
            ));
        }
        [(_, c)] => c.clone(),
        more => {
            let names: Vec<&str> = more.iter().map(|(_, c)| c.as_str()).collect();
            return Err(format!(
                "several prompt columns {names:?}: refused: guidellm joins or turns them into a conversation, \
                 which is not built here"
            ));
        }
    };
    let output = match category(columns, OUTPUT).as_slice() {
        [] => None,
        [(_, c)] => Some(c.clone()),
        more => {
            let names: Vec<&str> = more.iter().map(|(_, c)| c.as_str()).collect();
            return Err(format!("several output length columns {names:?}: refused: guidellm sums them per turn"));
        }
    };
    Ok((prompt, output))
}

/// A JSON object with its keys in file order.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object (one row)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry::<String, Value>()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A table: column names in first-appearance order and each row's cells.
struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<(String, Value)>>,
}

impl Table {
    fn of(rows: Vec<Vec<(String, Value)>>) -> Table {
        let mut columns: Vec<String> = Vec::new();
        for (k, _) in rows.iter().flatten() {
            if !columns.contains(k) {
                columns.push(k.clone());
            }
        }
        Table { columns, rows }
    }
}

fn json_table(text: &str) -> Result<Table, String> {
    if text.trim_start().starts_with('[') {
        let rows: Vec<Ordered> = serde_json::from_str(text).map_err(|e| format!("not a JSON array of rows: {e}"))?;
        return Ok(Table::of(rows.into_iter().map(|o| o.0).collect()));
    }
    let mut rows = Vec::new();
    for (k, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let o: Ordered = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", k + 1))?;
        rows.push(o.0);
    }
    Ok(Table::of(rows))
}

/// CSV records as pandas' reader splits them: commas, `"` quoting with `""` for a
/// quote, newlines inside quotes, blank lines skipped.
fn csv_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let (mut out, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    let mut any = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => {
                quoted = true;
                any = true;
            }
            (false, ',') => {
                record.push(std::mem::take(&mut field));
                any = true;
            }
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n' | '\r') => {
                if any || !field.is_empty() {
                    record.push(std::mem::take(&mut field));
                    out.push(std::mem::take(&mut record));
                }
                any = false;
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    if any || !field.is_empty() {
        record.push(field);
        out.push(record);
    }
    Ok(out)
}

fn csv_table(text: &str) -> Result<Table, String> {
    let mut records = csv_records(text)?.into_iter();
    let header = records.next().ok_or("no header row")?;
    let mut rows = Vec::new();
    for (k, r) in records.enumerate() {
        if r.len() > header.len() {
            return Err(format!("row {}: {} fields, the header names {}", k + 1, r.len(), header.len()));
        }
        let cells = header
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let v = r.get(i).filter(|s| !PANDAS_NA.contains(&s.as_str()));
                (h.clone(), v.map_or(Value::Null, |s| Value::String(s.clone())))
            })
            .collect();
        rows.push(cells);
    }
    Ok(Table { columns: header, rows })
}

/// A text file's lines, each with its newline (`\r\n` and `\r` read as `\n`, as
/// Python's text mode does).
fn text_rows(text: &str) -> Vec<Row> {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    text.split_inclusive('\n').map(|l| Row { prompt: l.to_string(), output_tokens: None }).collect()
}

fn output_length(v: &Value) -> Result<Option<u32>, String> {
    let n = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match n.filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= f64::from(u32::MAX)) {
        Some(0.0) => Ok(None),
        Some(x) => Ok(Some(x as u32)),
        None => Err(format!("{v} is not a whole number of tokens")),
    }
}

/// The rows of the dataset file at `path`, as guidellm 0.8.1 reads `kind`.
pub fn read(kind: FileKind, path: &Path) -> Result<Vec<Row>, String> {
    let suffix = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if !kind.suffixes().contains(&suffix.as_str()) {
        return Err(format!(
            "kind={} reads a .{} file (guidellm checks the name's ending), got {}",
            kind.name(),
            kind.suffixes().join(" or ."),
            path.display()
        ));
    }
    let text = crate::evidence::read_input_text(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table = match kind {
        FileKind::Text => return nonempty(text_rows(&text), path),
        FileKind::Json => json_table(&text),
        FileKind::Csv => csv_table(&text),
    }
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let (prompt, output) = choose(&table.columns).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (k, cells) in table.rows.iter().enumerate() {
        let at = |e: String| format!("{}, row {}: {e}", path.display(), k + 1);
        let cell = |name: &str| cells.iter().find(|(c, _)| c == name).map_or(&Value::Null, |(_, v)| v);
        let text = match cell(&prompt) {
            Value::String(s) if !s.is_empty() => s.clone(),
            other => return Err(at(format!("{prompt:?} is {other}: a prompt is non-empty text"))),
        };
        let output_tokens = match &output {
            Some(c) => output_length(cell(c)).map_err(|e| at(format!("{c:?}: {e}")))?,
            None => None,
        };
        rows.push(Row { prompt: text, output_tokens });
    }
    let given = rows.iter().filter(|r| r.output_tokens.is_some()).count();
    if given != 0 && given != rows.len() {
        return Err(format!(
            "{}: {given} of {} rows give an output length: refused: guidellm forces those (max_tokens with \
             ignore_eos) and lets the others stop where the model stops, but a cell here has one output mode",
            path.display(),
            rows.len()
        ));
    }
    nonempty(rows, path)
}

fn nonempty(rows: Vec<Row>, path: &Path) -> Result<Vec<Row>, String> {
    if rows.is_empty() { Err(format!("{}: no rows", path.display())) } else { Ok(rows) }
}

/// The rows as `requests` lines (`{"prompt"}`, with `"output_tokens"` when given).
pub fn to_requests_jsonl(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        let mut v = serde_json::json!({ "prompt": r.prompt });
        if let Some(n) = r.output_tokens {
            v["output_tokens"] = n.into();
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}
