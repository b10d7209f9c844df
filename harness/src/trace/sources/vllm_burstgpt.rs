//! `prompts.source = "vllm_burstgpt"`: vLLM 0.34's `BurstGPTDataset`
//! (`vllm/benchmarks/datasets/datasets.py`, `vllm bench serve --dataset-name
//! burstgpt`), draw for draw. Owns reading a BurstGPT CSV as vLLM's pandas code
//! reads it (a header row; rows whose `Model` is exactly `GPT-4` and whose
//! `Response tokens` is above 0, in file order), the row sampling (pandas'
//! `DataFrame.sample(n, random_state=study seed)`: NumPy's legacy
//! `RandomState(seed)`, `permutation(rows)[:n]` when n <= rows, else
//! `randint(0, rows, n)`, `mt19937`), and each entry: request i of row r takes
//! its input length from r's third column and its output length from its
//! fourth (vLLM reads them by position: `Request tokens` and `Response tokens` in
//! BurstGPT's layout `Timestamp,Model,Request tokens,Response tokens,Total
//! tokens,Log Type`), its IDs `(i + j) mod vocab_size`, j < input length, decoded
//! to text and re-encoded (the IDs sent are the re-encoding of the text vLLM
//! sends). The CSV reader takes plain and double-quoted fields, one row per line.
//! Must not draw from any other generator: the test against vLLM's own code
//! (tests/integration/vllm_datasets.rs) compares token for token.

use std::path::Path;

use super::Entry;
use super::mt19937::Mt19937;
use crate::plan::VllmBurstGptSpec;
use crate::trace::{Encoder, TraceError};

fn malformed(what: &str, message: impl Into<String>) -> TraceError {
    TraceError::Malformed { what: what.to_string(), message: message.into() }
}

/// One CSV line's fields: plain, or double-quoted (`""` is a quote inside).
fn fields(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed on its line".into()),
                }
            }
            if !matches!(chars.peek(), None | Some(',')) {
                return Err("text after a closing quote".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                field.push(c);
                chars.next();
            }
        }
        out.push(field);
        if chars.next().is_none() {
            return Ok(out);
        }
    }
}

/// A numeric cell as pandas reads it (`None`: empty, pandas' NaN).
fn number(cell: &str) -> Result<Option<f64>, String> {
    let t = cell.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse::<f64>().map(Some).map_err(|_| format!("{cell:?} is not a number"))
}

/// A kept row: its line number, input length and output length.
#[derive(Debug)]
struct Row {
    line: usize,
    input: f64,
    output: f64,
}

/// The GPT-4 rows with a positive response, in file order.
fn rows(text: &str) -> Result<Vec<Row>, String> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or("empty file: no header row")?;
    let header = fields(header.trim_end_matches('\r')).map_err(|e| format!("line 1: {e}"))?;
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| format!("no {name:?} column (BurstGPT's header)"))
    };
    let (model, response) = (col("Model")?, col("Response tokens")?);
    if header.len() < 4 {
        return Err("fewer than 4 columns: vLLM reads the lengths from the third and fourth".into());
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let line_no = i + 1;
        let cells = fields(line.trim_end_matches('\r')).map_err(|e| format!("line {line_no}: {e}"))?;
        if cells.len() != header.len() {
            return Err(format!("line {line_no}: {} fields, the header has {}", cells.len(), header.len()));
        }
        let at = |k: usize| number(&cells[k]).map_err(|e| format!("line {line_no}, column {:?}: {e}", header[k]));
        if cells[model] != "GPT-4" || !at(response)?.is_some_and(|r| r > 0.0) {
            continue;
        }
        let need = |k: usize| {
            at(k)?.ok_or_else(|| format!("line {line_no}, column {:?}: empty (vLLM's int() fails)", header[k]))
        };
        out.push(Row { line: line_no, input: need(2)?, output: need(3)? });
    }
    Ok(out)
}

