//! Traces: each cell's request list with explicit intended nanosecond offsets
//! (seeded, never rescaled), the prompt panel the requests draw from, and the
//! catalog that fixes every input file by size and SHA-256. Owns the traces and
//! the catalog under a study's `inputs/` (`inputs/` writes the prompt panel). Must not send requests, read clocks or link a tokenizer:
//! every arm in a block gets these exact bytes, and replay rejects a changed one.

mod arrival_file;
mod arrivals;
mod catalog;
mod panel;
mod replayed;
pub mod sources;

#[cfg(test)]
mod load_tests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;

pub use arrival_file::{ArrivalFormat, ArrivalRow, datetime_ns, parse_arrivals};
pub use arrivals::{Trace, TraceEntry, cell_trace, cell_trace_from, constant_offsets, gap_s, open_loop_offsets};
pub use catalog::{
    CATALOG_FORMAT, Catalog, CatalogFile, CatalogSource, CatalogTrace, generate_traces, generate_traces_in, read_trace,
    trace_path, verify_catalog, write_inputs, write_inputs_in,
};
pub use panel::{ChatMessage, Encoder, Panel, Prompt, SessionTurn, Vocabulary, build_panel, check_session};
pub use replayed::{arrival_copy_path, check_trace_files, nearest_length, read_arrival_file};

use crate::plan::PlanError;

/// One way an inputs directory differs from its catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogProblem {
    Missing {
        path: String,
    },
    Changed {
        path: String,
        expected_sha256: String,
        actual_sha256: String,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    Unreadable {
        path: String,
        message: String,
    },
    /// An absolute path or one with `..`: never read.
    UnsafePath {
        path: String,
    },
}

impl fmt::Display for CatalogProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatalogProblem::Missing { path } => write!(f, "{path}: missing"),
            CatalogProblem::Changed { path, expected_sha256, actual_sha256, expected_bytes, actual_bytes } => write!(
                f,
                "{path}: changed (catalog {expected_bytes} bytes, sha256 {expected_sha256}; \
                 found {actual_bytes} bytes, sha256 {actual_sha256})"
            ),
            CatalogProblem::Unreadable { path, message } => {
                write!(f, "{path}: unreadable: {message}")
            }
            CatalogProblem::UnsafePath { path } => {
                write!(f, "{path}: not a relative path inside the directory")
            }
        }
    }
}

struct Problems<'a>(&'a [CatalogProblem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} file(s) do not match the catalog:", self.0.len())?;
        for p in self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong while generating, writing or verifying inputs.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The cause is part of the message (not `#[source]`): chains print it once.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{what}: {message}")]
    Malformed { what: String, message: String },
    #[error(
        "prompts: cutting text needs an encoder for tokenizer {tokenizer:?}, and none was \
         supplied (this harness build has no tokenizer library)"
    )]
    NoEncoder { tokenizer: String },
    #[error("prompts: cannot encode {file}: {message}")]
    Encode { file: String, message: String },
    #[error("{}", Problems(.0))]
    Catalog(Vec<CatalogProblem>),
}

impl crate::BadInput for TraceError {
    fn is_bad_input(&self) -> bool {
        matches!(self, TraceError::Plan(p) if crate::BadInput::is_bad_input(p))
    }
}
