//! `engine bench`: prefill tokens/s at a fixed prompt length and decode tokens/s
//! at batch 1, for each KV format, thread count and quantized-matmul mode (modes
//! alternate in order within each repeat, so a busy machine hurts them alike),
//! plus the linear-layer kernels against the `gemm` crate (the named baseline)
//! at prefill and decode shapes, and what one token's linear layers read and
//! multiply (`Model::linear_work`, the denominators of scripts/bench-roofline).
//! Writes one JSON object. A benchmark, never a test: nothing here asserts
//! speed. Also owns the kernel flags (`KernelArgs`) that `generate`, `score`
//! and `bench` share.

use anyhow::{Context, Result};
use clap::Args;
use engine::error::EngineError;
use engine::kernels::cpu::matmul::matmul_on;
use engine::kernels::cpu::q8::matmul_q8_on;
use engine::kernels::cpu::quant::{QuantKind, QuantMatrix, matmul_quant_on};
use engine::kernels::{CpuFeatures, CpuPath, Kernels, QuantMatmul};
use engine::kv::KvFormat;
use engine::model::{LogitsWanted, Model, SeqInput};
use engine::runtime::{Engine, EngineOptions, Workers};
use std::path::PathBuf;
use std::time::Instant;

/// Kernel choices of `engine serve` and the in-process commands (over
/// ENGINE_CPU_PATH and ENGINE_QUANT_MATMUL).
#[derive(Args, Clone, Debug)]
pub struct KernelArgs {
    /// CPU code path: scalar, avx2, avx512, amx or auto (default: $ENGINE_CPU_PATH, else
    /// the best this CPU supports).
    #[arg(long)]
    pub cpu_path: Option<String>,
    /// Multiply quantized (Q4_0/Q4_1/Q8_0) weights exactly: f32 activations times
    /// exactly dequantized weights, bit-identical to the f32 model (for parity
    /// studies), instead of the default 8-bit activations (llama.cpp's numerics).
    #[arg(long)]
    pub exact_quant_matmul: bool,
    /// Where the kernels run: `cpu`. `cuda` is refused (exit 2) until the CUDA
    /// backend exists, so that a GPU plan never times the CPU path by mistake.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    pub device: String,
}

impl KernelArgs {
    /// `current` with these flags applied.
    pub fn kernels(&self, current: Kernels) -> Result<Kernels, EngineError> {
        if self.device != "cpu" {
            return Err(EngineError::Config(format!(
                "--device {}: this build has no CUDA backend yet (every kernel sits behind one seam whose only \
                 implementation is the CPU's); use --device cpu",
                self.device
            )));
        }
        let config = |e: engine::kernels::KernelError| EngineError::Config(e.to_string());
        let path = match &self.cpu_path {
            Some(s) => CpuPath::parse_supported(s).map_err(config)?,
            None => current.path(),
        };
        let quant = if self.exact_quant_matmul { QuantMatmul::Exact } else { current.quant_matmul() };
        Kernels::new(path, quant).map_err(config)
    }

    pub fn apply(&self, model: &mut Model) -> Result<(), EngineError> {
        let k = self.kernels(model.kernels())?;
        model.set_kernels(k);
        Ok(())
    }
}

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
    #[command(flatten)]
    kernels: KernelArgs,
    /// Quantized-matmul modes to measure, alternated within each repeat (e.g.
    /// q8,exact); default: the one the kernel flags select.
    #[arg(long, value_delimiter = ',', conflicts_with = "exact_quant_matmul")]
    quant_matmul: Option<Vec<QuantMatmul>>,
    /// Skip the linear-layer comparison with the `gemm` crate (whole-model
    /// figures only; `linear_kernel_vs_gemm_crate` is then empty).
    #[arg(long)]
    no_kernel_comparison: bool,
}

/// The 1-, 5- and 15-minute load averages (Linux), for the record.
fn load_average() -> Option<Vec<f64>> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().take(3).map(|v| v.parse().ok()).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(a: BenchArgs) -> Result<()> {
    let from_env = Kernels::from_env().map_err(|e| EngineError::Config(e.to_string()))?;
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
    let load_before = load_average();
    let opts = EngineOptions { kernels: from_env, ..EngineOptions::default() };
    let mut engine = Engine::new(loaded.model, loaded.tokenizer, &opts)?;
    let kernels = a.kernels.kernels(engine.model.kernels())?;
    let modes = a.quant_matmul.clone().unwrap_or_else(|| vec![kernels.quant_matmul()]);
    engine.model.set_kernels(kernels);
    let scales = engine.calibrate(&prompt)?;
    let mut model = engine.model;
    let mut rows = Vec::new();
    for &threads in &a.threads {
        let pool = Workers::new(threads)?;
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
            let mut prefill = vec![Vec::new(); modes.len()];
            let mut decode = vec![Vec::new(); modes.len()];
            for (rep, mi) in (0..a.repeats.max(1)).flat_map(|rep| (0..modes.len()).map(move |i| (rep, i))) {
                // Alternate the order of the modes from one repeat to the next.
                let mi = if rep % 2 == 0 { mi } else { modes.len() - 1 - mi };
                model.set_kernels(kernels.with_quant_matmul(modes[mi]));
                let model = &model;
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
                prefill[mi].push(a.prefill_tokens as f64 / t0.elapsed().as_secs_f64());
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
                decode[mi].push(a.decode_tokens as f64 / t1.elapsed().as_secs_f64());
            }
            for (mi, mode) in modes.iter().enumerate() {
                let row = serde_json::json!({
                    "kv_format": format,
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
                eprintln!("bench: {row}");
                rows.push(row);
            }
        }
    }
    let comparison = if a.no_kernel_comparison {
        Vec::new()
    } else {
        kernel_comparison(kernels.path(), &a.threads, cfg.hidden_size, cfg.intermediate_size, a.prefill_tokens)?
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
    let text = serde_json::to_string_pretty(&out)?;
    if let Some(p) = &a.out {
        std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?;
    }
    println!("{text}");
    Ok(())
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
    let matmul = |x: &[f32], w: &[f32], m, k, n| matmul_on(path, x, w, m, k, n);
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
        let pool = Workers::new(t)?;
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
                    std::hint::black_box(matmul_quant_on(path, &x[..m * k], &wq, m));
                }
                t0.elapsed().as_secs_f64() / reps as f64
            });
            let q8 = pool.install(|| {
                let t0 = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(matmul_q8_on(path, &x[..m * k], &wq, m));
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
    let q8_invariant = matmul_q8_on(path, &x[..k], &wq, 1) == matmul_q8_on(path, &x, &wq, m_big)[..n];
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
