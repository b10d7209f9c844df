//! The bodies of the engine's offline commands (`calibrate`, `export-tokenizer`,
//! `dequantize`, `roofline`, `bench`): each takes plain options, does its work through
//! the library, writes its outputs atomically and returns what it wrote. The
//! binary (main.rs) only parses arguments, prints and maps [`CommandError`] to
//! an exit code; nothing here prints or exits.

mod bench;
mod calibrate;
mod dequantize;
mod export_tokenizer;
mod roofline;

pub use bench::{BenchOptions, bench};
pub use calibrate::{CalibrateOptions, CalibrateReport, calibrate};
pub use dequantize::{DequantizeReport, dequantize};
pub use export_tokenizer::export_tokenizer;
pub use roofline::{RooflineOptions, roofline};

use crate::error::EngineError;
use std::path::{Path, PathBuf};

/// What an offline command can fail with: bad input (the model, a text, an
/// argument: the user's to fix) or a failure of its own (a write, a check of
/// its output).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Input(#[from] EngineError),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Check(String),
}

impl CommandError {
    /// True when the user's input was at fault (the CLI exits 2), false for a
    /// failure of the command itself (exit 1).
    pub fn is_input(&self) -> bool {
        matches!(self, CommandError::Input(_))
    }

    fn write(path: &Path, source: std::io::Error) -> Self {
        CommandError::Write { path: path.to_path_buf(), source }
    }
}

pub type Result<T> = std::result::Result<T, CommandError>;

/// Writes `bytes` to `path` through `path.tmp` and a rename, so a crash never
/// leaves a half file under the final name.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    std::fs::write(&tmp, bytes).map_err(|e| CommandError::write(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| CommandError::write(path, e))
}

/// `NAME.EXT.tmp` beside `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// The 1-, 5- and 15-minute load averages (Linux; None elsewhere), for the record.
fn load_average() -> Option<Vec<f64>> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().take(3).map(|v| v.parse().ok()).collect()
}

/// Reads a UTF-8 text file, optionally only the Unicode scalar values
/// `START:END` of it.
pub fn read_text(path: &Path, chars: Option<&str>) -> std::result::Result<String, EngineError> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    let Some(range) = chars else { return Ok(text) };
    let bad = |why: &str| EngineError::InvalidRequest(format!("--chars {range:?}: {why}"));
    let (s, e) = range.split_once(':').ok_or_else(|| bad("must be START:END"))?;
    let s: usize = s.parse().map_err(|_| bad("START is not a number"))?;
    let e: usize = e.parse().map_err(|_| bad("END is not a number"))?;
    if s >= e {
        return Err(bad("START must be below END"));
    }
    Ok(text.chars().skip(s).take(e - s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.txt");
        std::fs::write(&p, "naïve café").unwrap();
        assert_eq!(read_text(&p, None).unwrap(), "naïve café");
        assert_eq!(read_text(&p, Some("2:5")).unwrap(), "ïve");
        for bad in ["5:2", "x:3", "3", "1:y"] {
            assert!(matches!(read_text(&p, Some(bad)), Err(EngineError::InvalidRequest(_))), "{bad}");
        }
        assert!(matches!(read_text(&dir.path().join("none"), None), Err(EngineError::Io { .. })));
    }

    #[test]
    fn atomic_write_leaves_no_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        write_atomic(&p, b"{}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        assert!(!dir.path().join("out.json.tmp").exists());
        let missing = dir.path().join("no/such/dir/out.json");
        assert!(matches!(write_atomic(&missing, b"{}"), Err(CommandError::Write { .. })));
    }
}
