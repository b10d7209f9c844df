//! `engine dequantize`: a GGUF file rewritten with every tensor decoded to F32
//! (or F16), metadata kept; every tensor is checked before a byte is written,
//! and the output appears under its name only once complete.

use super::{CommandError, Result, tmp_path};
use crate::error::EngineError;
use crate::gguf::{Dequantized, GgufFile, OutDtype};
use std::path::{Path, PathBuf};

pub struct DequantizeReport {
    pub tensors: usize,
    pub bytes: u64,
}

pub fn dequantize(model: &Path, out: &Path, dtype: OutDtype) -> Result<DequantizeReport> {
    let bad = |msg: String| CommandError::Input(EngineError::InvalidRequest(msg));
    let gguf = GgufFile::open(model)?;
    if let (Ok(i), Ok(o)) = (model.canonicalize(), out.canonicalize())
        && i == o
    {
        return Err(bad(format!("--out {} is the input file", out.display())));
    }
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(bad(format!("--out {}: directory {} does not exist", out.display(), dir.display())));
    }
    let plan = Dequantized::new(&gguf, dtype).map_err(|e| in_file(model, e))?;
    let tmp = tmp_path(out);
    let write = || -> std::io::Result<()> {
        let file = std::fs::File::create(&tmp)?;
        let file = plan.write_to(std::io::BufWriter::with_capacity(8 << 20, file))?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(CommandError::write(&tmp, e));
    }
    std::fs::rename(&tmp, out).map_err(|e| CommandError::write(out, e))?;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(DequantizeReport { tensors: plan.tensors().len(), bytes })
}

/// The error with the file it concerns (the GGUF errors name tensors, not files).
fn in_file(model: &Path, e: EngineError) -> CommandError {
    match e {
        EngineError::Gguf(m) => CommandError::Input(EngineError::Gguf(format!("{}: {m}", model.display()))),
        other => CommandError::Input(other),
    }
}
