//! Seeds and the few random draws traces and prompt cutting need, fixed so that the
//! same plan gives the same bytes on any machine. Owns the seed derivations and the
//! generator choice. Must not use `std`'s `DefaultHasher`, `thread_rng` or any
//! generator whose output the rand crates may change between versions.
//!
//! - Cell seed: SHA-256 of `b"harness/trace/v1\0"`, the study seed as 8 little-endian
//!   bytes, then the cell name's UTF-8 bytes.
//! - Prompt seed: SHA-256 of `b"harness/prompts/v1\0"`, the study seed (8 bytes LE),
//!   the prompt length (4 bytes LE) and the document index (4 bytes LE).
//! - Setup pad (`blocks.randomize_setup`): see [`setup_pad_len`].
//! - The 32 digest bytes seed xoshiro256++ (`rand::rngs::Xoshiro256PlusPlus`,
//!   state = four little-endian u64 words), a fully specified generator.
//! - A uniform in [0, 1) is the top 53 bits of one draw times 2^-53; an integer
//!   below n is drawn by rejection (no modulo bias).

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use sha2::{Digest, Sha256};

/// The generator every trace and cut uses.
pub type TraceRng = Xoshiro256PlusPlus;

/// The 32-byte seed of a cell's arrival process.
pub fn cell_seed(study_seed: u64, cell: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"harness/trace/v1\0");
    h.update(study_seed.to_le_bytes());
    h.update(cell.as_bytes());
    h.finalize().into()
}

/// The 32-byte seed of one panel document's cut.
pub fn prompt_seed(study_seed: u64, length: u32, doc: u32) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"harness/prompts/v1\0");
    h.update(study_seed.to_le_bytes());
    h.update(length.to_le_bytes());
    h.update(doc.to_le_bytes());
    h.finalize().into()
}

/// Longest setup pad (`blocks.randomize_setup`), in bytes; a pad is 0..SETUP_PAD_MAX.
pub const SETUP_PAD_MAX: usize = 4096;

/// The length of unit (block, arm)'s setup pad: SHA-256 of
/// `b"harness/setup/v1\0"`, the study seed (8 bytes LE), the block (4 bytes LE)
/// and the arm name, its first 8 bytes as a little-endian u64, modulo
/// `SETUP_PAD_MAX` (a power of two: no modulo bias).
pub fn setup_pad_len(study_seed: u64, block: u32, arm: &str) -> usize {
    let mut h = Sha256::new();
    h.update(b"harness/setup/v1\0");
    h.update(study_seed.to_le_bytes());
    h.update(block.to_le_bytes());
    h.update(arm.as_bytes());
    let d: [u8; 32] = h.finalize().into();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    (u64::from_le_bytes(first) % SETUP_PAD_MAX as u64) as usize
}

pub fn rng(seed: [u8; 32]) -> TraceRng {
    TraceRng::from_seed(seed)
}

/// Uniform in [0, 1) with 53 random bits.
pub fn unit(rng: &mut TraceRng) -> f64 {
    use rand::Rng;
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Uniform integer in `0..n` (`n > 0`), by rejection.
pub fn below(rng: &mut TraceRng, n: u64) -> u64 {
    use rand::Rng;
    debug_assert!(n > 0);
    let zone = u64::MAX - (u64::MAX % n + 1) % n;
    loop {
        let x = rng.next_u64();
        if x <= zone {
            return x % n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_by_cell_and_study() {
        assert_ne!(cell_seed(1, "a"), cell_seed(1, "b"));
        assert_ne!(cell_seed(1, "a"), cell_seed(2, "a"));
        assert_eq!(cell_seed(1, "a"), cell_seed(1, "a"));
        assert_ne!(prompt_seed(1, 128, 0), prompt_seed(1, 128, 1));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = rng(cell_seed(0, "x"));
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            seen[below(&mut r, 7) as usize] += 1;
        }
        assert!(seen.iter().all(|&k| k > 800), "{seen:?}");
        assert_eq!(below(&mut r, 1), 0);
    }
}
