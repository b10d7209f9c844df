//! `Engine`: a loaded model, its tokenizer, a KV cache and the thread pool the
//! kernels run on, with the serial in-process paths: greedy generation (the
//! reference for the serial-parity gate), scoring (per-token log-probabilities)
//! and value-scale calibration. The HTTP server drives the same `Model::forward`
//! and `KvCache` through its scheduler, so both paths run the same kernels.

use crate::error::{EngineError, Result};
pub use crate::finish::{FinishReason, StopReason};
use crate::kernels::{Device, Kernels, Workers, argmax, log_softmax};
use crate::kv::format::E4M3_MAX;
use crate::kv::{KvCache, KvFormat, ValueScales};
use crate::model::{LogitsWanted, Model, SeqInput, load};
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub kv_format: KvFormat,
    pub kv_scales: Option<ValueScales>,
    pub kv_budget_bytes: usize,
    pub threads: usize,
    /// The kernel backend the model runs on (the caller resolves flags and
    /// environment: `Kernels::from_env`).
    pub kernels: Kernels,
    /// Where the forward pass runs (`Device::open` resolves `--device`).
    pub device: Device,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            kv_format: KvFormat::F16,
            kv_scales: None,
            kv_budget_bytes: 256 << 20,
            threads: 1,
            kernels: Kernels::default(),
            device: Device::Cpu,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    pub finish_reason: FinishReason,
}

/// Tokens per forward call when scoring or calibrating long texts.
const SCORE_CHUNK: usize = 256;

pub struct Engine {
    pub model: Model,
    pub tokenizer: Arc<Tokenizer>,
    pub cache: KvCache,
    pool: Workers,
}

impl Engine {
    pub fn load(model_path: &Path, opts: &EngineOptions) -> Result<Self> {
        let loaded = load(model_path)?;
        Self::new(loaded.model, loaded.tokenizer, opts)
    }

    pub fn new(mut model: Model, tokenizer: Tokenizer, opts: &EngineOptions) -> Result<Self> {
        model.set_kernels(opts.kernels);
        #[cfg(feature = "cuda")]
        if let Device::Cuda(gpu) = &opts.device {
            model.use_gpu(gpu.clone())?;
        }
        let c = &model.config;
        let mut cache = KvCache::with_budget(
            opts.kv_format,
            c.num_hidden_layers,
            c.num_key_value_heads,
            c.head_dim,
            opts.kv_budget_bytes,
            opts.kv_scales.as_ref(),
        )?;
        model.attach_cache(&mut cache)?;
        let pool = Workers::new(opts.threads).map_err(|e| EngineError::Config(e.to_string()))?;
        Ok(Engine { model, tokenizer: Arc::new(tokenizer), cache, pool })
    }

    /// The model, the cache and the kernel pool, borrowed separately so a
    /// caller can hold sequences' block tables while running a forward pass.
    pub fn parts(&mut self) -> (&Model, &mut KvCache, &Workers) {
        (&self.model, &mut self.cache, &self.pool)
    }

