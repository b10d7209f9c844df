//! Bounded, streaming reads of evidence files: every byte is hashed as it is read,
//! JSONL is split into lines of at most [`MAX_LINE_BYTES`] without ever holding more
//! than one line, and whole JSON documents are refused above [`MAX_DOC_BYTES`].
//! Owns the limits and the file/line wording of read errors. Every file is opened
//! through [`crate::evidence::open_regular`]: only regular files reached through real
//! directories under the evidence directory, never a link, FIFO, device or socket.
//! Must not interpret what a line means (callers parse it) and must not follow
//! anything a file names.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::evidence::{hex, open_regular};

/// The longest JSONL line replay parses (64 MiB); a longer one is an error.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// The largest whole JSON or TOML document replay reads (manifest, evidence.json).
pub const MAX_DOC_BYTES: u64 = 512 << 20;

/// Size and SHA-256 of a file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub bytes: u64,
    pub sha256: String,
}

/// Hashes the regular file `rel` under `root` in 1 MiB chunks.
pub fn hash_file(root: &Path, rel: impl AsRef<Path>) -> std::io::Result<FileDigest> {
    let mut f = open_regular(root, rel.as_ref())?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok(FileDigest { bytes: total, sha256: hex(&hasher.finalize()) })
}

/// Streams the regular file `rel` under `root` line by line (`\n`-separated; a final line without `\n` counts),
/// hashing every byte. `on_line(line_number, bytes)` sees each non-blank line until
/// it first returns an error; that error (prefixed `line N: `) is returned beside the
/// digest, and the rest of the file is only hashed. A line longer than
/// [`MAX_LINE_BYTES`] is such an error and is never held in memory whole.
pub fn stream_lines(
    root: &Path,
    rel: impl AsRef<Path>,
    mut on_line: impl FnMut(usize, &[u8]) -> Result<(), String>,
) -> std::io::Result<(FileDigest, Option<String>)> {
    let mut reader = BufReader::with_capacity(1 << 20, open_regular(root, rel.as_ref())?);
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    let mut pending: Vec<u8> = Vec::new();
    let mut overlong = false;
    let mut line_no = 0usize;
    let mut error: Option<String> = None;
    let mut finish = |line_no: usize, bytes: &[u8], overlong: bool, error: &mut Option<String>| {
        if error.is_some() {
            return;
        }
        if overlong {
            *error = Some(format!("line {line_no}: longer than {MAX_LINE_BYTES} bytes"));
        } else if !bytes.iter().all(u8::is_ascii_whitespace)
            && let Err(e) = on_line(line_no, bytes)
        {
            *error = Some(format!("line {line_no}: {e}"));
        }
    };
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let len = buf.len();
        hasher.update(buf);
        total += len as u64;
        let mut start = 0;
        while start < len {
            let rest = &buf[start..];
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    line_no += 1;
                    if pending.is_empty() && !overlong {
                        finish(line_no, &rest[..i], false, &mut error);
                    } else {
                        if !overlong && pending.len() + i <= MAX_LINE_BYTES {
                            pending.extend_from_slice(&rest[..i]);
                        } else {
                            overlong = true;
                        }
                        finish(line_no, &pending, overlong, &mut error);
                        pending.clear();
                        overlong = false;
                    }
                    start += i + 1;
                }
                None => {
                    if overlong || pending.len() + rest.len() > MAX_LINE_BYTES {
                        overlong = true;
                        pending.clear();
                    } else if error.is_none() {
                        pending.extend_from_slice(rest);
                    }
                    start = len;
                }
            }
        }
        reader.consume(len);
    }
    if !pending.is_empty() || overlong {
        line_no += 1;
        finish(line_no, &pending, overlong, &mut error);
    }
    Ok((FileDigest { bytes: total, sha256: hex(&hasher.finalize()) }, error))
}

/// Reads the whole regular file `rel` under `root`, of at most [`MAX_DOC_BYTES`].
pub fn read_doc(root: &Path, rel: impl AsRef<Path>) -> Result<Vec<u8>, String> {
    let f = open_regular(root, rel.as_ref()).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if len > MAX_DOC_BYTES {
        return Err(format!("{len} bytes, more than the {MAX_DOC_BYTES} replay reads whole"));
    }
    let mut bytes = Vec::new();
    f.take(MAX_DOC_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_DOC_BYTES {
        return Err(format!("more than the {MAX_DOC_BYTES} bytes replay reads whole"));
    }
    Ok(bytes)
}

/// Reads and parses the whole JSON document `rel` under `root`; errors name line and column.
pub fn read_json<T: DeserializeOwned>(root: &Path, rel: impl AsRef<Path>) -> Result<T, String> {
    let bytes = read_doc(root, rel)?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(bytes: &[u8]) -> (Vec<(usize, String)>, Option<String>, FileDigest) {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("x.jsonl");
        std::fs::write(&p, bytes).unwrap();
        let mut seen = Vec::new();
        let (d, err) = stream_lines(tmp.path(), "x.jsonl", |n, l| {
            let s = std::str::from_utf8(l).map_err(|e| e.to_string())?;
            if s == "bad" {
                return Err("bad line".into());
            }
            seen.push((n, s.to_string()));
            Ok(())
        })
        .unwrap();
        (seen, err, d)
    }

    #[test]
    fn splits_lines_hashes_everything_and_stops_parsing_at_the_first_error() {
        let (seen, err, d) = lines_of(b"a\n\nb\nbad\nc");
        assert_eq!(seen, vec![(1, "a".to_string()), (3, "b".to_string())]);
        assert_eq!(err.as_deref(), Some("line 4: bad line"));
        assert_eq!(d.bytes, 10);
        assert_eq!(d.sha256, crate::evidence::sha256_hex(b"a\n\nb\nbad\nc"));
        let (seen, err, _) = lines_of(b"x\ny");
        assert_eq!(seen.len(), 2);
        assert!(err.is_none());
    }

    #[test]
    fn an_overlong_line_is_an_error_not_an_allocation() {
        let mut big = vec![b'x'; MAX_LINE_BYTES + 10];
        big.extend_from_slice(b"\nok\n");
        let (seen, err, d) = lines_of(&big);
        assert!(seen.is_empty());
        assert!(err.unwrap().starts_with("line 1: longer than"));
        assert_eq!(d.bytes as usize, big.len());
    }

    #[test]
    fn non_utf8_is_reported_by_the_caller_with_its_line() {
        let (_, err, _) = lines_of(b"ok\n\xff\xfe\n");
        assert!(err.unwrap().starts_with("line 2: "));
    }
}
