//! The default activation-quantized (`q8`) matmul on the real SmolLM2-135M Q4_1
//! GGUF (fetched by scripts/fetch-assets): the numerics gate (Hamlet-passage
//! mean NLL within 0.01 nats of the exact path), whole-model logits identical
//! on every CPU path this machine has, and greedy output that does not depend
//! on batching or prefill chunking. Each test first checks that the q8 path is
//! really in effect (its logits differ from the exact path's).

use crate::common;

use common::hamlet::{all_logits, hamlet_ids, kernels};

use engine::kernels::cpu::ops::argmax;
use engine::kernels::{CpuPath, Kernels, QuantMatmul};
use engine::kv::KvFormat;
use engine::model::{LogitsWanted, SeqInput};
use engine::runtime::{Engine, EngineOptions};

fn engine_on(kernels: Kernels) -> Engine {
    let opts = EngineOptions {
        kv_format: KvFormat::F16,
        kv_scales: None,
        kv_budget_bytes: 64 << 20,
        threads: 2,
        ..EngineOptions::default()
    };
    let mut e = Engine::load(&common::smollm2(), &opts).expect("load SmolLM2");
    e.model.set_kernels(kernels);
    e
}

/// Every vector path this CPU has, else scalar (the scalar path gives the same
/// logits as every other: `q8_logits_are_identical_on_every_cpu_path`).
fn vector_paths() -> Vec<CpuPath> {
    let supported = CpuPath::supported();
    let vector: Vec<CpuPath> = supported.iter().copied().filter(|p| p.has_avx2()).collect();
    let paths = if vector.is_empty() { supported.clone() } else { vector };
    eprintln!("running CPU paths {paths:?} (supported here: {supported:?}; all: {:?})", CpuPath::ALL);
    paths
}

#[test]
fn hamlet_mean_nll_of_the_q8_path_is_within_0_01_nats_of_the_exact_path() {
    for path in vector_paths() {
        let mut exact = engine_on(kernels(path, QuantMatmul::Exact));
        let mut q8 = engine_on(kernels(path, QuantMatmul::Q8));
        let ids = hamlet_ids(&exact, 2000, 256);
        let nll = |lp: &[f64]| -lp.iter().sum::<f64>() / lp.len() as f64;
        let (lp_exact, lp_q8) = (exact.score(&ids).unwrap(), q8.score(&ids).unwrap());
        let (ne, nq) = (nll(&lp_exact), nll(&lp_q8));
        let per_token = lp_exact.iter().zip(&lp_q8).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
        eprintln!(
            "{path}: mean NLL over 255 predictions: exact {ne:.6}, q8 {nq:.6}; max per-token diff {per_token:.3e}"
        );
        assert!(lp_exact != lp_q8, "{path}: q8 and exact paths give identical log-probabilities: q8 is not applied");
        assert!((nq - ne).abs() < 0.01, "{path}: q8 mean NLL {nq} is more than 0.01 nats from the exact path's {ne}");
        assert!((3.7..4.0).contains(&ne), "{path}: exact-path NLL {ne} is far from the expected ~3.85");
    }
}

#[test]
fn q8_logits_are_identical_on_every_cpu_path() {
    let paths = CpuPath::supported();
    eprintln!("CPU paths on this machine: {paths:?}");
    let mut reference: Option<Vec<Vec<f32>>> = None;
    for &path in &paths {
        let mut e = engine_on(kernels(path, QuantMatmul::Q8));
        let ids = hamlet_ids(&e, 9000, 12);
        let l = all_logits(&mut e, &ids);
        let mut exact = engine_on(kernels(path, QuantMatmul::Exact));
        assert!(all_logits(&mut exact, &ids) != l, "{path}: q8 logits equal the exact path's: q8 is not applied");
        match &reference {
            None => reference = Some(l),
            Some(r) => assert!(*r == l, "q8 logits on {path} differ from those on {}", paths[0]),
        }
    }
}

