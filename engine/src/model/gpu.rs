//! The decoder's forward pass on the CUDA backend (cargo feature `cuda`): the
//! same steps as `qwen3.rs` — embedding, then per layer RMSNorm, q/k/v,
//! Qwen3's per-head q/k norms, RoPE, the KV write, paged attention, o_proj
//! and the residual add, RMSNorm, SwiGLU and the residual add; the final norm
//! and the LM head for the rows that want logits — each through an op of
//! `kernels::cuda`, with activations kept on the device. Only the logits come
//! back to the host.
//!
//! The weights are uploaded once (`GpuModel::upload`), from exactly the f32
//! values the CPU's exact path reads (`Weight::row_f32`). The KV pages live in
//! a device store attached to the host `KvCache` (which keeps the block
//! tables): `attach_kv` makes it at load, so that an out-of-memory is found
//! before the server says it is ready.

use super::qwen3::{LmHead, Model, RmsNorm, Weight};
use crate::kernels::cuda::memory::{DeviceKv, DeviceMatrix, DeviceVec, UploadedTables, Workspace};
use crate::kernels::cuda::plan::{Dims, PageTables, SeqRows, WorkspaceSizes};
use crate::kernels::cuda::{Gpu, GpuError, GpuWeights};
use crate::kv::KvCache;
use std::sync::Mutex;

/// One decoder layer's weights on the device.
struct GpuLayer {
    q: DeviceMatrix,
    k: DeviceMatrix,
    v: DeviceMatrix,
    o: DeviceMatrix,
    gate: DeviceMatrix,
    up: DeviceMatrix,
    down: DeviceMatrix,
    qk_norm: Option<(DeviceVec, DeviceVec)>,
    input_norm: DeviceVec,
    post_norm: DeviceVec,
}

/// A model's weights on one GPU, and the workspace its forward calls share.
pub struct GpuModel {
    gpu: Gpu,
    layers: Vec<GpuLayer>,
    embed: DeviceVec,
    norm: DeviceVec,
    lm_head: DeviceMatrix,
    rope_cos: DeviceVec,
    rope_sin: DeviceVec,
    dims: Dims,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f32,
    workspace: Mutex<Option<Workspace>>,
}

/// The rows one forward call runs: every new token, where each sequence's
/// rows sit, and which rows (in batch order) want logits.
pub struct GpuBatch<'a> {
    pub tokens: Vec<u32>,
    pub seqs: Vec<SeqRows<'a>>,
    pub logit_rows: Vec<usize>,
}

impl GpuModel {
    /// Device bytes of the weights `model` would upload in `weights`.
    fn weight_bytes(model: &Model, weights: GpuWeights) -> usize {
        let c = &model.config;
        let m = |r: usize, k: usize| DeviceMatrix::bytes(r, k, weights);
        let per_layer = m(c.q_dim(), c.hidden_size)
            + 2 * m(c.kv_dim(), c.hidden_size)
            + m(c.hidden_size, c.q_dim())
            + 2 * m(c.intermediate_size, c.hidden_size)
            + m(c.hidden_size, c.intermediate_size)
            + 4 * (2 * c.hidden_size + 2 * c.head_dim);
        let rope = 4 * model.rope_tables().0.len() * 2;
        c.num_hidden_layers * per_layer
            + 4 * c.vocab_size * c.hidden_size
            + m(c.vocab_size, c.hidden_size)
            + 4 * c.hidden_size
            + rope
    }

