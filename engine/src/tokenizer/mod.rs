//! Tokenizers: one `Tokenizer` over `tokenizers::Tokenizer`, built from a Hugging
//! Face `tokenizer.json` (+ `tokenizer_config.json`) or from the vocabulary
//! embedded in a GGUF file, with the model's chat template, special-token IDs
//! and streaming detokenization (`IncrementalDecoder`). Owns text <-> IDs and
//! chat-template rendering; it does not know about models, sampling or HTTP.

mod chat;
mod gguf_vocab;
mod incremental;
mod synthetic;

pub use chat::{ChatMessage, ChatTemplate};
pub use gguf_vocab::GgufVocab;
pub use incremental::IncrementalDecoder;
pub use synthetic::{CHATML_TEMPLATE, SYNTHETIC_VOCAB_SIZE, byte_to_char, synthetic_tokenizer_files};

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;
use std::path::Path;
use std::str::FromStr;

/// A tokenizer with its chat template and special tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    template: Option<ChatTemplate>,
    bos_token: Option<String>,
    bos_token_id: Option<u32>,
    eos_token: Option<String>,
    eos_token_ids: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("chat_template", &self.template.is_some())
            .finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Tokenizer(e.to_string())
}

/// A special token in tokenizer_config.json: a string, `{"content": ...}`, or null.
fn special_token(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` and, if given, `tokenizer_config.json` (chat
    /// template, bos_token, eos_token).
    pub fn from_hf_files(tokenizer_json: &Path, tokenizer_config_json: Option<&Path>) -> Result<Self> {
        let text = std::fs::read_to_string(tokenizer_json).map_err(|e| EngineError::io(tokenizer_json, e))?;
        let inner = tokenizers::Tokenizer::from_str(&text)
            .map_err(|e| tok_err(format!("{}: {e}", tokenizer_json.display())))?;
        let Some(cfg_path) = tokenizer_config_json else {
            return Self::assemble(inner, None, None, None, Vec::new());
        };
        let cfg_text = std::fs::read_to_string(cfg_path).map_err(|e| EngineError::io(cfg_path, e))?;
        let cfg: serde_json::Value =
            serde_json::from_str(&cfg_text).map_err(|e| tok_err(format!("{}: {e}", cfg_path.display())))?;
        let template = match cfg.get("chat_template") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // A list of named templates: use "default".
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            Some(other) => {
                return Err(EngineError::Template(format!(
                    "{}: chat_template has unexpected value {other}",
                    cfg_path.display()
                )));
            }
        };
        let bos = special_token(cfg.get("bos_token"));
        let eos = special_token(cfg.get("eos_token"));
        let mut eos_ids = Vec::new();
        if let Some(e) = &eos {
            eos_ids.push(
                inner.token_to_id(e).ok_or_else(|| {
                    tok_err(format!("{}: eos_token {e:?} is not in the vocabulary", cfg_path.display()))
                })?,
            );
        }
        Self::assemble(inner, template, bos, eos, eos_ids)
    }

    /// Builds the tokenizer embedded in a GGUF file (`tokenizer.ggml.*`).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        Self::from_gguf_vocab(&GgufVocab::from_gguf(gguf)?)
    }

    /// Builds a tokenizer from a GGUF-style vocabulary.
    pub fn from_gguf_vocab(v: &GgufVocab) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_str(&v.to_tokenizer_json()?)
            .map_err(|e| tok_err(format!("GGUF vocabulary: {e}")))?;
        let name = |id: Option<u32>| id.and_then(|i| v.tokens.get(i as usize).cloned());
        Self::assemble(inner, v.chat_template.clone(), name(v.bos_token_id), name(v.eos_token_id), v.eos_ids())
    }

    fn assemble(
        inner: tokenizers::Tokenizer,
        template: Option<String>,
        bos_token: Option<String>,
        eos_token: Option<String>,
        eos_token_ids: Vec<u32>,
    ) -> Result<Self> {
        let template = template.map(|t| ChatTemplate::new(&t)).transpose()?;
        let bos_token_id = bos_token.as_deref().and_then(|b| inner.token_to_id(b));
        Ok(Tokenizer { inner, template, bos_token, bos_token_id, eos_token, eos_token_ids })
    }

    /// Text to IDs. Added/special tokens written in the text (`<|im_start|>`)
    /// become their single IDs; `add_special_tokens` applies the post-processor
    /// (e.g. a BOS the tokenizer adds).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(tok_err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// IDs to text. IDs outside the vocabulary are skipped, as `tokenizers` does.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner.decode(ids, skip_special_tokens).map_err(tok_err)
    }

    /// Number of distinct IDs, added tokens included (the model's embedding
    /// may be larger).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// IDs that end a sequence (tokenizer_config's eos_token; for GGUF,
    /// eos then eot/eom). May be empty.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.template.as_ref().map(ChatTemplate::source)
    }

    /// The underlying `tokenizers::Tokenizer`.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Renders the model's chat template.
    pub fn apply_chat_template(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.apply_chat_template_with(messages, add_generation_prompt, &serde_json::Map::new())
    }

    /// As `apply_chat_template`, with extra template variables (e.g.
    /// `{"enable_thinking": false}` for Qwen3).
    pub fn apply_chat_template_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let t = self.template.as_ref().ok_or_else(|| {
            EngineError::Template("this model has no chat template; use /v1/completions with a plain prompt".into())
        })?;
        t.render(messages, add_generation_prompt, self.bos_token.as_deref(), self.eos_token.as_deref(), extra)
    }
}

#[cfg(test)]
mod tests;
