//! Secrets the evidence must never hold: each arm's API key (`api_key_env`'s value).
//! The harness sends a key on every request, and a server may echo it back (an
//! error body that quotes the `Authorization` header, a log line); every file of a
//! unit is scrubbed before its completion record fixes its bytes, and every text
//! the runner keeps in memory for `run.json` goes through [`Secrets::redact`], so
//! raw records, logs, `run.json` and everything derived from them (report, exports,
//! evidence.json) hold `[redacted]` instead. Owns the redaction. Must not print,
//! record or put a secret into an error message.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::{EvidenceError, io_err, write_atomic};

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The secret values of one study. `Debug` shows only how many there are.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.0.len())
    }
}

impl Secrets {
    /// The non-empty `values`, each also in its JSON-escaped spelling (how a JSON
    /// record holds a key with a quote or backslash), longest first.
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut all: Vec<String> = Vec::new();
        for v in values.into_iter().filter(|v| !v.is_empty()) {
            let escaped = serde_json::to_string(&v).unwrap_or_default();
            let escaped = escaped.trim_matches('"').to_string();
            for s in [v, escaped] {
                if !s.is_empty() && !all.contains(&s) {
                    all.push(s);
                }
            }
        }
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Secrets(all)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for s in &self.0 {
            if out.contains(s.as_str()) {
                out = Cow::Owned(out.replace(s.as_str(), REDACTED));
            }
        }
        out
    }

    /// `bytes` with every secret replaced, or `None` when none occurs.
    fn redact_bytes(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for s in &self.0 {
            let current = out.as_deref().unwrap_or(bytes);
            if let Some(replaced) = replace_all(current, s.as_bytes(), REDACTED.as_bytes()) {
                out = Some(replaced);
            }
        }
        out
    }

    /// Rewrites (atomically) each existing file of `paths` that holds a secret;
    /// returns the files changed.
    pub fn scrub_files(&self, paths: &[PathBuf]) -> Result<Vec<PathBuf>, EvidenceError> {
        let mut changed = Vec::new();
        if self.is_empty() {
            return Ok(changed);
        }
        for p in paths.iter().filter(|p| p.is_file()) {
            if self.scrub_file(p)? {
                changed.push(p.clone());
            }
        }
        Ok(changed)
    }

    fn scrub_file(&self, path: &Path) -> Result<bool, EvidenceError> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        match self.redact_bytes(&bytes) {
            None => Ok(false),
            Some(clean) => {
                write_atomic(path, &clean).map_err(io_err(path))?;
                Ok(true)
            }
        }
    }
}

/// `hay` with every occurrence of `needle` replaced by `with`, or `None` if there is none.
fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let first = find(hay, needle, 0)?;
    let mut out = Vec::with_capacity(hay.len());
    let mut at = 0;
    let mut next = Some(first);
    while let Some(i) = next {
        out.extend_from_slice(&hay[at..i]);
        out.extend_from_slice(with);
        at = i + needle.len();
        next = find(hay, needle, at);
    }
    out.extend_from_slice(&hay[at..]);
    Some(out)
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from >= hay.len() {
        return None;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|i| from + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_secret_is_redacted_in_text_and_files() {
        let s = Secrets::new(["sk-abc\"123".to_string(), String::new()]);
        assert_eq!(format!("{s:?}"), "Secrets(2 values)", "the key and its JSON spelling; the empty one dropped");
        assert_eq!(s.redact("Bearer sk-abc\"123 and sk-abc\"123"), "Bearer [redacted] and [redacted]");
        assert_eq!(s.redact(r#"{"auth":"Bearer sk-abc\"123"}"#), r#"{"auth":"Bearer [redacted]"}"#);
        assert!(matches!(s.redact("nothing here"), Cow::Borrowed(_)));

        let tmp = tempfile::tempdir().unwrap();
        let (dirty, clean) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
        std::fs::write(&dirty, "{\"body\":\"echo: Bearer sk-abc\\\"123\"}\nsk-abc\"123\n").unwrap();
        std::fs::write(&clean, "{}\n").unwrap();
        let changed = s.scrub_files(&[dirty.clone(), clean.clone(), tmp.path().join("absent")]).unwrap();
        assert_eq!(changed, std::slice::from_ref(&dirty));
        assert_eq!(std::fs::read_to_string(&dirty).unwrap(), "{\"body\":\"echo: Bearer [redacted]\"}\n[redacted]\n");
        assert_eq!(std::fs::read_to_string(&clean).unwrap(), "{}\n");
        assert!(Secrets::default().scrub_files(&[dirty]).unwrap().is_empty());
    }
}
