//! `prompts.source = "vllm_random"`: vLLM 0.34's `RandomDataset`
//! (`vllm/benchmarks/datasets/datasets.py`, `vllm bench serve --dataset-name
//! random`), draw for draw, from NumPy's `default_rng(study seed)`
//! (`numpy_random`): per-request input lengths, output lengths and vocabulary
//! offsets (`get_sampling_params`: the input length less the special tokens the
//! tokenizer adds, each range [floor(L(1-r)), ceil(L(1+r))], the output's at least
//! 1), the allowed IDs (the vocabulary without the plan's `special_ids`, else the
//! tokenizer's added tokens marked special; ascending), a prefix
//! of `prefix_len` allowed IDs drawn once, then for request i the allowed IDs
//! `(offset_i + i + k) mod |allowed|`, k < its input length, after the prefix.
//! Each sequence goes through vLLM's decode/re-encode check
//! (`gen_prompt_decode_to_target_len`: decode, re-encode without special tokens;
//! too short: append IDs drawn from the whole vocabulary; too long: truncate; at
//! most 10 rounds, the last re-encoding kept), so the IDs sent are the re-encoding
//! of the text vLLM sends. Must not draw from any other generator: the test
//! against vLLM's own code (tests/integration/vllm_datasets.rs) compares token for
//! token.

use super::Entry;
use super::numpy_random::NumpyGenerator;
use crate::plan::VllmRandomSpec;
use crate::trace::{Encoder, TraceError};

/// vLLM's retry budget of the decode/re-encode check.
const MAX_RETRY: u32 = 10;

fn malformed(what: &str, message: impl Into<String>) -> TraceError {
    TraceError::Malformed { what: what.to_string(), message: message.into() }
}

/// `n` entries of vLLM's random dataset from `seed`.
pub fn vllm_random(spec: &VllmRandomSpec, enc: &dyn Encoder, seed: u64, n: usize) -> Result<Vec<Entry>, TraceError> {
    let what = &spec.tokenizer;
    let vocab = enc.vocabulary().ok_or_else(|| malformed(what, "this tokenizer cannot say its vocabulary"))?;
    let vocab_size = i64::from(vocab.size);
    let real_input = i64::from(spec.input_len).saturating_sub(i64::from(vocab.special_tokens_to_add)).max(0);
    let (ri, ro) = (spec.input_range_ratio, spec.output_range_ratio);
    let input_low = (real_input as f64 * (1.0 - ri)).floor() as i64;
    let input_high = (real_input as f64 * (1.0 + ri)).ceil() as i64;
    if i64::from(spec.prefix_len) + input_low < 1 {
        return Err(malformed(
            "prompts.input_len",
            format!(
                "too small: with {} special tokens and range ratio {ri}, the shortest prompt (prefix + sampled) has \
                 {} tokens (vLLM's check)",
                vocab.special_tokens_to_add,
                i64::from(spec.prefix_len) + input_low
            ),
        ));
    }
    let out = f64::from(spec.output_len);
    let output_low = ((out * (1.0 - ro)).floor() as i64).max(1);
    let output_high = ((out * (1.0 + ro)).ceil() as i64).max(1);
    let mut rng = NumpyGenerator::new(seed);
    let range = |what: &str| malformed(what, "range wider than 32 bits");
    let input_lens = rng.integers(input_low, input_high + 1, n).ok_or_else(|| range("prompts.input_len"))?;
    let output_lens = rng.integers(output_low, output_high + 1, n).ok_or_else(|| range("prompts.output_len"))?;
    let offsets = rng.integers(0, vocab_size, n).ok_or_else(|| range("vocabulary"))?;
    let special = spec.special_ids.as_ref().unwrap_or(&vocab.special_ids);
    let allowed: Vec<u32> = (0..vocab.size).filter(|id| special.binary_search(id).is_err()).collect();
    if allowed.is_empty() {
        return Err(malformed(what, "no token of the vocabulary is a regular one"));
    }
    let check = |tokens: Vec<u32>, target: usize, rng: &mut NumpyGenerator| {
        let mut extra = |k: usize| {
            let ids = rng.integers(0, vocab_size, k).ok_or("vocabulary wider than 32 bits")?;
            Ok(ids.into_iter().map(|t| t as u32).collect())
        };
        decode_to_target_len(enc, tokens, target, &mut extra).map_err(|e| malformed(what, e))
    };
    let prefix = if spec.prefix_len > 0 {
        let picks = rng.integers(0, allowed.len() as i64, spec.prefix_len as usize).ok_or_else(|| range("prefix"))?;
        let tokens = picks.iter().map(|&k| allowed[k as usize]).collect();
        check(tokens, spec.prefix_len as usize, &mut rng)?
    } else {
        Vec::new()
    };
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let len = input_lens[i];
        let start = offsets[i] + i as i64;
        let m = allowed.len() as i64;
        let mut tokens = prefix.clone();
        tokens.extend((0..len).map(|k| allowed[((start + k) % m) as usize]));
        let target = spec.prefix_len as usize + len as usize;
        let tokens = check(tokens, target, &mut rng)?;
        entries.push(Entry {
            tokens,
            output_tokens: Some(output_lens[i] as u32),
            source: "vllm-random".into(),
            offset: offsets[i] as u64,
            messages: None,
            next_turns: Vec::new(),
        });
    }
    Ok(entries)
}

/// vLLM's `gen_prompt_decode_to_target_len`: the re-encoding of the text the last
/// round decoded; `extra(k)` draws the k vocabulary-wide IDs a short round appends
/// (from the generator the dataset passes, or NumPy's legacy global one).
pub(super) fn decode_to_target_len(
    enc: &dyn Encoder,
    mut tokens: Vec<u32>,
    target: usize,
    extra: &mut dyn FnMut(usize) -> Result<Vec<u32>, String>,
) -> Result<Vec<u32>, String> {
    let mut remaining = MAX_RETRY;
    loop {
        let text = enc.decode(&tokens)?;
        tokens = enc.encode(&text)?;
        if remaining == 0 || tokens.len() == target {
            return Ok(tokens);
        }
        if tokens.len() < target {
            tokens.extend(extra(target - tokens.len())?);
        } else {
            tokens.truncate(target);
        }
        remaining -= 1;
    }
}
