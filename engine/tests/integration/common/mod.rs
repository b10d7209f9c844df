//! Shared helpers for the engine's integration tests: asset locations, the
//! independent Python reference, and synthetic model directories.
#![allow(dead_code)]

pub mod hamlet;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// A fetched asset; panics with the fix when it is missing (never skips).
pub fn asset(rel: &str) -> PathBuf {
    let p = repo_root().join("assets").join(rel);
    assert!(p.exists(), "missing asset {}: run scripts/fetch-assets first", p.display());
    p
}

pub fn smollm2() -> PathBuf {
    asset("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Runs `engine/tests/reference/<script>` with python3 and parses its JSON stdout.
pub fn python_json(script: &str, args: &[String]) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference").join(script);
    let out = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "python3 {} failed: {}\n(scripts/test installs the Python reference packages)",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("reference output is not JSON: {e}"))
}

pub fn f64s(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number")).collect()
}

pub fn ids_arg(ids: &[u32]) -> String {
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}
