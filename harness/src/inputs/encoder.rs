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
