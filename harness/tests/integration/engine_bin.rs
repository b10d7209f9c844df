//! The engine binary the integration tests drive is the current build: `engine_bin()`
//! builds it once per test process, so it is never older than the engine's sources.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use common::{engine_bin, files, workspace};

fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_engine_binary_is_not_older_than_its_sources() {
    let engine = engine_bin();
    let built = mtime(&engine);
    let root = workspace().join("engine");
    let mut sources: Vec<_> = files(&root.join("src")).into_iter().map(|f| root.join("src").join(f)).collect();
    sources.push(root.join("Cargo.toml"));
    let newest = sources.iter().max_by_key(|p| mtime(p)).expect("engine has sources");
    assert!(
        built >= mtime(newest),
        "{} is older than {}: the tests would drive a stale engine",
        engine.display(),
        newest.display()
    );
    // The same path on a second call: one build per test process.
    assert_eq!(engine_bin(), engine);
    let out = Command::new(&engine).arg("--version").output().expect("run engine --version");
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout);
    // Both packages take the workspace's version.
    let want = format!("engine {}", env!("CARGO_PKG_VERSION"));
    assert!(version.contains(&want), "engine --version says {version:?}, want {want:?}");
}
