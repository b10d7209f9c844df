//! Validation of the `[analysis]` keys besides `alpha` (which `validate_cells`
//! checks with the hypotheses): `blocking`, the scope of "failed requests block
//! claims". Owns that key's spelling and default. Must not touch files.

use super::schema::AnalysisFile;
use super::types::Blocking;
use super::validate::Checker;

/// `analysis.blocking`: "study" (the default, also without `[analysis]`) or "cell".
pub(super) fn blocking(c: &mut Checker, analysis: Option<&AnalysisFile>) -> Blocking {
    match analysis.and_then(|a| a.blocking.as_deref()) {
        None | Some("study") => Blocking::Study,
        Some("cell") => Blocking::Cell,
        Some(other) => {
            c.err("analysis.blocking", format!("unknown value {other:?} (use \"study\" or \"cell\")"));
            Blocking::Study
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::validate_tests::{BASE, edit};
    use crate::plan::{Blocking, parse};

    #[test]
    fn blocking_defaults_to_study_and_reads_cell() {
        assert_eq!(parse(BASE).unwrap().blocking, Blocking::Study);
        let cell = edit("alpha = 0.05", "alpha = 0.05\nblocking = \"cell\"");
        assert_eq!(parse(&cell).unwrap().blocking, Blocking::Cell);
        let study = edit("alpha = 0.05", "alpha = 0.05\nblocking = \"study\"");
        assert_eq!(parse(&study).unwrap().blocking, Blocking::Study);
        let bad = parse(&edit("alpha = 0.05", "alpha = 0.05\nblocking = \"arm\"")).unwrap_err().to_string();
        assert!(bad.contains("analysis.blocking: unknown value \"arm\""), "{bad}");
    }
}
