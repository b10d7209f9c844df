//! One entry point for every supported checkpoint: a GGUF file or a Hugging
//! Face directory becomes a validated `Model` and its `Tokenizer`.

use super::config::ModelConfig;
use super::qwen3::{Model, Weight};
use super::safetensors_dir;
use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use std::collections::HashSet;
use std::path::Path;

pub struct LoadedModel {
    pub model: Model,
    pub tokenizer: Tokenizer,
}

/// Loads a `.gguf` file or a directory with config.json, safetensors and
/// tokenizer.json (+ optional tokenizer_config.json).
pub fn load(path: &Path) -> Result<LoadedModel> {
    if !path.exists() {
        return Err(EngineError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    if path.is_dir() {
        let config = safetensors_dir::read_config(path)?;
        // 2-D F16/BF16 weights stay 16-bit (widened exactly inside the kernels);
        // the embedding matrix only when a tied LM head will serve its lookups.
        let tied = config.tie_word_embeddings;
        let keep = |name: &str| name != "model.embed_tokens.weight" || tied;
        let (tensors, half) = safetensors_dir::load_tensors_keeping(path, &keep)?;
        let tok_json = path.join("tokenizer.json");
        if !tok_json.is_file() {
            return Err(EngineError::Tokenizer(format!("{} has no tokenizer.json", path.display())));
        }
        let tok_cfg = path.join("tokenizer_config.json");
        let tokenizer = Tokenizer::from_hf_files(&tok_json, tok_cfg.is_file().then_some(tok_cfg.as_path()))?;
        check_vocab(&config, &tokenizer)?;
        let mut model = Model::from_tensors(config, tensors)?;
        let n = model.use_stored(half.into_iter().map(|(name, m)| (name, Weight::Half(m))).collect());
        model.check_weights()?;
        tracing::debug!("{n} linear layers read 16-bit weights");
        Ok(LoadedModel { model, tokenizer })
    } else {
        let gguf = GgufFile::open(path)?;
        let config = gguf.model_config()?;
        // Quantized and 16-bit layers keep their stored form and are never
        // decoded to f32 (the peak would otherwise hold the whole model in
        // f32); the embedding matrix only when a tied LM head will serve its
        // lookups.
        let stored = gguf.stored_weights(&config)?;
        let deferred: HashSet<String> = stored
            .iter()
            .map(|(name, _)| name.clone())
            .filter(|name| name != "model.embed_tokens.weight" || config.tie_word_embeddings)
            .collect();
        let tensors = gguf.load_tensors_except(&config, &|name| deferred.contains(name))?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        check_vocab(&config, &tokenizer)?;
        let mut model = Model::from_tensors(config, tensors)?;
        let n = model.use_stored(stored);
        model.check_weights()?;
        tracing::debug!("{n} linear layers read stored (quantized or 16-bit) weights");
        Ok(LoadedModel { model, tokenizer })
    }
}

fn check_vocab(config: &ModelConfig, tokenizer: &Tokenizer) -> Result<()> {
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(EngineError::Config(format!(
            "tokenizer has {} tokens but the model's vocabulary is {}",
            tokenizer.vocab_size(),
            config.vocab_size
        )));
    }
    Ok(())
}
