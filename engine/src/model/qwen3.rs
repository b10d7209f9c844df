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
use crate::kernels::{AttnSeq, AttnShape, HalfMatrix, Kernels, QK, QuantMatrix, RopeTable};
use crate::kv::{BlockTable, KvCache};

/// A linear layer's weight: dense f32; the checkpoint's 16-bit floats (F16 or
/// BF16), widened inside the kernel to exactly the f32 values; or its
/// block-quantized bytes (multiplied as the model's `Kernels` say:
/// activation-quantized by default, or dequantized inside the kernel to exactly
/// the f32 values).
pub enum Weight {
    F32(Vec<f32>),
    Half(HalfMatrix),
    Quant(QuantMatrix),
}

impl Weight {
    /// `(rows, cols)` of a stored (16-bit or quantized) weight; `None` for f32.
    fn stored_dims(&self) -> Option<(usize, usize)> {
        match self {
            Weight::F32(_) => None,
            Weight::Half(h) => Some((h.rows, h.cols)),
            Weight::Quant(q) => Some((q.rows, q.cols)),
        }
    }

    /// Row `r` as f32 values: exactly what the loader would have made of it.
    pub(super) fn row_f32(&self, r: usize, out: &mut [f32]) {
        match self {
            Weight::F32(w) => out.copy_from_slice(&w[r * out.len()..(r + 1) * out.len()]),
            Weight::Half(h) => h.row_f32(r, out),
            Weight::Quant(q) => q.dequantize_row(r, out),
        }
    }
}

/// `y = x Wᵀ`, weight `[out_features, in_features]`, no bias.
pub struct Linear {
    pub weight: Weight,
    pub out_features: usize,
    pub in_features: usize,
}

impl Linear {
    pub fn forward(&self, x: &[f32], kernels: &Kernels) -> Vec<f32> {
        let rows = x.len() / self.in_features;
        match &self.weight {
            Weight::F32(w) => kernels.matmul(x, w, rows, self.in_features, self.out_features),
            Weight::Half(h) => kernels.matmul_half(x, h, rows),
            Weight::Quant(q) => kernels.matmul_quant(x, q, rows),
        }
    }

    /// `[x Wᵢᵀ]` for layers over the same input: quantized layers of one input
    /// width go through one `matmul_quant_many` (the input quantized once),
    /// others one by one. Each result is exactly that layer's `forward`.
    pub fn forward_many<const N: usize>(layers: [&Linear; N], x: &[f32], kernels: &Kernels) -> [Vec<f32>; N] {
        let quant: Option<Vec<&QuantMatrix>> = layers
            .iter()
            .map(|l| match &l.weight {
                Weight::Quant(q) if l.in_features == layers[0].in_features => Some(q),
                _ => None,
            })
            .collect();
        match quant {
            Some(ws) if N > 0 => {
                let mut ys = kernels.matmul_quant_many(x, &ws, x.len() / layers[0].in_features).into_iter();
                std::array::from_fn(|_| ys.next().unwrap_or_default())
            }
            _ => layers.map(|l| l.forward(x, kernels)),
        }
    }

    /// Tells the kernels that `layers` (one product over the same input) run
    /// next on `rows` rows, so idle threads can start reading their weights (a
    /// cache hint: results never depend on it).
    pub fn prefetch_next(layers: &[&Linear], rows: usize, kernels: &Kernels) {
        kernels.prefetch_next(&Linear::quant_weights(layers), rows);
    }

