//! `prompts.source = "vllm_prefix_repetition"`: vLLM 0.34's
//! `PrefixRepetitionRandomDataset` (`vllm/benchmarks/datasets/datasets.py`, `vllm
//! bench serve --dataset-name prefix_repetition`), draw for draw. vLLM seeds
//! NumPy's legacy global generator and Python's `random` with the study seed
//! (`mt19937`); for each of `num_prefixes` prefixes it draws `prefix_len` IDs
//! (`np.random.randint(0, vocab_size)`) and runs them through the decode/re-encode
//! check (`gen_prompt_decode_to_target_len`, padding from the same legacy
//! generator), then for each of its `num_requests / num_prefixes` prompts a
//! suffix the same way; a prompt is prefix + suffix, decoded to the text vLLM
//! sends (the IDs sent are its re-encoding). The prompts, prefix-major, are then
//! shuffled with Python's `random.shuffle` (not with `shuffle = false`, vLLM's
//! `--disable-shuffle`). Every entry's output length is `output_len`. Must not
//! draw from any other generator: the test against vLLM's own code
//! (tests/integration/vllm_datasets.rs) compares token for token.

use super::Entry;
use super::mt19937::Mt19937;
use super::vllm_random::decode_to_target_len;
use crate::plan::VllmPrefixRepetitionSpec;
use crate::trace::{Encoder, TraceError};

fn malformed(what: &str, message: impl Into<String>) -> TraceError {
    TraceError::Malformed { what: what.to_string(), message: message.into() }
}

/// `n` entries of vLLM's prefix_repetition dataset from `seed` (`n` a multiple of
/// `num_prefixes`, as the plan checks).
pub fn vllm_prefix_repetition(
    spec: &VllmPrefixRepetitionSpec,
    enc: &dyn Encoder,
    seed: u64,
    n: usize,
) -> Result<Vec<Entry>, TraceError> {
    let what = &spec.tokenizer;
    let vocab = enc.vocabulary().ok_or_else(|| malformed(what, "this tokenizer cannot say its vocabulary"))?;
    let vocab_size = i64::from(vocab.size);
    let per_prefix = n / spec.num_prefixes as usize;
    if per_prefix == 0 {
        return Err(malformed(
            "prompts.num_requests",
            format!("{n} is below prompts.num_prefixes {} (vLLM's check)", spec.num_prefixes),
        ));
    }
    let legacy_seed = u32::try_from(seed).map_err(|_| {
        malformed("study.seed", "above 2^32 - 1: NumPy's legacy np.random.seed refuses it (as in vLLM)")
    })?;
    let mut python = Mt19937::python_seed(seed);
    let mut numpy = Mt19937::numpy_seed(legacy_seed);
    let draw = |rng: &mut Mt19937, k: usize| -> Result<Vec<u32>, String> {
        let ids = rng.numpy_randint(0, vocab_size, k).ok_or("vocabulary wider than 32 bits")?;
        Ok(ids.into_iter().map(|t| t as u32).collect())
    };
    let exact = |rng: &mut Mt19937, target: usize| -> Result<Vec<u32>, TraceError> {
        let tokens = draw(rng, target).map_err(|e| malformed(what, e))?;
        decode_to_target_len(enc, tokens, target, &mut |k| draw(rng, k)).map_err(|e| malformed(what, e))
    };
    let mut entries = Vec::with_capacity(per_prefix * spec.num_prefixes as usize);
    for p in 0..spec.num_prefixes {
        let prefix = exact(&mut numpy, spec.prefix_len as usize)?;
        for _ in 0..per_prefix {
            let mut combined = prefix.clone();
            combined.extend(exact(&mut numpy, spec.suffix_len as usize)?);
            let text = enc.decode(&combined).map_err(|e| malformed(what, e))?;
            let tokens = enc.encode(&text).map_err(|e| malformed(what, e))?;
            entries.push(Entry {
                tokens,
                output_tokens: Some(spec.output_len),
                source: format!("vllm-prefix-repetition#{p}"),
                offset: 0,
                messages: None,
                next_turns: Vec::new(),
            });
        }
    }
    if spec.shuffle {
        python.python_shuffle(&mut entries);
    }
    Ok(entries)
}
