//! One streaming pass over a server log, for the identity checks (`identity`):
//! the first line holding each needle the checks name, and the engine's startup
//! line, found without ever holding more than one line (a line is kept to its
//! first [`MAX_LOG_LINE`] bytes). A log of any size is searched whole in bounded
//! memory; a retry continues where the last complete line ended. Also the bounded
//! reads of a log the harness quotes (its tail) and the cap the evidence keeps of
//! it ([`cap_log`]). Owns none of the checks' verdicts. Must not write to a log
//! except to cut it to its kept prefix after its server stopped.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::evidence::{LogKept, hex};

/// The longest log line the checks look at whole (1 MiB); the rest of a longer
/// line is skipped.
pub const MAX_LOG_LINE: usize = 1 << 20;

/// What the checks need from a log, as far as it was read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogFacts {
    /// Each needle (as `plain` text) and the first line holding it (shown, at most 200 chars).
    needles: Vec<(String, Option<String>)>,
    want_startup: bool,
    startup: Option<Value>,
    /// Bytes read.
    pub bytes: u64,
}

impl LogFacts {
    /// Facts to gather: the first line holding each of `needles`, and the engine's
    /// startup line when `want_startup`.
    pub fn new(needles: impl IntoIterator<Item = String>, want_startup: bool) -> LogFacts {
        let mut seen: Vec<(String, Option<String>)> = Vec::new();
        for n in needles.into_iter().map(|n| super::identity::plain(&n)) {
            if !seen.iter().any(|(s, _)| *s == n) {
                seen.push((n, None));
            }
        }
        LogFacts { needles: seen, want_startup, startup: None, bytes: 0 }
    }

    /// The facts of a whole text (tests, and logs already in memory).
    pub fn of_text(self, text: &str) -> LogFacts {
        let mut facts = self;
        for line in text.lines() {
            facts.take_line(line.as_bytes());
        }
        facts.bytes = text.len() as u64;
        facts
    }

    /// The first line holding `needle`, when one was read.
    pub fn line(&self, needle: &str) -> Option<&str> {
        let n = super::identity::plain(needle);
        self.needles.iter().find(|(s, _)| *s == n).and_then(|(_, l)| l.as_deref())
    }

    /// The engine's startup line (`"event": "kv_inventory"`), when one was read.
    pub fn startup(&self) -> Option<&Value> {
        self.startup.as_ref()
    }

    /// Every needle found and the startup line (when wanted) too: nothing more to read.
    pub fn complete(&self) -> bool {
        self.needles.iter().all(|(_, l)| l.is_some()) && (!self.want_startup || self.startup.is_some())
    }

    fn take_line(&mut self, raw: &[u8]) {
        let text = String::from_utf8_lossy(raw);
        let line = text.trim_end_matches('\r');
        if self.needles.iter().any(|(_, l)| l.is_none()) {
            let p = super::identity::plain(line);
            for (needle, found) in self.needles.iter_mut().filter(|(_, l)| l.is_none()) {
                if p.contains(needle.as_str()) {
                    *found = Some(p.trim().chars().take(200).collect());
                }
            }
        }
        if self.want_startup && self.startup.is_none() {
            let t = line.trim();
            if t.starts_with('{')
                && let Ok(v) = serde_json::from_str::<Value>(t)
                && v.get("event").and_then(Value::as_str) == Some("kv_inventory")
            {
                self.startup = Some(v);
            }
        }
    }
}

/// Reads `reader` line by line into `facts` (a line longer than [`MAX_LOG_LINE`]
/// keeps its first bytes) until it ends or nothing more is wanted. Returns the
/// bytes consumed up to the end of the last complete line, and the unterminated
/// final line's bytes (not yet taken).
fn feed(facts: &mut LogFacts, reader: impl Read) -> std::io::Result<(u64, Vec<u8>)> {
    let mut r = BufReader::with_capacity(1 << 16, reader);
    let mut line: Vec<u8> = Vec::new();
    let mut complete_end = 0u64;
    let mut read = 0u64;
    loop {
        if facts.complete() {
            return Ok((complete_end, Vec::new()));
        }
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((complete_end, line));
        }
        let (used, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let body = &buf[..if ended { used - 1 } else { used }];
        let room = MAX_LOG_LINE.saturating_sub(line.len());
        line.extend_from_slice(&body[..body.len().min(room)]);
        r.consume(used);
        read += used as u64;
        if ended {
            facts.take_line(&line);
            line.clear();
            complete_end = read;
        }
    }
}

/// The facts of everything `reader` gives (its final unterminated line included).
pub fn scan_reader(mut facts: LogFacts, reader: impl Read) -> std::io::Result<LogFacts> {
    let (end, tail) = feed(&mut facts, reader)?;
    facts.bytes = end + tail.len() as u64;
    if !tail.is_empty() {
        facts.take_line(&tail);
    }
    Ok(facts)
}

/// A log read again and again as it grows (the identity checks' retries): each
/// [`LogScan::scan`] continues after the last complete line the previous one read.
#[derive(Debug, Clone)]
pub struct LogScan {
    committed: LogFacts,
    offset: u64,
}

impl LogScan {
    pub fn new(facts: LogFacts) -> LogScan {
        LogScan { committed: facts, offset: 0 }
    }

    /// The facts of the log at `path` as it is now (a missing log reads as empty).
    pub fn scan(&mut self, path: &Path) -> std::io::Result<LogFacts> {
        let mut file = match crate::evidence::open_input(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogFacts { bytes: self.offset, ..self.committed.clone() });
            }
            Err(e) => return Err(e),
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let (end, tail) = feed(&mut self.committed, file)?;
        self.offset += end;
        let mut now = self.committed.clone();
        now.bytes = self.offset + tail.len() as u64;
        if !tail.is_empty() {
            now.take_line(&tail);
        }
        Ok(now)
    }
}

