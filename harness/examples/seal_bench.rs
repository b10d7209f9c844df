//! Benchmark of the evidence opener (`evidence::Sealed::open`, what every reader
//! of an evidence directory pays before reading: the listing, and every file
//! hashed once in parallel) on a seed-000-scale synthetic study (not a test; no
//! assertion on time). Prints one JSON object.
//!
//! `cargo run --release -p harness --example seal_bench -- [DIR]` (default: a
//! seed-000 synthetic study written to a temporary folder first, then removed).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use harness::evidence::Sealed;
use harness::fixtures::synth::{SynthSpec, generate};

fn main() -> ExitCode {
    let given = std::env::args().nth(1).map(PathBuf::from);
    let (dir, made) = match given {
        Some(d) => (d, false),
        None => {
            let d = std::env::temp_dir().join(format!("seal-bench-{}", std::process::id()));
            if let Err(e) = generate(&d, &SynthSpec::seed000()) {
                eprintln!("seal_bench: {e}");
                return ExitCode::FAILURE;
            }
            (d, true)
        }
    };
    let mut runs = Vec::new();
    let mut result = Ok(());
    for _ in 0..3 {
        let t = Instant::now();
        match Sealed::open(&dir) {
            Ok(_) => runs.push(t.elapsed().as_secs_f64()),
            Err(e) => {
                result = Err(e.to_string());
                break;
            }
        }
    }
    let files =
        harness::evidence::read_manifest(&dir).map(|m| (m.files.len(), m.files.iter().map(|f| f.bytes).sum::<u64>()));
    if made {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(e) = result {
        eprintln!("seal_bench: {e}");
        return ExitCode::FAILURE;
    }
    let (files, bytes) = files.unwrap_or_default();
    let best = runs.iter().copied().fold(f64::INFINITY, f64::min);
    let out = serde_json::json!({
        "benchmark": "evidence-open",
        "command": "cargo run --release -p harness --example seal_bench",
        "files": files,
        "bytes": bytes,
        "seconds": runs,
        "mb_per_s_best": bytes as f64 / 1e6 / best,
        "threads": std::thread::available_parallelism().map_or(0, |n| n.get()),
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    ExitCode::SUCCESS
}
