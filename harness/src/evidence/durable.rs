//! The write and hash primitives every evidence file goes through: `write_atomic`
//! (temporary name in the same directory, flush, fsync, rename, fsync of the
//! directory), `commit_rename` for files written elsewhere under a temporary name
//! (streamed JSONL, rendered images), and lower-case hex SHA-256. Owns the
//! durability order. Must not decide what is written or where.
//!
//! Debug builds only: `HARNESS_DEBUG_COUNT_WRITES=<file>` appends one line
//! `<n> <path>` to `<file>` after each completed write, and
//! `HARNESS_DEBUG_EXIT_AFTER_WRITES=<n>` aborts the process right after the n-th
//! completed write (the crash-consistency test kills a study at every boundary).

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// `.<name>.tmp` beside `path`.
fn tmp_path(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other("path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    Ok(path.with_file_name(tmp_name))
}

/// Writes `bytes` to `path` through a temporary file in the same directory, flushed,
/// synced and renamed, then syncs the directory: a crash leaves either the old file
/// or the whole new one under the final name, never a half one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path)?;
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.flush()?;
    }
    commit_rename(&tmp, path)
}

/// Syncs the whole file `tmp` (already written and closed or flushed), renames it to
/// `path` and syncs `path`'s directory. The one commit point of every evidence file.
pub fn commit_rename(tmp: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new().read(true).open(tmp)?.sync_all()?;
    std::fs::rename(tmp, path)?;
    sync_parent(path)?;
    after_write(path);
    Ok(())
}

/// Syncs the directory holding `path` (so a rename in it is durable).
pub fn sync_parent(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)?.sync_all()
}

#[cfg(debug_assertions)]
fn after_write(path: &Path) {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Test hook only (debug builds): the number of completed writes of this process.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let count = std::env::var_os("HARNESS_DEBUG_COUNT_WRITES");
    let exit_at = std::env::var("HARNESS_DEBUG_EXIT_AFTER_WRITES").ok().and_then(|v| v.parse::<u64>().ok());
    if count.is_none() && exit_at.is_none() {
        return;
    }
    let n = WRITES.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(file) = count
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file)
    {
        let _ = writeln!(f, "{n} {}", path.display());
    }
    if exit_at == Some(n) {
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
fn after_write(_: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_matches_known_vectors() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex(&[0, 15, 16, 255]), "000f10ff");
    }

    #[test]
    fn write_atomic_replaces_whole_and_leaves_no_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("x.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
