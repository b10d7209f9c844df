//! What every gate shares: the tokenizer (a Hugging Face tokenizer.json through the
//! `tokenizers` crate; prompts are sent as token IDs, identical for every arm), the
//! natural-text source documents, exact-length cuts from them, and the seeded
//! generator of subsets, offsets and passkeys. Must not send requests.
//!
//! Seeds: SHA-256 of `b"harness/quality/v1\0"`, the gate seed (8 bytes LE), the use
//! (UTF-8, e.g. `nll`), a 0 byte and the item index (8 bytes LE) seed xoshiro256++.

use std::path::{Path, PathBuf};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

use super::QualityError;

pub type QRng = Xoshiro256PlusPlus;

/// The generator for one item of one use.
pub fn item_rng(seed: u64, what: &str, index: u64) -> QRng {
    let mut h = Sha256::new();
    h.update(b"harness/quality/v1\0");
    h.update(seed.to_le_bytes());
    h.update(what.as_bytes());
    h.update([0u8]);
    h.update(index.to_le_bytes());
    QRng::from_seed(h.finalize().into())
}

/// Uniform integer in `0..n` (`n > 0`), by rejection (bounded: gives up to 0 after
/// 64 rejections, probability below 2^-64).
pub fn below(rng: &mut QRng, n: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    let zone = u64::MAX - (u64::MAX % n + 1) % n;
    for _ in 0..64 {
        let x = rng.next_u64();
        if x <= zone {
            return x % n;
        }
    }
    0
}

/// The gates' tokenizer.
pub struct Tok {
    inner: tokenizers::Tokenizer,
    pub path: PathBuf,
}

impl Tok {
    pub fn load(path: &Path) -> Result<Tok, QualityError> {
        let bytes = crate::evidence::read_input(path)
            .map_err(|e| QualityError::Input { path: path.to_path_buf(), message: e.to_string() })?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| QualityError::Input {
            path: path.to_path_buf(),
            message: format!(
                "not a tokenizer.json: {e} (for a GGUF model, export one with `engine export-tokenizer --model \
                 FILE.gguf --out DIR`)"
            ),
        })?;
        Ok(Tok { inner, path: path.to_path_buf() })
    }

    /// Token IDs of `text`; `special` adds the tokenizer's special tokens (BOS),
    /// as a server would for a text prompt.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, QualityError> {
        self.inner
            .encode(text, special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| QualityError::Tokenize(format!("{}: {e}", self.path.display())))
    }
}

/// Natural-text documents (files matching a pattern, by name), encoded lazily whole
/// with no special tokens.
pub struct Texts {
    files: Vec<PathBuf>,
    encoded: Vec<Option<Vec<u32>>>,
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        Some((pre, post)) => name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post),
        None => name == pattern,
    }
}

impl Texts {
    pub fn open(dir: &Path, pattern: &str) -> Result<Texts, QualityError> {
        let io = |error| QualityError::Io { path: dir.to_path_buf(), error };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| matches(pattern, n)))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(QualityError::Input {
                path: dir.to_path_buf(),
                message: format!("no file matches {pattern:?} (run scripts/fetch-assets)"),
            });
        }
        let encoded = vec![None; files.len()];
        Ok(Texts { files, encoded })
    }

    fn doc(&mut self, i: usize, tok: &Tok) -> Result<&[u32], QualityError> {
        if self.encoded[i].is_none() {
            let path = &self.files[i];
            let text = crate::evidence::read_input_text(path)
                .map_err(|error| QualityError::Io { path: path.clone(), error })?;
            self.encoded[i] = Some(tok.encode(&text, false)?);
        }
        Ok(self.encoded[i].as_deref().unwrap_or(&[]))
    }

    /// `len` consecutive tokens for item `index` of `what`: from file `index mod F`
    /// (or the next file long enough), at a seeded offset. Returns (file name, offset, tokens).
    pub fn cut(
        &mut self,
        tok: &Tok,
        seed: u64,
        what: &str,
        index: u64,
        len: usize,
    ) -> Result<(String, u64, Vec<u32>), QualityError> {
        let n = self.files.len();
        for step in 0..n {
            let i = (index as usize + step) % n;
            let doc = self.doc(i, tok)?;
            if doc.len() >= len {
                let mut rng = item_rng(seed, what, index);
                let offset = below(&mut rng, (doc.len() - len + 1) as u64) as usize;
                let tokens = doc[offset..offset + len].to_vec();
                let name = self.files[i].file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                return Ok((name, offset as u64, tokens));
            }
        }
        Err(QualityError::Input {
            path: self.files[0].clone(),
            message: format!("no text file has {len} tokens for {what}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_draws_are_fixed_and_distinct() {
        let a: Vec<u64> = (0..5).map(|_| below(&mut item_rng(7, "nll", 1), 1000)).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(item_rng(7, "nll", 1).next_u64(), item_rng(7, "nll", 2).next_u64());
        assert_ne!(item_rng(7, "nll", 1).next_u64(), item_rng(7, "gsm", 1).next_u64());
        assert!(matches("*_gut.txt", "lear_gut.txt") && !matches("*_gut.txt", "SHA256SUMS"));
    }
}
