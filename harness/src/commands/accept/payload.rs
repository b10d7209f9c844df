//! Prompts of the acceptance suite: deterministic from the seed, so every server is
//! sent byte-identical payloads. Token-ID prompts draw small ids from a fixed range
//! (a server's vocabulary bound is unknown); text prompts draw words from a fixed
//! list. Owns the generator (splitmix64, written out so a dependency upgrade can
//! never change a payload). Must not touch the network or read a tokenizer.

use serde_json::{Value, json};

/// A fixed word list for `--text-prompts`: common words, one token or a few in any
/// real tokenizer.
const WORDS: &[&str] = &[
    "the", "river", "stone", "light", "winter", "garden", "house", "silver", "morning", "bread", "window", "quiet",
    "mountain", "letter", "candle", "road", "forest", "music", "harbor", "yellow", "market", "paper", "cloud", "table",
    "evening", "orchard", "bridge", "lantern", "meadow", "copper", "village", "thunder", "autumn", "basket", "feather",
    "island", "kettle", "ladder", "mirror", "needle", "ocean", "pepper", "rabbit", "saddle", "tower", "valley",
    "wagon", "anchor", "blanket", "chimney", "desert", "engine", "fountain", "glacier", "hammer", "iron", "jacket",
    "kitchen", "lemon", "marble", "north", "olive", "pillow", "salt",
];

/// The generator: splitmix64 (Steele, Lea and Flood, 2014).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A stream for one purpose: the seed mixed with a tag and an index.
    pub fn new(seed: u64, tag: &str, index: u64) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a of the tag
        for b in tag.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let mut r = Rng(seed ^ h.rotate_left(17) ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi > lo`); the modulo bias is irrelevant here.
    pub fn below(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }
}

/// One prompt: token ids or text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Ids(Vec<u32>),
    Text(String),
}

impl Prompt {
    /// The `prompt` field of a completions request.
    pub fn to_json(&self) -> Value {
        match self {
            Prompt::Ids(ids) => json!(ids),
            Prompt::Text(t) => json!(t),
        }
    }

    /// Length in ids or words, for the record.
    pub fn units(&self) -> usize {
        match self {
            Prompt::Ids(ids) => ids.len(),
            Prompt::Text(t) => t.split(' ').count(),
        }
    }

    fn last_unit(&self) -> Option<String> {
        match self {
            Prompt::Ids(ids) => ids.last().map(u32::to_string),
            Prompt::Text(t) => t.rsplit(' ').next().map(str::to_string),
        }
    }
}

/// How prompts are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptGen {
    pub seed: u64,
    pub text: bool,
    /// Token ids are drawn from `id_lo..id_hi`.
    pub id_lo: u32,
    pub id_hi: u32,
}

impl PromptGen {
    /// Prompt `index` of the family `tag`, `len` ids (or words) long.
    pub fn prompt(&self, tag: &str, index: u64, len: usize) -> Prompt {
        let mut rng = Rng::new(self.seed, tag, index);
        if self.text {
            Prompt::Text(Self::words(&mut rng, len))
        } else {
            let (lo, hi) = (u64::from(self.id_lo), u64::from(self.id_hi));
            Prompt::Ids((0..len).map(|_| rng.below(lo, hi) as u32).collect())
        }
    }

    /// `count` distinct prompts of one family whose last ids (or words) also differ
    /// when the range allows it: a model that only echoes its input still answers
    /// each prompt differently, so mixed answers show. Bounded: at most 64 draws
    /// per prompt, after which a repeated last unit is accepted.
    pub fn distinct(&self, tag: &str, count: usize, len: usize) -> Vec<Prompt> {
        let mut out: Vec<Prompt> = Vec::with_capacity(count);
        for i in 0..count {
            let mut chosen = self.prompt(tag, (i as u64) << 8, len);
            for attempt in 1..64u64 {
                let clash = out.iter().any(|p| *p == chosen || p.last_unit() == chosen.last_unit());
                if !clash {
                    break;
                }
                chosen = self.prompt(tag, ((i as u64) << 8) + attempt, len);
            }
            out.push(chosen);
        }
        out
    }

    /// A chat message's text (always words: chat takes text).
    pub fn chat_text(&self, tag: &str, index: u64, words: usize) -> String {
        Self::words(&mut Rng::new(self.seed, tag, index), words)
    }

    fn words(rng: &mut Rng, len: usize) -> String {
        let n = WORDS.len() as u64;
        (0..len.max(1)).map(|_| WORDS[rng.below(0, n) as usize]).collect::<Vec<_>>().join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(text: bool) -> PromptGen {
        PromptGen { seed: 7, text, id_lo: 100, id_hi: 256 }
    }

    #[test]
    fn deterministic_and_in_range() {
        let g = generator(false);
        assert_eq!(g.prompt("a", 1, 32), g.prompt("a", 1, 32));
        assert_ne!(g.prompt("a", 1, 32), g.prompt("a", 2, 32));
        assert_ne!(g.prompt("a", 1, 32), g.prompt("b", 1, 32));
        let Prompt::Ids(ids) = g.prompt("a", 1, 500) else { panic!("ids") };
        assert_eq!(ids.len(), 500);
        assert!(ids.iter().all(|&i| (100..256).contains(&i)));
        // Pinned (values from an independent Python splitmix64): a change of the
        // generator would silently change every payload.
        assert_eq!(Rng::new(0, "", 0).next_u64(), 2_761_005_933_058_287_195);
        assert_eq!(g.prompt("pin", 0, 4), Prompt::Ids(vec![160, 112, 117, 157]));
    }

    #[test]
    fn distinct_prompts_end_differently() {
        let g = generator(false);
        let ps = g.distinct("conc", 8, 16);
        for (i, a) in ps.iter().enumerate() {
            for b in &ps[i + 1..] {
                assert_ne!(a.last_unit(), b.last_unit());
            }
        }
        let t = generator(true).distinct("conc", 4, 10);
        assert!(t.iter().all(|p| matches!(p, Prompt::Text(s) if s.split(' ').count() == 10)));
    }
}
