//! The tokenizer layer on real vocabularies (fetched by scripts/fetch-assets):
//! the Qwen3 tokenizer.json against the Python `tokenizers` package, and the
//! SmolLM2 GGUF vocabulary against an independent pure-Python GPT-2 BPE
//! (tests/reference/gpt2_bpe.py). Also: round trips, chat templates, the
//! incremental decoder on multi-token characters, and the GGUF "qwen2"
//! pre-tokenizer path rebuilt from the Qwen3 vocabulary.

use engine::gguf::GgufFile;
use engine::tokenizer::{ChatMessage, GgufVocab, IncrementalDecoder, Tokenizer};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn asset(rel: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets").join(rel);
    assert!(p.exists(), "missing test asset {}: run scripts/fetch-assets first", p.display());
    p
}

fn qwen3() -> Tokenizer {
    Tokenizer::from_hf_files(
        &asset("qwen3-tokenizer/tokenizer.json"),
        Some(&asset("qwen3-tokenizer/tokenizer_config.json")),
    )
    .unwrap()
}

fn smollm2() -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(asset("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap()).unwrap()
}

/// Runs a reference script with `texts` as JSON on stdin; returns its JSON.
fn python(script: &str, arg: &PathBuf, texts: &[String]) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reference").join(script);
    let mut child = Command::new("python3")
        .arg(&path)
        .arg(arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", path.display()));
    let input = serde_json::to_vec(texts).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed (pip install -r engine/tests/reference/requirements.txt):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reference prints JSON")
}

fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

const MIXED: &str = "Digits 12345 and 3.14, naïve café 日本語 🙂\n<|im_start|>user\nhi<|im_end|>\n";

fn texts() -> Vec<String> {
    let hamlet = std::fs::read_to_string(asset("texts/hamlet_gut.txt")).unwrap();
    let passage: String = hamlet.chars().skip(2000).take(3000).collect();
    [
        "12345 and 3.14",
        "naïve café 日本語 🙂",
        "<|im_start|>user\nhi<|im_end|>",
        MIXED,
        "  leading, trailing and   multiple spaces \n\n\tTabs\r\nCRLF  ",
        "don't I'll we've THEY'RE x=1+2; // 🙂🙂 ½ ٣ ①",
        "Ünïcödé: Ελληνικά, русский, עברית, 한국어, emoji 👩‍👩‍👧 and a flag 🇫🇷.",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([passage])
    .collect()
}

#[test]
fn qwen3_tokenizer_json_matches_python_tokenizers() {
    let t = qwen3();
    assert_eq!(t.vocab_size(), 151_669);
    assert_eq!(t.token_to_id("<|im_start|>"), Some(151_644));
    assert_eq!(t.eos_token_ids(), &[151_645]);
    assert_eq!(t.bos_token_id(), None);
    // Reference IDs from the Python `tokenizers` 0.23.3 package.
    assert_eq!(t.encode("12345 and 3.14", false).unwrap(), vec![16, 17, 18, 19, 20, 323, 220, 18, 13, 16, 19]);
    assert_eq!(
        t.encode("naïve café 日本語 🙂", false).unwrap(),
        vec![3376, 37572, 586, 51950, 75402, 21894, 102819, 27484]
    );
    assert_eq!(t.encode("<|im_start|>user\nhi<|im_end|>", true).unwrap(), vec![151644, 872, 198, 6023, 151645]);

    let texts = texts();
    let reference = python("hf_tokenize.py", &asset("qwen3-tokenizer/tokenizer.json"), &texts);
    for (i, text) in texts.iter().enumerate() {
        let ids = t.encode(text, false).unwrap();
        assert_eq!(ids, ids_of(&reference["ids"][i]), "text #{i} {text:?}");
        assert_eq!(t.decode(&ids, false).unwrap(), *text, "round trip #{i}");
        assert_eq!(reference["decoded"][i].as_str(), Some(text.as_str()));
    }
}

#[test]
fn smollm2_gguf_vocab_matches_the_independent_python_bpe() {
    let t = smollm2();
    assert_eq!(t.vocab_size(), 49_152);
    assert_eq!(t.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(t.eos_token_ids(), &[2]);
    assert_eq!(t.bos_token_id(), Some(1));
    // Reference IDs from tests/reference/gpt2_bpe.py (digits one per token).
    assert_eq!(t.encode("12345 and 3.14", false).unwrap(), vec![33, 34, 35, 36, 37, 284, 216, 35, 30, 33, 36]);
    assert_eq!(
        t.encode("naïve café 日本語 🙂", false).unwrap(),
        vec![3546, 46494, 37366, 17097, 241, 115, 40993, 179, 120, 248, 47526]
    );
    assert_eq!(t.encode("<|im_start|>user\nhi<|im_end|>", true).unwrap(), vec![1, 4093, 198, 6004, 2]);

    let texts = texts();
    let reference = python("gpt2_bpe.py", &asset("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), &texts);
    for (i, text) in texts.iter().enumerate() {
        let ids = t.encode(text, false).unwrap();
        assert_eq!(ids, ids_of(&reference[i]), "text #{i} {text:?}");
        assert_eq!(t.decode(&ids, false).unwrap(), *text, "round trip #{i}");
    }
    let ids = t.encode(MIXED, false).unwrap();
    assert_eq!(t.decode(&ids, true).unwrap(), MIXED.replace("<|im_start|>", "").replace("<|im_end|>", ""));
}

#[test]
fn chat_templates_render_like_transformers() {
    let q = [ChatMessage::new("user", "What is the capital of France?")];
    assert_eq!(
        smollm2().apply_chat_template(&q, true).unwrap(),
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    );
    // Expected strings rendered by jinja2 3.1.6 with transformers' settings
    // (trim_blocks, lstrip_blocks, loopcontrols).
    let t = qwen3();
    assert_eq!(
        t.apply_chat_template(&q, true).unwrap(),
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    );
    let mut no_think = serde_json::Map::new();
    no_think.insert("enable_thinking".into(), false.into());
    assert_eq!(
        t.apply_chat_template_with(&q, true, &no_think).unwrap(),
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    let multi = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "hi"),
        ChatMessage::new("assistant", "<think>\nhmm\n</think>\n\nHello!"),
        ChatMessage::new("user", "What is 2+2?"),
    ];
    assert_eq!(
        t.apply_chat_template(&multi, true).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n\
         Hello!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        t.apply_chat_template(&multi[..3], false).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n\
         <think>\nhmm\n</think>\n\nHello!<|im_end|>\n"
    );
}

#[test]
fn incremental_decoding_on_real_vocabularies() {
    let text = "Tokyo 東京 🙂👩‍👩‍👧 ends; naïve «quote» — done.";
    for (name, t) in [("qwen3", qwen3()), ("smollm2", smollm2())] {
        let ids = t.encode(text, false).unwrap();
        let mut d = IncrementalDecoder::new(false);
        let mut so_far = String::new();
        let mut held = 0;
        for (i, &id) in ids.iter().enumerate() {
            let delta = d.push(&t, id).unwrap();
            held += delta.is_empty() as usize;
            so_far.push_str(&delta);
            let full = t.decode(&ids[..=i], false).unwrap();
            assert_eq!(so_far, full.trim_end_matches('\u{FFFD}'), "{name}: after id #{i}");
        }
        so_far.push_str(&d.finish(&t).unwrap());
        assert_eq!(so_far, text, "{name}");
        assert!(held > 0, "{name}: no character spanned several tokens");
    }
}

/// The GGUF "qwen2" pre-tokenizer path, fed the Qwen3 vocabulary the way
/// convert_hf_to_gguf would store it, tokenizes like the tokenizer.json.
#[test]
fn gguf_qwen2_pre_tokenizer_matches_qwen3_tokenizer_json() {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(asset("qwen3-tokenizer/tokenizer.json")).unwrap()).unwrap();
    let vocab = doc["model"]["vocab"].as_object().unwrap();
    let added = doc["added_tokens"].as_array().unwrap();
    let n = added.iter().map(|a| a["id"].as_u64().unwrap() as usize + 1).max().unwrap();
    let mut tokens = vec![String::new(); n];
    let mut token_types = vec![1i64; n];
    for (tok, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = tok.clone();
    }
    for a in added {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_string();
        token_types[id] = if a["special"].as_bool().unwrap() { 3 } else { 4 };
    }
    let merges = doc["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{} {}", m[0].as_str().unwrap(), m[1].as_str().unwrap()))
        .collect();
    let v = GgufVocab {
        model: "gpt2".into(),
        pre: "qwen2".into(),
        tokens,
        token_types,
        merges,
        eos_token_id: Some(151_645),
        ..Default::default()
    };
    let from_gguf = Tokenizer::from_gguf_vocab(&v).unwrap();
    let from_json = qwen3();
    assert_eq!(from_gguf.vocab_size(), from_json.vocab_size());
    for text in texts() {
        let ids = from_json.encode(&text, false).unwrap();
        assert_eq!(from_gguf.encode(&text, false).unwrap(), ids, "{text:?}");
        assert_eq!(from_gguf.decode(&ids, false).unwrap(), text);
    }
}
