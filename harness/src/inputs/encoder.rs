//! The plan's tokenizer as the prompt panel's encoder: a `trace::Encoder` over a
//! Hugging Face `tokenizer.json`, read as a regular input file; it also decodes and
//! says what vLLM's random dataset reads of its vocabulary. Must not add special
//! tokens or fetch anything.

use std::path::Path;

use super::InputsError;
use crate::trace::Encoder;

/// A `trace::Encoder` over a Hugging Face `tokenizer.json`; encodes without special
/// tokens (no BOS/EOS added).
pub struct TokenizerEncoder {
    pub(super) inner: tokenizers::Tokenizer,
}

impl TokenizerEncoder {
    pub fn from_file(path: &Path) -> Result<TokenizerEncoder, InputsError> {
        let hint = if path.extension().is_some_and(|e| e == "gguf") {
            "; a GGUF file is not a tokenizer.json: export one with \
             `engine export-tokenizer --model FILE.gguf --out DIR` and name DIR/tokenizer.json"
        } else {
            ""
        };
        let bytes = crate::evidence::read_input(path)
            .map_err(|e| InputsError::Tokenizer { path: path.to_path_buf(), message: e.to_string() })?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| InputsError::Tokenizer { path: path.to_path_buf(), message: format!("{e}{hint}") })?;
        Ok(TokenizerEncoder { inner })
    }
}

impl TokenizerEncoder {
    /// Hugging Face's `all_special_ids` for this tokenizer as transformers reads
    /// it: the IDs of the special tokens that `config` (the `tokenizer_config.json`
    /// beside the tokenizer.json) names (`bos_token`, `eos_token`, `unk_token`,
    /// `sep_token`, `pad_token`, `cls_token`, `mask_token`, each a string or
    /// `{"content": ..}`, and the lists `additional_special_tokens` and
    /// `extra_special_tokens`), ascending; names the vocabulary lacks are skipped.
    pub fn special_ids_named(&self, config: &serde_json::Value) -> Vec<u32> {
        let content = |v: &serde_json::Value| -> Option<String> {
            v.as_str().map(str::to_string).or_else(|| v.get("content").and_then(|c| c.as_str()).map(str::to_string))
        };
        let mut names: Vec<String> =
            ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]
                .iter()
                .filter_map(|k| config.get(*k).and_then(content))
                .collect();
        for list in ["additional_special_tokens", "extra_special_tokens"] {
            if let Some(items) = config.get(list).and_then(|v| v.as_array()) {
                names.extend(items.iter().filter_map(content));
            }
        }
        let mut ids: Vec<u32> = names.iter().filter_map(|n| self.inner.token_to_id(n)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// `encode_fast` is `encode` without character offsets (the harness needs the IDs only).
impl Encoder for TokenizerEncoder {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.inner.encode_fast(text, false).map(|e| e.get_ids().to_vec()).map_err(|e| e.to_string())
    }

    fn encode_batch(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, String> {
        let encodings = self.inner.encode_batch_fast(texts.to_vec(), false).map_err(|e| e.to_string())?;
        Ok(encodings.iter().map(|e| e.get_ids().to_vec()).collect())
    }

    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.inner.decode(ids, false).map_err(|e| e.to_string())
    }

    fn vocabulary(&self) -> Option<crate::trace::Vocabulary> {
        use tokenizers::PostProcessor;
        let mut special_ids: Vec<u32> =
            self.inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        special_ids.sort_unstable();
        let to_add = self.inner.get_post_processor().map_or(0, |p| p.added_tokens(false));
        Some(crate::trace::Vocabulary {
            size: u32::try_from(self.inner.get_vocab_size(false)).ok()?,
            special_ids,
            special_tokens_to_add: u32::try_from(to_add).ok()?,
        })
    }
}