    /// The block-quantized weights of `layers`, up to the first that is not.
    fn quant_weights<'a>(layers: &[&'a Linear]) -> Vec<&'a QuantMatrix> {
        layers
            .iter()
            .map_while(|l| match &l.weight {
                Weight::Quant(q) => Some(q),
                _ => None,
            })
            .collect()
    }

    /// Replaces the weight with a stored (16-bit or quantized) form if the
    /// shapes agree.
    fn set_stored(&mut self, w: Weight) -> bool {
        if w.stored_dims() == Some((self.out_features, self.in_features)) {
            self.weight = w;
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
    pub fn forward(&self, x: &[f32], kernels: &Kernels) -> Vec<f32> {
        kernels.rms_norm(x, &self.weight, self.eps)
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

impl Attention {
    /// Self-attention of every new row (`x` is the normalised hidden state,
    /// `[rows, hidden]`): projects, rotates, stores this layer's keys and values
    /// in each sequence's pages, attends over the cache and projects back.
    /// `then`: the layers that run after `o_proj` (a cache hint).
    fn forward(&self, x: &[f32], batch: &mut Batch<'_, '_>, cache: &mut KvCache, then: &[&Linear]) -> Vec<f32> {
        let kv_dim = batch.shape.kv_heads * batch.shape.head_dim;
        let kernels = batch.kernels;
        Linear::prefetch_next(&[&self.o_proj], batch.positions.len(), kernels);
        let [mut q, mut k, v] = Linear::forward_many([&self.q_proj, &self.k_proj, &self.v_proj], x, kernels);
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q, kernels);
            k = kn.forward(&k, kernels);
        }
        kernels.rope(batch.rope, &mut q, &batch.positions);
        kernels.rope(batch.rope, &mut k, &batch.positions);
        if let Some(obs) = batch.observe.as_mut() {
            obs(batch.layer, &v);
        }
        for (s, p) in batch.seqs.iter().zip(&batch.places) {
            let rows = p.row * kv_dim..(p.row + p.len) * kv_dim;
            cache.write(batch.layer, s.table, p.start, &k[rows.clone()], &v[rows]);
        }
        let attn_seqs: Vec<AttnSeq<'_>> = batch
            .seqs
            .iter()
            .zip(&batch.places)
            .map(|(s, p)| AttnSeq { table: &*s.table, q_row: p.row, rows: p.len, start_pos: p.start })
            .collect();
        let attn = kernels.paged_attention(&q, &attn_seqs, cache, batch.layer, batch.shape);
        Linear::prefetch_next(then, batch.positions.len(), kernels);
        self.o_proj.forward(&attn, kernels)
    }
}

pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Mlp {
    /// `then`: the layers that run after `down_proj` (a cache hint).
    pub fn forward(&self, x: &[f32], kernels: &Kernels, then: &[&Linear]) -> Vec<f32> {
        let rows = x.len() / self.gate_proj.in_features;
        if let (Weight::Quant(g), Weight::Quant(u), Weight::Quant(d)) =
            (&self.gate_proj.weight, &self.up_proj.weight, &self.down_proj.weight)
        {
            return kernels.swiglu_mlp_quant(x, g, u, d, rows, &Linear::quant_weights(then));
        }
        Linear::prefetch_next(&[&self.down_proj], rows, kernels);
        let [mut g, u] = Linear::forward_many([&self.gate_proj, &self.up_proj], x, kernels);
        kernels.silu_mul(&mut g, &u);
        Linear::prefetch_next(then, rows, kernels);
        self.down_proj.forward(&g, kernels)
    }
}

pub struct DecoderLayer {
    pub self_attn: Attention,
    pub mlp: Mlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    /// Pre-norm residual block: `x += attn(norm(x))`, then `x += mlp(norm(x))`.
    /// `next`: the layer after this one, if any (a cache hint).
    fn forward(&self, x: &mut [f32], batch: &mut Batch<'_, '_>, cache: &mut KvCache, next: Option<&DecoderLayer>) {
        let kernels = batch.kernels;
        let mlp_in = [&self.mlp.gate_proj, &self.mlp.up_proj];
        let attn = self.self_attn.forward(&self.input_layernorm.forward(x, kernels), batch, cache, &mlp_in);
        kernels.residual_add(x, &attn);
        let then = next.map(|n| [&n.self_attn.q_proj, &n.self_attn.k_proj, &n.self_attn.v_proj]);
        let mlp = self.mlp.forward(
            &self.post_attention_layernorm.forward(x, kernels),
            kernels,
            then.as_ref().map_or(&[][..], |t| &t[..]),
        );
        kernels.residual_add(x, &mlp);
    }
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

/// Where one sequence's new tokens sit: rows `row..row + len` of the batch,
/// positions `start..start + len` of the sequence.
#[derive(Debug, Clone, Copy)]
struct Place {
    row: usize,
    start: usize,
    len: usize,
}

/// What every layer of one forward call shares: the sequences, where their rows
/// sit, each row's position, and the layer being run.
struct Batch<'s, 'o> {
    seqs: &'s [SeqInput<'s>],
    places: Vec<Place>,
    positions: Vec<usize>,
    shape: AttnShape,
    rope: &'s RopeTable,
    kernels: &'s Kernels,
    observe: Option<ValueObserver<'o>>,
    layer: usize,
}

/// The output projection: the embedding matrix read as a linear layer (tied
/// weights), or a layer of its own (an untied head, or the stored (16-bit or
/// quantized) tied embedding matrix, which then also serves the lookups).
pub enum LmHead {
    Tied,
    Linear(Linear),
}

/// Where token embeddings are looked up.
enum Embedding {
    /// `[vocab, hidden]` f32 rows.
    F32(Vec<f32>),
    /// The rows of the stored (16-bit or quantized) tied LM head, decoded on
    /// lookup: exactly the f32 rows the loader would make from the same
    /// tensor, without keeping them (`vocab x hidden x 4` bytes).
    TiedHead,
}

pub struct Model {
    pub config: ModelConfig,
    embed: Embedding,
    pub layers: Vec<DecoderLayer>,
    pub norm: RmsNorm,
    pub lm_head: LmHead,
    rope: RopeTable,
    kernels: Kernels,
    /// The weights on a GPU, when the model runs there (`Model::use_gpu`):
    /// every forward pass then runs on it.
    #[cfg(feature = "cuda")]
    gpu: Option<Box<super::gpu::GpuModel>>,
}

/// Takes tensors out of a checkpoint by Hugging Face name under a prefix
/// (`model.layers.3`, then `self_attn`, ...), checking each shape: the loader's
/// counterpart of candle's `VarBuilder::pp`.
struct Take<'a> {
    tensors: &'a mut TensorMap,
    prefix: String,
}

