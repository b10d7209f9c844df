//! Acceptance on the real SmolLM2-135M-Instruct GGUF (fetched by
//! scripts/fetch-assets): a chat answer (on both quantized-matmul paths), the
//! NLL of a Hamlet passage against the independent numpy reference and the
//! bit-identity of quantized and dense weights (on the exact path, which those
//! references are for), and the three KV formats side by side. The default
//! (8-bit activation) path's own numerics gate is in q8_real.rs.

use crate::common;

use engine::kernels::QuantMatmul;
use engine::kv::{KvFormat, ValueScales};
use engine::runtime::{Engine, EngineOptions};
use engine::tokenizer::ChatMessage;

/// SmolLM2 on the exact quantized matmul (bit-identical to its f32 weights).
fn engine(format: KvFormat, scales: Option<ValueScales>) -> Engine {
    engine_on(format, scales, QuantMatmul::Exact)
}

fn engine_on(format: KvFormat, scales: Option<ValueScales>, quant: QuantMatmul) -> Engine {
    let opts = EngineOptions {
        kv_format: format,
        kv_scales: scales,
        kv_budget_bytes: 64 << 20,
        threads: 2,
        ..EngineOptions::default()
    };
    let mut e = Engine::load(&common::smollm2(), &opts).expect("load SmolLM2");
    let k = e.model.kernels().with_quant_matmul(quant);
    e.model.set_kernels(k);
    e
}

fn hamlet_ids(engine: &Engine) -> Vec<u32> {
    let text = std::fs::read_to_string(common::asset("texts/hamlet_gut.txt")).unwrap();
    let passage: String = text.chars().skip(2000).take(2000).collect();
    let mut ids = engine.tokenizer.encode(&passage, false).unwrap();
    ids.truncate(256);
    ids
}

/// On the exact path only: its first answer token is a near tie (measured:
/// "The" 25.322 vs "L" 25.239 in logits), which the default q8 path's 8-bit
/// activations flip ("L'Étoile, ..."). The q8 path is gated on NLL and batch
/// invariance in q8_real.rs instead.
#[test]
fn chat_answer_names_paris() {
    let quant = QuantMatmul::Exact;
    let mut e = engine_on(KvFormat::F16, None, quant);
    let msgs = [ChatMessage { role: "user".into(), content: "What is the capital of France?".into() }];
    let text = e.tokenizer.apply_chat_template(&msgs, true).unwrap();
    let ids = e.tokenizer.encode(&text, false).unwrap();
    let g = e.generate_greedy(&ids, 24, false).unwrap();
    let answer = e.tokenizer.decode(&g.output_ids, true).unwrap();
    eprintln!("{quant}: answer: {answer:?} ({:?})", g.output_ids);
    assert!(answer.contains("Paris"), "{quant}: answer does not name Paris: {answer:?}");
}

#[test]
fn hamlet_nll_matches_reference_and_formats_differ_slightly() {
    let mut f16 = engine(KvFormat::F16, None);
    let ids = hamlet_ids(&f16);
    assert_eq!(ids.len(), 256);
    let nll = |lp: &[f64]| -lp.iter().sum::<f64>() / lp.len() as f64;
    let ours_lp = f16.score(&ids).unwrap();
    let ours = nll(&ours_lp);

    let reference = common::python_json(
        "forward.py",
        &[
            "--gguf".into(),
            common::smollm2().display().to_string(),
            "--ids".into(),
            common::ids_arg(&ids),
            "--logits".into(),
            "none".into(),
        ],
    );
    let ref_nll = common::f64s(&reference["nll"]);
    let ref_mean = reference["mean_nll"].as_f64().unwrap();
    let per_token = ours_lp.iter().zip(&ref_nll).map(|(o, r)| (-o - r).abs()).fold(0.0f64, f64::max);
    eprintln!(
        "mean NLL: engine f16 {ours:.6}, numpy float64 reference {ref_mean:.6}; max per-token diff {per_token:.2e}"
    );
    // The reference is float64 with unrounded K/V; f16 KV rounding moves
    // per-token NLL by about 1e-3 at most on this text.
    assert!((ours - ref_mean).abs() < 2e-3, "mean NLL {ours} vs reference {ref_mean}");
    assert!(per_token < 2e-2, "per-token NLL differs by up to {per_token}");
    assert!((3.7..4.0).contains(&ref_mean), "reference NLL {ref_mean} is far from the expected ~3.85");

    // k16v8 with scales calibrated on another play; bf16 as well.
    let macbeth = std::fs::read_to_string(common::asset("texts/macbeth_gut.txt")).unwrap();
    let cal_ids: Vec<u32> =
        f16.tokenizer.encode(&macbeth.chars().skip(5000).take(8000).collect::<String>(), false).unwrap();
    let scales = f16.calibrate(&cal_ids[..1024.min(cal_ids.len())]).unwrap();
    let k16v8 = nll(&engine(KvFormat::K16v8, Some(scales)).score(&ids).unwrap());
    let bf16 = nll(&engine(KvFormat::Bf16, None).score(&ids).unwrap());
    eprintln!("mean NLL over 255 predictions: f16 {ours:.6}, bf16 {bf16:.6}, k16v8 {k16v8:.6}");
    for (name, v) in [("bf16", bf16), ("k16v8", k16v8)] {
        let d = (v - ours).abs();
        assert!(d > 0.0, "{name} NLL is identical to f16: the format is not applied");
        assert!(d < 0.05, "{name} NLL differs from f16 by {d}");
    }
}

#[test]
fn kv_inventory_k16v8_is_75_percent_of_f16() {
    let f16 = engine(KvFormat::F16, None).cache.inventory();
    let scales = ValueScales { rule: "test".into(), scales: vec![0.05; 30] };
    let k16v8 = engine(KvFormat::K16v8, Some(scales)).cache.inventory();
    assert_eq!(f16.bytes_per_token, 30 * 3 * 64 * 4);
    assert_eq!(k16v8.bytes_per_token * 4, f16.bytes_per_token * 3);
}

#[test]
fn quantized_weights_give_bit_identical_logits() {
    use engine::gguf::GgufFile;
    use engine::kv::KvCache;
    use engine::model::{LogitsWanted, Model, SeqInput};
    let gguf = GgufFile::open(common::smollm2()).unwrap();
    let cfg = gguf.model_config().unwrap();
    let dense = Model::from_tensors(cfg.clone(), gguf.load_tensors(&cfg).unwrap()).unwrap();
    let mut quant = Model::from_tensors(cfg.clone(), gguf.load_tensors(&cfg).unwrap()).unwrap();
    let n = quant.use_quantized(gguf.quantized_weights(&cfg).unwrap());
    assert_eq!(n, 30 * 7 + 1, "every projection and the tied LM head read quantized blocks");
    // Bit-identity holds on the exact quantized matmul (the default q8 path is
    // llama.cpp's numerics instead; see q8_real.rs).
    quant.set_kernels(quant.kernels().with_quant_matmul(engine::kernels::QuantMatmul::Exact));
    let ids: Vec<u32> = (0..40).map(|i| 100 + i * 7).collect();
    let run = |m: &Model| {
        let mut cache = KvCache::new(KvFormat::F16, 30, 3, 64, 4, None).unwrap();
        let mut t = cache.new_table();
        assert!(t.reserve(ids.len()));
        m.forward(&mut cache, &mut [SeqInput { tokens: &ids, table: &mut t, logits: LogitsWanted::All }], None).unwrap()
    };
    assert!(run(&dense) == run(&quant), "quantized and dense weights must give identical logits");
}