#[test]
fn each_quantized_weight_is_held_once_in_the_layout_its_kernels_read() {
    let ids_of = |e: &Engine| hamlet_ids(e, 9000, 12);
    for path in CpuPath::supported() {
        let mut e = engine_on(kernels(path, QuantMatmul::Q8));
        let ids = ids_of(&e);
        let q8 = all_logits(&mut e, &ids);
        for quant in [QuantMatmul::Exact, QuantMatmul::Q8] {
            e.model.set_kernels(kernels(path, quant));
            let packed = path.has_avx512() && quant == QuantMatmul::Q8;
            let (layouts, tied_quant) = e.model.weight_layouts();
            // 30 layers x 7 linear layers + the tied LM head, all Q4_1 or Q8_0.
            assert_eq!(layouts.len(), 30 * 7 + 1, "{path} {quant}");
            assert!(layouts.iter().all(|&l| l == (!packed, packed)), "{path} {quant}: layouts {layouts:?}");
            // SmolLM2 ties its embeddings: lookups read the quantized head, no f32 copy.
            assert!(tied_quant, "{path} {quant}: embedding lookups keep an f32 copy");
        }
        // Converted to the exact path's layout and back: the same logits.
        assert!(all_logits(&mut e, &ids) == q8, "{path}: q8 logits changed after a layout round trip");
    }
}

/// One sequence of a simulated batch: tokens still to feed, and its output.
struct Running {
    pending: Vec<u32>,
    out: Vec<u32>,
}

/// Greedy decoding of every prompt at once, as a continuous-batching server
/// would: one forward call per step over every unfinished sequence, prompts
/// fed at most `chunk` tokens per step.
fn batched_greedy(e: &mut Engine, prompts: &[Vec<u32>], max_tokens: usize, chunk: usize) -> Vec<Vec<u32>> {
    let (model, cache, pool) = e.parts();
    let mut tables: Vec<_> = prompts.iter().map(|_| cache.new_table()).collect();
    for (t, p) in tables.iter_mut().zip(prompts) {
        assert!(t.reserve(p.len() + max_tokens));
    }
    let mut seqs: Vec<Running> = prompts.iter().map(|p| Running { pending: p.clone(), out: Vec::new() }).collect();
    for _step in 0..prompts.iter().map(|p| p.len()).sum::<usize>() + max_tokens {
        let live: Vec<usize> = (0..seqs.len()).filter(|&i| seqs[i].out.len() < max_tokens).collect();
        if live.is_empty() {
            break;
        }
        let feeds: Vec<Vec<u32>> =
            live.iter().map(|&i| seqs[i].pending[..seqs[i].pending.len().min(chunk)].to_vec()).collect();
        let mut inputs = Vec::new();
        let mut feed_of_live = feeds.iter();
        for (i, table) in tables.iter_mut().enumerate() {
            if !live.contains(&i) {
                continue;
            }
            let feed = feed_of_live.next().expect("one feed per live sequence");
            let last = feed.len() == seqs[i].pending.len();
            let logits = if last { LogitsWanted::Last } else { LogitsWanted::None };
            inputs.push(SeqInput { tokens: feed, table, logits });
        }
        let logits = pool.install(|| model.forward(cache, &mut inputs, None)).unwrap();
        for ((&i, feed), l) in live.iter().zip(&feeds).zip(&logits) {
            let s = &mut seqs[i];
            if feed.len() == s.pending.len() {
                let tok = argmax(&l[0]);
                s.out.push(tok);
                s.pending = vec![tok];
            } else {
                s.pending.drain(..feed.len());
            }
        }
    }
    seqs.into_iter().map(|s| s.out).collect()
}

#[test]
fn greedy_output_of_the_q8_path_does_not_depend_on_batching_or_chunking() {
    // Every vector path: their kernels differ with the number of rows.
    for path in vector_paths() {
        let mut e = engine_on(kernels(path, QuantMatmul::Q8));
        let prompts: Vec<Vec<u32>> =
            [(500, 5), (3000, 12), (6000, 31)].iter().map(|&(s, n)| hamlet_ids(&e, s, n)).collect();
        let max_tokens = 12;
        // The path is in effect: the last prompt's logits differ from the exact path's.
        let q8_logits = all_logits(&mut e, &prompts[2]);
        let mut exact = engine_on(kernels(path, QuantMatmul::Exact));
        assert!(all_logits(&mut exact, &prompts[2]) != q8_logits, "{path}: q8 is not applied");
        let serial: Vec<Vec<u32>> =
            prompts.iter().map(|p| e.generate_greedy(p, max_tokens, true).unwrap().output_ids).collect();
        for chunk in [usize::MAX, 8, 3] {
            let batched = batched_greedy(&mut e, &prompts, max_tokens, chunk);
            for (i, (s, b)) in serial.iter().zip(&batched).enumerate() {
                assert_eq!(s, b, "{path} prompt {i}: serial vs batched (prefill chunk {chunk}) greedy outputs differ");
            }
        }
        eprintln!("{path}: serial = batched greedy outputs on q8: {serial:?}");
    }
}
