//! The per-turn section of a session cell in `report.md` (and so `report.html`,
//! rendered from it): one pipe table per cell with multi-turn sessions, one row per
//! (block, arm, turn index) as `metrics::summarize_turns` computed it (the rows each
//! stored summary holds as `turns`), unpooled: requests are never pooled across
//! blocks. Writes nothing for a cell without sessions. Must not compute anything.

use std::fmt::Write;

use crate::analysis::study::CellData;

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.2}"))
}

fn tokens(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.0}"))
}

/// The per-turn table of cell `cell` (nothing when none of its runs has turns).
pub fn markdown(o: &mut String, cells: &[CellData], cell: &str) {
    let runs: Vec<&CellData> = cells.iter().filter(|c| c.cell == cell && !c.turns.is_empty()).collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Per turn of the multi-turn sessions, one row per block, arm and turn index (turn 0 is each session's \
         first request; not pooled across blocks). Nearest-rank percentiles over that turn's valid requests; a \
         turn never sent after a failed one counts as failed; TTFT, TPOT and E2E from HTTP send, in ms; input \
         tokens are the server's `usage.prompt_tokens`, which grow with the history.\n"
    );
    let _ = writeln!(
        o,
        "| block | arm | turn | requests | completed | failed | TTFT p50 | TTFT p95 | TTFT p99 | TPOT p50 | E2E p50 | \
         E2E p95 | input tokens p50 | output tokens p50 |"
    );
    let _ = writeln!(o, "|{}", " --- |".repeat(14));
    for c in runs {
        for t in &c.turns {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.block,
                c.arm,
                t.turn,
                t.requests,
                t.completed,
                t.failed,
                ms(t.ttft_p50_ms),
                ms(t.ttft_p95_ms),
                ms(t.ttft_p99_ms),
                ms(t.tpot_p50_ms),
                ms(t.e2e_p50_ms),
                ms(t.e2e_p95_ms),
                tokens(t.input_tokens_p50),
                tokens(t.output_tokens_p50),
            );
        }
    }
    o.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::TurnSummary;

    fn data(cell: &str, block: u32, turns: Vec<TurnSummary>) -> CellData {
        CellData {
            block,
            arm: "a".into(),
            cell: cell.into(),
            summary: Err("not needed".into()),
            ttft_ms: Vec::new(),
            tpot_ms: Vec::new(),
            spread: crate::analysis::spread::spread(&[]),
            turns,
        }
    }

    fn row(turn: u32) -> TurnSummary {
        TurnSummary {
            turn,
            requests: 4,
            completed: 3,
            failed: 1,
            ttft_p50_ms: Some(12.345),
            ttft_p95_ms: Some(20.0),
            ttft_p99_ms: Some(21.0),
            tpot_p50_ms: None,
            e2e_p50_ms: Some(100.0),
            e2e_p95_ms: Some(150.5),
            input_tokens_p50: Some(37.0),
            output_tokens_p50: Some(8.0),
        }
    }

    #[test]
    fn one_row_per_block_arm_and_turn_and_nothing_without_sessions() {
        let cells = vec![data("s", 0, vec![row(0), row(1)]), data("plain", 0, Vec::new()), data("s", 1, vec![row(0)])];
        let mut o = String::new();
        markdown(&mut o, &cells, "plain");
        assert!(o.is_empty(), "{o}");
        markdown(&mut o, &cells, "s");
        let rows: Vec<&str> =
            o.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| block") && !l.starts_with("| ---")).collect();
        assert_eq!(
            rows,
            [
                "| 0 | a | 0 | 4 | 3 | 1 | 12.35 | 20.00 | 21.00 | n/a | 100.00 | 150.50 | 37 | 8 |",
                "| 0 | a | 1 | 4 | 3 | 1 | 12.35 | 20.00 | 21.00 | n/a | 100.00 | 150.50 | 37 | 8 |",
                "| 1 | a | 0 | 4 | 3 | 1 | 12.35 | 20.00 | 21.00 | n/a | 100.00 | 150.50 | 37 | 8 |",
            ]
        );
        assert!(o.contains("| block | arm | turn | requests | completed | failed | TTFT p50 |"), "{o}");
    }
}
