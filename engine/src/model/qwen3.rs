//! The dense decoder (Qwen3 and llama architectures, one code path): one struct
//! per Hugging Face module, built from tensors with their checkpoint names, and a
//! batched forward pass over the paged KV cache.
//!
//! A forward call takes any mix of sequences, each contributing one or more new
//! tokens (a prefill chunk, a decode step, or a recompute after preemption). All
//! rows go through the linear layers together; attention is per sequence. Every
//! kernel is row-independent (see `kernels::cpu`), so a sequence's logits do not
//! depend on the rest of the batch.

use super::config::ModelConfig;
use super::tensor::TensorMap;
use crate::error::{EngineError, Result};
use crate::kernels::cpu::attention::{AttnSeq, AttnShape, paged_attention};
use crate::kernels::cpu::matmul::matmul;
use crate::kernels::cpu::ops::{add_in_place, rms_norm, silu_mul_in_place};
use crate::kernels::cpu::quant::{QuantMatrix, matmul_quant};
use crate::kernels::cpu::rope::RopeTable;
use crate::kv::{BlockTable, KvCache};

/// A linear layer's weight: dense f32, or the checkpoint's block-quantized
/// bytes (dequantized inside the kernel to exactly the same f32 values).
pub enum Weight {
    F32(Vec<f32>),
    Quant(QuantMatrix),
}

/// `y = x Wᵀ`, weight `[out_features, in_features]`, no bias.
pub struct Linear {
    pub weight: Weight,
    pub out_features: usize,
    pub in_features: usize,
}

impl Linear {
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len() / self.in_features;
        match &self.weight {
            Weight::F32(w) => matmul(x, w, rows, self.in_features, self.out_features),
            Weight::Quant(q) => matmul_quant(x, q, rows),
        }
    }

    /// Replaces the weight with its quantized form if the shapes agree.
    fn set_quantized(&mut self, q: QuantMatrix) -> bool {
        if q.rows == self.out_features && q.cols == self.in_features {
            self.weight = Weight::Quant(q);
            true
        } else {
            false
        }
    }
}

pub struct RmsNorm {
    pub weight: Vec<f32>,
    pub eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        rms_norm(x, &self.weight, self.eps)
    }
}

pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    /// Qwen3 only: per-head RMSNorm before RoPE.
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
}

pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Mlp {
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut g = self.gate_proj.forward(x);
        let u = self.up_proj.forward(x);
        silu_mul_in_place(&mut g, &u);
        self.down_proj.forward(&g)
    }
}

pub struct DecoderLayer {
    pub self_attn: Attention,
    pub mlp: Mlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

/// Which logits a sequence wants back from a forward call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsWanted {
    None,
    /// The last new position (generation).
    Last,
    /// Every new position (scoring, prompt logprobs).
    All,
}

/// One sequence's part of a forward call. Its new tokens take positions
/// `table.len()..table.len() + tokens.len()`; the table must have room for them.
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    pub table: &'a mut BlockTable,
    pub logits: LogitsWanted,
}

/// Receives each layer's value rows (`[rows, kv_dim]`) before they are stored;
/// `engine calibrate` uses it to measure value ranges.
pub type ValueObserver<'a> = &'a mut dyn FnMut(usize, &[f32]);

pub struct Model {
    pub config: ModelConfig,
    pub embed_tokens: Vec<f32>,
    pub layers: Vec<DecoderLayer>,
    pub norm: RmsNorm,
    /// `None` when tied to `embed_tokens`.
    pub lm_head: Option<Linear>,
    rope: RopeTable,
}

struct Take<'a> {
    tensors: &'a mut TensorMap,
}

impl Take<'_> {
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensors.remove(name).ok_or_else(|| EngineError::MissingTensor(name.to_string()))?;
        if t.shape != shape {
            return Err(EngineError::Shape { name: name.to_string(), expected: shape.to_vec(), found: t.shape });
        }
        Ok(t.data)
    }

    fn linear(&mut self, name: &str, out_features: usize, in_features: usize) -> Result<Linear> {
        Ok(Linear { weight: Weight::F32(self.get(name, &[out_features, in_features])?), out_features, in_features })
    }

    fn norm(&mut self, name: &str, dim: usize, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: self.get(name, &[dim])?, eps })
    }
}

