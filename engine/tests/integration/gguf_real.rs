//! The GGUF loader on the real SmolLM2-135M-Instruct Q4_1 file (fetched by
//! scripts/fetch-assets): header, metadata, model config, and dequantized rows of
//! Q8_0, Q4_1 and F32 tensors -- including the un-permuted q_proj/k_proj --
//! against values computed independently by tests/reference/gguf_rows.py
//! (python `gguf` + numpy).

use engine::gguf::{GgmlType, GgufFile};
use engine::model::Arch;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

fn smollm2() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.is_file(), "missing test asset {}: run scripts/fetch-assets first", p.display());
    p
}

fn reference_rows(path: &PathBuf) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reference/gguf_rows.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed (needs numpy and gguf: pip install -r engine/tests/reference/requirements.txt):\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("gguf_rows.py prints JSON")
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("array of floats").iter().map(|x| x.as_f64().expect("float") as f32).collect()
}

fn assert_close(ours: &[f32], want: &[f32], what: &str) {
    assert_eq!(ours.len(), want.len(), "{what}: length");
    for (i, (a, b)) in ours.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-6, "{what}[{i}]: ours {a}, reference {b}");
    }
}

#[test]
fn smollm2_header_and_config() {
    let g = GgufFile::open(smollm2()).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.tensors().len(), 272);
    let mut by_type: HashMap<GgmlType, usize> = HashMap::new();
    for t in g.tensors() {
        *by_type.entry(t.ty).or_default() += 1;
    }
    assert_eq!(by_type.get(&GgmlType::Q4_1), Some(&210));
    assert_eq!(by_type.get(&GgmlType::F32), Some(&61));
    assert_eq!(by_type.get(&GgmlType::Q8_0), Some(&1));
    assert_eq!(g.tensor_info("token_embd.weight").unwrap().ty, GgmlType::Q8_0);
    assert!(g.tensor_info("output.weight").is_none());
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), Some("smollm"));
    assert_eq!(g.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap().len(), 49152);
    assert_eq!(g.get_str_array("tokenizer.ggml.merges").unwrap().unwrap().len(), 48900);
    assert_eq!(g.get_bool("tokenizer.ggml.add_bos_token").unwrap(), Some(false));

    let c = g.model_config().unwrap();
    assert_eq!(c.arch, Arch::Llama);
    assert_eq!(c.vocab_size, 49152);
    assert_eq!(c.hidden_size, 576);
    assert_eq!(c.intermediate_size, 1536);
    assert_eq!(c.num_hidden_layers, 30);
    assert_eq!(c.num_attention_heads, 9);
    assert_eq!(c.num_key_value_heads, 3);
    assert_eq!(c.head_dim, 64);
    assert_eq!(c.rope_theta, 100_000.0);
    assert_eq!(c.rms_norm_eps, 1e-5);
    assert_eq!(c.max_position_embeddings, 8192);
    assert!(c.tie_word_embeddings);
    assert_eq!(c.bos_token_id, Some(1));
    assert_eq!(c.eos_token_ids, vec![2]);
}

#[test]
fn smollm2_tensors_match_the_python_reference() {
    let path = smollm2();
    let reference = reference_rows(&path);
    assert_eq!(reference["architecture"], "llama");
    let g = GgufFile::open(&path).unwrap();
    let cfg = g.model_config().unwrap();
    let t0 = std::time::Instant::now();
    let tensors = g.load_tensors(&cfg).unwrap();
    eprintln!("load_tensors: {} tensors in {:.2?}", tensors.len(), t0.elapsed());
    assert_eq!(tensors.len(), 272);
    assert!(tensors.keys().all(|k| k.starts_with("model.")), "unmapped tensor names");
    assert!(!tensors.contains_key("lm_head.weight"));
    for l in 0..30 {
        for m in [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "input_layernorm",
            "post_attention_layernorm",
        ] {
            let name = format!("model.layers.{l}.{m}.weight");
            assert!(tensors.contains_key(&name), "missing {name}");
        }
    }

    let entries = reference["tensors"].as_object().expect("tensors object");
    assert_eq!(entries.len(), 13);
    let mut checked_types = std::collections::HashSet::new();
    for (hf_name, want) in entries {
        let t = &tensors[hf_name];
        let shape: Vec<usize> =
            want["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(t.shape, shape, "{hf_name}: shape");
        checked_types.insert(want["ggml_type"].as_str().unwrap().to_string());
        let cols = *t.shape.last().unwrap();
        for (row, values) in want["rows"].as_object().unwrap() {
            let ours = if row == "all" {
                &t.data[..]
            } else {
                let r: usize = row.parse().unwrap();
                &t.data[r * cols..(r + 1) * cols]
            };
            assert_close(ours, &floats(values), &format!("{hf_name} row {row}"));
        }
        // q/k: the stored (permuted) rows are what dequantize_raw returns, and
        // they differ from the HF rows we load.
        if let Some(stored) = want.get("stored_rows") {
            let raw = g.dequantize_raw(want["gguf_name"].as_str().unwrap()).unwrap();
            let mut differs = false;
            for (row, values) in stored.as_object().unwrap() {
                let r: usize = row.parse().unwrap();
                let raw_row = &raw.data[r * cols..(r + 1) * cols];
                assert_close(raw_row, &floats(values), &format!("{hf_name} stored row {row}"));
                differs |= raw_row != &t.data[r * cols..(r + 1) * cols];
            }
            assert!(differs, "{hf_name}: un-permutation changed nothing");
        }
    }
    for ty in ["Q8_0", "Q4_1", "F32"] {
        assert!(checked_types.contains(ty), "no {ty} tensor checked");
    }
}