    /// Uploads `model`'s weights (refusing with the bytes needed and free when
    /// they do not fit).
    pub fn upload(model: &Model, gpu: Gpu) -> Result<Self, GpuError> {
        let c = &model.config;
        crate::kernels::cuda::plan::attention_kernel(
            crate::kv::KvFormat::F16,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        )?;
        gpu.bind()?;
        gpu.check_free("the model's weights", Self::weight_bytes(model, gpu.weights()))?;
        let matrix = |what: String, w: &Weight, rows: usize, cols: usize| {
            DeviceMatrix::upload(&gpu, &what, rows, cols, |r, out| w.row_f32(r, out))
        };
        let vec = |what: &str, n: &RmsNorm| DeviceVec::upload(&gpu, what, &n.weight);
        let mut layers = Vec::with_capacity(model.layers.len());
        for (i, l) in model.layers.iter().enumerate() {
            let (a, f) = (&l.self_attn, &l.mlp);
            let lin = |name: &str, x: &super::qwen3::Linear| {
                matrix(format!("layer {i} {name}"), &x.weight, x.out_features, x.in_features)
            };
            let qk_norm = match (&a.q_norm, &a.k_norm) {
                (Some(qn), Some(kn)) => Some((vec("q_norm", qn)?, vec("k_norm", kn)?)),
                _ => None,
            };
            layers.push(GpuLayer {
                q: lin("q_proj", &a.q_proj)?,
                k: lin("k_proj", &a.k_proj)?,
                v: lin("v_proj", &a.v_proj)?,
                o: lin("o_proj", &a.o_proj)?,
                gate: lin("gate_proj", &f.gate_proj)?,
                up: lin("up_proj", &f.up_proj)?,
                down: lin("down_proj", &f.down_proj)?,
                qk_norm,
                input_norm: vec("input_layernorm", &l.input_layernorm)?,
                post_norm: vec("post_attention_layernorm", &l.post_attention_layernorm)?,
            });
        }
        let (h, vocab) = (c.hidden_size, c.vocab_size);
        let mut table = vec![0.0f32; vocab * h];
        for (t, row) in table.chunks_exact_mut(h).enumerate() {
            model.embedding_row(t, row);
        }
        let embed = DeviceVec::upload(&gpu, "the embedding matrix", &table)?;
        let lm_head = match &model.lm_head {
            LmHead::Linear(l) => matrix("the LM head".into(), &l.weight, l.out_features, l.in_features)?,
            LmHead::Tied => DeviceMatrix::upload(&gpu, "the LM head", vocab, h, |r, out| {
                out.copy_from_slice(&table[r * h..(r + 1) * h])
            })?,
        };
        drop(table);
        let (cos, sin) = model.rope_tables();
        Ok(GpuModel {
            layers,
            embed,
            norm: vec("norm", &model.norm)?,
            lm_head,
            rope_cos: DeviceVec::upload(&gpu, "RoPE cosines", cos)?,
            rope_sin: DeviceVec::upload(&gpu, "RoPE sines", sin)?,
            dims: Dims { hidden: h, q_dim: c.q_dim(), kv_dim: c.kv_dim(), intermediate: c.intermediate_size, vocab },
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            eps: c.rms_norm_eps,
            workspace: Mutex::new(None),
            gpu,
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Makes `cache`'s device page store (every page, in its format, with its
    /// value scales) unless it has one of this geometry already.
    pub fn attach_kv(&self, cache: &mut KvCache) -> Result<(), GpuError> {
        let inv = cache.inventory();
        if let Some(kv) = cache.device_store::<DeviceKv>()
            && kv.format() == inv.format
        {
            return Ok(());
        }
        self.gpu.bind()?;
        let kv = DeviceKv::new(
            &self.gpu,
            inv.format,
            inv.layers,
            inv.kv_heads,
            inv.head_dim,
            inv.blocks,
            cache.value_scales(),
        )?;
        cache.attach_device_store(Box::new(kv));
        Ok(())
    }

    /// Runs `batch` through the model; returns the logits of its
    /// `logit_rows`, `[logit_rows.len() * vocab]`. `observe` receives each
    /// layer's value rows (copied back) before they are stored.
    pub fn forward(
        &self,
        cache: &mut KvCache,
        batch: &GpuBatch<'_>,
        mut observe: Option<super::qwen3::ValueObserver<'_>>,
    ) -> Result<Vec<f32>, GpuError> {
        self.attach_kv(cache)?;
        let kv = cache.device_store::<DeviceKv>().expect("attached above");
        let g = &self.gpu;
        g.bind()?;
        let rows = batch.tokens.len();
        let d = self.dims;
        let tables = UploadedTables::upload(g, &PageTables::build(&batch.seqs)?)?;
        let ids = g.upload("token ids", &batch.tokens)?;
        let half = g.weights() == GpuWeights::F16;
        let need = WorkspaceSizes::new(d, rows, batch.logit_rows.len(), half);
        let mut guard = self.workspace.lock().unwrap_or_else(|p| p.into_inner());
        if !guard.as_ref().is_some_and(|w| w.sizes.holds(&need)) {
            let had = guard.take().map(|w| w.sizes);
            let (r, l) = had.map_or((0, 0), |s| (s.rows, s.logit_rows));
            *guard = Some(Workspace::new(g, WorkspaceSizes::new(d, rows.max(r), batch.logit_rows.len().max(l), half))?);
        }
        let ws = guard.as_ref().expect("made above");
        let p = |s: &cudarc::driver::CudaSlice<f32>| g.ptr(s);
        let (x, xn, out, q, attn, k, v, gate, up) =
            (p(&ws.x), p(&ws.xn), p(&ws.out), p(&ws.q), p(&ws.attn), p(&ws.k), p(&ws.v), p(&ws.gate), p(&ws.up));
        let hx = g.ptr(&ws.half_input);
        let pos = g.ptr(&tables.row_pos);
        let half_dim = self.head_dim / 2;
        g.embed_rows(self.embed.ptr(g), g.ptr(&ids), x, rows, d.hidden)?;
        for (li, l) in self.layers.iter().enumerate() {
            g.rms_norm(x, l.input_norm.ptr(g), xn, rows, d.hidden, self.eps)?;
            g.linear(xn, &l.q, q, rows, hx)?;
            g.linear(xn, &l.k, k, rows, hx)?;
            g.linear(xn, &l.v, v, rows, hx)?;
            if let Some((qn, kn)) = &l.qk_norm {
                g.rms_norm(q, qn.ptr(g), q, rows * self.heads, self.head_dim, self.eps)?;
                g.rms_norm(k, kn.ptr(g), k, rows * self.kv_heads, self.head_dim, self.eps)?;
            }
            g.rope(q, self.rope_cos.ptr(g), self.rope_sin.ptr(g), pos, rows, self.heads, half_dim)?;
            g.rope(k, self.rope_cos.ptr(g), self.rope_sin.ptr(g), pos, rows, self.kv_heads, half_dim)?;
            if let Some(obs) = observe.as_mut() {
                obs(li, &g.download(&ws.v, rows * d.kv_dim)?);
            }
            kv.write(g, li, k, v, g.ptr(&tables.slots), rows)?;
            kv.attention(g, li, q, attn, &tables, rows, self.heads)?;
            g.linear(attn, &l.o, out, rows, hx)?;
            g.residual_add(x, out, rows * d.hidden)?;
            g.rms_norm(x, l.post_norm.ptr(g), xn, rows, d.hidden, self.eps)?;
            g.linear(xn, &l.gate, gate, rows, hx)?;
            g.linear(xn, &l.up, up, rows, hx)?;
            g.silu_mul(gate, up, rows * d.intermediate)?;
            g.linear(gate, &l.down, out, rows, hx)?;
            g.residual_add(x, out, rows * d.hidden)?;
        }
        let wanted = batch.logit_rows.len();
        if wanted == 0 {
            g.synchronize()?;
            return Ok(Vec::new());
        }
        let idx: Vec<i32> = batch.logit_rows.iter().map(|&r| r as i32).collect();
        let idx = g.upload("logit rows", &idx)?;
        let (picked, picked_norm, logits) = (p(&ws.picked), p(&ws.picked_norm), p(&ws.logits));
        g.gather_rows(x, g.ptr(&idx), picked, wanted, d.hidden)?;
        g.rms_norm(picked, self.norm.ptr(g), picked_norm, wanted, d.hidden, self.eps)?;
        g.linear(picked_norm, &self.lm_head, logits, wanted, hx)?;
        g.download(&ws.logits, wanted * d.vocab)
    }
}
