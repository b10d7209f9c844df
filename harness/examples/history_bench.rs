//! Benchmark of `harness gate --history` at CI scale (not a test; no assertion on
//! time): change-point detection over a series of 100,000 gate estimates (noise SD
//! 1%, flat, then a 3% step at 40% and a return at 70%), and the whole command
//! (read, deduplicate, detect) over a store of 3,000 gate files of two hypotheses
//! with one copied file. Prints one JSON object.
//!
//! `cargo run --release -p harness --example history_bench -- [GATES] [FILES] [--keep DIR]`
//! (`--keep DIR`: the store is written to DIR and kept, e.g. to time
//! `harness gate --history DIR` of another build on it).

use std::process::ExitCode;
use std::time::Instant;

use polars::prelude::{Column, DataFrame};
use polars_io::parquet::write::ParquetWriter;
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Normal};

/// Gate `i`'s level: 0, a 3% slowdown from 40% to 70% of the series, then 0.
fn level(i: usize, n: usize) -> f64 {
    if i * 10 >= n * 4 && i * 10 < n * 7 { 0.03f64.ln_1p() } else { 0.0 }
}

fn write_gate(dir: &std::path::Path, i: usize, n: usize, noise: &mut impl FnMut() -> f64) -> std::path::PathBuf {
    let id = format!("{}-{:012x}", 1_700_000_000_000u64 + i as u64, i);
    let rows = 2 * 4;
    let mut hyp = Vec::new();
    let mut block = Vec::new();
    let mut ratio = Vec::new();
    for h in ["closed-throughput", "open-ttft"] {
        for b in 0..4i64 {
            hyp.push(h.to_string());
            block.push(b);
            ratio.push(level(i, n) + noise());
        }
    }
    let cols = vec![
        Column::new("gate".into(), vec![id.clone(); rows]),
        Column::new("unix_ms".into(), vec![1_700_000_000_000i64 + i as i64; rows]),
        Column::new("candidate_revision".into(), vec![format!("{i:012x}"); rows]),
        Column::new("baseline_sha256".into(), vec![String::new(); rows]),
        Column::new("candidate_sha256".into(), vec![String::new(); rows]),
        Column::new("verdict".into(), vec!["passed".to_string(); rows]),
        Column::new("hypothesis".into(), hyp),
        Column::new("block".into(), block),
        Column::new("worse_log_ratio".into(), ratio),
    ];
    let mut df = DataFrame::new(rows, cols).expect("frame");
    let path = dir.join(format!("{id}.parquet"));
    let mut buf = Vec::new();
    ParquetWriter::new(&mut buf).finish(&mut df).expect("parquet");
    std::fs::write(&path, buf).expect("write");
    path
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let keep = argv.iter().position(|a| a == "--keep").and_then(|i| argv.get(i + 1)).map(std::path::PathBuf::from);
    let args: Vec<usize> = argv.iter().filter_map(|a| a.parse().ok()).collect();
    let gates = args.first().copied().unwrap_or(100_000);
    let files = args.get(1).copied().unwrap_or(3_000);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let normal = Normal::new(0.0, 0.01).expect("normal");
    let xs: Vec<f64> = (0..gates).map(|i| level(i, gates) + normal.sample(&mut rng)).collect();
    let t = Instant::now();
    let cps = harness::commands::gate::change_points(&xs, 9);
    let detect_s = t.elapsed().as_secs_f64();

    let dir =
        keep.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("history-bench-{}", std::process::id())));
    std::fs::create_dir_all(&dir).expect("store");
    let mut noise = || normal.sample(&mut rng);
    let mut first = None;
    for i in 0..files {
        let p = write_gate(&dir, i, files, &mut noise);
        first.get_or_insert(p);
    }
    // A copy of one gate's file under another name: counted once.
    if let Some(p) = &first {
        std::fs::copy(p, dir.join("copy-of-first.parquet")).expect("copy");
    }
    let t = Instant::now();
    let h = harness::commands::gate::History::analyse(&dir, 9);
    let store_s = t.elapsed().as_secs_f64();
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let h = match h {
        Ok(h) => h,
        Err(e) => {
            eprintln!("history_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = serde_json::json!({
        "benchmark": "gate-history",
        "command": format!("cargo run --release -p harness --example history_bench -- {gates} {files}"),
        "detect": {"gates": gates, "seconds": detect_s, "change_points": cps.iter().map(|c| c.0).collect::<Vec<_>>()},
        "store": {"files": files + 1, "gates": h.gates, "duplicates": h.duplicates.len(), "seconds": store_s,
                  "change_points": h.series.iter().map(|s| (s.hypothesis.clone(), s.change_points.iter().map(|c| c.at).collect::<Vec<_>>())).collect::<Vec<_>>()},
        "threads": std::thread::available_parallelism().map_or(0, |n| n.get()),
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    ExitCode::SUCCESS
}
