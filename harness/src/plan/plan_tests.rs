//! Tests of derivation round trips, resolution, freezing, schedules and placeholder
//! expansion on small plans built from `validate_tests::BASE`.

use std::path::{Path, PathBuf};

use super::validate_tests::{BASE, DERIVE, edit};
use super::*;
use crate::evidence::sha256_hex;

#[test]
fn derive_write_then_validate_round_trips() {
    let text = edit("rate = 2.5", "rate = \"derived:near\"")
        .replace("concurrency = 4\ncount = 16", "concurrency = 4\ncount = \"derived:count\"")
        + DERIVE;
    let plan = parse(&text).unwrap();
    let err = plan.require_derived().unwrap_err().to_string();
    assert!(err.contains("cells[0].count: cell \"closed\" uses derived:count"), "{err}");
    assert!(err.contains("cells[1].rate: cell \"open\" uses derived:near"), "{err}");
    assert!(plan.resolved_cells().is_err());

    let (_, loads) = derive_text(&text).unwrap();
    let written = rewrite_with_derived(&text, &loads).unwrap();
    assert!(written.starts_with(&text), "other bytes must be kept");
    let derived = parse(&written).unwrap();
    derived.require_derived().unwrap();
    let cells = derived.resolved_cells().unwrap();
    assert_eq!(cells[0].count, 768);
    assert_eq!(cells[1].load, ResolvedLoad::Open { rate_rps: 14.9, arrival: Arrival::Poisson });

    // A stale table (pilots changed) fails validation, and derive replaces it in place.
    let stale = written.replace("16.6504", "10.0");
    assert!(parse(&stale).unwrap_err().to_string().contains("derived.near"));
    let (_, fresh) = derive_text(&stale).unwrap();
    let again = rewrite_with_derived(&stale, &fresh).unwrap();
    assert_eq!(again.matches("[derived]").count(), 1);
    assert_eq!(parse(&again).unwrap().derived.unwrap().rate("near"), Some(9.0));
}

#[test]
fn freeze_keeps_bytes_and_hashes_them() {
    let frozen = freeze(BASE.as_bytes().to_vec()).unwrap();
    assert_eq!(frozen.bytes, BASE.as_bytes());
    assert_eq!(frozen.sha256, sha256_hex(BASE.as_bytes()));
    assert_eq!(frozen.sha256.len(), 64);
    assert!(freeze(vec![0xff, 0xfe]).is_err());
}

#[test]
fn schedule_of_the_base_plan_alternates() {
    let plan = parse(BASE).unwrap();
    let s = plan.schedule();
    assert_eq!(s.blocks.len(), 2);
    assert_eq!(s.blocks[0].arms, ["cand", "ctrl"]);
    assert_eq!(s.blocks[0].cells, ["closed", "open"]);
    assert_eq!(s.blocks[1].arms, ["ctrl", "cand"]);
    assert_eq!(s.blocks[1].cells, ["open", "closed"]);
}

#[test]
fn plan_check_says_when_blocks_are_interleaved_or_the_setup_randomized() {
    let plain = parse(BASE).unwrap().render_check("x");
    assert!(!plain.contains("interleaved") && !plain.contains("setup randomized"), "{plain}");
    let text = edit("cell_order = \"alternate\"", "cell_order = \"alternate\"\nrounds = 4\nrandomize_setup = true");
    let shown = parse(&text).unwrap().render_check("x");
    assert!(shown.contains("interleaved (blocks.rounds = 4)"), "{shown}");
    assert!(shown.contains("setup randomized (blocks.randomize_setup)"), "{shown}");
}

#[test]
fn descriptive_cells_run_in_their_own_blocks() {
    let text = BASE.replace("count = 2\n", "count = 3\n").replace(
        "[analysis]",
        "[[cells]]\nname = \"iso\"\nkind = \"descriptive\"\nload = \"isolated\"\nspacing_s = 5\ncount = 8\nretries = 1\n\n[analysis]",
    );
    let plan = parse(&text).unwrap();
    let s = plan.schedule();
    assert_eq!(plan.blocks.descriptive, 1);
    assert_eq!(s.blocks.len(), 4);
    assert_eq!(s.blocks[3].kind, CellKind::Descriptive);
    assert_eq!(s.blocks[3].cells, ["iso"]);
    assert_eq!(s.blocks[3].arms, ["ctrl", "cand"]);
    let iso = plan.try_resolve(plan.cell("iso").unwrap()).unwrap();
    assert_eq!(iso.load, ResolvedLoad::Isolated { spacing_ns: 5_000_000_000 });
    assert!(plan.balance_notes().iter().any(|n| n.contains("blocks.arm_order")));
}

#[test]
fn arm_command_expands_placeholders() {
    let text = edit(
        "\"{port}\"]\nport = 18001",
        "\"{port}\", \"--receipts\", \"{receipts}\", \"--name\", \"{model}\"]\nport = 18001\n\
         receipts = \"{arm_dir}/receipts.jsonl\"\nenv = { TAG = \"{arm}-b{block}\" }",
    );
    let plan = parse(&text).unwrap();
    let cmd = plan.arm_command(&plan.arms[0], 3, Path::new("/ev/raw/b3/cand")).unwrap().unwrap();
    assert_eq!(
        cmd.argv,
        ["engine", "serve", "--port", "18001", "--receipts", "/ev/raw/b3/cand/receipts.jsonl", "--name", "m"]
    );
    assert_eq!(cmd.env["TAG"], "cand-b3");
    assert_eq!(cmd.receipts, Some(PathBuf::from("/ev/raw/b3/cand/receipts.jsonl")));
}

#[test]
fn metric_kinds() {
    assert_eq!(Metric::ThroughputRps.kind(), MetricKind::Throughput);
    assert_eq!(Metric::OutputTokensPerS.kind(), MetricKind::Throughput);
    for m in
        [Metric::TtftP95, Metric::TpotP95, Metric::E2eP95, Metric::E2eP95Intended, Metric::E2eMean, Metric::TtftMean]
    {
        assert_eq!(m.kind(), MetricKind::Latency);
    }
    for m in Metric::ALL {
        let parsed: Metric = serde_json::from_str(&format!("{:?}", m.as_str())).unwrap();
        assert_eq!(parsed, m);
    }
}
