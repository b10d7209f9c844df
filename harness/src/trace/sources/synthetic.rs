//! `prompts.source = "synthetic"`: input and output lengths drawn from named
//! distributions (vLLM bench `random` with real text, guidellm's synthetic data),
//! prompts cut from natural text so that every token is real text. Entry i draws,
//! from its own seed (see `sources`): its input length L, its output length, then a
//! text file uniformly among those with at least L tokens (files as in a text panel:
//! sorted by name, encoded whole) and an offset uniform in 0..=T-L. Lengths: fixed;
//! uniform integer in min..=max; normal(mean, sd) and lognormal(mu, sigma) (the
//! log of the length is normal) rounded to the nearest integer and clipped to
//! [min, max] (`rand_distr`'s samplers, as pinned in Cargo.lock). Must not
//! rescale a draw: a clipped draw is the bound.
//!
//! For the chat route (`chat`), an entry's cut is also its text, as AIPerf's
//! synthetic prompts are (`PromptGenerator._decode_to_exact_len`, vLLM's
//! `gen_prompt_decode_to_target_len`): decoded, re-encoded, and while the
//! re-encoding is not L tokens cut to L or topped up with the document's next tokens
//! (wrapping to its start), at most `TEXT_ROUNDS` times; the entry's one user
//! message is the last text decoded and its tokens that text's encoding (so its
//! length is L unless the rounds ran out). The draws are the same on both routes.
//!
//! With token IDs in place of text (`min_token_id`/`max_token_id`, vLLM bench's
//! `random` dataset with `--random-range-ratio`): entry i draws its lengths the
//! same way from the same seed, then its L IDs uniform in min..=max; a prefix of P
//! IDs (`prefix_tokens`, `--random-prefix-len`), drawn once from
//! SHA-256(`"harness/synthetic-prefix/v1\0"` || study seed), comes first in every
//! entry, so its prompt has P + L tokens.

use std::path::Path;

use rand_distr::{Distribution, LogNormal, Normal};

use super::{ChatMessage, Entry, seed_of};
use crate::plan::seed::{TraceRng, below, rng};
use crate::plan::{LengthDist, SyntheticSpec, SyntheticTokens};
use crate::trace::panel::text_docs;
use crate::trace::{Encoder, TraceError};

fn clip(x: f64, min: u32, max: u32) -> u32 {
    if x.is_nan() {
        return min;
    }
    x.round().clamp(f64::from(min), f64::from(max)) as u32
}

/// One draw of a length distribution (validation guarantees valid parameters).
pub fn draw_length(d: &LengthDist, r: &mut TraceRng) -> u32 {
    match *d {
        LengthDist::Fixed(v) => v,
        LengthDist::Uniform { min, max } => min + below(r, u64::from(max - min) + 1) as u32,
        LengthDist::Normal { mean, sd, min, max } => {
            clip(Normal::new(mean, sd).map_or(f64::NAN, |n| n.sample(r)), min, max)
        }
        LengthDist::LogNormal { mu, sigma, min, max } => {
            clip(LogNormal::new(mu, sigma).map_or(f64::NAN, |n| n.sample(r)), min, max)
        }
    }
}

/// Decode and re-encode rounds of a chat entry's text (AIPerf's and vLLM's 10).
const TEXT_ROUNDS: u32 = 10;

/// `n` synthetic entries cut from the text files in `dir`; with `chat`, each also
/// carries its text as one user message.
pub fn synthetic(
    spec: &SyntheticSpec,
    dir: &Path,
    enc: &dyn Encoder,
    study_seed: u64,
    n: usize,
    chat: bool,
) -> Result<Vec<Entry>, TraceError> {
    let pattern = match &spec.tokens {
        SyntheticTokens::Text { pattern, .. } => pattern.as_str(),
        SyntheticTokens::Random { .. } => "*.txt",
    };
    let docs = text_docs(dir, pattern, enc)?;
    if docs.is_empty() {
        return Err(TraceError::Malformed {
            what: format!("{}/{}", dir.display(), pattern),
            message: "no text file matches".into(),
        });
    }
    let longest = docs.iter().map(|d| d.tokens.len()).max().unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut r = rng(seed_of(b"harness/synthetic/v1\0", study_seed, Some(i as u64)));
        let length = draw_length(&spec.input, &mut r) as usize;
        let output = draw_length(&spec.output, &mut r);
        let eligible: Vec<usize> = (0..docs.len()).filter(|&k| docs[k].tokens.len() >= length).collect();
        if eligible.is_empty() {
            return Err(TraceError::Malformed {
                what: "prompts.input_tokens".into(),
                message: format!(
                    "entry {i} drew {length} tokens, but the longest text file has {longest}: lower prompts.input_tokens.max"
                ),
            });
        }
        let d = &docs[eligible[below(&mut r, eligible.len() as u64) as usize]];
        let offset = below(&mut r, (d.tokens.len() - length) as u64 + 1);
        let start = offset as usize;
        let (tokens, messages) = if chat {
            let (tokens, content) = text_of_cut(enc, &d.tokens, start, length)
                .map_err(|message| TraceError::Encode { file: d.name.clone(), message })?;
            (tokens, Some(vec![ChatMessage { role: "user".into(), content }]))
        } else {
            (d.tokens[start..start + length].to_vec(), None)
        };
        out.push(Entry {
            tokens,
            output_tokens: Some(output),
            source: d.name.clone(),
            offset,
            messages,
            next_turns: Vec::new(),
        });
    }
    Ok(out)
}

/// The text of `doc[start..start + length]` and its encoding, made `length` tokens
/// long where `TEXT_ROUNDS` rounds allow (see the module doc).
fn text_of_cut(enc: &dyn Encoder, doc: &[u32], start: usize, length: usize) -> Result<(Vec<u32>, String), String> {
    let mut tokens = doc[start..start + length].to_vec();
    let mut next = start + length;
    let mut rounds = 1;
    loop {
        let text = enc.decode(&tokens)?;
        tokens = enc.encode(&text)?;
        if tokens.len() == length || rounds == TEXT_ROUNDS || doc.is_empty() {
            return Ok((tokens, text));
        }
        tokens.truncate(length);
        while tokens.len() < length {
            tokens.push(doc[next % doc.len()]);
            next += 1;
        }
        rounds += 1;
    }
}

/// `n` synthetic entries of seeded random token IDs (`spec.tokens` is
/// `SyntheticTokens::Random`; an empty panel otherwise).
pub fn synthetic_random(spec: &SyntheticSpec, study_seed: u64, n: usize) -> Vec<Entry> {
    let SyntheticTokens::Random { min_token_id, max_token_id, prefix } = spec.tokens else {
        return Vec::new();
    };
    let span = u64::from(max_token_id - min_token_id) + 1;
    let ids = |r: &mut TraceRng, count: u32| -> Vec<u32> {
        (0..count).map(|_| min_token_id + below(r, span) as u32).collect()
    };
    let shared = ids(&mut rng(seed_of(b"harness/synthetic-prefix/v1\0", study_seed, None)), prefix);
    (0..n)
        .map(|i| {
            let mut r = rng(seed_of(b"harness/synthetic/v1\0", study_seed, Some(i as u64)));
            let length = draw_length(&spec.input, &mut r);
            let output = draw_length(&spec.output, &mut r);
            let mut tokens = shared.clone();
            tokens.extend(ids(&mut r, length));
            Entry {
                tokens,
                output_tokens: Some(output),
                source: "random".into(),
                offset: 0,
                messages: None,
                next_turns: Vec::new(),
            }
        })
        .collect()
}
