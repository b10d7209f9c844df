//! A JSONL file written while a study runs (scrapes, memory samples): lines go to
//! `<name>.partial`, each flushed as written, and `finish` syncs and renames it to
//! its final name. A crash leaves only the `.partial` name, never a file that looks
//! whole. Must not be used for request records, which are written whole per cell.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{EvidenceError, io_err};

pub struct JsonlStream {
    partial: PathBuf,
    path: PathBuf,
    out: BufWriter<File>,
    lines: u64,
}

impl JsonlStream {
    /// Starts `path` (its `.partial` sibling is created now).
    pub fn create(path: &Path) -> Result<JsonlStream, EvidenceError> {
        let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".partial");
        let partial = path.with_file_name(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let file = File::create(&partial).map_err(io_err(&partial))?;
        Ok(JsonlStream { partial, path: path.to_path_buf(), out: BufWriter::new(file), lines: 0 })
    }

    /// Appends one compact JSON line and flushes it to the file.
    pub fn push<T: Serialize>(&mut self, item: &T) -> Result<(), EvidenceError> {
        let line = serde_json::to_string(item)
            .map_err(|e| EvidenceError::Json { what: self.path.display().to_string(), message: e.to_string() })?;
        let w = &mut self.out;
        w.write_all(line.as_bytes())
            .and_then(|()| w.write_all(b"\n"))
            .and_then(|()| w.flush())
            .map_err(io_err(&self.partial))?;
        self.lines += 1;
        Ok(())
    }

    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Syncs and renames to the final name; returns the number of lines.
    pub fn finish(self) -> Result<u64, EvidenceError> {
        let JsonlStream { partial, path, out, lines } = self;
        let file = out.into_inner().map_err(|e| EvidenceError::Io { path: partial.clone(), error: e.into_error() })?;
        drop(file);
        super::commit_rename(&partial, &path).map_err(io_err(&path))?;
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_to_partial_then_renames() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        let mut s = JsonlStream::create(&path).unwrap();
        s.push(&serde_json::json!({"a": 1})).unwrap();
        assert!(tmp.path().join("x.jsonl.partial").exists());
        assert!(!path.exists());
        assert_eq!(s.finish().unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n");
        assert!(!tmp.path().join("x.jsonl.partial").exists());
    }
}
