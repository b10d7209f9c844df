//! vLLM's `random`, `burstgpt` and `prefix_repetition` datasets built by `harness
//! bench` equal, token for token, what vLLM 0.34's own `RandomDataset`,
//! `BurstGPTDataset` and `PrefixRepetitionRandomDataset` build from the same seed,
//! flags and tokenizer: the plan comes from `harness bench --dataset-name ...
//! --print-plan` (vLLM's flags), its panel from `harness trace`, and vLLM's from
//! its own dataset code
//! (harness/tests/reference/vllm_datasets_check.py; scripts/test installs vLLM and
//! transformers), on the Qwen3 tokenizer in assets/ (its special tokens all above
//! the vocabulary) and SmolLM2's, exported from its GGUF (special tokens inside
//! the vocabulary, named by its tokenizer_config.json as transformers reads them).
//! burstgpt reads a small fixture in BurstGPT's CSV layout
//! (tests/fixtures/burstgpt/BurstGPT_sample.csv). No timed assertions.

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

/// vLLM's requests for each spec, from its own dataset code.
fn vllm_requests(specs: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
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
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("JSON")
}

/// vLLM's request i's token IDs (its prompt re-encoded) and output length.
fn vllm_request(r: &serde_json::Value) -> (Vec<u64>, u64) {
    let tokens = r["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    (tokens, r["expected_output_len"].as_u64().unwrap())
}

/// The panel `harness bench --dataset-name <dataset>` plans for `flags` (its
/// plan's panel `source`): (tokens, output tokens) per prompt.
fn harness_panel(
    tmp: &Path,
    k: &str,
    tokenizer: &str,
    (dataset, source): (&str, &str),
    flags: &[&str],
) -> Vec<(Vec<u64>, u64)> {
    let print = Command::new(harness_bin())
        .args(["bench", "--model", "m", "--dataset-name", dataset, "--tokenizer", tokenizer])
        .args(flags)
        .arg("--print-plan")
        .current_dir(workspace())
        .output()
        .expect("harness bench");
    let plan_text = String::from_utf8_lossy(&print.stdout).into_owned();
    assert!(print.status.success(), "{plan_text}\n{}", String::from_utf8_lossy(&print.stderr));
    assert!(plan_text.contains(&format!("source = \"{source}\"")), "{plan_text}");
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
    let vllm = vllm_requests(specs);
    for (k, (case, theirs)) in CASES.iter().zip(&vllm).enumerate() {
        let ours = harness_panel(tmp.path(), &k.to_string(), &dir(case), ("random", "vllm_random"), case.flags);
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

/// The BurstGPT-layout fixture (the real BurstGPT CSV is the user's, via
/// --dataset-path).
const BURSTGPT_CSV: &str = "harness/tests/fixtures/burstgpt/BurstGPT_sample.csv";

/// A burstgpt or prefix_repetition case: harness bench's flags and the spec
/// vllm_datasets_check.py takes for the same arguments.
struct LegacyCase {
    dataset: &'static str,
    source: &'static str,
    flags: &'static [&'static str],
    spec: fn() -> serde_json::Value,
}

const LEGACY_CASES: [LegacyCase; 4] = [
    // 5 of the fixture's 14 GPT-4 rows: a permutation's first 5.
    LegacyCase {
        dataset: "burstgpt",
        source: "vllm_burstgpt",
        flags: &["--dataset-path", BURSTGPT_CSV, "--num-prompts", "5"],
        spec: || serde_json::json!({"dataset": "burstgpt", "seed": 0, "num_prompts": 5, "dataset_path": BURSTGPT_CSV}),
    },
    // More requests than rows: drawn with replacement.
    LegacyCase {
        dataset: "burstgpt",
        source: "vllm_burstgpt",
        flags: &["--dataset-path", BURSTGPT_CSV, "--num-prompts", "20", "--seed", "11"],
        spec: || serde_json::json!({"dataset": "burstgpt", "seed": 11, "num_prompts": 20, "dataset_path": BURSTGPT_CSV}),
    },
    LegacyCase {
        dataset: "prefix_repetition",
        source: "vllm_prefix_repetition",
        flags: &[
            "--prefix-repetition-prefix-len",
            "16",
            "--prefix-repetition-suffix-len",
            "8",
            "--prefix-repetition-num-prefixes",
            "2",
            "--prefix-repetition-output-len",
            "12",
            "--num-prompts",
            "6",
        ],
        spec: || {
            serde_json::json!({"dataset": "prefix_repetition", "seed": 0, "num_prompts": 6, "prefix_len": 16,
                "suffix_len": 8, "num_prefixes": 2, "output_len": 12, "disable_shuffle": false})
        },
    },
    // vLLM's general --output-len sets the output length; --disable-shuffle keeps
    // the prompts prefix-major.
    LegacyCase {
        dataset: "prefix_repetition",
        source: "vllm_prefix_repetition",
        flags: &[
            "--prefix-repetition-prefix-len",
            "40",
            "--prefix-repetition-suffix-len",
            "20",
            "--prefix-repetition-num-prefixes",
            "3",
            "--output-len",
            "7",
            "--num-prompts",
            "9",
            "--seed",
            "5",
            "--disable-shuffle",
        ],
        spec: || {
            serde_json::json!({"dataset": "prefix_repetition", "seed": 5, "num_prompts": 9, "prefix_len": 40,
                "suffix_len": 20, "num_prefixes": 3, "output_len": 7, "disable_shuffle": true})
        },
    },
];

#[test]
fn vllms_burstgpt_and_prefix_repetition_datasets_are_built_token_for_token_as_vllm_builds_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let qwen3 = "assets/qwen3-tokenizer";
    let specs = LEGACY_CASES
        .iter()
        .map(|c| {
            let mut spec = (c.spec)();
            spec["tokenizer_dir"] = qwen3.into();
            spec
        })
        .collect();
    let vllm = vllm_requests(specs);
    assert_eq!(vllm.len(), LEGACY_CASES.len());
    for (k, (case, theirs)) in LEGACY_CASES.iter().zip(&vllm).enumerate() {
        let ours = harness_panel(tmp.path(), &format!("legacy{k}"), qwen3, (case.dataset, case.source), case.flags);
        let theirs: Vec<(Vec<u64>, u64)> =
            theirs["requests"].as_array().expect("requests").iter().map(vllm_request).collect();
        assert_eq!(ours.len(), theirs.len(), "{} case {k}: request count", case.dataset);
        for (i, (mine, r)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(mine.0, r.0, "{} case {k}, request {i}: token IDs", case.dataset);
            assert_eq!(mine.1, r.1, "{} case {k}, request {i}: output length", case.dataset);
        }
        // Not a degenerate comparison: the prompts differ from one another.
        let distinct: std::collections::BTreeSet<&Vec<u64>> = ours.iter().map(|o| &o.0).collect();
        assert!(distinct.len() > 1, "{} case {k}: prompts differ", case.dataset);
    }
}
