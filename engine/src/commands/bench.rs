//! `engine bench`: prefill tokens/s at a fixed prompt length and decode tokens/s
//! at batch 1, for each KV format, thread count and quantized-matmul mode (modes
//! alternate in order within each repeat, so a busy machine hurts them alike),
//! plus the linear-layer kernels against the `gemm` crate (the named baseline)
//! at prefill and decode shapes, and what one token's linear layers read and
//! multiply (`Model::linear_work`, the denominators of scripts/bench-roofline).
//! Returns one JSON document (and writes it atomically where asked). A
//! benchmark, never a test: nothing here asserts speed. Every kernel call goes
//! through the `Kernels` seam, as the model's do. With `--device cuda` the
//! model runs on the GPU (each forward call returns once its logits are back
//! on the host, so the clock covers the GPU's work), the thread counts only
//! repeat the figures, and the CPU-only `gemm` comparison is skipped.

use super::{CommandError, Result, load_average, write_atomic};
use crate::error::EngineError;
use crate::kernels::{
    CpuFeatures, CpuPath, Device, KernelError, Kernels, QuantKind, QuantMatmul, QuantMatrix, Workers, argmax,
};
use crate::kv::{KvCache, KvFormat};
use crate::model::{LogitsWanted, SeqInput};
use crate::runtime::{Engine, EngineOptions};
use std::path::PathBuf;
use std::time::Instant;

pub struct BenchOptions {
    /// A .gguf file or a Hugging Face model directory.
    pub model: PathBuf,
    /// Text whose tokens form the prompt (else token IDs 100, 101, ...).
    pub text: Option<PathBuf>,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    /// Thread counts to measure.
    pub threads: Vec<usize>,
    /// KV formats to measure (k16v8 scales are calibrated on the prompt).
    pub kv_formats: Vec<KvFormat>,
    /// Timed repetitions per figure; the median is reported.
    pub repeats: usize,
    /// The kernels to run on, resolved by the caller (flags over the environment).
    pub kernels: Kernels,
    /// Where the model runs (opened by the caller).
    pub device: Device,
    /// Quantized-matmul modes to measure, alternated within each repeat
    /// (empty: the one `kernels` names).
    pub modes: Vec<QuantMatmul>,
    /// Also compare the linear kernels with the `gemm` crate.
    pub kernel_comparison: bool,
    /// Also write the JSON document here (atomically).
    pub out: Option<PathBuf>,
}

