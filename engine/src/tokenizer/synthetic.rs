//! The built-in synthetic tokenizer for the engine's `synth` command when no
//! real tokenizer is at hand: GPT-2 byte-level BPE with the 256 byte tokens
//! (id = byte value), a handful of English merges, and the ChatML specials
//! `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, plus a plain ChatML template.
//! Owns only the generation of those two JSON documents.

use serde_json::json;

/// Merges after the 256 byte tokens, in priority order (each adds one token).
const MERGES: [(&str, &str); 8] =
    [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("Ġ", "a"), ("o", "n"), ("r", "e")];

/// The special tokens, after the merges.
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The synthetic tokenizer's size: 256 bytes + merges + specials.
pub const SYNTHETIC_VOCAB_SIZE: usize = 256 + MERGES.len() + SPECIALS.len();

/// ChatML, as Qwen and SmolLM use it, without a default system prompt.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// GPT-2's reversible byte-to-character map (`bytes_to_unicode`): printable
/// Latin-1 bytes map to themselves, the other 68 to U+0100 onwards.
pub fn byte_to_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// `(tokenizer.json, tokenizer_config.json)` of the synthetic tokenizer.
pub fn synthetic_tokenizer_files() -> (String, String) {
    let mut vocab = serde_json::Map::new();
    for b in 0..=255u8 {
        vocab.insert(byte_to_char(b).to_string(), json!(b));
    }
    for (i, (l, r)) in MERGES.iter().enumerate() {
        vocab.insert(format!("{l}{r}"), json!(256 + i));
    }
    let added: Vec<_> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let id = 256 + MERGES.len() + i;
            vocab.insert(s.to_string(), json!(id));
            json!({"id": id, "content": s, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
                            "trim_offsets": false, "use_regex": true});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": MERGES.iter().map(|(l, r)| json!([l, r])).collect::<Vec<_>>()},
    });
    let config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHATML_TEMPLATE,
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": false,
    });
    (
        serde_json::to_string_pretty(&tokenizer).unwrap_or_default(),
        serde_json::to_string_pretty(&config).unwrap_or_default(),
    )
}
