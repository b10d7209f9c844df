//! Validation of `[arms.identity]`: the preset's name, the engine-only claims
//! (`kv_format`, `cpu_path`, `weights`) and their values, and the text checks
//! (not empty, one line each). Must not decide which checks a preset implies
//! (`arm::identity` does).

use super::schema::IdentityFile;
use super::types::{IdentityPreset, IdentitySpec};
use super::validate::Checker;

/// The engine's KV formats (`engine serve --kv-format`).
pub const ENGINE_KV_FORMATS: [&str; 3] = ["f16", "bf16", "k16v8"];
/// The engine's CPU paths (`engine serve --cpu-path`).
pub const ENGINE_CPU_PATHS: [&str; 4] = ["scalar", "avx2", "avx512", "amx"];
/// The weight types the engine's startup line names.
pub const ENGINE_WEIGHT_TYPES: [&str; 9] = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k"];

/// `external`: the arm is a `url` server, whose log the harness never sees.
pub(super) fn identity(c: &mut Checker, k: &str, f: IdentityFile, external: bool) -> IdentitySpec {
    if external {
        let from_log = [
            ("log_has", !f.log_has.is_empty()),
            ("log_lacks", !f.log_lacks.is_empty()),
            ("kv_format", f.kv_format.is_some()),
            ("cpu_path", f.cpu_path.is_some()),
            ("weights", f.weights.is_some()),
        ];
        for (key, _) in from_log.iter().filter(|(_, set)| *set) {
            c.err(
                format!("{k}.{key}"),
                "is read from the server's log, and the harness never sees an external (url) server's log: check \
                 what it answers (served_model, max_model_len, version, metrics_have)",
            );
        }
    }
    let preset = f.preset.as_deref().and_then(|p| {
        let got = IdentityPreset::parse(p);
        if got.is_none() {
            let names: Vec<_> = IdentityPreset::ALL.iter().map(|p| p.as_str()).collect();
            c.err(format!("{k}.preset"), format!("{p:?} is not a preset; one of {}", names.join(", ")));
        }
        got
    });
    let engine = preset == Some(IdentityPreset::Engine);
    let one_of = |c: &mut Checker, key: &str, v: &Option<String>, allowed: &[&str]| {
        if let Some(v) = v {
            if !engine {
                c.err(format!("{k}.{key}"), "is read from this engine's startup line: set preset = \"engine\"");
            } else if !allowed.contains(&v.as_str()) {
                c.err(format!("{k}.{key}"), format!("{v:?} is not one of {}", allowed.join(", ")));
            }
        }
    };
    one_of(c, "kv_format", &f.kv_format, &ENGINE_KV_FORMATS);
    one_of(c, "cpu_path", &f.cpu_path, &ENGINE_CPU_PATHS);
    one_of(c, "weights", &f.weights, &ENGINE_WEIGHT_TYPES);
    let max_model_len = f.max_model_len.and_then(|n| c.int(&format!("{k}.max_model_len"), n, 1, u32::MAX.into()));
    for (key, v) in [("served_model", &f.served_model), ("version", &f.version)] {
        if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
            c.err(format!("{k}.{key}"), "must not be empty");
        }
    }
    for (key, list) in [("log_has", &f.log_has), ("log_lacks", &f.log_lacks), ("metrics_have", &f.metrics_have)] {
        for (i, s) in list.iter().enumerate() {
            if s.trim().is_empty() || s.contains('\n') {
                c.err(format!("{k}.{key}[{i}]"), "must be one non-empty line");
            } else if key == "metrics_have" && s.contains(char::is_whitespace) {
                c.err(format!("{k}.{key}[{i}]"), format!("{s:?} is not a metric name (no blanks)"));
            }
        }
    }
    let spec = IdentitySpec {
        preset,
        served_model: f.served_model,
        max_model_len,
        version: f.version,
        kv_format: f.kv_format,
        cpu_path: f.cpu_path,
        weights: f.weights,
        log_has: f.log_has,
        log_lacks: f.log_lacks,
        metrics_have: f.metrics_have,
    };
    if spec == IdentitySpec::default() {
        c.err(k, "declares nothing: set a preset or at least one check (see docs/plan.md, [arms.identity])");
    }
    spec
}
