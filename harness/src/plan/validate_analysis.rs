//! Validation of the `[analysis]` keys besides `alpha` (which `validate_cells`
//! checks with the hypotheses): `blocking`, the scope of "failed requests block
//! claims"; `noise`, the measures whose variance the report decomposes; and of a
//! cell's `recorder` (full or light, the observer-effect check).
//! Owns those keys' spellings and defaults. Must not touch files.

use super::schema::AnalysisFile;
use super::types::{Blocking, Cell, CellKind, Metric, Recorder};
use super::validate::Checker;

/// `cells[i].recorder` (key prefix `k`): "full" (default) or "light", and light
/// only on a descriptive cell (a light record has no TPOT, so no hypothesis may
/// read it).
pub(super) fn recorder(c: &mut Checker, k: &str, v: Option<&str>, kind: CellKind) -> Recorder {
    match v {
        None | Some("full") => Recorder::Full,
        Some("light") if kind == CellKind::Descriptive => Recorder::Light,
        Some("light") => {
            c.err(format!("{k}.recorder"), "the light recorder is for descriptive cells only (no TPOT or gaps)");
            Recorder::Full
        }
        Some(other) => {
            c.err(format!("{k}.recorder"), format!("unknown value {other:?} (use \"full\" or \"light\")"));
            Recorder::Full
        }
    }
}

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

/// `analysis.noise`: measures (each once) whose variance the report splits into
/// blocks, servers and repeats (`crate::analysis::noise`): every arm is taken as a server of
/// the block (an A/A plan of one build), so it needs 2 or more confirmation blocks
/// and a confirmation cell. Empty without the key.
pub(super) fn noise(c: &mut Checker, analysis: Option<&AnalysisFile>, blocks: u32, cells: &[Cell]) -> Vec<Metric> {
    let Some(metrics) = analysis.and_then(|a| a.noise.clone()) else { return Vec::new() };
    if metrics.is_empty() {
        c.err("analysis.noise", "an empty list: leave the key out, or name the measures to decompose");
    }
    for (i, m) in metrics.iter().enumerate() {
        if metrics[..i].contains(m) {
            c.err("analysis.noise", format!("{} is listed twice", m.as_str()));
        }
    }
    if blocks < 2 || !cells.iter().any(|cell| cell.kind == CellKind::Confirmation) {
        c.err(
            "analysis.noise",
            format!("a decomposition needs at least 2 confirmation blocks and a confirmation cell (the plan has {blocks} blocks)"),
        );
    }
    metrics
}

#[cfg(test)]
mod tests {
    use crate::plan::validate_tests::{BASE, edit};
    use crate::plan::{Blocking, parse};

    #[test]
    fn noise_names_measures_once_and_needs_blocks() {
        use crate::plan::Metric;
        assert!(parse(BASE).unwrap().noise.is_empty());
        let two = edit("alpha = 0.05", "alpha = 0.05\nnoise = [\"throughput_rps\", \"e2e_p95_intended\"]");
        assert_eq!(parse(&two).unwrap().noise, vec![Metric::ThroughputRps, Metric::E2eP95Intended]);
        let twice = edit("alpha = 0.05", "alpha = 0.05\nnoise = [\"ttft_p95\", \"ttft_p95\"]");
        assert!(parse(&twice).unwrap_err().to_string().contains("analysis.noise: ttft_p95 is listed twice"));
        let empty = edit("alpha = 0.05", "alpha = 0.05\nnoise = []");
        assert!(parse(&empty).unwrap_err().to_string().contains("analysis.noise: an empty list"));
        let one_block = edit("alpha = 0.05", "alpha = 0.05\nnoise = [\"ttft_p95\"]").replacen(
            "count = 2\narm_order",
            "count = 1\narm_order",
            1,
        );
        assert!(parse(&one_block).unwrap_err().to_string().contains("at least 2 confirmation blocks"));
    }

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

    #[test]
    fn the_light_recorder_is_for_descriptive_cells_only() {
        use crate::plan::Recorder;
        assert!(parse(BASE).unwrap().cells.iter().all(|c| c.recorder == Recorder::Full));
        let light = edit("name = \"open\"", "name = \"open\"\nrecorder = \"light\"");
        let err = parse(&light).unwrap_err().to_string();
        assert!(err.contains("recorder: the light recorder is for descriptive cells only"), "{err}");
        let bad = parse(&edit("name = \"open\"", "name = \"open\"\nrecorder = \"none\"")).unwrap_err().to_string();
        assert!(bad.contains("recorder: unknown value \"none\""), "{bad}");
    }
}
