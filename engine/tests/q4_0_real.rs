//! GGUF Q4_0 weights on the real SmolLM2-135M: the Q4_1 file's linear weights
//! requantized to Q4_0 here with llama.cpp's reference quantizer
//! (`quantize_row_q4_0_ref`, written out below), so the test needs no
//! llama.cpp build. The model keeps every such weight as Q4_0 blocks; its
//! exact path gives the logits of its own F32 rewrite (`engine dequantize`'s
//! values) bit for bit; the activation-quantized (`q8`) path is in effect,
//! within 0.01 nats of the exact path on a Hamlet passage and identical on
//! every CPU path this machine has. Requantizing a 4-bit model is lossy: the
//! mean NLL is printed beside the Q4_1 original's, and only bounded loosely.

mod common;

use engine::kernels::{CpuPath, Kernels, QuantMatmul};
use engine::kv::KvFormat;
use engine::model::gguf::writer::GgufWriter;
use engine::model::gguf::{Dequantized, GgmlType, GgufFile, MetaValue, OutDtype};
use engine::model::{LogitsWanted, SeqInput};
use engine::runtime::{Engine, EngineOptions};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// llama.cpp's `quantize_row_q4_0_ref` for one block of 32: the value of
/// largest magnitude (first of equals, with its sign) maps to -8, `d = max /
/// -8` stored as f16, `q = min(15, (i8)(x / d + 8.5))` (truncation toward zero,
/// and `x / d` taken as `x * (1 / d)` with `1 / d` from the unrounded `d`).
fn quantize_block_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            (amax, max) = (v.abs(), v);
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(half::f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        out.push(q(x[j]) | (q(x[16 + j]) << 4));
    }
}

/// The ggml type id of the types the SmolLM2 Q4_1 file holds.
fn type_id(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 8,
        other => panic!("unexpected tensor type {other:?} in the SmolLM2 file"),
    }
}

/// A temporary directory holding `q4_0.gguf` (every Q4_1 tensor of the
/// SmolLM2 file requantized, the rest copied byte for byte, metadata copied
/// with `general.file_type` = 2, MOSTLY_Q4_0) and `q4_0-f32.gguf` (its F32
/// rewrite). Built once per test binary.
fn files() -> &'static (tempfile::TempDir, PathBuf, PathBuf) {
    static FILES: OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = OnceLock::new();
    FILES.get_or_init(|| {
        let src = GgufFile::open(common::smollm2()).expect("open SmolLM2");
        let mut w = GgufWriter::new();
        for (key, value) in src.metadata() {
            if key == "general.file_type" {
                w.meta(key, MetaValue::U32(2));
            } else if let (Some(elem), MetaValue::Array(items)) = (src.array_elem_type(key), value) {
                w.meta_array(key, elem, items.clone());
            } else {
                w.meta(key, value.clone());
            }
        }
        let mut requantized = 0;
        for info in src.tensors() {
            if info.ty == GgmlType::Q4_1 {
                let values = src.dequantize_raw(&info.name).expect("decode").data;
                let mut bytes = Vec::with_capacity(values.len() / 32 * 18);
                for block in values.chunks_exact(32) {
                    quantize_block_q4_0(block, &mut bytes);
                }
                w.tensor(&info.name, &info.dims, 2, bytes);
                requantized += 1;
            } else {
                let bytes = src.tensor_bytes(info).expect("tensor bytes").to_vec();
                w.tensor(&info.name, &info.dims, type_id(info.ty), bytes);
            }
        }
        assert!(requantized >= 30 * 7, "only {requantized} Q4_1 tensors in the SmolLM2 file");
        let dir = tempfile::tempdir().expect("tempdir");
        let q4 = dir.path().join("q4_0.gguf");
        std::fs::write(&q4, w.to_bytes(src.version())).expect("write q4_0.gguf");
        let f32_path = dir.path().join("q4_0-f32.gguf");
        let q4_file = GgufFile::open(&q4).expect("reopen q4_0.gguf");
        let rewrite = Dequantized::new(&q4_file, OutDtype::F32).expect("plan the F32 rewrite");
        let out = std::fs::File::create(&f32_path).expect("create the F32 rewrite");
        rewrite.write_to(std::io::BufWriter::new(out)).expect("write the F32 rewrite");
        (dir, q4, f32_path)
    })
}

fn engine_of(path: &Path, kernels: Kernels) -> Engine {
    let opts = EngineOptions { kv_format: KvFormat::F16, kv_scales: None, kv_budget_bytes: 64 << 20, threads: 2 };
    let mut e = Engine::load(path, &opts).unwrap_or_else(|err| panic!("load {}: {err}", path.display()));
    e.model.set_kernels(kernels);
    e
}

