//! vLLM's `random` dataset built by `harness bench` equals, token for token, what
//! vLLM 0.34's own `RandomDataset` builds from the same seed and tokenizer: the
//! plan comes from `harness bench --dataset-name random ... --print-plan` (vLLM's
//! flags), its panel from `harness trace`, and vLLM's from its own dataset code
//! (harness/tests/reference/vllm_datasets_check.py; scripts/test installs vLLM and
//! transformers), on the Qwen3 tokenizer in assets/ (its special tokens all above
//! the vocabulary) and SmolLM2's, exported from its GGUF (special tokens inside
//! the vocabulary, named by its tokenizer_config.json as transformers reads them).
//! No timed assertions.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// One case: vLLM's flags, and the same arguments as vLLM's `sample` takes them.
struct Case {
    /// SmolLM2's tokenizer (exported from its GGUF), else assets/qwen3-tokenizer.
    smollm2: bool,
    flags: &'static [&'static str],
    seed: u64,
    num_prompts: usize,
    input_len: u32,
    output_len: u32,
    prefix_len: u32,
    range_ratio: &'static str,
}

const CASES: [Case; 4] = [
    Case {
        smollm2: false,
        flags: &["--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "12"],
        seed: 0,
        num_prompts: 12,
        input_len: 64,
        output_len: 16,
        prefix_len: 0,
        range_ratio: "0.0",
    },
    Case {
        smollm2: false,
        flags: &[
            "--random-input-len",
            "100",
            "--random-output-len",
            "20",
            "--random-range-ratio",
            "0.3",
            "--random-prefix-len",
            "8",
            "--num-prompts",
            "10",
            "--seed",
            "7",
        ],
        seed: 7,
        num_prompts: 10,
        input_len: 100,
        output_len: 20,
        prefix_len: 8,
        range_ratio: "0.3",
    },
    Case {
        // vLLM's general --input-len/--output-len and a per-side ratio.
        smollm2: false,
        flags: &[
            "--input-len",
            "48",
            "--output-len",
            "10",
            "--random-range-ratio",
            r#"{"input": 0.2, "output": 0.5}"#,
            "--num-prompts",
            "8",
            "--seed",
            "3",
        ],
        seed: 3,
        num_prompts: 8,
        input_len: 48,
        output_len: 10,
        prefix_len: 0,
        range_ratio: r#"{"input": 0.2, "output": 0.5}"#,
    },
    Case {
        smollm2: true,
        flags: &[
            "--random-input-len",
            "64",
            "--random-output-len",
            "8",
            "--random-prefix-len",
            "4",
            "--num-prompts",
            "6",
        ],
        seed: 0,
        num_prompts: 6,
        input_len: 64,
        output_len: 8,
        prefix_len: 4,
        range_ratio: "0.0",
    },
];

/// The panel `harness bench` plans for `flags`: (tokens, output tokens) per prompt.
fn harness_panel(tmp: &Path, k: usize, tokenizer: &str, flags: &[&str]) -> Vec<(Vec<u64>, u64)> {
    let print = Command::new(harness_bin())
        .args(["bench", "--model", "m", "--dataset-name", "random", "--tokenizer", tokenizer])
        .args(flags)
        .arg("--print-plan")
        .current_dir(workspace())
        .output()
        .expect("harness bench");
    let plan_text = String::from_utf8_lossy(&print.stdout).into_owned();
    assert!(print.status.success(), "{plan_text}\n{}", String::from_utf8_lossy(&print.stderr));
    assert!(plan_text.contains("source = \"vllm_random\""), "{plan_text}");
    let plan = tmp.join(format!("plan{k}.toml"));
    std::fs::write(&plan, &plan_text).unwrap();
    let out = tmp.join(format!("inputs{k}"));
    let trace = Command::new(harness_bin())
        .arg("trace")
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .current_dir(workspace())
        .output()
        .expect("harness trace");
    assert!(trace.status.success(), "{}", String::from_utf8_lossy(&trace.stderr));
    std::fs::read_to_string(out.join("prompts.jsonl"))
        .expect("prompts.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|p| {
            let tokens = p["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
            (tokens, p["output_tokens"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn vllms_random_dataset_is_built_token_for_token_as_vllm_builds_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // SmolLM2's tokenizer, as `engine export-tokenizer` writes it from the GGUF.
    let smol = tmp.path().join("smollm2-tokenizer");
    let gguf = workspace().join("assets/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let export = Command::new(engine_bin())
        .args(["export-tokenizer", "--model"])
        .arg(&gguf)
        .arg("--out")
        .arg(&smol)
        .output()
        .expect("engine export-tokenizer");
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let smol = smol.display().to_string();
    let dir = |c: &Case| if c.smollm2 { smol.clone() } else { "assets/qwen3-tokenizer".to_string() };
    let specs: Vec<serde_json::Value> = CASES
        .iter()
        .map(|c| {
            serde_json::json!({
                "dataset": "random", "tokenizer_dir": dir(c), "seed": c.seed,
                "num_prompts": c.num_prompts, "input_len": c.input_len, "output_len": c.output_len,
                "prefix_len": c.prefix_len, "range_ratio": c.range_ratio,
            })
        })
        .collect();
    let script = workspace().join("harness/tests/reference/vllm_datasets_check.py");
    let run = Command::new("python3")
        .arg(&script)
        .arg(serde_json::Value::Array(specs).to_string())
        .current_dir(workspace())
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "vLLM's dataset code (run scripts/test):\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let vllm: Vec<serde_json::Value> = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("JSON");
    for (k, (case, theirs)) in CASES.iter().zip(&vllm).enumerate() {
        let ours = harness_panel(tmp.path(), k, &dir(case), case.flags);
        let requests = theirs["requests"].as_array().expect("requests");
        assert_eq!(ours.len(), requests.len(), "case {k}: request count");
        for (i, (mine, r)) in ours.iter().zip(requests).enumerate() {
            let tokens: Vec<u64> = r["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
            assert_eq!(mine.0, tokens, "case {k}, request {i}: token IDs");
            assert_eq!(mine.1, r["expected_output_len"].as_u64().unwrap(), "case {k}, request {i}: output length");
            assert_eq!(mine.0.len() as u64, r["prompt_len"].as_u64().unwrap(), "case {k}, request {i}: prompt_len");
        }
        // The lengths vary as vLLM's ranges say (case 0: fixed).
        if case.range_ratio != "0.0" {
            let lens: std::collections::BTreeSet<usize> = ours.iter().map(|o| o.0.len()).collect();
            assert!(lens.len() > 1, "case {k}: lengths vary: {lens:?}");
        }
    }
}
