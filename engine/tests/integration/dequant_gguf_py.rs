//! The loader's decoders against llama.cpp's own Python GGUF library: runs
//! tests/reference/gguf_dequant_check.py, which writes random blocks of every
//! type the engine decodes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
//! Q4_K, Q5_K, Q6_K) with gguf-py's GGUFWriter, runs `engine dequantize` on
//! them and compares each value with `gguf.quants.dequantize` bit for bit.
//! Needs python3 with numpy and gguf (engine/tests/reference/requirements.txt,
//! installed by scripts/test); fails, never skips, without them.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_decoded_type_equals_gguf_py_bit_for_bit() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reference/gguf_dequant_check.py");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .arg(&script)
        .args(["--engine", env!("CARGO_BIN_EXE_engine")])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} exited {:?} (2: could not run; it needs numpy and gguf: \
         python3 -m pip install -r engine/tests/reference/requirements.txt):\n{stdout}\n{stderr}",
        script.display(),
        out.status.code()
    );
    eprintln!("{stdout}");
    for ty in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("ok {ty} ")) && l.contains(" 0 differ")),
            "{ty} not compared:\n{stdout}"
        );
    }
}
