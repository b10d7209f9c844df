//! `engine export-tokenizer`: the vocabulary embedded in a GGUF file as Hugging
//! Face `tokenizer.json` + `tokenizer_config.json` (chat template, BOS/EOS),
//! checked to encode exactly as the engine's own GGUF tokenizer does.

use super::{CommandError, Result, write_atomic};
use crate::gguf::GgufFile;
use crate::tokenizer::{GgufVocab, Tokenizer};
use std::path::Path;

/// A probe with digits, accents, a special token and an emoji: the exported
/// file must encode it token for token as the GGUF vocabulary does.
const PROBE: &str = "Check 12345: naïve café, <|im_start|>user\nhi<|im_end|> 🙂";

pub fn export_tokenizer(model: &Path, out: &Path) -> Result<()> {
    let gguf = GgufFile::open(model)?;
    let vocab = GgufVocab::from_gguf(&gguf)?;
    let json = vocab.to_tokenizer_json()?;
    std::fs::create_dir_all(out).map_err(|e| CommandError::write(out, e))?;
    let mut cfg = serde_json::Map::new();
    if let Some(t) = &vocab.chat_template {
        cfg.insert("chat_template".into(), serde_json::Value::String(t.clone()));
    }
    let name = |id: Option<u32>| id.and_then(|i| vocab.tokens.get(i as usize).cloned());
    if let Some(b) = name(vocab.bos_token_id) {
        cfg.insert("bos_token".into(), b.into());
    }
    if let Some(e) = name(vocab.eos_token_id) {
        cfg.insert("eos_token".into(), e.into());
    }
    let cfg = serde_json::to_string_pretty(&cfg).expect("a JSON map always serialises");
    write_atomic(&out.join("tokenizer.json"), json.as_bytes())?;
    write_atomic(&out.join("tokenizer_config.json"), cfg.as_bytes())?;
    let exported = Tokenizer::from_hf_files(&out.join("tokenizer.json"), Some(&out.join("tokenizer_config.json")))?;
    let native = Tokenizer::from_gguf(&gguf)?;
    if exported.encode(PROBE, false)? != native.encode(PROBE, false)? {
        return Err(CommandError::Check("the exported tokenizer.json does not encode like the GGUF vocabulary".into()));
    }
    Ok(())
}
