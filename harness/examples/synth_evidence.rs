//! Writes a synthetic evidence directory for `harness replay` benchmarks and tests:
//! `cargo run --release -p harness --example synth_evidence -- OUT [--small]`.
//! Default scale is seed-000 (33 server invocations, ~40,000 requests, ~5 million
//! stream events); `--small` writes a study of a few hundred requests. The results/
//! files come from the analysis path (`report::build`), so replay checks them
//! independently. Then time `harness replay OUT`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use harness::fixtures::synth::{SynthSpec, generate};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.iter().find(|a| !a.starts_with("--")).map(PathBuf::from) else {
        eprintln!("usage: synth_evidence OUT [--small]");
        return ExitCode::FAILURE;
    };
    let spec = if args.iter().any(|a| a == "--small") { SynthSpec::small() } else { SynthSpec::seed000() };
    let t = Instant::now();
    match generate(&out, &spec) {
        Ok(requests) => {
            println!(
                "wrote {} ({requests} request records, {} blocks + 1 descriptive, 3 arms) in {:.1} s",
                out.display(),
                spec.blocks,
                t.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("synth_evidence: {e}");
            ExitCode::FAILURE
        }
    }
}
