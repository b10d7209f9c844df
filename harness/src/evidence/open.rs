//! Opening an evidence file for reading without ever leaving the evidence directory
//! or blocking: every component under the directory must be a real directory (no
//! symbolic link), the file itself a regular file, opened with `O_NOFOLLOW |
//! O_NONBLOCK` and checked again on the open descriptor (a FIFO, device or socket is
//! refused, never waited on). The one way replay opens a file. Must not follow
//! anything, create anything, or read outside the directory it is given.
//! [`read_input`] is the same rule for the user's own input files (plans, traces,
//! datasets, tokenizers): regular files only, never waited on.

use std::fs::{File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path};

/// What a directory entry is, in words, when it is not a regular file.
pub fn kind_in_words(t: &FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

fn refused(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Opens `rel` (relative to `root`; a path that starts with `root` is taken
/// relative to it) for reading, only if it is a regular file reached through real
/// directories under `root`. Errors say why in words ("`inputs` is a symbolic link:
/// replay reads only regular files inside the evidence directory").
pub fn open_regular(root: &Path, rel: &Path) -> io::Result<File> {
    let rel = rel.strip_prefix(root).unwrap_or(rel);
    let parts: Vec<_> = rel.components().collect();
    if parts.is_empty() {
        return Err(refused("an empty path names no file".into()));
    }
    let mut at = root.to_path_buf();
    let mut shown = String::new();
    for (i, part) in parts.iter().enumerate() {
        let Component::Normal(name) = part else {
            return Err(refused(format!("{}: only plain names inside the evidence directory are read", rel.display())));
        };
        at.push(name);
        if !shown.is_empty() {
            shown.push('/');
        }
        shown.push_str(&name.to_string_lossy());
        let t = at.symlink_metadata()?.file_type();
        let last = i + 1 == parts.len();
        let fine = if last { t.is_file() } else { t.is_dir() };
        if !fine {
            return Err(refused(format!(
                "{shown} is {}: replay reads only regular files inside the evidence directory",
                kind_in_words(&t)
            )));
        }
    }
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&at)?;
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(refused(format!(
            "{shown} is {}: replay reads only regular files inside the evidence directory",
            kind_in_words(&t)
        )));
    }
    Ok(file)
}

/// Reads a user's input file (a plan, trace, dataset, tokenizer, rules or gate
/// file) whole, only if it is a regular file: opened with `O_NONBLOCK` and checked on
/// the open descriptor, so a FIFO, device or socket is refused at once instead of
/// waited on. Symbolic links are followed (a dataset may be linked in). The one way
/// the harness reads its inputs.
pub fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = open_input(path)?;
    let meta = file.metadata()?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(1 << 30));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens `path` for reading only if it is a regular file (`O_NONBLOCK`, checked on
/// the open descriptor: a FIFO, device or socket is refused at once, never waited
/// on); symbolic links are followed. [`read_input`] without the read, for files
/// read in parts (a server log).
pub fn open_input(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(refused(format!(
            "{} is {}: inputs are read only from regular files",
            path.display(),
            kind_in_words(&t)
        )));
    }
    Ok(file)
}

/// [`read_input`] as UTF-8 text, without a leading byte order mark (the one rule
/// for every text input, JSON, JSONL, CSV and plain text alike: Windows tools write
/// one, and it is never content).
pub fn read_input_text(path: &Path) -> io::Result<String> {
    let text = String::from_utf8(read_input(path)?).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: not UTF-8 text: {}", path.display(), e.utf8_error()))
    })?;
    Ok(match text.strip_prefix(BOM) {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// The UTF-8 byte order mark, U+FEFF.
pub const BOM: char = '\u{feff}';

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn fifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn opens_regular_files_and_refuses_links_fifos_and_escapes_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ev");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("inputs")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("inputs/a.json"), "{}").unwrap();
        std::fs::write(outside.join("a.json"), "{}").unwrap();
        let mut s = String::new();
        open_regular(&root, Path::new("inputs/a.json")).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "{}");
        open_regular(&root, &root.join("inputs/a.json")).unwrap();

        std::os::unix::fs::symlink(outside.join("a.json"), root.join("link.json")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("raw")).unwrap();
        fifo(&root.join("plan.toml"));
        let err = |rel: &str| open_regular(&root, Path::new(rel)).unwrap_err().to_string();
        assert!(err("link.json").contains("link.json is a symbolic link"), "{}", err("link.json"));
        assert!(err("raw/a.json").contains("raw is a symbolic link"), "{}", err("raw/a.json"));
        assert!(err("plan.toml").contains("FIFO"), "{}", err("plan.toml"));
        assert!(err("../outside/a.json").contains("only plain names"), "{}", err("../outside/a.json"));
        assert!(err("inputs").contains("a directory"), "{}", err("inputs"));
        assert!(err("missing.json").contains("No such file"), "{}", err("missing.json"));
    }

    #[test]
    fn inputs_are_read_from_regular_files_and_links_to_them_and_a_fifo_is_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plan.toml");
        std::fs::write(&file, "x = 1\n").unwrap();
        std::os::unix::fs::symlink(&file, tmp.path().join("link.toml")).unwrap();
        assert_eq!(read_input_text(&file).unwrap(), "x = 1\n");
        assert_eq!(read_input(&tmp.path().join("link.toml")).unwrap(), b"x = 1\n");
        let pipe = tmp.path().join("pipe.toml");
        fifo(&pipe);
        // Without O_NONBLOCK this open would wait for a writer for ever.
        let err = read_input(&pipe).unwrap_err().to_string();
        assert!(err.contains("is a FIFO (named pipe): inputs are read only from regular files"), "{err}");
        let err = read_input(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        std::fs::write(&file, "\u{feff}[1]\n").unwrap();
        assert_eq!(read_input_text(&file).unwrap(), "[1]\n", "a byte order mark is not content");
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(read_input_text(&file).unwrap_err().to_string().contains("not UTF-8"));
    }
}