    /// Runs `f` on the engine's kernel threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// Greedy generation of up to `max_tokens` tokens after `prompt`, serial and
    /// in-process. Stops at an end-of-sequence token unless `ignore_eos`.
    pub fn generate_greedy(&mut self, prompt: &[u32], max_tokens: usize, ignore_eos: bool) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if max_tokens == 0 {
            return Err(EngineError::InvalidRequest("max_tokens must be at least 1".into()));
        }
        let limit = self.model.max_positions();
        if prompt.len() + max_tokens > limit {
            return Err(EngineError::InvalidRequest(format!(
                "prompt ({} tokens) + max_tokens ({max_tokens}) exceeds the model's {limit} positions",
                prompt.len()
            )));
        }
        let eos = self.tokenizer.eos_token_ids().to_vec();
        let Engine { model, cache, pool, .. } = self;
        let mut table = cache.new_table();
        let mut output = Vec::with_capacity(max_tokens);
        let mut next_input: Vec<u32> = prompt.to_vec();
        let finish = loop {
            let needed = table.len() + next_input.len();
            if !table.reserve(needed) {
                return Err(EngineError::Kv(format!(
                    "the KV budget holds {} token slots; this request needs {}",
                    cache.inventory().logical_token_slots,
                    prompt.len() + max_tokens
                )));
            }
            let logits = pool.install(|| {
                model.forward(
                    cache,
                    &mut [SeqInput { tokens: &next_input, table: &mut table, logits: LogitsWanted::Last }],
                    None,
                )
            })?;
            let tok = argmax(&logits[0][0]);
            output.push(tok);
            if !ignore_eos && eos.contains(&tok) {
                break FinishReason::Stop(StopReason::Token(tok));
            }
            if output.len() == max_tokens {
                break FinishReason::Length;
            }
            next_input = vec![tok];
        };
        Ok(Generation { prompt_ids: prompt.to_vec(), output_ids: output, finish_reason: finish })
    }

    /// Natural-log probabilities of `ids[1..]`, each given the tokens before it.
    pub fn score(&mut self, ids: &[u32]) -> Result<Vec<f64>> {
        if ids.len() < 2 {
            return Err(EngineError::InvalidRequest("scoring needs at least 2 tokens".into()));
        }
        if ids.len() > self.model.max_positions() {
            return Err(EngineError::InvalidRequest(format!(
                "{} tokens exceed the model's {} positions",
                ids.len(),
                self.model.max_positions()
            )));
        }
        let Engine { model, cache, pool, .. } = self;
        let mut table = cache.new_table();
        if !table.reserve(ids.len()) {
            return Err(EngineError::Kv(format!("the KV budget cannot hold {} tokens", ids.len())));
        }
        let mut logprobs = Vec::with_capacity(ids.len() - 1);
        for (ci, chunk) in ids.chunks(SCORE_CHUNK).enumerate() {
            let logits = pool.install(|| {
                model.forward(
                    cache,
                    &mut [SeqInput { tokens: chunk, table: &mut table, logits: LogitsWanted::All }],
                    None,
                )
            })?;
            for (j, row) in logits[0].iter().enumerate() {
                let pos = ci * SCORE_CHUNK + j;
                if let Some(&next) = ids.get(pos + 1) {
                    logprobs.push(pool.install(|| log_softmax(row))[next as usize]);
                }
            }
        }
        Ok(logprobs)
    }

    /// Per-layer value scales for k16v8: `max |v|` over every value element the
    /// model computes for `ids`, divided by 448 (the largest finite E4M3 value),
    /// so that the largest observed value maps to the top of the FP8 range.
    pub fn calibrate(&mut self, ids: &[u32]) -> Result<ValueScales> {
        if ids.is_empty() {
            return Err(EngineError::InvalidRequest("calibration text has no tokens".into()));
        }
        let layers = self.model.config.num_hidden_layers;
        let mut absmax = vec![0.0f32; layers];
        let Engine { model, cache, pool, .. } = self;
        let mut table = cache.new_table();
        if !table.reserve(ids.len()) {
            return Err(EngineError::Kv(format!("the KV budget cannot hold {} tokens", ids.len())));
        }
        for chunk in ids.chunks(SCORE_CHUNK) {
            let mut observe = |layer: usize, v: &[f32]| {
                let m = v.iter().fold(0.0f32, |a, &b| a.max(b.abs()));
                absmax[layer] = absmax[layer].max(m);
            };
            pool.install(|| {
                model.forward(
                    cache,
                    &mut [SeqInput { tokens: chunk, table: &mut table, logits: LogitsWanted::None }],
                    Some(&mut observe),
                )
            })?;
        }
        let scales = absmax.iter().map(|&m| if m > 0.0 && m.is_finite() { m / E4M3_MAX } else { 1.0 }).collect();
        Ok(ValueScales { rule: format!("max|v| / {E4M3_MAX} per layer over {} calibration tokens", ids.len()), scales })
    }
}