/// The engine's startup line in the log at `path`, read line by line.
pub fn engine_startup_in(path: &Path) -> Option<Value> {
    let file = crate::evidence::open_input(path).ok()?;
    scan_reader(LogFacts::new([], true), file).ok()?.startup
}

/// Bytes of a log's end read to quote its last lines.
const TAIL_BYTES: u64 = 64 << 10;

/// The last `n` non-blank lines of the log at `path`, from its last 64 KiB only;
/// `None` when it cannot be read.
pub fn tail_lines(path: &Path, n: usize) -> Option<Vec<String>> {
    let mut file = crate::evidence::open_input(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    // A cut first line is not quoted.
    let skip = usize::from(start > 0);
    let lines: Vec<String> = text.lines().skip(skip).filter(|l| !l.trim().is_empty()).map(str::to_string).collect();
    Some(lines[lines.len().saturating_sub(n)..].to_vec())
}

/// The first bytes of a server log the evidence keeps (16 MiB): a server's log
/// after its stop is cut to them, its whole size and SHA-256 recorded.
pub const LOG_KEPT_BYTES: u64 = 16 << 20;

/// Hashes the whole log at `path` in 1 MiB chunks and cuts it to its first
/// `keep` bytes: what the evidence then says of it. `None` when there is no log.
pub fn cap_log(path: &Path, keep: u64) -> std::io::Result<Option<LogKept>> {
    let mut file = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    let kept_bytes = bytes.min(keep);
    if kept_bytes < bytes {
        file.set_len(kept_bytes)?;
        file.sync_all()?;
    }
    Ok(Some(LogKept { bytes, sha256: hex(&hasher.finalize()), kept_bytes }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> LogFacts {
        LogFacts::new(["Using FLASH attention".to_string(), "error".to_string()], true)
    }

    /// A reader of `n` filler lines followed by `tail`, generated as it is read.
    struct Filler {
        left: u64,
        tail: std::io::Cursor<Vec<u8>>,
    }

    impl Read for Filler {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return self.tail.read(out);
            }
            let line = b"INFO step 12345 done in 0.25 ms\n";
            let mut n = 0;
            while self.left > 0 && n + line.len() <= out.len() {
                out[n..n + line.len()].copy_from_slice(line);
                n += line.len();
                self.left -= 1;
            }
            Ok(n)
        }
    }

    #[test]
    fn the_first_matching_lines_are_found_after_any_amount_of_log_in_bounded_memory() {
        // 64 MB of log before the lines sought: read through a 64 KiB buffer.
        let tail =
            "\u{1b}[32mINFO\u{1b}[0m Using   FLASH attention backend\n{\"event\":\"kv_inventory\",\"kv\":{}}\nlast"
                .to_string();
        let tail_len = tail.len() as u64;
        let r = Filler { left: 2_000_000, tail: std::io::Cursor::new(tail.into_bytes()) };
        let f = scan_reader(facts(), r).unwrap();
        assert_eq!(f.line("Using FLASH attention"), Some("INFO Using FLASH attention backend"));
        assert_eq!(f.line("error"), None);
        assert_eq!(f.startup().and_then(|v| v.get("event")).and_then(Value::as_str), Some("kv_inventory"));
        assert_eq!(f.bytes, 2_000_000 * 32 + tail_len);
    }

    #[test]
    fn an_overlong_line_keeps_its_start_and_the_next_line_is_read() {
        let mut text = "x".repeat(MAX_LOG_LINE + 100);
        text.push_str(" error at the end of a long line\nsecond error\n");
        let f = scan_reader(facts(), text.as_bytes()).unwrap();
        assert_eq!(f.line("error"), Some("second error"));
    }

    #[test]
    fn a_growing_log_is_read_on_from_its_last_complete_line() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("server.log");
        let mut scan = LogScan::new(facts());
        assert_eq!(scan.scan(&log).unwrap().bytes, 0, "no log yet");
        std::fs::write(&log, "starting\nUsing FLASH").unwrap();
        let f = scan.scan(&log).unwrap();
        assert_eq!((f.line("Using FLASH attention"), f.bytes), (None, 20));
        std::fs::write(&log, "starting\nUsing FLASH attention backend\nan error\n").unwrap();
        let f = scan.scan(&log).unwrap();
        assert_eq!(f.line("Using FLASH attention"), Some("Using FLASH attention backend"));
        assert_eq!((f.line("error"), f.bytes), (Some("an error"), 48));
        assert_eq!(f, scan_reader(facts(), std::fs::File::open(&log).unwrap()).unwrap(), "the same as one pass");
    }

    #[test]
    fn a_log_is_cut_to_its_kept_prefix_with_the_whole_recorded_and_its_tail_read_from_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("server.log");
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, &text).unwrap();
        assert_eq!(tail_lines(&log, 2).unwrap(), ["line 998", "line 999"]);
        let kept = cap_log(&log, 100).unwrap().unwrap();
        assert_eq!(
            kept,
            LogKept { bytes: text.len() as u64, sha256: crate::evidence::sha256_hex(text.as_bytes()), kept_bytes: 100 }
        );
        assert_eq!(std::fs::read(&log).unwrap(), &text.as_bytes()[..100]);
        let whole = cap_log(&log, 1000).unwrap().unwrap();
        assert_eq!((whole.bytes, whole.kept_bytes), (100, 100), "a short log is kept whole");
        assert_eq!(cap_log(&tmp.path().join("none"), 10).unwrap(), None);
    }
}
