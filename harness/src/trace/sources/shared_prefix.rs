//! `prompts.source = "shared_prefix"` (SGLang's generated-shared-prefix workload):
//! `groups` groups of `prompts_per_group` requests; every request of group g starts
//! with the same `prefix_tokens`-token system prefix, then its own
//! `suffix_tokens`-token question, so that a server with prefix caching can reuse
//! the prefix's KV. Every token is real text: text files as in a text panel (sorted
//! by name, encoded whole); group g's prefix is cut from its own seed (SHA-256 of
//! `b"harness/shared-prefix/v1\0"`, the study seed and g), request j of group g's
//! suffix from another (`b"harness/shared-suffix/v1\0"`, the study seed and
//! g * prompts_per_group + j): a file uniformly among those long enough, then an
//! offset uniform in 0..=T-L. Entries are group-major (group 0's requests first),
//! as SGLang generates them; cells send them round robin. Output lengths are the
//! plan's (`request.output_tokens`). Must not shorten a prefix or a suffix: a text
//! set with no file long enough is an error.

use std::path::Path;

use super::{Entry, seed_of};
use crate::plan::SharedPrefixSpec;
use crate::plan::seed::{TraceRng, below, rng};
use crate::trace::panel::{Doc, text_docs};
use crate::trace::{Encoder, TraceError};

/// A cut of `len` tokens: (document index, offset).
fn cut(docs: &[Doc], len: usize, r: &mut TraceRng, what: &str) -> Result<(usize, usize), TraceError> {
    let eligible: Vec<usize> = (0..docs.len()).filter(|&k| docs[k].tokens.len() >= len).collect();
    if eligible.is_empty() {
        let longest = docs.iter().map(|d| d.tokens.len()).max().unwrap_or(0);
        return Err(TraceError::Malformed {
            what: what.into(),
            message: format!("{len} tokens asked, but the longest text file has {longest}"),
        });
    }
    let d = eligible[below(r, eligible.len() as u64) as usize];
    let offset = below(r, (docs[d].tokens.len() - len) as u64 + 1) as usize;
    Ok((d, offset))
}

/// The `groups * prompts_per_group` entries, group-major.
pub fn shared_prefix(
    spec: &SharedPrefixSpec,
    dir: &Path,
    enc: &dyn Encoder,
    study_seed: u64,
) -> Result<Vec<Entry>, TraceError> {
    let docs = text_docs(dir, &spec.pattern, enc)?;
    if docs.is_empty() {
        return Err(TraceError::Malformed {
            what: format!("{}/{}", dir.display(), spec.pattern),
            message: "no text file matches".into(),
        });
    }
    let (p, s) = (spec.prefix_tokens as usize, spec.suffix_tokens as usize);
    let per = u64::from(spec.prompts_per_group);
    let mut out = Vec::with_capacity((u64::from(spec.groups) * per) as usize);
    for g in 0..u64::from(spec.groups) {
        let mut r = rng(seed_of(b"harness/shared-prefix/v1\0", study_seed, Some(g)));
        let (pd, po) = cut(&docs, p, &mut r, "prompts.prefix_tokens")?;
        let prefix = &docs[pd].tokens[po..po + p];
        for j in 0..per {
            let mut r = rng(seed_of(b"harness/shared-suffix/v1\0", study_seed, Some(g * per + j)));
            let (sd, so) = cut(&docs, s, &mut r, "prompts.suffix_tokens")?;
            let mut tokens = Vec::with_capacity(p + s);
            tokens.extend_from_slice(prefix);
            tokens.extend_from_slice(&docs[sd].tokens[so..so + s]);
            out.push(Entry {
                tokens,
                output_tokens: None,
                source: format!("group {g}: {}@{po} + {}@{so}", docs[pd].name, docs[sd].name),
                offset: po as u64,
                messages: None,
                next_turns: Vec::new(),
            });
        }
    }
    Ok(out)
}
