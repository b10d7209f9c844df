//! Benchmark: builds a dataset panel of 100,000 requests and prints one JSON line
//! with the time it took (not a test; no assertion on the time).
//!
//! `cargo run --release -p harness --example panel_bench -- [SHAREGPT.json] [TOKENIZER.json] [N]`
//!
//! Defaults: the play-dialogue file (play dialogue in ShareGPT format, not ShareGPT;
//! built by `scripts/fetch-assets`), the Qwen3 tokenizer, N = 100,000. The file has
//! fewer conversations than N, so it is first repeated (each copy a distinct
//! conversation entry) into a temporary file of at least N + 20% conversations. The
//! timed part is what `harness run` does: parse the file, shuffle, encode, filter
//! (vLLM's defaults), sample N; then `prompts.jsonl` is rendered and timed apart.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use harness::inputs::TokenizerEncoder;
use harness::trace::{Encoder, build_panel};

fn plan_text(path: &str, tokenizer: &str, n: usize) -> String {
    format!(
        "[study]\nname = \"panel-bench\"\nseed = 1\n\n[request]\nmodel = \"m\"\noutput = \"natural\"\n\
         max_output_tokens = 128\n\n[prompts]\nsource = \"sharegpt\"\npath = {path:?}\ntokenizer = {tokenizer:?}\n\
         num_requests = {n}\n\n[warmup]\nprompts = 0\n\n[timing]\nsettle_s = 0\nrequest_timeout_s = 5\n\
         drain_timeout_s = 5\n\n[blocks]\ncount = 1\narm_order = \"fixed\"\ncell_order = \"fixed\"\n\n\
         [[arms]]\nname = \"a\"\nrole = \"control\"\nurl = \"http://127.0.0.1:1\"\n\n\
         [[cells]]\nname = \"c\"\nkind = \"confirmation\"\nload = \"closed\"\nconcurrency = 1\ncount = 1\n"
    )
}

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let data = PathBuf::from(args.first().map_or("assets/sharegpt-plays/plays_sharegpt.json", String::as_str));
    let tokenizer = PathBuf::from(args.get(1).map_or("assets/qwen3-tokenizer/tokenizer.json", String::as_str));
    let n: usize = args.get(2).map_or(Ok(100_000), |s| s.parse()).map_err(|e| format!("N: {e}"))?;
    let text = std::fs::read_to_string(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let convs: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if convs.is_empty() {
        return Err(format!("{}: no conversations", data.display()));
    }
    let copies = (n + n / 5).div_ceil(convs.len());
    let tiled: Vec<&serde_json::Value> = (0..copies).flat_map(|_| convs.iter()).collect();
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = tmp.path().join("tiled.json");
    std::fs::write(&file, serde_json::to_vec(&tiled).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let plan = harness::plan::parse(&plan_text(&file.display().to_string(), &tokenizer.display().to_string(), n))
        .map_err(|e| e.to_string())?;
    let encoder = TokenizerEncoder::from_file(&tokenizer).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let panel =
        build_panel(&plan, std::path::Path::new("."), Some(&encoder as &dyn Encoder)).map_err(|e| e.to_string())?;
    let build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let jsonl = panel.to_jsonl();
    let jsonl_s = t.elapsed().as_secs_f64();
    let tokens: u64 = panel.prompts.iter().map(|p| u64::from(p.length)).sum();
    Ok(serde_json::json!({
        "benchmark": "panel_bench",
        "source": "sharegpt",
        "dataset": data.display().to_string(),
        "dataset_label": "play dialogue in ShareGPT format, not ShareGPT",
        "conversations_in_file": tiled.len(),
        "tokenizer": tokenizer.display().to_string(),
        "requests": panel.prompts.len(),
        "prompt_tokens": tokens,
        "build_s": build_s,
        "prompts_jsonl_s": jsonl_s,
        "prompts_jsonl_bytes": jsonl.len(),
    })
    .to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("panel_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
