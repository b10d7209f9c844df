//! The CUDA kernels, compiled without a GPU (run with `--features cuda`;
//! scripts/test does): `kernels::cuda::source::SOURCE` — the exact string the
//! engine compiles at startup — goes through NVRTC to PTX and then through
//! ptxas to SASS for sm_80 (A100) and sm_90 (H100), and any error fails. ptxas's
//! `-v` report gives each kernel's registers per thread and spills: they are
//! printed (and written as JSON to `$ENGINE_PTXAS_REPORT` when set), and any
//! spill in an attention kernel fails.
//!
//! NVRTC and ptxas come from the package registry's wheels
//! (`nvidia-cuda-nvrtc-cu12`, `nvidia-cuda-nvcc-cu12`;
//! engine/tests/reference/requirements-cuda.txt, installed by scripts/test).
//! They are found through `python3` (or `ENGINE_NVRTC_LIB` and `ENGINE_PTXAS`),
//! and the NVRTC library is opened by its full path before cudarc looks for it
//! by name, so no loader path needs setting.
use engine::kernels::cuda::compile::{Image, compile, nvrtc_version};
use engine::kernels::cuda::source::{ATT_CHUNK, ATT_MAX_HEAD_DIM, ATT_THREADS, KERNELS, SOURCE};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

const INSTALL: &str = "pip install -r engine/tests/reference/requirements-cuda.txt (scripts/test does)";

/// The folder of an installed Python package (`nvidia.cuda_nvrtc`).
fn python_package(module: &str) -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", &format!("import {module} as m; print(list(m.__path__)[0])")])
        .output()
        .ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn nvrtc_library() -> PathBuf {
    if let Some(p) = std::env::var_os("ENGINE_NVRTC_LIB") {
        return PathBuf::from(p);
    }
    let dir = python_package("nvidia.cuda_nvrtc").unwrap_or_else(|| panic!("no NVRTC wheel: {INSTALL}"));
    let lib = dir.join("lib/libnvrtc.so.12");
    assert!(lib.is_file(), "{} is missing: {INSTALL}", lib.display());
    lib
}

fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("ENGINE_PTXAS") {
        return PathBuf::from(p);
    }
    let dir = python_package("nvidia.cuda_nvcc").unwrap_or_else(|| panic!("no ptxas wheel: {INSTALL}"));
    let bin = dir.join("bin/ptxas");
    assert!(bin.is_file(), "{} is missing: {INSTALL}", bin.display());
    bin
}

/// Opens libnvrtc by its full path, so that cudarc's later open by name
/// (`libnvrtc.so.12`) finds the loaded library by its soname.
fn load_nvrtc() {
    let lib = nvrtc_library();
    let c = std::ffi::CString::new(lib.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the handle is kept for the process's life.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null(), "cannot load {}", lib.display());
}

/// One kernel's figures from `ptxas -v`.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Usage {
    registers: u32,
    stack_bytes: u32,
    spill_store_bytes: u32,
    spill_load_bytes: u32,
}

