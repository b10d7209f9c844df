//! The per-request table `results/requests.csv` / `.parquet` on synthetic evidence:
//! one row per request record, the same column types for a CSV reader's inference
//! and the Parquet schema, listed in the manifest, replayed clean, and a changed
//! value named by replay with its row and column.

use crate::common;

use std::path::Path;

use common::tamper::*;
use harness::commands::replay::{Status, replay_dir};
use harness::fixtures::synth::{SynthSpec, generate};
use polars::prelude::DataFrame;
use polars_io::SerReader;
use polars_io::csv::read::CsvReadOptions;
use polars_io::parquet::read::ParquetReader;

const CHECK: &str = "per-request table: results/requests.csv";

fn read_csv(path: &Path) -> DataFrame {
    CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(None)
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .expect("csv reader")
        .finish()
        .expect("read csv")
}

#[test]
fn the_request_table_has_a_row_per_record_one_schema_and_replay_names_a_changed_value() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    generate(&clean, &SynthSpec::small()).expect("synthetic evidence");

    let records: usize = common::files(&clean)
        .iter()
        .filter(|p| p.ends_with(".requests.jsonl"))
        .map(|p| common::read_records(&clean.join(p)).len())
        .sum();
    let csv = read_csv(&clean.join("results/requests.csv"));
    let parquet =
        ParquetReader::new(std::fs::File::open(clean.join("results/requests.parquet")).unwrap()).finish().unwrap();
    assert_eq!((csv.height(), parquet.height()), (records, records));
    assert_eq!(csv.schema(), parquet.schema(), "a CSV reader and the Parquet file agree on every column's type");
    let manifest = common::read_json(&clean.join("manifest.json"));
    let listed: Vec<&str> = manifest["files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
    assert!(listed.contains(&"results/requests.csv") && listed.contains(&"results/requests.parquet"));
    let o = replay_dir(&clean).unwrap();
    assert_eq!(o.check(CHECK).expect("the check runs").status, Status::Pass, "{}", o.render_table(5));

    // One TTFT changed (and the manifest re-sealed): replay names row and column.
    let dir = tmp.path().join("changed");
    copy_dir(&clean, &dir);
    let path = dir.join("results/requests.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = header.iter().position(|h| *h == "ttft_ms").unwrap();
    let (row, mut fields) = lines
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, l)| (i, l.split(',').map(str::to_string).collect::<Vec<_>>()))
        .find(|(_, f)| !f[col].is_empty())
        .expect("a row with a TTFT");
    let key = format!("row b{}/{}/{}/#{} ttft_ms", fields[2], fields[3], fields[4], fields[5]);
    let was: f64 = fields[col].parse().unwrap();
    fields[col] = format!("{}", was + 1.0);
    lines[row] = fields.join(",");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    rewrite_manifest(&dir);
    let o = replay_dir(&dir).unwrap();
    let c = o.check(CHECK).unwrap();
    assert_eq!(c.status, Status::Fail, "{}", o.render_table(5));
    assert!(c.mismatches.iter().any(|m| m.field == key), "{key} not named:\n{}", o.render_table(5));
}

/// The study-clock stamps and finish reason make a time series without the raw
/// records: each row's stamps are its record's (first token = the first
/// token-bearing event), replay checks them, and a table written before them (23
/// columns) still replays.
#[test]
fn each_row_carries_its_records_stamps_and_an_older_table_still_replays() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    generate(&clean, &SynthSpec::small()).expect("synthetic evidence");
    let text = std::fs::read_to_string(clean.join("results/requests.csv")).unwrap();
    let lines: Vec<Vec<String>> = text.lines().map(|l| l.split(',').map(str::to_string).collect()).collect();
    let at = |name: &str| lines[0].iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    let (id, send, first, done) = (at("id"), at("send_ns"), at("first_token_ns"), at("done_ns"));
    let mut seen = 0;
    for p in common::files(&clean).iter().filter(|p| p.ends_with(".requests.jsonl")) {
        for r in common::read_records(&clean.join(p)) {
            let row = lines.iter().find(|l| l[id] == r.id).expect("a row per record");
            let opt = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
            assert_eq!(row[send], opt(r.send_ns));
            assert_eq!(row[first], opt(r.events.iter().find(|e| e.tokens > 0).map(|e| e.t_ns)));
            assert_eq!(row[done], opt(r.done_ns));
            // Wall time: the session's start plus the stamp.
            assert_eq!(row[at("session")], "0");
            let wall: f64 = row[at("send_unix_ms")].parse().expect("a wall time");
            let want = harness::fixtures::synth::SYNTH_STARTED_UNIX_MS as f64 + r.send_ns.unwrap() as f64 / 1e6;
            assert!((wall - want).abs() < 1e-3, "{wall} vs {want}");
            seen += 1;
        }
    }
    assert!(seen > 0);
    // The 23- and 30-column layouts of earlier reports, re-sealed: still a pass.
    for width in [23, 30] {
        let old = tmp.path().join(format!("old-{width}"));
        copy_dir(&clean, &old);
        let cut: Vec<String> = lines.iter().map(|l| l[..width].join(",")).collect();
        std::fs::write(old.join("results/requests.csv"), cut.join("\n") + "\n").unwrap();
        rewrite_manifest(&old);
        let o = replay_dir(&old).unwrap();
        assert_eq!(o.check(CHECK).expect("the check runs").status, Status::Pass, "{}", o.render_table(5));
    }
    // A wall time moved by a second: replay names it.
    let moved = tmp.path().join("moved");
    copy_dir(&clean, &moved);
    let mut rows = lines.clone();
    let col = at("done_unix_ms");
    let v: f64 = rows[1][col].parse().unwrap();
    rows[1][col] = format!("{}", v + 1000.0);
    let text: Vec<String> = rows.iter().map(|l| l.join(",")).collect();
    std::fs::write(moved.join("results/requests.csv"), text.join("\n") + "\n").unwrap();
    rewrite_manifest(&moved);
    let o = replay_dir(&moved).unwrap();
    let c = o.check(CHECK).expect("the check runs");
    assert!(c.mismatches.iter().any(|m| m.field.ends_with("done_unix_ms")), "{}", o.render_table(5));
}