impl<'a> Take<'a> {
    fn new(tensors: &'a mut TensorMap) -> Self {
        Take { tensors, prefix: String::new() }
    }

    /// The same map under `self.prefix` + `.` + `sub`.
    fn pp(&mut self, sub: &str) -> Take<'_> {
        let prefix = self.name(sub);
        Take { tensors: self.tensors, prefix }
    }

    fn name(&self, leaf: &str) -> String {
        if self.prefix.is_empty() { leaf.to_string() } else { format!("{}.{leaf}", self.prefix) }
    }

    fn contains(&self, leaf: &str) -> bool {
        self.tensors.contains_key(&self.name(leaf))
    }

    fn get(&mut self, leaf: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let name = self.name(leaf);
        let t = self.tensors.remove(&name).ok_or_else(|| EngineError::MissingTensor(name.clone()))?;
        if t.shape != shape {
            return Err(EngineError::Shape { name, expected: shape.to_vec(), found: t.shape });
        }
        Ok(t.data)
    }

    /// `{leaf}.weight` as a linear layer `[out_features, in_features]`.
    fn linear(&mut self, leaf: &str, out_features: usize, in_features: usize) -> Result<Linear> {
        let weight = Weight::F32(self.get(&format!("{leaf}.weight"), &[out_features, in_features])?);
        Ok(Linear { weight, out_features, in_features })
    }

    /// `{leaf}.weight` as an RMSNorm over `dim`.
    fn norm(&mut self, leaf: &str, dim: usize, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: self.get(&format!("{leaf}.weight"), &[dim])?, eps })
    }
}

impl Attention {
    fn load(t: &mut Take<'_>, c: &ModelConfig) -> Result<Self> {
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let (q_norm, k_norm) = if c.arch.has_qk_norm() {
            (Some(t.norm("q_norm", c.head_dim, eps)?), Some(t.norm("k_norm", c.head_dim, eps)?))
        } else {
            (None, None)
        };
        Ok(Attention {
            q_proj: t.linear("q_proj", c.q_dim(), h)?,
            k_proj: t.linear("k_proj", c.kv_dim(), h)?,
            v_proj: t.linear("v_proj", c.kv_dim(), h)?,
            o_proj: t.linear("o_proj", h, c.q_dim())?,
            q_norm,
            k_norm,
        })
    }
}