impl Model {
    /// Builds the model from tensors named as in the Hugging Face checkpoint.
    /// Every tensor's shape is checked against the config.
    pub fn from_tensors(config: ModelConfig, mut tensors: TensorMap) -> Result<Self> {
        config.validate()?;
        let c = &config;
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let mut t = Take { tensors: &mut tensors };
        let embed_tokens = t.get("model.embed_tokens.weight", &[c.vocab_size, h])?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let (q_norm, k_norm) = if c.arch.has_qk_norm() {
                (
                    Some(t.norm(&format!("{p}.self_attn.q_norm.weight"), c.head_dim, eps)?),
                    Some(t.norm(&format!("{p}.self_attn.k_norm.weight"), c.head_dim, eps)?),
                )
            } else {
                (None, None)
            };
            layers.push(DecoderLayer {
                self_attn: Attention {
                    q_proj: t.linear(&format!("{p}.self_attn.q_proj.weight"), c.q_dim(), h)?,
                    k_proj: t.linear(&format!("{p}.self_attn.k_proj.weight"), c.kv_dim(), h)?,
                    v_proj: t.linear(&format!("{p}.self_attn.v_proj.weight"), c.kv_dim(), h)?,
                    o_proj: t.linear(&format!("{p}.self_attn.o_proj.weight"), h, c.q_dim())?,
                    q_norm,
                    k_norm,
                },
                mlp: Mlp {
                    gate_proj: t.linear(&format!("{p}.mlp.gate_proj.weight"), c.intermediate_size, h)?,
                    up_proj: t.linear(&format!("{p}.mlp.up_proj.weight"), c.intermediate_size, h)?,
                    down_proj: t.linear(&format!("{p}.mlp.down_proj.weight"), h, c.intermediate_size)?,
                },
                input_layernorm: t.norm(&format!("{p}.input_layernorm.weight"), h, eps)?,
                post_attention_layernorm: t.norm(&format!("{p}.post_attention_layernorm.weight"), h, eps)?,
            });
        }
        let norm = t.norm("model.norm.weight", h, eps)?;
        let lm_head = if t.tensors.contains_key("lm_head.weight") {
            Some(t.linear("lm_head.weight", c.vocab_size, h)?)
        } else if c.tie_word_embeddings {
            None
        } else {
            return Err(EngineError::MissingTensor("lm_head.weight (and tie_word_embeddings is false)".into()));
        };
        let rope = RopeTable::new(c.head_dim, c.rope_theta, c.max_position_embeddings);
        Ok(Model { config, embed_tokens, layers, norm, lm_head, rope })
    }

    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    fn lm_head_forward(&self, x: &[f32]) -> Vec<f32> {
        match &self.lm_head {
            Some(l) => l.forward(x),
            None => matmul(
                x,
                &self.embed_tokens,
                x.len() / self.config.hidden_size,
                self.config.hidden_size,
                self.config.vocab_size,
            ),
        }
    }

    /// Uses block-quantized weights (from a GGUF file) in place of their f32
    /// copies; results are bit-for-bit unchanged, memory traffic is not. A tied
    /// LM head gets the quantized embedding matrix (lookups keep the f32 one).
    /// Returns how many layers now read quantized weights.
    pub fn use_quantized(&mut self, weights: Vec<(String, QuantMatrix)>) -> usize {
        let mut n = 0;
        for (name, q) in weights {
            let target: Option<&mut Linear> = if name == "lm_head.weight" {
                self.lm_head.as_mut()
            } else if name == "model.embed_tokens.weight" {
                if self.lm_head.is_none() && self.config.tie_word_embeddings {
                    let (out_features, in_features) = (self.config.vocab_size, self.config.hidden_size);
                    self.lm_head = Some(Linear { weight: Weight::F32(Vec::new()), out_features, in_features });
                }
                match self.lm_head.as_mut() {
                    Some(l) if matches!(&l.weight, Weight::F32(w) if w.is_empty()) => Some(l),
                    _ => None,
                }
            } else {
                self.linear_mut(&name)
            };
            if let Some(l) = target
                && l.set_quantized(q)
            {
                n += 1;
            }
        }
        // A tied head whose quantized matrix did not fit falls back to the embedding.
        if matches!(&self.lm_head, Some(Linear { weight: Weight::F32(w), .. }) if w.is_empty()) {
            self.lm_head = None;
        }
        n
    }

    fn linear_mut(&mut self, name: &str) -> Option<&mut Linear> {
        let rest = name.strip_prefix("model.layers.")?;
        let (idx, tail) = rest.split_once('.')?;
        let layer = self.layers.get_mut(idx.parse::<usize>().ok()?)?;
        match tail {
            "self_attn.q_proj.weight" => Some(&mut layer.self_attn.q_proj),
            "self_attn.k_proj.weight" => Some(&mut layer.self_attn.k_proj),
            "self_attn.v_proj.weight" => Some(&mut layer.self_attn.v_proj),
            "self_attn.o_proj.weight" => Some(&mut layer.self_attn.o_proj),
            "mlp.gate_proj.weight" => Some(&mut layer.mlp.gate_proj),
            "mlp.up_proj.weight" => Some(&mut layer.mlp.up_proj),
            "mlp.down_proj.weight" => Some(&mut layer.mlp.down_proj),
            _ => None,
        }
    }

    /// Runs the new tokens of every sequence through the model, storing their
    /// keys and values, and returns per sequence the logits it asked for
    /// (`[positions][vocab]`).
    pub fn forward(
        &self,
        cache: &mut KvCache,
        seqs: &mut [SeqInput<'_>],
        mut observe: Option<ValueObserver<'_>>,
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let c = &self.config;
        let (h, hd) = (c.hidden_size, c.head_dim);
        // Validate and place every sequence before touching the cache.
        let mut starts = Vec::with_capacity(seqs.len());
        let mut total = 0usize;
        for (i, s) in seqs.iter().enumerate() {
            let start = s.table.len();
            let n = s.tokens.len();
            if n == 0 {
                return Err(EngineError::InvalidRequest(format!("sequence {i} has no new tokens")));
            }
            if start + n > self.max_positions() {
                return Err(EngineError::InvalidRequest(format!(
                    "sequence {i} would reach position {} but the model supports {}",
                    start + n,
                    self.max_positions()
                )));
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(EngineError::InvalidRequest(format!(
                    "token id {bad} is outside the vocabulary (size {})",
                    c.vocab_size
                )));
            }
            if s.table.capacity() < start + n {
                return Err(EngineError::Kv(format!(
                    "sequence {i}: block table holds {} slots, needs {}",
                    s.table.capacity(),
                    start + n
                )));
            }
            starts.push((total, start, n));
            total += n;
        }
        for (s, &(_, start, n)) in seqs.iter_mut().zip(&starts) {
            cache.commit(s.table, start + n);
        }

        let mut x = Vec::with_capacity(total * h);
        for s in seqs.iter() {
            for &t in s.tokens {
                x.extend_from_slice(&self.embed_tokens[t as usize * h..(t as usize + 1) * h]);
            }
        }
        let positions: Vec<usize> = starts.iter().flat_map(|&(_, start, n)| start..start + n).collect();
        let shape = AttnShape { heads: c.num_attention_heads, kv_heads: c.num_key_value_heads, head_dim: hd };
        let (q_dim, kv_dim) = (c.q_dim(), c.kv_dim());

        for (li, layer) in self.layers.iter().enumerate() {
            let a = &layer.self_attn;
            let hn = layer.input_layernorm.forward(&x);
            let mut q = a.q_proj.forward(&hn);
            let mut k = a.k_proj.forward(&hn);
            let v = a.v_proj.forward(&hn);
            if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
                q = qn.forward(&q);
                k = kn.forward(&k);
            }
            for (r, &pos) in positions.iter().enumerate() {
                self.rope.apply(&mut q[r * q_dim..(r + 1) * q_dim], pos);
                self.rope.apply(&mut k[r * kv_dim..(r + 1) * kv_dim], pos);
            }
            if let Some(obs) = observe.as_mut() {
                obs(li, &v);
            }
            for (s, &(row, start, n)) in seqs.iter().zip(&starts) {
                let (k_rows, v_rows) = (&k[row * kv_dim..(row + n) * kv_dim], &v[row * kv_dim..(row + n) * kv_dim]);
                cache.write(li, s.table, start, k_rows, v_rows);
            }
            let attn_seqs: Vec<AttnSeq<'_>> = seqs
                .iter()
                .zip(&starts)
                .map(|(s, &(row, start, n))| AttnSeq { table: &*s.table, q_row: row, rows: n, start_pos: start })
                .collect();
            let attn = paged_attention(&q, &attn_seqs, cache, li, shape);
            add_in_place(&mut x, &a.o_proj.forward(&attn));
            let hn = layer.post_attention_layernorm.forward(&x);
            add_in_place(&mut x, &layer.mlp.forward(&hn));
        }

        // Final norm and LM head only for the rows someone asked for.
        let mut wanted_rows = Vec::new();
        for (s, &(row, _, n)) in seqs.iter().zip(&starts) {
            match s.logits {
                LogitsWanted::None => {}
                LogitsWanted::Last => wanted_rows.push(row + n - 1),
                LogitsWanted::All => wanted_rows.extend(row..row + n),
            }
        }
        let mut picked = Vec::with_capacity(wanted_rows.len() * h);
        for &r in &wanted_rows {
            picked.extend_from_slice(&x[r * h..(r + 1) * h]);
        }
        let normed = self.norm.forward(&picked);
        let logits = self.lm_head_forward(&normed);
        let mut rows = logits.chunks_exact(c.vocab_size).map(|r| r.to_vec());
        let mut out = Vec::with_capacity(seqs.len());
        for (s, &(_, _, n)) in seqs.iter().zip(&starts) {
            let count = match s.logits {
                LogitsWanted::None => 0,
                LogitsWanted::Last => 1,
                LogitsWanted::All => n,
            };
            out.push(rows.by_ref().take(count).collect());
        }
        Ok(out)
    }
}