fn config(e: KernelError) -> CommandError {
    CommandError::Input(EngineError::Config(e.to_string()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Measures; `progress` sees each row (one KV format, thread count and mode) as it is done.
pub fn bench(a: &BenchOptions, mut progress: impl FnMut(&serde_json::Value)) -> Result<serde_json::Value> {
    let loaded = crate::model::load(&a.model)?;
    let cfg = loaded.model.config.clone();
    let prompt: Vec<u32> = match &a.text {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| EngineError::io(p, e))?;
            let ids = loaded.tokenizer.encode(&text, false)?;
            if ids.len() < a.prefill_tokens {
                let why = format!("{} has only {} tokens, fewer than --prefill-tokens", p.display(), ids.len());
                return Err(EngineError::InvalidRequest(why).into());
            }
            ids[..a.prefill_tokens].to_vec()
        }
        None => (0..a.prefill_tokens as u32).map(|i| 100 + i % (cfg.vocab_size as u32 - 100)).collect(),
    };
    let load_before = load_average();
    let kernels = a.kernels;
    let opts = EngineOptions { kernels, device: a.device.clone(), ..EngineOptions::default() };
    let mut engine = Engine::new(loaded.model, loaded.tokenizer, &opts)?;
    let modes = if a.modes.is_empty() { vec![kernels.quant_matmul()] } else { a.modes.clone() };
    let scales = engine.calibrate(&prompt)?;
    let mut model = engine.model;
    let device = model.device_info();
    let mut rows = Vec::new();
    for &threads in &a.threads {
        let pool = Workers::new(threads).map_err(config)?;
        for &format in &a.kv_formats {
            let mut cache = KvCache::with_budget(
                format,
                cfg.num_hidden_layers,
                cfg.num_key_value_heads,
                cfg.head_dim,
                (a.prefill_tokens + a.decode_tokens + 64)
                    * KvCache::bytes_per_token(format, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim),
                Some(&scales),
            )?;
            let mut prefill = vec![Vec::new(); modes.len()];
            let mut decode = vec![Vec::new(); modes.len()];
            for (rep, mi) in (0..a.repeats.max(1)).flat_map(|rep| (0..modes.len()).map(move |i| (rep, i))) {
                // Alternate the order of the modes from one repeat to the next.
                let mi = if rep % 2 == 0 { mi } else { modes.len() - 1 - mi };
                model.set_kernels(kernels.with_quant_matmul(modes[mi]));
                let model = &model;
                let mut table = cache.new_table();
                if !table.reserve(a.prefill_tokens + a.decode_tokens) {
                    return Err(CommandError::Check("the bench's KV budget is too small for its own prompt".into()));
                }
                let t0 = Instant::now();
                let logits = pool.install(|| {
                    model.forward(
                        &mut cache,
                        &mut [SeqInput { tokens: &prompt, table: &mut table, logits: LogitsWanted::Last }],
                        None,
                    )
                })?;
                prefill[mi].push(a.prefill_tokens as f64 / t0.elapsed().as_secs_f64());
                let mut tok = argmax(&logits[0][0]);
                let t1 = Instant::now();
                for _ in 0..a.decode_tokens {
                    let l = pool.install(|| {
                        model.forward(
                            &mut cache,
                            &mut [SeqInput { tokens: &[tok], table: &mut table, logits: LogitsWanted::Last }],
                            None,
                        )
                    })?;
                    tok = argmax(&l[0][0]);
                }
                decode[mi].push(a.decode_tokens as f64 / t1.elapsed().as_secs_f64());
            }
            for (mi, mode) in modes.iter().enumerate() {
                let row = serde_json::json!({
                    "kv_format": format,
                    "device": device["kind"],
                    "threads": threads,
                    "cpu_path": kernels.path(),
                    "quant_matmul": mode,
                    "prefill_tokens": a.prefill_tokens,
                    "prefill_tokens_per_s": median(prefill[mi].clone()),
                    "prefill_tokens_per_s_each": prefill[mi],
                    "decode_batch": 1,
                    "decode_context_start": a.prefill_tokens,
                    "decode_tokens": a.decode_tokens,
                    "decode_tokens_per_s": median(decode[mi].clone()),
                    "decode_tokens_per_s_each": decode[mi],
                });
                progress(&row);
                rows.push(row);
            }
        }
    }
    let comparison = if a.kernel_comparison && a.device.is_cpu() {
        kernel_comparison(kernels.path(), &a.threads, cfg.hidden_size, cfg.intermediate_size, a.prefill_tokens)?
    } else {
        Vec::new()
    };
    let work = model.linear_work();
    let out = serde_json::json!({
        "model": a.model.display().to_string(),
        "config": cfg,
        "weight_dtypes": model.weight_dtypes(),
        "weight_bytes_per_token": work.weight_bytes,
        "linear_macs_per_token": work.macs,
        "lm_head_weight_bytes": work.lm_head_weight_bytes,
        "lm_head_macs": work.lm_head_macs,
        "linear_work": "per token, over every linear layer and the LM head (the tied embedding matrix included): \
                        the weight bytes the kernels read (quantized: rows*cols/32*block bytes; 16-bit: 2 a value; \
                        f32: 4) and rows*cols multiply-accumulates; embedding lookups, norms and attention are not \
                        counted; a prefill computes the LM head for its last token only",
        "device": device,
        "cpu_features": CpuFeatures::get(),
        "cpu_path": kernels.path(),
        "repeats": a.repeats,
        "statistic": "median of repeats",
        "mode_order": "modes alternate: listed order on even repeats, reversed on odd",
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "runs": rows,
        "linear_kernel_vs_gemm_crate": comparison,
    });
    if let Some(p) = &a.out {
        let text = serde_json::to_string_pretty(&out).expect("a JSON value serialises");
        write_atomic(p, text.as_bytes())?;
    }
    Ok(out)
}

/// Our batch-invariant linear kernels (f32, and Q4_1 exact and through 8-bit
/// activations) against `gemm::gemm` on the same shapes, and whether each
/// one's row 0 is the same at M = 1 and at M = prefill.
fn kernel_comparison(
    path: CpuPath,
    threads: &[usize],
    k: usize,
    n: usize,
    m_big: usize,
) -> Result<Vec<serde_json::Value>> {
    let exact = Kernels::new(path, QuantMatmul::Exact).map_err(config)?;
    let q8 = exact.with_quant_matmul(QuantMatmul::Q8);
    let matmul = |x: &[f32], w: &[f32], m, k, n| exact.matmul(x, w, m, k, n);
    let x: Vec<f32> = (0..m_big * k).map(|i| ((i * 7919 % 1000) as f32 / 1000.0) - 0.5).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 104729 % 1000) as f32 / 1000.0) - 0.5).collect();
    // A Q4_1 matrix of the same shape (d = 0.01, m = -0.05, nibbles pseudo-random).
    let qbytes: Vec<u8> = (0..n * k / 32)
        .flat_map(|b| {
            let mut blk = Vec::with_capacity(20);
            blk.extend(half::f16::from_f32(0.01).to_le_bytes());
            blk.extend(half::f16::from_f32(-0.05).to_le_bytes());
            blk.extend((0..16).map(move |j| ((b * 31 + j * 7) % 256) as u8));
            blk
        })
        .collect();
    let wq = QuantMatrix::new(QuantKind::Q4_1, n, k, qbytes).ok_or_else(|| {
        CommandError::Check(format!(
            "the bench's synthetic {n} x {k} Q4_1 matrix cannot be built: the model's hidden size is not a multiple of 32"
        ))
    })?;
    let mut out = Vec::new();
    for &t in threads {
        let pool = Workers::new(t).map_err(config)?;
        for m in [1usize, m_big] {
            let reps = if m == 1 { 200 } else { 5 };
            let ours = pool.install(|| {
                let t0 = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(matmul(&x[..m * k], &w, m, k, n));
                }
                t0.elapsed().as_secs_f64() / reps as f64
            });
            let theirs = pool.install(|| {
                let t0 = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(gemm_crate(&x[..m * k], &w, m, k, n, t));
                }
                t0.elapsed().as_secs_f64() / reps as f64
            });
            let q4 = pool.install(|| {
                let t0 = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(exact.matmul_quant(&x[..m * k], &wq, m));
                }
                t0.elapsed().as_secs_f64() / reps as f64
            });
            let q8 = pool.install(|| {
                let t0 = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(q8.matmul_quant(&x[..m * k], &wq, m));
                }
                t0.elapsed().as_secs_f64() / reps as f64
            });
            let flops = 2.0 * (m * n * k) as f64;
            out.push(serde_json::json!({
                "threads": t, "m": m, "n": n, "k": k,
                "ours_gflops": flops / ours / 1e9,
                "gemm_crate_gflops": flops / theirs / 1e9,
                "ours_over_gemm": theirs / ours,
                "ours_q4_1_gflops": flops / q4 / 1e9,
                "ours_q4_1_q8_activations_gflops": flops / q8 / 1e9,
            }));
        }
    }
    let ours_invariant = matmul(&x[..k], &w, 1, k, n) == matmul(&x, &w, m_big, k, n)[..n];
    let gemm_invariant = gemm_crate(&x[..k], &w, 1, k, n, 1) == gemm_crate(&x, &w, m_big, k, n, 1)[..n];
    let q8_invariant = q8.matmul_quant(&x[..k], &wq, 1) == q8.matmul_quant(&x, &wq, m_big)[..n];
    out.push(serde_json::json!({
        "row0_identical_at_m1_and_m_big": {
            "ours": ours_invariant, "ours_q4_1_q8_activations": q8_invariant, "gemm_crate": gemm_invariant, "m_big": m_big
        }
    }));
    Ok(out)
}

fn gemm_crate(x: &[f32], w: &[f32], m: usize, k: usize, n: usize, threads: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; m * n];
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the strides describe x as [m,k] row-major, Wᵀ as [k,n] (W is [n,k]
    // row-major) and y as [m,n] row-major; all buffers have exactly those sizes.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            y.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
    y
}
