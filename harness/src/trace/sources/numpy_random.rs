//! NumPy's `np.random.default_rng(seed)` as far as vLLM's `RandomDataset` uses it:
//! `SeedSequence(seed)` expanded into a PCG64 state (XSL-RR 128/64, NumPy's
//! default bit generator), and `Generator.integers(low, high, size)` for int64
//! results whose range fits 32 bits (Lemire's bounded method on NumPy's buffered
//! 32-bit draws: each 64-bit output serves two 32-bit draws, low half first, and
//! the spare half carries over to the next call as in NumPy's bit generator
//! state). Owns bit-exactness with NumPy 2.x (`numpy/random/bit_generator.pyx`,
//! `src/pcg64/pcg64.h`, `src/distributions/distributions.c`); the token-for-token
//! test against vLLM's own code (tests/integration/vllm_datasets.rs) holds it to
//! that. Must not be used for the harness's own seeds (those are `plan::seed`).

/// NumPy's `SeedSequence` pool size and hash constants (`bit_generator.pyx`).
const POOL_SIZE: usize = 4;
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;

/// PCG's default 128-bit multiplier.
const PCG_MULT: u128 = (0x2360_ed05_1fc6_5da4_u128 << 64) | 0x4385_df64_9fcc_f645;

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

/// `SeedSequence(seed).generate_state(4, np.uint64)`.
fn seed_sequence_state(seed: u64) -> [u64; 4] {
    // The entropy as 32-bit words, least significant first (0 is one word).
    let mut entropy = vec![(seed & 0xffff_ffff) as u32];
    if seed >> 32 != 0 {
        entropy.push((seed >> 32) as u32);
    }
    let mut pool = [0u32; POOL_SIZE];
    let mut hash_const = INIT_A;
    for (i, slot) in pool.iter_mut().enumerate() {
        *slot = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hash_const);
    }
    for src in 0..POOL_SIZE {
        for dst in 0..POOL_SIZE {
            if src != dst {
                let h = hashmix(pool[src], &mut hash_const);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &e in entropy.iter().skip(POOL_SIZE) {
        for slot in pool.iter_mut() {
            *slot = mix(*slot, hashmix(e, &mut hash_const));
        }
    }
    let mut words = [0u32; 8];
    let mut hash_const = INIT_B;
    for (i, w) in words.iter_mut().enumerate() {
        let mut v = pool[i % POOL_SIZE] ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hash_const);
        *w = v ^ (v >> XSHIFT);
    }
    std::array::from_fn(|i| u64::from(words[2 * i]) | (u64::from(words[2 * i + 1]) << 32))
}

/// NumPy's `Generator(PCG64(seed))`, the draws vLLM's random dataset makes.
#[derive(Debug, Clone)]
pub struct NumpyGenerator {
    state: u128,
    inc: u128,
    /// The spare upper half of the last 64-bit output, for the next 32-bit draw.
    spare: Option<u32>,
}

impl NumpyGenerator {
    /// `np.random.default_rng(seed)`.
    pub fn new(seed: u64) -> NumpyGenerator {
        let s = seed_sequence_state(seed);
        let init_state = (u128::from(s[0]) << 64) | u128::from(s[1]);
        let init_seq = (u128::from(s[2]) << 64) | u128::from(s[3]);
        let mut g = NumpyGenerator { state: 0, inc: (init_seq << 1) | 1, spare: None };
        g.step();
        g.state = g.state.wrapping_add(init_state);
        g.step();
        g
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    fn next_u64(&mut self) -> u64 {
        self.step();
        let hi = (self.state >> 64) as u64;
        let lo = self.state as u64;
        (hi ^ lo).rotate_right((self.state >> 122) as u32)
    }

    fn next_u32(&mut self) -> u32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let next = self.next_u64();
        self.spare = Some((next >> 32) as u32);
        next as u32
    }

    /// Lemire's bounded draw in 0..=rng (NumPy's `buffered_bounded_lemire_uint32`).
    fn bounded_u32(&mut self, rng: u32) -> u32 {
        if rng == u32::MAX {
            return self.next_u32();
        }
        let excl = rng + 1;
        let mut m = u64::from(self.next_u32()) * u64::from(excl);
        let mut leftover = m as u32;
        if leftover < excl {
            let threshold = (u32::MAX - rng) % excl;
            while leftover < threshold {
                m = u64::from(self.next_u32()) * u64::from(excl);
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }

    /// `integers(low, high, size=n)` (int64, high exclusive); `None` when the
    /// range is empty or wider than 32 bits (never for token counts and IDs).
    pub fn integers(&mut self, low: i64, high: i64, n: usize) -> Option<Vec<i64>> {
        let rng = u32::try_from(high.checked_sub(1)?.checked_sub(low)?).ok()?;
        if rng == 0 {
            return Some(vec![low; n]);
        }
        Some((0..n).map(|_| low + i64::from(self.bounded_u32(rng))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SeedSequence(0).generate_state(4, np.uint64)` and the first draws of
    /// `np.random.default_rng(0)`, as NumPy 2.x prints them.
    #[test]
    fn seed_zero_matches_numpys_published_state_and_draws() {
        let mut g = NumpyGenerator::new(0);
        // np.random.default_rng(0).integers(0, 10, size=10)
        assert_eq!(g.integers(0, 10, 10).unwrap(), [8, 6, 5, 2, 3, 0, 0, 0, 1, 8]);
        // A zero-width range draws nothing: the stream is unchanged after it.
        let mut a = NumpyGenerator::new(7);
        let mut b = NumpyGenerator::new(7);
        assert_eq!(a.integers(5, 6, 3).unwrap(), [5, 5, 5]);
        assert_eq!(a.integers(0, 1000, 4), b.integers(0, 1000, 4));
        assert!(a.integers(0, 0, 1).is_none());
    }
}