fn kernels(path: CpuPath, quant: QuantMatmul) -> Kernels {
    Kernels::new(path, quant).expect("a supported CPU path")
}

fn hamlet_ids(engine: &Engine, skip: usize, len: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(common::asset("texts/hamlet_gut.txt")).unwrap();
    let passage: String = text.chars().skip(skip).take(8 * len).collect();
    let mut ids = engine.tokenizer.encode(&passage, false).unwrap();
    assert!(ids.len() >= len, "passage too short");
    ids.truncate(len);
    ids
}

fn all_logits(e: &mut Engine, ids: &[u32]) -> Vec<Vec<f32>> {
    let (model, cache, pool) = e.parts();
    let mut table = cache.new_table();
    assert!(table.reserve(ids.len()));
    let seq = SeqInput { tokens: ids, table: &mut table, logits: LogitsWanted::All };
    pool.install(|| model.forward(cache, &mut [seq], None)).unwrap().remove(0)
}

fn mean_nll(lp: &[f64]) -> f64 {
    -lp.iter().sum::<f64>() / lp.len() as f64
}

#[test]
fn q4_0_weights_stay_q4_0_and_the_exact_path_equals_the_f32_rewrite() {
    let (_, q4, f32_path) = files();
    let path = CpuPath::best();
    let mut e = engine_of(q4, kernels(path, QuantMatmul::Exact));
    let dtypes = e.model.weight_dtypes();
    // 30 layers x 7 linear layers, and the tied head if the file stores it as Q4_1.
    assert!(dtypes.get("q4_0").copied().unwrap_or(0) >= 30 * 7, "weight types {dtypes:?}");
    assert!(!dtypes.contains_key("q4_1") && !dtypes.contains_key("f32"), "weight types {dtypes:?}");
    let mut dense = engine_of(f32_path, kernels(path, QuantMatmul::Exact));
    assert_eq!(dense.model.weight_dtypes().keys().collect::<Vec<_>>(), vec![&"f32"]);
    let ids = hamlet_ids(&e, 4000, 24);
    assert!(all_logits(&mut e, &ids) == all_logits(&mut dense, &ids), "{path}: Q4_0 exact logits differ from F32");
}

#[test]
fn q4_0_q8_path_is_within_0_01_nats_of_the_exact_path_and_the_same_on_every_cpu_path() {
    let (_, q4, _) = files();
    let mut reference: Option<(CpuPath, Vec<Vec<f32>>)> = None;
    for path in CpuPath::supported() {
        let mut exact = engine_of(q4, kernels(path, QuantMatmul::Exact));
        let mut q8 = engine_of(q4, kernels(path, QuantMatmul::Q8));
        let ids = hamlet_ids(&exact, 2000, 256);
        let (lp_exact, lp_q8) = (exact.score(&ids).unwrap(), q8.score(&ids).unwrap());
        let (ne, nq) = (mean_nll(&lp_exact), mean_nll(&lp_q8));
        eprintln!("{path}: Q4_0 mean NLL over 255 predictions: exact {ne:.6}, q8 {nq:.6}");
        assert!(lp_exact != lp_q8, "{path}: q8 and exact paths agree exactly: q8 is not applied");
        assert!((nq - ne).abs() < 0.01, "{path}: q8 mean NLL {nq} is more than 0.01 nats from exact {ne}");
        let short = hamlet_ids(&q8, 9000, 12);
        let l = all_logits(&mut q8, &short);
        match &reference {
            None => reference = Some((path, l)),
            Some((p0, r)) => assert!(*r == l, "q8 logits on {path} differ from those on {p0}"),
        }
    }
}

#[test]
fn requantized_q4_0_stays_near_the_q4_1_original() {
    let (_, q4, _) = files();
    let opts = EngineOptions { kv_format: KvFormat::F16, kv_scales: None, kv_budget_bytes: 64 << 20, threads: 2 };
    let mut original = Engine::load(&common::smollm2(), &opts).expect("load SmolLM2");
    let mut requantized = engine_of(q4, original.model.kernels());
    let ids = hamlet_ids(&original, 2000, 256);
    let (n1, n0) = (mean_nll(&original.score(&ids).unwrap()), mean_nll(&requantized.score(&ids).unwrap()));
    eprintln!("Hamlet mean NLL: Q4_1 original {n1:.4}, requantized Q4_0 {n0:.4} (lossy: {:+.4})", n0 - n1);
    // A broken decoder or kernel lands far away (a uniform guess is ln 49152 = 10.8).
    assert!((n0 - n1).abs() < 0.5, "requantized Q4_0 NLL {n0} is far from the Q4_1 original's {n1}");
}