/// Reads `ptxas -v`'s report: per function, its stack frame and spills, and
/// per entry function its registers.
fn parse_ptxas(report: &str) -> BTreeMap<String, Usage> {
    let mut out: BTreeMap<String, Usage> = BTreeMap::new();
    let (mut entry, mut props) = (String::new(), String::new());
    let quoted = |line: &str| line.split('\'').nth(1).unwrap_or_default().to_string();
    let number_before = |line: &str, what: &str| -> u32 {
        let at = line.find(what).unwrap_or(0);
        line[..at].split_whitespace().last().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    for line in report.lines() {
        if line.contains("Compiling entry function") {
            entry = quoted(line);
            out.entry(entry.clone()).or_default();
        } else if line.contains("Function properties for") {
            props = line.rsplit("for ").next().unwrap_or_default().trim().to_string();
        } else if line.contains("bytes stack frame") {
            let u = out.entry(props.clone()).or_default();
            u.stack_bytes = number_before(line, "bytes stack frame");
            u.spill_store_bytes = number_before(line, "bytes spill stores");
            u.spill_load_bytes = number_before(line, "bytes spill loads");
        } else if line.contains("Used") && line.contains("registers") {
            out.entry(entry.clone()).or_default().registers = number_before(line, "registers");
        }
    }
    out
}

#[test]
fn ptxas_reports_are_read() {
    let report = "ptxas info    : Compiling entry function 'k' for 'sm_80'\n\
                  ptxas info    : Function properties for k\n    \
                  8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                  ptxas info    : Used 40 registers, 1280 bytes smem, 420 bytes cmem[0]\n";
    let u = &parse_ptxas(report)["k"];
    assert_eq!((u.registers, u.stack_bytes, u.spill_store_bytes, u.spill_load_bytes), (40, 8, 4, 12));
}

#[test]
fn every_kernel_compiles_to_sass_for_sm_80_and_sm_90_and_attention_never_spills() {
    load_nvrtc();
    let (major, minor) = nvrtc_version().expect("NVRTC loads");
    let ptxas = ptxas();
    let dir = tempfile::tempdir().unwrap();
    let mut record = serde_json::Map::new();
    for arch in ["80", "90"] {
        let ptx = match compile(SOURCE, &format!("compute_{arch}")).unwrap_or_else(|e| panic!("NVRTC: {e}")) {
            Image::Ptx(text) => text,
            Image::Cubin(_) => panic!("compute_{arch} must give PTX"),
        };
        let src = dir.path().join(format!("kernels_{arch}.ptx"));
        std::fs::write(&src, &ptx).unwrap();
        let out = Command::new(&ptxas)
            .arg(format!("-arch=sm_{arch}"))
            .arg("-v")
            .arg(&src)
            .arg("-o")
            .arg(dir.path().join(format!("kernels_{arch}.cubin")))
            .output()
            .expect("ptxas runs");
        let report = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ptxas for sm_{arch} failed:\n{report}");
        let usage = parse_ptxas(&report);
        for name in KERNELS {
            let u = usage.get(name).unwrap_or_else(|| panic!("sm_{arch}: no kernel {name} in ptxas's report"));
            assert!(u.registers > 0, "sm_{arch}: {name}: no register count read");
            eprintln!(
                "sm_{arch} {name:24} {:3} registers, {:4} bytes stack, spills {} stored / {} loaded",
                u.registers, u.stack_bytes, u.spill_store_bytes, u.spill_load_bytes
            );
        }
        for (name, u) in &usage {
            if name.contains("attention") || name.contains("attend") {
                assert_eq!(
                    (u.spill_store_bytes, u.spill_load_bytes),
                    (0, 0),
                    "sm_{arch}: the attention kernel {name} spills: {u:?}"
                );
            }
        }
        record.insert(format!("sm_{arch}"), serde_json::to_value(&usage).unwrap());
    }
    if let Some(p) = std::env::var_os("ENGINE_PTXAS_REPORT") {
        let doc = serde_json::json!({
            "what": "ptxas -v per kernel of kernels::cuda::source::SOURCE (NVRTC to PTX, ptxas to SASS)",
            "nvrtc": format!("{major}.{minor}"),
            "ptxas": String::from_utf8_lossy(&Command::new(&ptxas).arg("--version").output().unwrap().stdout)
                .lines().last().unwrap_or_default().to_string(),
            "command": "ENGINE_PTXAS_REPORT=FILE cargo test -p engine --features cuda --test integration -- cuda_kernels_compile::",
            "kernels": record,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    }
}

#[test]
fn a_kernel_that_does_not_compile_gives_nvrtc_s_log_and_exit_1() {
    load_nvrtc();
    let broken = "extern \"C\" __global__ void k(float* x) { x[0] = no_such_function(x[1]); }";
    let e = match compile(broken, "sm_90") {
        Err(e) => e,
        Ok(_) => panic!("a call of an undefined function compiled"),
    };
    let text = e.to_string();
    assert!(text.contains("no_such_function") && text.contains("sm_90"), "{text}");
    assert!(!e.is_input(), "a compile failure is the engine's (exit 1), not bad input");
    let engine_error: engine::error::EngineError = e.into();
    assert!(!engine_error.is_input());
}

#[test]
fn the_host_constants_are_the_source_s() {
    for (name, value) in [
        ("ATT_THREADS", ATT_THREADS as usize),
        ("ATT_CHUNK", ATT_CHUNK as usize),
        ("ATT_MAX_HEAD_DIM", ATT_MAX_HEAD_DIM),
        ("PAGE", engine::kv::PAGE_SIZE),
    ] {
        assert!(SOURCE.contains(&format!("#define {name} {value}\n")), "{name} is not {value} in the source");
    }
    for name in KERNELS {
        assert!(
            SOURCE.contains(&format!("void {name}(")) || SOURCE.contains(&format!("ATTENTION_KERNEL({name},")),
            "{name} is not defined in the source"
        );
    }
}
