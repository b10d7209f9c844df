//! GSM8K answer extraction and scoring: lm-eval's strict-match filter, written as a
//! small exact matcher (no regex crate), and the gold answer of a GSM8K JSONL line.
//! Owns what "correct" means for one completion. Must not send requests or count pairs.
//!
//! Strict rule (lm-eval `gsm8k` filter `strict-match`): the first match of the regex
//! `#### (\-?[0-9\.\,]+)` anywhere in the completion; its group, commas removed, must
//! equal the gold answer (the text after the last `#### ` of the `answer` field,
//! trimmed, commas removed) exactly. No match scores wrong (lm-eval's `[invalid]`).
//!
//! Terminal-dot limitation: the character class includes `.`, so `#### 42.` captures
//! `42.`, which is not `42`: the strict rule scores it wrong. lm-eval itself (its
//! gsm8k task config version 3) additionally passes both strings through the
//! `exact_match` option `regexes_to_ignore: [",", "\\$", "(?s).*#### ", "\\.$"]`,
//! which removes one terminal dot, so lm-eval scores `#### 42.` right; its version
//! 1.0 config had no `"\\.$"` and scored it wrong, as this rule does. The gate uses
//! the strict rule; [`lm_eval_v3_equal`] is computed beside it, as a disclosed
//! descriptive count, never for the gate.

/// What the gate's output states about the extractor.
pub const TERMINAL_DOT_NOTE: &str = "strict match takes the first `#### (\\-?[0-9\\.\\,]+)` and removes commas only: \
     `#### 42.` captures `42.`, which does not equal `42` (scored wrong). lm-eval's gsm8k config v3 also strips one \
     terminal `.` (regexes_to_ignore `\\.$`) and would score it right; `lm_eval_v3_correct` counts that variant \
     (descriptive only, not the gate).";

/// The captured group of the first strict match, before comma removal.
pub fn strict_capture(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(pos) = text.get(from..).and_then(|t| t.find("#### ")) {
        let start = from + pos + 5;
        let mut end = start;
        if bytes.get(end) == Some(&b'-') {
            end += 1;
        }
        let digits_from = end;
        while bytes.get(end).is_some_and(|b| b.is_ascii_digit() || *b == b'.' || *b == b',') {
            end += 1;
        }
        if end > digits_from {
            return text.get(start..end);
        }
        // `-?` backtracks to empty, but `-` is not in the class: no match here.
        from = from + pos + 1;
    }
    None
}

/// The strict-match answer: the first capture with commas removed, or `None`
/// (lm-eval's `[invalid]`).
pub fn strict_answer(text: &str) -> Option<String> {
    strict_capture(text).map(|c| c.replace(',', ""))
}

/// The gold answer of a GSM8K `answer` field: the text after its last `#### `,
/// trimmed, commas removed. `None` when the field has no `#### ` marker.
pub fn gold_answer(answer: &str) -> Option<String> {
    let at = answer.rfind("#### ")?;
    let gold = answer[at + 5..].trim().replace(',', "");
    if gold.is_empty() { None } else { Some(gold) }
}

/// Whether a completion is right under the strict rule.
pub fn strict_correct(completion: &str, gold: &str) -> bool {
    strict_answer(completion).is_some_and(|a| a == gold)
}

/// lm-eval v3's normalisation of both sides: remove `,` and `$`, then one terminal
/// `.`, compared case-insensitively. Descriptive only.
pub fn lm_eval_v3_equal(completion: &str, gold: &str) -> bool {
    let norm = |s: &str| {
        let mut s: String = s.chars().filter(|c| *c != ',' && *c != '$').collect();
        if s.ends_with('.') {
            s.pop();
        }
        s.to_lowercase()
    };
    strict_capture(completion).is_some_and(|c| norm(c) == norm(gold))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_table() {
        // (completion, strict answer, correct against gold "42")
        let table: [(&str, Option<&str>, bool); 12] = [
            ("so #### 42", Some("42"), true),
            ("#### 1,234", Some("1234"), false),
            ("#### -3", Some("-3"), false),
            ("#### 42.", Some("42."), false),
            ("The answer is 42.", None, false),
            ("#### 42 then #### 7", Some("42"), true),
            ("#### 7\n#### 42", Some("7"), false),
            ("####42", None, false),
            ("#### x #### 42", Some("42"), true),
            ("##### 42", Some("42"), true),
            ("#### -x", None, false),
            ("#### $42", None, false),
        ];
        for (text, want, right) in table {
            assert_eq!(strict_answer(text).as_deref(), want, "{text:?}");
            assert_eq!(strict_correct(text, "42"), right, "{text:?}");
        }
        assert!(strict_correct("#### 1,234", "1234"));
        assert!(strict_correct("#### -3", "-3"));
    }

    #[test]
    fn terminal_dot_is_wrong_strictly_but_right_for_lm_eval_v3() {
        assert!(!strict_correct("#### 42.", "42"));
        assert!(lm_eval_v3_equal("#### 42.", "42"));
        assert!(lm_eval_v3_equal("#### 1,234", "1234"));
        assert!(!lm_eval_v3_equal("#### 42..", "42"));
    }

    #[test]
    fn gold_answers() {
        assert_eq!(gold_answer("3 + 4 = <<3+4=7>>7\n#### 7").as_deref(), Some("7"));
        assert_eq!(gold_answer("x\n#### 1,200\n").as_deref(), Some("1200"));
        assert_eq!(gold_answer("no marker"), None);
    }
}
