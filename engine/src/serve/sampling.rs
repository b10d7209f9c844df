//! Token selection for one sequence: greedy (temperature 0, or top_k 1) or
//! seeded random sampling with temperature, min-p, top-k and top-p; end-of-sequence
//! masking for `min_tokens`; and log-probabilities of the raw distribution.

use crate::kernels::{argmax, log_softmax};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

#[derive(Debug, Clone)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// 0 or negative: no top-k limit.
    pub top_k: i64,
    /// 0: no filter; else tokens below `min_p` times the top probability (after
    /// temperature) are dropped before top-k and top-p (vLLM's order).
    pub min_p: f32,
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub ignore_eos: bool,
    pub stop_token_ids: Vec<u32>,
    /// Top alternatives per generated token (None: no logprobs).
    pub logprobs: Option<usize>,
    /// Top alternatives per prompt token (None: no prompt logprobs).
    pub prompt_logprobs: Option<usize>,
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }
}

/// A token's log-probability, its rank (1 = most likely) and the top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f64,
    pub rank: usize,
    pub top: Vec<(u32, f64)>,
}

/// Log-probability of `token` under `logits`, with its rank and the top `k`.
pub fn token_logprob(logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let lp = log_softmax(logits);
    let mine = lp[token as usize];
    let rank = 1 + lp.iter().filter(|&&v| v > mine).count();
    let mut top = Vec::new();
    if k > 0 {
        let mut idx: Vec<usize> = (0..lp.len()).collect();
        let k = k.min(lp.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
        idx.truncate(k);
        idx.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
        top = idx.into_iter().map(|i| (i as u32, lp[i])).collect();
    }
    TokenLogprob { token, logprob: mine, rank, top }
}

pub struct Sampler {
    rng: Xoshiro256PlusPlus,
}

impl Sampler {
    pub fn new(seed: u64) -> Self {
        Sampler { rng: Xoshiro256PlusPlus::seed_from_u64(seed) }
    }

    /// Picks the next token. `banned` (end-of-sequence ids before `min_tokens`)
    /// are never chosen.
    pub fn sample(&mut self, logits: &[f32], params: &SamplingParams, banned: &[u32]) -> u32 {
        let masked;
        let logits = if banned.is_empty() {
            logits
        } else {
            let mut m = logits.to_vec();
            for &b in banned {
                if let Some(v) = m.get_mut(b as usize) {
                    *v = f32::NEG_INFINITY;
                }
            }
            masked = m;
            &masked
        };
        if params.is_greedy() {
            return argmax(logits);
        }
        let t = params.temperature as f64;
        let mut cand: Vec<(usize, f64)> =
            logits.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| (i, v as f64 / t)).collect();
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if params.min_p > 0.0
            && let Some(&(_, top)) = cand.first()
        {
            // p_i / p_max = exp(l_i - l_max): no normalization needed.
            let floor = top + f64::from(params.min_p).ln();
            cand.retain(|c| c.1 >= floor);
        }
        if params.top_k > 0 {
            cand.truncate(params.top_k as usize);
        }
        let max = cand.first().map(|c| c.1).unwrap_or(0.0);
        let mut probs: Vec<f64> = cand.iter().map(|c| (c.1 - max).exp()).collect();
        let z: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= z);
        if params.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= params.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            let z: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= z);
        }
        let u: f64 = self.rng.random::<f64>();
        let mut acc = 0.0;
        for (i, p) in probs.iter().enumerate() {
            acc += p;
            if u < acc {
                return cand[i].0 as u32;
            }
        }
        cand[probs.len().saturating_sub(1)].0 as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: i64, top_p: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            min_p: 0.0,
            max_tokens: 1,
            min_tokens: 0,
            ignore_eos: false,
            stop_token_ids: vec![],
            logprobs: None,
            prompt_logprobs: None,
        }
    }

    #[test]
    fn greedy_and_banned() {
        let mut s = Sampler::new(1);
        let l = [0.1, 3.0, 2.0];
        assert_eq!(s.sample(&l, &params(0.0, 0, 1.0), &[]), 1);
        assert_eq!(s.sample(&l, &params(0.0, 0, 1.0), &[1]), 2);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let l: Vec<f32> = (0..50).map(|i| (i as f32) * 0.1).collect();
        let p = params(1.0, 3, 1.0);
        let a: Vec<u32> = {
            let mut s = Sampler::new(42);
            (0..100).map(|_| s.sample(&l, &p, &[])).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(42);
            (0..100).map(|_| s.sample(&l, &p, &[])).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&t| t >= 47), "top_k 3 keeps only ids 47..49");
        assert!(a.iter().any(|&t| t != 49), "temperature 1 is not greedy");
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        let l = [10.0f32, 9.9, -10.0, -10.0];
        let p = params(1.0, 0, 0.5);
        let mut s = Sampler::new(3);
        for _ in 0..50 {
            assert_eq!(s.sample(&l, &p, &[]), 0, "top_p 0.5 keeps only the top token (p ~ 0.52)");
        }
    }

    #[test]
    fn min_p_drops_tokens_below_its_share_of_the_top_one() {
        // Probabilities at temperature 1 proportional to e^0, e^-1, e^-2, e^-3: relative
        // to the top 1, 0.37, 0.14, 0.05. min_p 0.2 keeps ids 0 and 1; min_p 0.1 adds 2.
        let l = [0.0f32, -1.0, -2.0, -3.0];
        let draws = |min_p: f32| -> std::collections::BTreeSet<u32> {
            let p = SamplingParams { min_p, ..params(1.0, 0, 1.0) };
            let mut s = Sampler::new(9);
            (0..2000).map(|_| s.sample(&l, &p, &[])).collect()
        };
        assert_eq!(draws(0.2), [0, 1].into());
        assert_eq!(draws(0.1), [0, 1, 2].into());
        assert_eq!(draws(0.0), [0, 1, 2, 3].into(), "0 is no filter");
        // Temperature first (vLLM's order): at 0.5 the shares are 0.14, 0.02, ...
        let p = SamplingParams { min_p: 0.1, ..params(0.5, 0, 1.0) };
        let mut s = Sampler::new(9);
        assert!((0..2000).all(|_| s.sample(&l, &p, &[]) <= 1));
    }

    #[test]
    fn logprob_rank_and_top() {
        let t = token_logprob(&[0.0, 2.0, 1.0], 2, 2);
        assert_eq!(t.rank, 2);
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2]);
        let total: f64 = [0.0f64, 2.0, 1.0].iter().map(|v| v.exp()).sum();
        assert!((t.logprob - (1.0 - total.ln())).abs() < 1e-12);
    }
}