impl Mlp {
    fn load(t: &mut Take<'_>, c: &ModelConfig) -> Result<Self> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        Ok(Mlp {
            gate_proj: t.linear("gate_proj", i, h)?,
            up_proj: t.linear("up_proj", i, h)?,
            down_proj: t.linear("down_proj", h, i)?,
        })
    }
}

impl DecoderLayer {
    fn load(t: &mut Take<'_>, c: &ModelConfig) -> Result<Self> {
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        Ok(DecoderLayer {
            self_attn: Attention::load(&mut t.pp("self_attn"), c)?,
            mlp: Mlp::load(&mut t.pp("mlp"), c)?,
            input_layernorm: t.norm("input_layernorm", h, eps)?,
            post_attention_layernorm: t.norm("post_attention_layernorm", h, eps)?,
        })
    }

    /// The layer's linear layer named by the tail of a checkpoint name
    /// (`self_attn.q_proj.weight`).
    fn linear_mut(&mut self, tail: &str) -> Option<&mut Linear> {
        match tail {
            "self_attn.q_proj.weight" => Some(&mut self.self_attn.q_proj),
            "self_attn.k_proj.weight" => Some(&mut self.self_attn.k_proj),
            "self_attn.v_proj.weight" => Some(&mut self.self_attn.v_proj),
            "self_attn.o_proj.weight" => Some(&mut self.self_attn.o_proj),
            "mlp.gate_proj.weight" => Some(&mut self.mlp.gate_proj),
            "mlp.up_proj.weight" => Some(&mut self.mlp.up_proj),
            "mlp.down_proj.weight" => Some(&mut self.mlp.down_proj),
            _ => None,
        }
    }
}

