//! Errors of the plan layer. Owns `PlanError` and `Issue` (one problem, named by the
//! plan key it concerns). Must not print or exit: callers decide how to report.

use std::fmt;
use std::path::PathBuf;

/// One problem with a plan, named by its key path, e.g. `cells[2].rate: must be positive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Key path in the plan file: `arms[1].argv`, `blocks.count`, `derived.near`.
    pub key: String,
    /// What is wrong, in words.
    pub message: String,
}

impl Issue {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Issue { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Renders a list of issues: one issue alone, several as a counted list.
struct Issues<'a>(&'a [Issue]);

impl fmt::Display for Issues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems in the plan:", many.len())?;
                for issue in many {
                    write!(f, "\n  {issue}")?;
                }
                Ok(())
            }
        }
    }
}

/// Everything that can go wrong while reading, validating, deriving or freezing a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    // Causes are part of each message (not `#[source]`), so a chain is not printed twice.
    #[error("cannot read {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: std::io::Error },
    #[error("the plan is not UTF-8 text: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error("the plan does not parse: {0}")]
    Parse(String),
    /// Validation failed; every problem found is listed (not only the first).
    #[error("{}", Issues(.0))]
    Invalid(Vec<Issue>),
}

impl crate::BadInput for PlanError {
    /// Everything but failing to write a plan back is about the plan.
    fn is_bad_input(&self) -> bool {
        !matches!(self, PlanError::Write { .. })
    }
}

impl From<std::str::Utf8Error> for PlanError {
    fn from(e: std::str::Utf8Error) -> Self {
        PlanError::NotUtf8(e)
    }
}

impl PlanError {
    /// A single-issue validation error.
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        PlanError::Invalid(vec![Issue::new(key, message)])
    }

    /// The issues of an `Invalid` error (empty for other kinds).
    pub fn issues(&self) -> &[Issue] {
        match self {
            PlanError::Invalid(issues) => issues,
            _ => &[],
        }
    }
}
