//! `--argv` text to words: split on whitespace, with single or double quotes grouping
//! words (no escapes, no variables, no shell). Must not run or expand anything.

/// The words of `text`, or why it cannot be split (an unclosed quote).
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for ch in text.chars() {
        match quote {
            Some(q) if ch == q => quote = None,
            Some(_) => word.push(ch),
            None if ch == '"' || ch == '\'' => {
                quote = Some(ch);
                in_word = true;
            }
            None if ch.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(ch);
                in_word = true;
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("--argv: unclosed {q} quote in {text:?}"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_on_whitespace_and_quotes_group_them() {
        assert_eq!(split_words("  engine serve\t--port {port} ").unwrap(), ["engine", "serve", "--port", "{port}"]);
        assert_eq!(
            split_words(r#"vllm serve --compilation-config '{"level": 3}' --x "a b"c"#).unwrap(),
            ["vllm", "serve", "--compilation-config", r#"{"level": 3}"#, "--x", "a bc"]
        );
        assert_eq!(split_words("a '' b").unwrap(), ["a", "", "b"]);
        assert!(split_words("a 'b").unwrap_err().contains("unclosed ' quote"));
        assert!(split_words("   ").unwrap().is_empty());
    }
}
