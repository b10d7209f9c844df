//! Bad input through the `engine` command line: each is a clear error naming
//! the problem, exit code 2, never a panic.

use engine::gguf::MetaValue;
use engine::gguf::writer::GgufWriter;
use engine::synth::{SynthSpec, SynthTokenizer, write_model};
use std::process::Command;

fn engine(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_engine")).args(args).output().expect("run engine");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "engine panicked: {stderr}");
    (out.status.code(), stderr)
}

#[test]
fn missing_model_file() {
    let (code, err) = engine(&["generate", "--model", "/nonexistent/model.gguf", "--prompt", "hi"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn gguf_with_unsupported_tensor_type() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    let mut w = GgufWriter::new();
    let u = MetaValue::U32;
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("llama.block_count", u(1))
        .meta("llama.context_length", u(64))
        .meta("llama.embedding_length", u(256))
        .meta("llama.feed_forward_length", u(256))
        .meta("llama.attention.head_count", u(4))
        .meta("llama.attention.head_count_kv", u(4))
        .meta("llama.rope.freq_base", MetaValue::F32(10000.0))
        .meta("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5))
        .meta("llama.vocab_size", u(256));
    // IQ2_XXS (ggml type 16, not decoded): 66 bytes per 256 values.
    w.tensor("token_embd.weight", &[256, 256], 16, vec![0; 66 * 256]);
    std::fs::write(&path, w.to_bytes(3)).unwrap();
    let (code, err) = engine(&["generate", "--model", path.to_str().unwrap(), "--prompt-ids", "1,2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("IQ2_XXS") && err.contains("token_embd.weight"), "{err}");
}

#[test]
fn truncated_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    std::fs::write(&path, b"GGUF\x03\x00\x00\x00\x05").unwrap();
    let (code, err) = engine(&["generate", "--model", path.to_str().unwrap(), "--prompt-ids", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("GGUF"), "{err}");
}

#[test]
fn config_with_inconsistent_heads() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, ..SynthSpec::default() };
    write_model(&spec, dir.path()).unwrap();
    let cfg_path = dir.path().join("config.json");
    let text =
        std::fs::read_to_string(&cfg_path).unwrap().replace("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
    std::fs::write(&cfg_path, text).unwrap();
    let (code, err) = engine(&["generate", "--model", dir.path().to_str().unwrap(), "--prompt-ids", "1,2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("num_key_value_heads (3)"), "{err}");
}

#[test]
fn bad_kv_scales() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, ..SynthSpec::default() };
    write_model(&spec, dir.path()).unwrap();
    let model = dir.path().to_str().unwrap();
    for (body, needle) in [
        (r#"{"scales": [1.0, -2.0, 1.0, 1.0]}"#, "layer 1: scale -2 must be finite and positive"),
        (r#"{"scales": [1.0, 1.0, 1e999, 1.0]}"#, "scales"),
        (r#"{"scales": [1.0, 1.0]}"#, "has 2 scales but the model has 4 layers"),
        (r#"{"scales": "#, "scales"),
    ] {
        let p = dir.path().join("scales.json");
        std::fs::write(&p, body).unwrap();
        let (code, err) = engine(&[
            "generate",
            "--model",
            model,
            "--kv-format",
            "k16v8",
            "--kv-scales",
            p.to_str().unwrap(),
            "--prompt-ids",
            "1",
        ]);
        assert_eq!(code, Some(2), "{body}: {err}");
        assert!(err.contains(needle), "{body}: {err}");
    }
    let (code, err) = engine(&["generate", "--model", model, "--kv-format", "k16v8", "--prompt-ids", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--kv-scales"), "{err}");
}

#[test]
fn malformed_prompts_jsonl_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SynthSpec { tokenizer: SynthTokenizer::ByteLevel, ..SynthSpec::default() };
    write_model(&spec, dir.path()).unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    std::fs::write(&prompts, "{\"index\": 0, \"prompt_ids\": [1, 2]}\n{\"index\": 1}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_engine"))
        .args(["generate", "--model", dir.path().to_str().unwrap(), "--max-tokens", "3", "--prompts-jsonl"])
        .arg(&prompts)
        .output()
        .expect("run engine");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("prompts.jsonl line 2") && err.contains("prompt_ids"), "{err}");
    // The first prompt was answered before the bad line: one JSON line per answer.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().expect("an answer")).unwrap();
    assert_eq!(first["index"], 0);
    assert_eq!(first["output_ids"].as_array().map(Vec::len), Some(3));
}

#[test]
fn idle_gather_factor_outside_0_to_1() {
    for bad in ["1.5", "-0.1", "nan", "x"] {
        let flag = format!("--idle-gather-factor={bad}");
        let (code, err) = engine(&["serve", "--model", "/nonexistent", &flag]);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("--idle-gather-factor") && err.contains("from 0 to 1"), "{bad}: {err}");
    }
}

#[test]
fn serve_help_lists_the_kv_formats_and_a_bad_one_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_engine")).args(["serve", "--help"]).output().expect("run engine");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[possible values: f16, bf16, k16v8]"), "{help}");
    let (code, err) = engine(&["serve", "--model", "x", "--kv-format", "fp8"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("fp8"), "{err}");
}

/// `--device cuda` where no GPU can be opened: exit 2 before the model is read
/// (a GPU plan that starts this engine must fail at once, not time the CPU path).
/// A default build names the rebuild; a build with the CUDA backend (scripts/test
/// checks that one too) names the missing driver on a machine without one.
#[test]
fn device_cuda_is_refused_before_loading_where_no_gpu_can_be_opened() {
    for cmd in ["serve", "generate", "score"] {
        for device in ["cuda", "cuda:7"] {
            let mut args = vec![cmd, "--model", "/nonexistent", "--device", device];
            args.extend(match cmd {
                "generate" => &["--prompt", "hi"][..],
                "score" => &["--text-file", "/nonexistent.txt"][..],
                _ => &[][..],
            });
            let (code, err) = engine(&args);
            assert_eq!(code, Some(2), "{cmd} {device}: {err}");
            if cfg!(feature = "cuda") {
                if std::path::Path::new("/proc/driver/nvidia/version").exists() {
                    continue; // a GPU machine: the device may open, and the model is then refused
                }
                assert!(err.contains("no CUDA driver: libcuda.so could not be loaded"), "{cmd} {device}: {err}");
            } else {
                let n = if device == "cuda" { "cuda:0" } else { device };
                let want = format!("--device {n}: this engine was built without the CUDA backend");
                assert!(err.contains(&want) && err.contains("--features cuda"), "{cmd} {device}: {err}");
            }
            assert!(!err.contains("/nonexistent"), "{cmd} {device}: refused before the model is read: {err}");
        }
    }
    for bad in ["tpu", "cuda:x", "cuda:"] {
        let (code, err) = engine(&["serve", "--model", "/nonexistent", "--device", bad]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("expected cpu, cuda or cuda:N"), "{bad}: {err}");
    }
}

#[test]
fn serve_refuses_an_unknown_or_unsupported_cpu_path_before_loading() {
    // The model path does not exist: the kernel choice must be refused first.
    let (code, err) = engine(&["serve", "--model", "/nonexistent", "--cpu-path", "sse9"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("sse9") && !err.contains("/nonexistent"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_engine"))
        .args(["serve", "--model", "/nonexistent"])
        .env("ENGINE_CPU_PATH", "sse9")
        .output()
        .expect("run engine");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ENGINE_CPU_PATH") && err.contains("sse9"), "{err}");
}

#[test]
fn every_model_command_takes_the_kernel_environment_and_refuses_a_bad_one_before_loading() {
    // The model never reads the environment: each command resolves it and passes
    // it down, so a bad value is named before the (missing) model is touched.
    for args in [&["generate", "--model", "/nonexistent", "--prompt", "hi"][..], &["bench", "--model", "/nonexistent"]]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_engine"))
            .args(args)
            .env("ENGINE_CPU_PATH", "sse9")
            .output()
            .expect("run engine");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("ENGINE_CPU_PATH") && err.contains("sse9"), "{args:?}: {err}");
    }
}

#[test]
fn api_key_flags_conflict_and_an_unset_or_empty_key_variable_is_named() {
    let (code, err) = engine(&["serve", "--model", "/nonexistent", "--api-key", "k", "--api-key-env", "K"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--api-key <API_KEY>") && err.contains("--api-key-env <VAR>"), "{err}");
    let (code, err) = engine(&["serve", "--model", "/nonexistent", "--api-key", ""]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--api-key must not be empty"), "{err}");
    for value in [None, Some("")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_engine"));
        cmd.args(["serve", "--model", "/nonexistent", "--api-key-env", "ENGINE_TEST_NO_KEY"]);
        match value {
            None => cmd.env_remove("ENGINE_TEST_NO_KEY"),
            Some(v) => cmd.env("ENGINE_TEST_NO_KEY", v),
        };
        let out = cmd.output().expect("run engine");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value:?}: {err}");
        // Refused before the server binds or the model loads.
        assert!(err.contains("ENGINE_TEST_NO_KEY") && !err.contains("/nonexistent"), "{value:?}: {err}");
    }
}
