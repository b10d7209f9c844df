//! A small RFC 4180 reader for `results/matrix.csv` (as polars writes it: a header
//! line, comma separators, double-quoted fields with `""` escapes, possibly holding
//! commas or newlines). Owns nothing but the splitting into records: column meaning
//! is `side`'s. Must not guess types.

/// Splits CSV text into records of fields. `Err` names the 1-based line of an
/// unterminated quote or of a stray quote inside an unquoted field.
pub fn parse(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut line = 1usize;
    let mut quoted = false;
    let mut quote_start = 0usize;
    let mut at_field_start = true;
    while let Some(ch) = chars.next() {
        if quoted {
            match ch {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => {
                    quoted = false;
                    if !matches!(chars.peek(), None | Some(',') | Some('\n') | Some('\r')) {
                        return Err(format!("line {line}: text after a closing quote"));
                    }
                }
                c => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            }
            continue;
        }
        match ch {
            '"' if at_field_start => {
                quoted = true;
                quote_start = line;
                at_field_start = false;
            }
            '"' => return Err(format!("line {line}: a quote inside an unquoted field")),
            ',' => {
                record.push(std::mem::take(&mut field));
                at_field_start = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                at_field_start = true;
                line += 1;
            }
            c => {
                field.push(c);
                at_field_start = false;
            }
        }
    }
    if quoted {
        return Err(format!("line {quote_start}: unterminated quoted field"));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn quotes_commas_newlines_and_empty_fields() {
        let text = "a,b,c\n1,\"x, \"\"y\"\"\",\n2,\"two\nlines\",z\r\n";
        let r = parse(text).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[1], vec!["1", "x, \"y\"", ""]);
        assert_eq!(r[2], vec!["2", "two\nlines", "z"]);
        assert_eq!(parse("a,b").unwrap(), vec![vec!["a", "b"]]);
        assert!(parse("a,\"b\nc").unwrap_err().contains("line 1: unterminated"));
        assert!(parse("a,b\"c\n").unwrap_err().contains("line 1"));
    }
}
