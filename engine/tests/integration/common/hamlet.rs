//! Helpers of the tests on the real SmolLM2 model: token ids of a Hamlet
//! passage, the logits of every position in one forward call, and kernels by
//! CPU path and quantized-matmul mode.

use engine::kernels::{CpuPath, Kernels, QuantMatmul};
use engine::model::{LogitsWanted, SeqInput};
use engine::runtime::Engine;

/// The kernels of `path` and `quant` (the path must be supported here).
pub fn kernels(path: CpuPath, quant: QuantMatmul) -> Kernels {
    Kernels::new(path, quant).expect("a supported CPU path")
}

/// The first `len` token ids of Hamlet from character `skip` on.
pub fn hamlet_ids(engine: &Engine, skip: usize, len: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(super::asset("texts/hamlet_gut.txt")).unwrap();
    let passage: String = text.chars().skip(skip).take(8 * len).collect();
    let mut ids = engine.tokenizer.encode(&passage, false).unwrap();
    assert!(ids.len() >= len, "passage too short");
    ids.truncate(len);
    ids
}

/// Logits of every position of `ids`, in one forward call.
pub fn all_logits(e: &mut Engine, ids: &[u32]) -> Vec<Vec<f32>> {
    let (model, cache, pool) = e.parts();
    let mut table = cache.new_table();
    assert!(table.reserve(ids.len()));
    let seq = SeqInput { tokens: ids, table: &mut table, logits: LogitsWanted::All };
    pool.install(|| model.forward(cache, &mut [seq], None)).unwrap().remove(0)
}
