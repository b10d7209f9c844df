//! Unit tests of the tokenizer layer on the synthetic tokenizer and tiny GGUF
//! vocabularies (the real Qwen3 and SmolLM2 vocabularies are tested in
//! `tests/tokenizer_real.rs`).

use super::*;
use crate::gguf::writer::GgufWriter;
use crate::gguf::{GgufFile, MetaValue};

fn synthetic() -> Tokenizer {
    let dir =
        std::env::temp_dir().join(format!("engine-tok-test-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (tj, tc) = synthetic_tokenizer_files();
    std::fs::write(dir.join("tokenizer.json"), tj).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), tc).unwrap();
    let t = Tokenizer::from_hf_files(&dir.join("tokenizer.json"), Some(&dir.join("tokenizer_config.json"))).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    t
}

const MIXED: &str = "12345 and 3.14, naïve café 日本語 🙂 <|im_start|>user\nhi<|im_end|>";

#[test]
fn synthetic_tokenizer_round_trips_and_knows_its_specials() {
    let t = synthetic();
    assert_eq!(t.vocab_size(), SYNTHETIC_VOCAB_SIZE);
    assert!((259..=512).contains(&t.vocab_size()));
    assert_eq!(t.token_to_id("<|im_start|>"), Some(265));
    assert_eq!(t.eos_token_ids(), &[266]);
    assert_eq!(t.bos_token_id(), None);
    // bytes are their own IDs; "Ġthe" is merge 258
    assert_eq!(t.encode("A the", false).unwrap(), vec![65, 258]);
    let ids = t.encode(MIXED, true).unwrap();
    assert!(ids.contains(&265) && ids.contains(&266));
    assert_eq!(t.decode(&ids, false).unwrap(), MIXED);
    let plain = t.decode(&ids, true).unwrap();
    assert_eq!(plain, MIXED.replace("<|im_start|>", "").replace("<|im_end|>", ""));
    let chat = t.apply_chat_template(&[ChatMessage::new("user", "hi")], true).unwrap();
    assert_eq!(chat, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

fn stream(t: &Tokenizer, ids: &[u32], skip: bool) -> Vec<String> {
    let mut d = IncrementalDecoder::new(skip);
    let mut out: Vec<String> = ids.iter().map(|&i| d.push(t, i).unwrap()).collect();
    out.push(d.finish(t).unwrap());
    out
}

#[test]
fn incremental_decoding_never_splits_a_character() {
    let t = synthetic();
    let text = "a🙂b 日本, 語!é";
    let ids = t.encode(text, false).unwrap();
    let deltas = stream(&t, &ids, false);
    assert_eq!(deltas.concat(), text);
    // After each ID, exactly the complete characters so far have been emitted.
    let mut so_far = String::new();
    for (i, d) in deltas[..ids.len()].iter().enumerate() {
        so_far.push_str(d);
        let full = t.decode(&ids[..=i], false).unwrap();
        assert_eq!(so_far, full.trim_end_matches('\u{FFFD}'), "after id #{i}");
    }
    // The emoji is four byte tokens: three empty deltas, then the emoji.
    assert_eq!(&deltas[1..5], &["", "", "", "🙂"]);
    assert_eq!(deltas[0], "a");
    assert_eq!(deltas.last().map(String::as_str), Some(""));
}

#[test]
fn incremental_decoding_flushes_an_incomplete_tail_and_skips_specials() {
    let t = synthetic();
    let mut ids = t.encode("x🙂", false).unwrap();
    ids.truncate(3); // 'x' + two of the emoji's four bytes
    let deltas = stream(&t, &ids, false);
    assert_eq!(deltas.concat(), t.decode(&ids, false).unwrap());
    assert_eq!(deltas.last().map(String::as_str), Some("\u{FFFD}"));
    let ids = t.encode("<|im_start|>hé<|im_end|>", false).unwrap();
    assert_eq!(stream(&t, &ids, true).concat(), "hé");
    assert_eq!(stream(&t, &ids, false).concat(), "<|im_start|>hé<|im_end|>");
}

fn strings(v: &[&str]) -> MetaValue {
    MetaValue::Array(v.iter().map(|s| MetaValue::String(s.to_string())).collect())
}

/// A GGUF vocabulary: the 256 GPT-2 byte characters, merges for "12" and
/// "Ġhi", and a control and a user-defined token.
fn tiny_gguf(model: &str, pre: &str, add_bos: bool) -> GgufFile {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    tokens.extend(["12", "Ġh", "Ġhi", "<|im_end|>", "<tool>"].map(String::from));
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut types = vec![MetaValue::I32(1); 259];
    types.extend([MetaValue::I32(3), MetaValue::I32(4)]);
    let mut w = GgufWriter::new();
    w.meta("tokenizer.ggml.model", MetaValue::String(model.into()))
        .meta("tokenizer.ggml.pre", MetaValue::String(pre.into()))
        .meta("tokenizer.ggml.tokens", strings(&refs))
        .meta("tokenizer.ggml.token_type", MetaValue::Array(types))
        .meta("tokenizer.ggml.merges", strings(&["1 2", "Ġ h", "Ġh i"]))
        .meta("tokenizer.ggml.bos_token_id", MetaValue::U32(259))
        .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(259))
        .meta("tokenizer.ggml.add_bos_token", MetaValue::Bool(add_bos));
    GgufFile::from_bytes(w.to_bytes(3)).unwrap()
}

#[test]
fn gguf_vocab_pre_tokenizers_differ_on_digits() {
    let smol = Tokenizer::from_gguf(&tiny_gguf("gpt2", "smollm", false)).unwrap();
    let gpt2 = Tokenizer::from_gguf(&tiny_gguf("gpt2", "gpt2", false)).unwrap();
    assert_eq!(smol.vocab_size(), 261);
    // smollm splits digits one per token, so the "12" merge never applies.
    assert_eq!(smol.encode("12 hi", false).unwrap(), vec![49, 50, 258]);
    assert_eq!(gpt2.encode("12 hi", false).unwrap(), vec![256, 258]);
    // Control and user-defined tokens are matched in text.
    let ids = smol.encode("a<|im_end|><tool>", false).unwrap();
    assert_eq!(ids, vec![97, 259, 260]);
    assert_eq!(smol.decode(&ids, true).unwrap(), "a<tool>");
    assert_eq!(smol.eos_token_ids(), &[259]);
    let e = smol.apply_chat_template(&[], false).unwrap_err();
    assert!(matches!(e, EngineError::Template(m) if m.contains("no chat template")));
}

#[test]
fn gguf_add_bos_adds_it_only_with_special_tokens() {
    let t = Tokenizer::from_gguf(&tiny_gguf("gpt2", "gpt2", true)).unwrap();
    assert_eq!(t.encode("hi", true).unwrap(), vec![259, 104, 105]);
    assert_eq!(t.encode("hi", false).unwrap(), vec![104, 105]);
}

#[test]
fn unsupported_gguf_tokenizers_are_named() {
    let e = Tokenizer::from_gguf(&tiny_gguf("llama", "default", false)).unwrap_err().to_string();
    assert!(e.contains("\"llama\"") && e.contains("supported: gpt2"), "{e}");
    let e = Tokenizer::from_gguf(&tiny_gguf("gpt2", "deepseek-llm", false)).unwrap_err().to_string();
    assert!(e.contains("\"deepseek-llm\""), "{e}");
}

#[test]
fn tokenizer_and_decoder_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
    send_sync::<IncrementalDecoder>();
    send_sync::<GgufFile>();
}
