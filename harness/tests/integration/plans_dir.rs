//! Every study plan shipped in `plans/` parses and validates with this harness
//! (a key renamed in the schema fails here, not in a user's first run), and the
//! README's "Example plans" table names each of them. `gate-*.toml` are gate rule
//! files (`harness gate`), not study plans, and are read by the gate tests.

use crate::common;

use common::workspace;

fn study_plans() -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(workspace().join("plans"))
        .expect("plans/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("gate-"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_study_plan_validates() {
    let plans = study_plans();
    assert!(plans.len() > 20, "{plans:?}");
    let mut bad = Vec::new();
    for p in &plans {
        if let Err(e) = harness::plan::freeze_file(p) {
            bad.push(format!("{}: {e}", p.display()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_readme_names_every_study_plan() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    // A family may be named by its prefix: `plans/compare-*.toml`.
    let patterns: Vec<&str> =
        readme.split('`').filter_map(|w| w.strip_prefix("plans/").and_then(|w| w.strip_suffix("*.toml"))).collect();
    let missing: Vec<String> = study_plans()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| !readme.contains(&format!("plans/{name}")) && !patterns.iter().any(|p| name.starts_with(p)))
        .collect();
    assert!(missing.is_empty(), "README.md does not name {missing:?}");
}

/// A command that only prints ends quietly when its reader is gone (`harness plan
/// check PLAN | head`), as a Unix filter does: killed by SIGPIPE, no panic.
#[test]
fn a_printing_command_ends_quietly_when_stdout_is_closed() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    for args in [&["plan", "check", "plans/aa-cpu.toml"][..], &["completions", "bash"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(args)
            .current_dir(workspace())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run harness");
        // The reader is gone before the first write.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.signal() == Some(libc::SIGPIPE) || out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
}
