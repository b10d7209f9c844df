//! The vocabulary embedded in a GGUF file (`tokenizer.ggml.*`), turned into a
//! Hugging Face `tokenizer.json` document so that `tokenizers` runs it. Owns the
//! mapping of llama.cpp's tokenizer model and pre-tokenizer names to HF
//! components; supports `tokenizer.ggml.model = "gpt2"` (byte-level BPE) with
//! the pre-tokenizers whose behaviour is known exactly, and refuses the rest
//! with a clear error rather than tokenizing differently from llama.cpp.

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;
use serde_json::{Value, json};
use std::collections::HashSet;

/// The Qwen2 pre-tokenizer regex (llama.cpp's `qwen2`, identical to the Split
/// pattern in Qwen2/Qwen3 `tokenizer.json`). The GPT-2 regex needs no constant:
/// `tokenizers`' ByteLevel pre-tokenizer with `use_regex` applies it.
const QWEN2_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's token types (`llama_token_type`).
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// `tokenizer.ggml.*` as read from a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model` (only "gpt2" is supported).
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    pub tokens: Vec<String>,
    /// Same length as `tokens` (1 = normal when absent).
    pub token_types: Vec<i64>,
    /// "left right" pairs, highest priority first.
    pub merges: Vec<String>,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` / `eom_token_id`: further end-of-turn ids.
    pub extra_eos_ids: Vec<u32>,
    pub add_bos_token: bool,
    pub add_eos_token: bool,
    pub chat_template: Option<String>,
}

fn tok_err(m: String) -> EngineError {
    EngineError::Tokenizer(m)
}

impl GgufVocab {
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let model = g
            .get_str("tokenizer.ggml.model")?
            .ok_or_else(|| tok_err("the GGUF file has no tokenizer.ggml.model".into()))?
            .to_string();
        let tokens: Vec<String> = g
            .get_str_array("tokenizer.ggml.tokens")?
            .ok_or_else(|| tok_err("the GGUF file has no tokenizer.ggml.tokens".into()))?
            .into_iter()
            .map(str::to_string)
            .collect();
        let token_types = g.get_i64_array("tokenizer.ggml.token_type")?.unwrap_or_else(|| vec![1; tokens.len()]);
        if token_types.len() != tokens.len() {
            return Err(tok_err(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                token_types.len(),
                tokens.len()
            )));
        }
        let merges =
            g.get_str_array("tokenizer.ggml.merges")?.unwrap_or_default().into_iter().map(str::to_string).collect();
        let id = |key: &str| -> Result<Option<u32>> {
            match g.get_u64(key)? {
                None => Ok(None),
                Some(v) if (v as usize) < tokens.len() => Ok(Some(v as u32)),
                Some(v) => Err(tok_err(format!("{key} = {v} is outside the vocabulary"))),
            }
        };
        let mut extra_eos_ids = Vec::new();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            extra_eos_ids.extend(id(key)?);
        }
        Ok(GgufVocab {
            model,
            pre: g.get_str("tokenizer.ggml.pre")?.unwrap_or("default").to_string(),
            bos_token_id: id("tokenizer.ggml.bos_token_id")?,
            eos_token_id: id("tokenizer.ggml.eos_token_id")?,
            extra_eos_ids,
            add_bos_token: g.get_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(false),
            add_eos_token: g.get_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false),
            chat_template: g.get_str("tokenizer.chat_template")?.map(str::to_string),
            tokens,
            token_types,
            merges,
        })
    }

    /// The pre-tokenizer (and normalizer) for `self.pre`, as HF JSON.
    fn pre_tokenizer(&self) -> Result<(Value, Value)> {
        let byte_level = |use_regex: bool| {
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                   "use_regex": use_regex})
        };
        Ok(match self.pre.as_str() {
            // llama.cpp: the GPT-2 regex alone.
            "gpt2" => (Value::Null, byte_level(true)),
            // llama.cpp: "\p{N}" (each digit alone), then the GPT-2 regex.
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" => (
                Value::Null,
                json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Digits", "individual_digits": true},
                    byte_level(true)]}),
            ),
            // Qwen2/Qwen3: the regex of their tokenizer.json, with its NFC normalizer.
            "qwen2" => (
                json!({"type": "NFC"}),
                json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
                     "invert": false},
                    byte_level(false)]}),
            ),
            other => {
                return Err(tok_err(format!(
                    "unsupported GGUF pre-tokenizer tokenizer.ggml.pre = {other:?}; supported: \
                     gpt2, smollm (and its llama.cpp aliases starcoder, refact, command-r, \
                     codeshell, exaone), qwen2"
                )));
            }
        })
    }

    /// A `tokenizer.json` document for this vocabulary.
    pub fn to_tokenizer_json(&self) -> Result<String> {
        if self.model != "gpt2" {
            return Err(tok_err(format!(
                "unsupported GGUF tokenizer model tokenizer.ggml.model = {:?}; supported: gpt2 \
                 (byte-level BPE)",
                self.model
            )));
        }
        let (normalizer, pre_tokenizer) = self.pre_tokenizer()?;
        let mut vocab = serde_json::Map::with_capacity(self.tokens.len());
        let mut added = Vec::new();
        for (i, (tok, &ty)) in self.tokens.iter().zip(&self.token_types).enumerate() {
            // A duplicated token string keeps its first id.
            if !vocab.contains_key(tok) {
                vocab.insert(tok.clone(), json!(i));
            }
            if matches!(ty, TYPE_UNKNOWN | TYPE_CONTROL | TYPE_USER_DEFINED) {
                added.push(json!({"id": i, "content": tok, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": ty != TYPE_USER_DEFINED}));
            }
        }
        let mut merges = Vec::with_capacity(self.merges.len());
        for m in &self.merges {
            // As llama.cpp: split at the first space after the first character.
            let split = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i)
                .ok_or_else(|| tok_err(format!("merge {m:?} has no space separator")))?;
            merges.push(json!([&m[..split], &m[split + 1..]]));
        }
        let token = |id: Option<u32>| id.and_then(|i| self.tokens.get(i as usize));
        let mut single = Vec::new();
        let mut specials = serde_json::Map::new();
        let mut piece = |id: Option<u32>, on: bool, single: &mut Vec<Value>| {
            if let (true, Some(t), Some(i)) = (on, token(id), id) {
                single.push(json!({"SpecialToken": {"id": t, "type_id": 0}}));
                specials.insert(t.clone(), json!({"id": t, "ids": [i], "tokens": [t]}));
            }
        };
        piece(self.bos_token_id, self.add_bos_token, &mut single);
        single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
        piece(self.eos_token_id, self.add_eos_token, &mut single);
        let post_processor = if specials.is_empty() {
            Value::Null
        } else {
            let mut pair = single.clone();
            pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
            json!({"type": "TemplateProcessing", "single": single, "pair": pair,
                   "special_tokens": specials})
        };
        let doc = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                        "use_regex": false},
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges},
        });
        Ok(doc.to_string())
    }

    /// End-of-sequence ids: eos, then eot/eom, without repeats.
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut seen = HashSet::new();
        self.eos_token_id.into_iter().chain(self.extra_eos_ids.iter().copied()).filter(|i| seen.insert(*i)).collect()
    }
}