impl Model {
    /// Builds the model from tensors named as in the Hugging Face checkpoint.
    /// Every tensor's shape is checked against the config.
    pub fn from_tensors(config: ModelConfig, mut tensors: TensorMap) -> Result<Self> {
        config.validate()?;
        let c = &config;
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let mut root = Take::new(&mut tensors);
        let lm_head = if root.contains("lm_head.weight") {
            LmHead::Linear(root.linear("lm_head", c.vocab_size, h)?)
        } else if c.tie_word_embeddings {
            LmHead::Tied
        } else {
            return Err(EngineError::MissingTensor("lm_head.weight (and tie_word_embeddings is false)".into()));
        };
        let mut t = root.pp("model");
        let embed_tokens = t.get("embed_tokens.weight", &[c.vocab_size, h])?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| DecoderLayer::load(&mut t.pp(&format!("layers.{i}")), c))
            .collect::<Result<Vec<_>>>()?;
        let norm = t.norm("norm", h, eps)?;
        let rope = RopeTable::new(c.head_dim, c.rope_theta, c.max_position_embeddings);
        let kernels = Kernels::default();
        Ok(Model {
            config,
            embed: Embedding::F32(embed_tokens),
            layers,
            norm,
            lm_head,
            rope,
            kernels,
            #[cfg(feature = "cuda")]
            gpu: None,
        })
    }

    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    /// The kernel backend every forward pass runs on: the best this CPU supports
    /// at load (`Kernels::default`; the model never reads the environment),
    /// replaced with [`Model::set_kernels`] (`Engine::new` sets its options').
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Also keeps each quantized weight in the one layout `kernels` read (the
    /// 16-row interleaved copy on the AVX-512 q8 path, rows of GGUF blocks
    /// otherwise), converting it here rather than inside a forward pass.
    pub fn set_kernels(&mut self, kernels: Kernels) {
        self.kernels = kernels;
        let packed = kernels.reads_packed_weights();
        for q in self.quant_matrices_mut() {
            q.keep_layout(packed);
        }
    }

    /// Moves the forward pass to `gpu`: uploads every weight once (refused,
    /// with the bytes needed and free, when they do not fit). The host weights
    /// stay (embedding lookups for tools, `linear_work`).
    #[cfg(feature = "cuda")]
    pub fn use_gpu(&mut self, gpu: crate::kernels::cuda::Gpu) -> Result<()> {
        self.gpu = Some(Box::new(super::gpu::GpuModel::upload(self, gpu)?));
        Ok(())
    }

    /// Where the forward pass runs, for the startup line: `{"kind": "cpu"}`,
    /// or the GPU's identity (`kernels::cuda::GpuInfo`) with `"kind": "cuda"`.
    pub fn device_info(&self) -> serde_json::Value {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            let mut v = serde_json::to_value(g.gpu().info()).unwrap_or_default();
            v["kind"] = "cuda".into();
            return v;
        }
        serde_json::json!({"kind": "cpu"})
    }

    /// Gives `cache` its device page store when the model runs on a GPU (at
    /// load, so an out-of-memory is found before serving); nothing on the CPU.
    pub fn attach_cache(&self, cache: &mut KvCache) -> Result<()> {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            g.attach_kv(cache)?;
        }
        let _ = cache;
        Ok(())
    }

    /// Every block-quantized weight of the model.
    fn quant_matrices_mut(&mut self) -> impl Iterator<Item = &mut QuantMatrix> {
        let head = match &mut self.lm_head {
            LmHead::Linear(l) => Some(l),
            LmHead::Tied => None,
        };
        self.layers
            .iter_mut()
            .flat_map(|l| {
                let (a, m) = (&mut l.self_attn, &mut l.mlp);
                [
                    &mut a.q_proj,
                    &mut a.k_proj,
                    &mut a.v_proj,
                    &mut a.o_proj,
                    &mut m.gate_proj,
                    &mut m.up_proj,
                    &mut m.down_proj,
                ]
            })
            .chain(head)
            .filter_map(|l| match &mut l.weight {
                Weight::Quant(q) => Some(q),
                Weight::F32(_) | Weight::Half(_) => None,
            })
    }

    /// Every linear layer with its checkpoint name (the LM head last, when it
    /// is a layer of its own).
    fn named_linears(&self) -> impl Iterator<Item = (String, &Linear)> {
        const NAMES: [&str; 7] = [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ];
        let head = match &self.lm_head {
            LmHead::Linear(l) => Some(("lm_head.weight".to_string(), l)),
            LmHead::Tied => None,
        };
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                let (a, m) = (&l.self_attn, &l.mlp);
                [&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &m.gate_proj, &m.up_proj, &m.down_proj]
                    .into_iter()
                    .zip(NAMES)
                    .map(move |(lin, n)| (format!("model.layers.{i}.{n}.weight"), lin))
            })
            .chain(head)
    }

    /// Fails, naming the first, if a weight has no values: a tensor loaded
    /// deferred (`Tensor::deferred`) that no quantized matrix replaced.
    pub fn check_weights(&self) -> Result<()> {
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if let Embedding::F32(e) = &self.embed
            && e.len() != vocab * h
        {
            return Err(EngineError::MissingTensor("model.embed_tokens.weight (values)".into()));
        }
        for (name, l) in self.named_linears() {
            if let Weight::F32(w) = &l.weight
                && w.len() != l.out_features * l.in_features
            {
                return Err(EngineError::MissingTensor(format!("{name} (values)")));
            }
        }
        Ok(())
    }

    /// How many linear layers (the LM head included when it is a layer of its
    /// own) hold each weight type: `f32`, `f16`, `bf16`, `q4_0`, `q4_1`, `q8_0`.
    pub fn weight_dtypes(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for (_, l) in self.named_linears() {
            let dtype = match &l.weight {
                Weight::F32(_) => "f32",
                Weight::Half(h) => h.dtype(),
                Weight::Quant(q) => q.kind.name(),
            };
            *counts.entry(dtype).or_insert(0) += 1;
        }
        counts
    }

    /// The layouts each block-quantized weight holds now, as
    /// `QuantMatrix::layouts` gives them (`(rows of blocks, packed)`), and whether
    /// embedding lookups read the quantized tied head instead of f32 rows.
    pub fn weight_layouts(&self) -> (Vec<(bool, bool)>, bool) {
        let layouts = self
            .named_linears()
            .filter_map(|(_, l)| match &l.weight {
                Weight::Quant(q) => Some(q.layouts()),
                Weight::F32(_) | Weight::Half(_) => None,
            })
            .collect();
        (layouts, matches!(self.embed, Embedding::TiedHead))
    }

    fn lm_head_forward(&self, x: &[f32]) -> Vec<f32> {
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        match (&self.lm_head, &self.embed) {
            (LmHead::Linear(l), _) => l.forward(x, &self.kernels),
            (LmHead::Tied, Embedding::F32(e)) => self.kernels.matmul(x, e, x.len() / h, h, vocab),
            (LmHead::Tied, Embedding::TiedHead) => unreachable!("a stored tied embedding is the LM head"),
        }
    }

    /// Token `t`'s embedding row, exactly as a forward pass looks it up.
    #[cfg(feature = "cuda")]
    pub(super) fn embedding_row(&self, t: usize, out: &mut [f32]) {
        let h = self.config.hidden_size;
        match (&self.embed, &self.lm_head) {
            (Embedding::F32(e), _) => out.copy_from_slice(&e[t * h..(t + 1) * h]),
            (Embedding::TiedHead, LmHead::Linear(l)) => l.weight.row_f32(t, out),
            (Embedding::TiedHead, LmHead::Tied) => unreachable!("a stored tied embedding is the LM head"),
        }
    }

    /// The RoPE table's cosines and sines, `[position][head_dim / 2]` each.
    #[cfg(feature = "cuda")]
    pub(super) fn rope_tables(&self) -> (&[f32], &[f32]) {
        self.rope.tables()
    }

    /// Appends token `t`'s embedding row to `x`.
    fn push_embedding(&self, t: u32, x: &mut Vec<f32>) {
        let h = self.config.hidden_size;
        let t = t as usize;
        match (&self.embed, &self.lm_head) {
            (Embedding::F32(e), _) => x.extend_from_slice(&e[t * h..(t + 1) * h]),
            (Embedding::TiedHead, LmHead::Linear(l)) => {
                let at = x.len();
                x.resize(at + h, 0.0);
                l.weight.row_f32(t, &mut x[at..]);
            }
            (Embedding::TiedHead, LmHead::Tied) => unreachable!("a stored tied embedding is the LM head"),
        }
    }

    /// Uses block-quantized weights (from a GGUF file) in place of their f32
    /// copies; on the exact quantized matmul results are bit-for-bit unchanged
    /// (memory traffic is not), on the default `q8` one they are llama.cpp's.
    /// See [`Model::use_stored`]. Returns how many layers now read them.
    pub fn use_quantized(&mut self, weights: Vec<(String, QuantMatrix)>) -> usize {
        self.use_stored(weights.into_iter().map(|(n, q)| (n, Weight::Quant(q))).collect())
    }

    /// Uses weights kept as the checkpoint stores them (16-bit floats or
    /// quantized blocks) in place of their f32 copies, by checkpoint name. A
    /// tied LM head gets the stored embedding matrix, and lookups read its rows
    /// (decoded: the same f32 values) instead of an f32 copy. A weight whose
    /// shape does not fit is left out. Each quantized weight is then kept in
    /// the layout the model's kernels read. Returns how many layers use them.
    pub fn use_stored(&mut self, weights: Vec<(String, Weight)>) -> usize {
        let mut n = 0;
        for (name, w) in weights {
            let used = match name.as_str() {
                "lm_head.weight" => match &mut self.lm_head {
                    LmHead::Linear(l) => l.set_stored(w),
                    LmHead::Tied => false,
                },
                "model.embed_tokens.weight" => self.tie_stored_embedding(w),
                _ => self.linear_mut(&name).is_some_and(|l| l.set_stored(w)),
            };
            n += usize::from(used);
        }
        self.set_kernels(self.kernels);
        n
    }

    /// A tied head reads the stored embedding matrix when its shape fits. When
    /// the head is a layer of its own after all (a checkpoint that says its
    /// embeddings are tied yet ships `lm_head.weight`) and the lookups have no
    /// values yet, they get the matrix decoded to f32, as a loader without
    /// stored weights would have made it.
    fn tie_stored_embedding(&mut self, w: Weight) -> bool {
        let (out_features, in_features) = (self.config.vocab_size, self.config.hidden_size);
        let fits = w.stored_dims() == Some((out_features, in_features));
        if matches!(self.lm_head, LmHead::Tied) && self.config.tie_word_embeddings && fits {
            self.lm_head = LmHead::Linear(Linear { weight: w, out_features, in_features });
            self.embed = Embedding::TiedHead;
            return true;
        }
        if let Embedding::F32(e) = &mut self.embed
            && e.is_empty()
            && fits
        {
            let mut rows = vec![0.0f32; out_features * in_features];
            for (r, row) in rows.chunks_exact_mut(in_features).enumerate() {
                w.row_f32(r, row);
            }
            *e = rows;
        }
        false
    }

    fn linear_mut(&mut self, name: &str) -> Option<&mut Linear> {
        let rest = name.strip_prefix("model.layers.")?;
        let (idx, tail) = rest.split_once('.')?;
        self.layers.get_mut(idx.parse::<usize>().ok()?)?.linear_mut(tail)
    }

    /// Checks every sequence and places its new tokens in the batch, before
    /// anything touches the cache.
    fn place(&self, seqs: &[SeqInput<'_>]) -> Result<Vec<Place>> {
        let vocab = self.config.vocab_size;
        let mut places = Vec::with_capacity(seqs.len());
        let mut row = 0usize;
        for (i, s) in seqs.iter().enumerate() {
            let (start, len) = (s.table.len(), s.tokens.len());
            if len == 0 {
                return Err(EngineError::InvalidRequest(format!("sequence {i} has no new tokens")));
            }
            if start + len > self.max_positions() {
                return Err(EngineError::InvalidRequest(format!(
                    "sequence {i} would reach position {} but the model supports {}",
                    start + len,
                    self.max_positions()
                )));
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(EngineError::InvalidRequest(format!(
                    "token id {bad} is outside the vocabulary (size {vocab})"
                )));
            }
            if s.table.capacity() < start + len {
                return Err(EngineError::Kv(format!(
                    "sequence {i}: block table holds {} slots, needs {}",
                    s.table.capacity(),
                    start + len
                )));
            }
            places.push(Place { row, start, len });
            row += len;
        }
        Ok(places)
    }

    /// Runs the new tokens of every sequence through the model, storing their
    /// keys and values, and returns per sequence the logits it asked for
    /// (`[positions][vocab]`).
    pub fn forward(
        &self,
        cache: &mut KvCache,
        seqs: &mut [SeqInput<'_>],
        observe: Option<ValueObserver<'_>>,
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let c = &self.config;
        let h = c.hidden_size;
        let places = self.place(seqs)?;
        for (s, p) in seqs.iter_mut().zip(&places) {
            cache.commit(s.table, p.start + p.len);
        }
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            return self.forward_gpu(g, cache, seqs, &places, observe);
        }
        let total: usize = places.iter().map(|p| p.len).sum();
        let mut x = Vec::with_capacity(total * h);
        for &t in seqs.iter().flat_map(|s| s.tokens) {
            self.push_embedding(t, &mut x);
        }
        let positions = places.iter().flat_map(|p| p.start..p.start + p.len).collect();
        let shape = AttnShape { heads: c.num_attention_heads, kv_heads: c.num_key_value_heads, head_dim: c.head_dim };
        let mut batch = Batch {
            seqs: &*seqs,
            places,
            positions,
            shape,
            rope: &self.rope,
            kernels: &self.kernels,
            observe,
            layer: 0,
        };
        for (li, layer) in self.layers.iter().enumerate() {
            batch.layer = li;
            layer.forward(&mut x, &mut batch, cache, self.layers.get(li + 1));
        }
        Ok(self.logits(&x, seqs, &batch.places))
    }

    /// [`Model::forward`] on the GPU: the same rows, logits split per sequence
    /// the same way.
    #[cfg(feature = "cuda")]
    fn forward_gpu(
        &self,
        g: &super::gpu::GpuModel,
        cache: &mut KvCache,
        seqs: &[SeqInput<'_>],
        places: &[Place],
        observe: Option<ValueObserver<'_>>,
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let wanted: Vec<std::ops::Range<usize>> = seqs.iter().zip(places).map(|(s, p)| Self::wanted(s, p)).collect();
        let batch = super::gpu::GpuBatch {
            tokens: seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect(),
            seqs: seqs
                .iter()
                .zip(places)
                .map(|(s, p)| crate::kernels::cuda::plan::SeqRows {
                    blocks: s.table.blocks(),
                    start_pos: p.start,
                    rows: p.len,
                })
                .collect(),
            logit_rows: wanted.iter().flat_map(|r| r.clone()).collect(),
        };
        let logits = g.forward(cache, &batch, observe)?;
        let mut rows = logits.chunks_exact(self.config.vocab_size).map(|r| r.to_vec());
        Ok(wanted.iter().map(|w| rows.by_ref().take(w.len()).collect()).collect())
    }

    /// The batch rows of `s` (at `p`) whose logits it asked for.
    fn wanted(s: &SeqInput<'_>, p: &Place) -> std::ops::Range<usize> {
        match s.logits {
            LogitsWanted::None => 0..0,
            LogitsWanted::Last => p.row + p.len - 1..p.row + p.len,
            LogitsWanted::All => p.row..p.row + p.len,
        }
    }

    /// Final norm and LM head, only for the rows someone asked for.
    fn logits(&self, x: &[f32], seqs: &[SeqInput<'_>], places: &[Place]) -> Vec<Vec<Vec<f32>>> {
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        let wanted = Self::wanted;
        let mut picked = Vec::new();
        for (s, p) in seqs.iter().zip(places) {
            for r in wanted(s, p) {
                picked.extend_from_slice(&x[r * h..(r + 1) * h]);
            }
        }
        let logits = self.lm_head_forward(&self.norm.forward(&picked, &self.kernels));
        let mut rows = logits.chunks_exact(vocab).map(|r| r.to_vec());
        seqs.iter().zip(places).map(|(s, p)| rows.by_ref().take(wanted(s, p).len()).collect()).collect()
    }
}

/// What one token's pass through the linear layers costs, as the model's
/// weights are stored now: the weight bytes the kernels read (quantized: the
/// GGUF block bytes, `rows * cols / 32 * block_bytes`, which the AVX-512 packed
/// layout holds too, its rows padded to a multiple of 16; 16-bit: 2 bytes a
/// value; f32: 4) and the multiply-accumulates (`rows * cols`), over every
/// linear layer and the LM head (the f32 embedding matrix when the head is
/// tied and not stored). Embedding lookups, norms and attention are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearWork {
    /// Every linear layer and the LM head.
    pub weight_bytes: u64,
    pub macs: u64,
    /// The LM head alone (a prefill computes it for its last token only).
    pub lm_head_weight_bytes: u64,
    pub lm_head_macs: u64,
}

impl Model {
    /// See [`LinearWork`].
    pub fn linear_work(&self) -> LinearWork {
        let cost = |l: &Linear| {
            let macs = (l.out_features * l.in_features) as u64;
            let bytes = match &l.weight {
                Weight::F32(_) => macs * 4,
                Weight::Half(_) => macs * 2,
                Weight::Quant(q) => macs / QK as u64 * q.kind.block_bytes() as u64,
            };
            (bytes, macs)
        };
        // named_linears holds the head when it is a layer of its own.
        let (mut weight_bytes, mut macs) =
            self.named_linears().map(|(_, l)| cost(l)).fold((0, 0), |(b, m), (lb, lm)| (b + lb, m + lm));
        let (lm_head_weight_bytes, lm_head_macs) = match &self.lm_head {
            LmHead::Linear(l) => cost(l),
            LmHead::Tied => {
                let head_macs = (self.config.vocab_size * self.config.hidden_size) as u64;
                weight_bytes += head_macs * 4;
                macs += head_macs;
                (head_macs * 4, head_macs)
            }
        };
        LinearWork { weight_bytes, macs, lm_head_weight_bytes, lm_head_macs }
    }
}