/// A length as Python's `int()` of a float: truncated, within 0..=u32::MAX.
fn length(v: f64, what: &str) -> Result<u32, String> {
    let t = v.trunc();
    if (0.0..=f64::from(u32::MAX)).contains(&t) {
        Ok(t as u32)
    } else {
        Err(format!("{what} {v} is not a token count"))
    }
}

/// `n` entries of vLLM's burstgpt dataset from the CSV at `file` (`spec.path`
/// relative to the plan) and `seed`.
pub fn vllm_burstgpt(
    spec: &VllmBurstGptSpec,
    file: &Path,
    enc: &dyn Encoder,
    seed: u64,
    n: usize,
) -> Result<Vec<Entry>, TraceError> {
    let what = &spec.path;
    let text = std::fs::read_to_string(file).map_err(|e| malformed(what, format!("cannot read: {e}")))?;
    let rows = rows(&text).map_err(|e| malformed(what, e))?;
    if rows.is_empty() {
        return Err(malformed(what, "no row with Model \"GPT-4\" and Response tokens above 0 (vLLM's filter)"));
    }
    let seed = u32::try_from(seed)
        .map_err(|_| malformed("study.seed", "above 2^32 - 1: NumPy's legacy RandomState refuses it (as in vLLM)"))?;
    let mut rng = Mt19937::numpy_seed(seed);
    let picks: Vec<usize> = if n <= rows.len() {
        let mut p = rng.numpy_permutation(rows.len()).ok_or_else(|| malformed(what, "too many rows"))?;
        p.truncate(n);
        p
    } else {
        let p = rng.numpy_randint(0, rows.len() as i64, n).ok_or_else(|| malformed(what, "too many rows"))?;
        p.into_iter().map(|k| k as usize).collect()
    };
    let vocab =
        enc.vocabulary().ok_or_else(|| malformed(&spec.tokenizer, "this tokenizer cannot say its vocabulary"))?;
    let vocab_size = u64::from(vocab.size);
    let mut entries = Vec::with_capacity(n);
    for (i, &k) in picks.iter().enumerate() {
        let row = &rows[k];
        let at = format!("{what}:{}", row.line);
        let input = length(row.input, "Request tokens").map_err(|e| malformed(&at, e))?;
        let output = length(row.output, "Response tokens").map_err(|e| malformed(&at, e))?;
        if output == 0 {
            return Err(malformed(&at, format!("Response tokens {} is 0 as vLLM's int() reads it", row.output)));
        }
        let ids: Vec<u32> = (0..u64::from(input)).map(|j| ((i as u64 + j) % vocab_size) as u32).collect();
        let prompt = enc.decode(&ids).map_err(|e| malformed(&spec.tokenizer, e))?;
        let tokens = enc.encode(&prompt).map_err(|e| malformed(&spec.tokenizer, e))?;
        entries.push(Entry {
            tokens,
            output_tokens: Some(output),
            source: at,
            offset: i as u64,
            messages: None,
            next_turns: Vec::new(),
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_are_read_and_filtered_as_vllm_filters_them() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    1,GPT-4,10,5,15,Conversation log\n\
                    2,ChatGPT,11,6,17,Conversation log\n\
                    3,GPT-4,12,0,12,API log\n\
                    \n\
                    4,\"GPT-4\",13.0,7,20,\"API, log\"\n";
        let r = rows(text).unwrap();
        let got: Vec<(usize, f64, f64)> = r.iter().map(|r| (r.line, r.input, r.output)).collect();
        assert_eq!(got, [(2, 10.0, 5.0), (6, 13.0, 7.0)]);
        assert!(rows("Model,Response tokens\n").unwrap_err().contains("fewer than 4 columns"));
        assert!(rows("a,b,c,d\n").unwrap_err().contains("\"Model\""));
        let e = rows("T,Model,R,Response tokens\n1,GPT-4,,3\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("empty"), "{e}");
        assert_eq!(fields("\"a\"\"b\",,c").unwrap(), ["a\"b", "", "c"]);
        assert!(fields("\"open").is_err());
    }
}
