//! `engine bench`: prefill tokens/s at a fixed prompt length and decode tokens/s
//! at batch 1, for each KV format and thread count, plus the linear-layer kernel
//! against the `gemm` crate (the named baseline) at prefill and decode shapes.
//! Writes one JSON object. A benchmark, never a test: nothing here asserts speed.

use anyhow::{Context, Result};
use clap::Args;
use engine::kernels::cpu::matmul::matmul;
use engine::kernels::cpu::quant::{QuantKind, QuantMatrix, matmul_quant};
use engine::kv::KvFormat;
use engine::model::{LogitsWanted, SeqInput};
use engine::runtime::{Engine, EngineOptions};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    /// A .gguf file or a Hugging Face model directory.
    #[arg(long)]
    model: PathBuf,
    /// Text whose tokens form the prompt (else token IDs 100, 101, ...).
    #[arg(long)]
    text: Option<PathBuf>,
    #[arg(long, default_value_t = 512)]
    prefill_tokens: usize,
    #[arg(long, default_value_t = 64)]
    decode_tokens: usize,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// KV formats to measure (k16v8 scales are calibrated on the prompt).
    #[arg(long, value_delimiter = ',', default_value = "f16,bf16,k16v8")]
    kv_formats: Vec<KvFormat>,
    /// Timed repetitions per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Where to write the JSON (also printed to stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(a: BenchArgs) -> Result<()> {
    let loaded = engine::model::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let cfg = loaded.model.config.clone();
    let prompt: Vec<u32> = match &a.text {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let ids = loaded.tokenizer.encode(&text, false)?;
            anyhow::ensure!(ids.len() >= a.prefill_tokens, "{} has only {} tokens", p.display(), ids.len());
            ids[..a.prefill_tokens].to_vec()
        }
        None => (0..a.prefill_tokens as u32).map(|i| 100 + i % (cfg.vocab_size as u32 - 100)).collect(),
    };
    let mut engine = Engine::new(loaded.model, loaded.tokenizer, &EngineOptions::default())?;
    let scales = engine.calibrate(&prompt)?;
    let model = engine.model;
    let mut rows = Vec::new();
    for &threads in &a.threads {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
        for &format in &a.kv_formats {
            let mut cache = engine::kv::KvCache::with_budget(
                format,
                cfg.num_hidden_layers,
                cfg.num_key_value_heads,
                cfg.head_dim,
                (a.prefill_tokens + a.decode_tokens + 64)
                    * engine::kv::KvCache::bytes_per_token(
                        format,
                        cfg.num_hidden_layers,
                        cfg.num_key_value_heads,
                        cfg.head_dim,
                    ),
                Some(&scales),
            )?;
            let (mut prefill, mut decode) = (Vec::new(), Vec::new());
            for _ in 0..a.repeats.max(1) {
                let mut table = cache.new_table();
                anyhow::ensure!(table.reserve(a.prefill_tokens + a.decode_tokens), "KV budget too small");
                let t0 = Instant::now();
                let logits = pool.install(|| {
                    model.forward(
                        &mut cache,
                        &mut [SeqInput { tokens: &prompt, table: &mut table, logits: LogitsWanted::Last }],
                        None,
                    )
                })?;
                prefill.push(a.prefill_tokens as f64 / t0.elapsed().as_secs_f64());
                let mut tok = engine::kernels::cpu::ops::argmax(&logits[0][0]);
                let t1 = Instant::now();
                for _ in 0..a.decode_tokens {
                    let l = pool.install(|| {
                        model.forward(
                            &mut cache,
                            &mut [SeqInput { tokens: &[tok], table: &mut table, logits: LogitsWanted::Last }],
                            None,
                        )
                    })?;
                    tok = engine::kernels::cpu::ops::argmax(&l[0][0]);
                }
                decode.push(a.decode_tokens as f64 / t1.elapsed().as_secs_f64());
            }
            let row = serde_json::json!({
                "kv_format": format,
                "threads": threads,
                "prefill_tokens": a.prefill_tokens,
                "prefill_tokens_per_s": median(prefill),
                "decode_batch": 1,
                "decode_context_start": a.prefill_tokens,
                "decode_tokens": a.decode_tokens,
                "decode_tokens_per_s": median(decode),
            });
            eprintln!("bench: {row}");
            rows.push(row);
        }
    }
    let kernels = kernel_comparison(&a.threads, cfg.hidden_size, cfg.intermediate_size, a.prefill_tokens)?;
    let out = serde_json::json!({
        "model": a.model.display().to_string(),
        "config": cfg,
        "repeats": a.repeats,
        "statistic": "median of repeats",
        "runs": rows,
        "linear_kernel_vs_gemm_crate": kernels,
    });
    let text = serde_json::to_string_pretty(&out)?;
    if let Some(p) = &a.out {
        std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?;
    }
    println!("{text}");
    Ok(())
}

/// Our batch-invariant linear kernel against `gemm::gemm` on the same shapes,
/// and whether each one's row 0 is the same at M = 1 and at M = prefill.
fn kernel_comparison(threads: &[usize], k: usize, n: usize, m_big: usize) -> Result<Vec<serde_json::Value>> {
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
    let wq = QuantMatrix::new(QuantKind::Q4_1, n, k, qbytes).context("building the Q4_1 bench matrix")?;
    let mut out = Vec::new();
    for &t in threads {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
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
                    std::hint::black_box(matmul_quant(&x[..m * k], &wq, m));
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
            }));
        }
    }
    let ours_invariant = matmul(&x[..k], &w, 1, k, n) == matmul(&x, &w, m_big, k, n)[..n];
    let gemm_invariant = gemm_crate(&x[..k], &w, 1, k, n, 1) == gemm_crate(&x, &w, m_big, k, n, 1)[..n];
    out.push(serde_json::json!({
        "row0_identical_at_m1_and_m_big": {"ours": ours_invariant, "gemm_crate": gemm_invariant, "m_big": m_big}
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
