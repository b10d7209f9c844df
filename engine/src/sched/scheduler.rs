//! The per-step scheduling decision (see the module doc of `sched`).

use super::sequence::{SeqId, Sequence};
use crate::finish::{FinishReason, StopReason};
use crate::kv::BlockAllocator;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub chunked_prefill: bool,
    /// With chunked prefill, while requests are waiting, a running sequence's
    /// prefill chunk takes at most this many tokens, so that a short request
    /// arriving behind a long prompt is admitted in the same step (vLLM's
    /// `long_prefill_token_threshold`). 0 means half of `max_num_batched_tokens`.
    pub long_prefill_token_threshold: usize,
    /// Share full pages of identical prefixes (see `kv::pool`).
    pub prefix_caching: bool,
}

impl SchedulerConfig {
    fn prefill_cap(&self) -> usize {
        match self.long_prefill_token_threshold {
            0 => (self.max_num_batched_tokens / 2).max(1),
            n => n,
        }
    }
}

/// Whether a sequence can ever be scheduled, checked once at admission (the
/// server refuses the rest up front instead of letting them wait forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitLimits {
    /// Token slots of the whole KV pool.
    pub kv_slots: usize,
    pub chunked_prefill: bool,
    pub max_num_batched_tokens: usize,
}

impl FitLimits {
    pub fn new(cfg: &SchedulerConfig, kv_slots: usize) -> Self {
        FitLimits { kv_slots, chunked_prefill: cfg.chunked_prefill, max_num_batched_tokens: cfg.max_num_batched_tokens }
    }

    /// A sequence of `total_tokens` (prompt + max output) fits when its pages
    /// fit the whole pool and, without chunked prefill, it fits one step's
    /// budget (a resumed sequence recomputes prompt + generated tokens at once).
    pub fn check(&self, total_tokens: usize) -> Result<(), String> {
        if total_tokens > self.kv_slots {
            return Err(format!(
                "the request needs {total_tokens} KV token slots but the whole cache holds {}",
                self.kv_slots
            ));
        }
        if !self.chunked_prefill && total_tokens > self.max_num_batched_tokens {
            return Err(format!(
                "prompt + max_tokens ({total_tokens}) exceeds max_num_batched_tokens ({}) and chunked prefill is off",
                self.max_num_batched_tokens
            ));
        }
        Ok(())
    }
}

/// One sequence's work in a step: compute tokens `start..end` of its
/// `tokens`; `sample` when that reaches the end (a new token follows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    pub start: usize,
    pub end: usize,
    pub sample: bool,
}

/// What a step does, and what the step receipt records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepPlan {
    pub chunks: Vec<ScheduledChunk>,
    /// Admitted for the first time in this step.
    pub fresh: Vec<SeqId>,
    /// Re-admitted after a preemption in this step.
    pub resumed: Vec<SeqId>,
    /// Preempted (pages freed, back to waiting) in this step.
    pub preempted: Vec<SeqId>,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    /// Prompt tokens of this step's admissions, and how many of them were
    /// found in the prefix cache (their keys and values are not recomputed).
    pub prefix_query_tokens: usize,
    pub prefix_hit_tokens: usize,
}

impl StepPlan {
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

pub struct Scheduler {
    cfg: SchedulerConfig,
    alloc: BlockAllocator,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    admissions: u64,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig, alloc: BlockAllocator) -> Self {
        Scheduler { cfg, alloc, waiting: VecDeque::new(), running: Vec::new(), admissions: 0 }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Tokens the waiting sequences must compute before their first sample.
    pub fn waiting_tokens(&self) -> usize {
        self.waiting.iter().map(|s| s.tokens.len().saturating_sub(s.num_computed)).sum()
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// The limits a request must fit to ever be scheduled (`FitLimits`).
    pub fn fit_limits(&self) -> FitLimits {
        FitLimits::new(&self.cfg, self.alloc.total() * crate::kv::PAGE_SIZE)
    }

    pub fn add(&mut self, seq: Sequence) {
        self.waiting.push_back(seq);
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.running.iter().find(|s| s.id == id).or_else(|| self.waiting.iter().find(|s| s.id == id))
    }

    #[cfg(test)]
    fn get_mut(&mut self, id: SeqId) -> Option<&mut Sequence> {
        match self.running.iter_mut().find(|s| s.id == id) {
            Some(s) => Some(s),
            None => self.waiting.iter_mut().find(|s| s.id == id),
        }
    }

    /// Running sequences, in admission order.
    pub fn running_mut(&mut self) -> &mut [Sequence] {
        &mut self.running
    }

    /// Removes a sequence wherever it is (finished or aborted); its pages return
    /// to the pool when it is dropped.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            return Some(self.running.remove(i));
        }
        let i = self.waiting.iter().position(|s| s.id == id)?;
        self.waiting.remove(i)
    }

    /// Decides the next step.
    pub fn schedule(&mut self) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut budget = self.cfg.max_num_batched_tokens;
        // Running sequences first: decodes, then continuing prefill chunks, each
        // in admission order.
        self.running.sort_by_key(|s| s.admitted_order);
        let decodes = self.running.iter().filter(|s| s.pending() == 1).map(|s| s.id);
        let prefills = self.running.iter().filter(|s| s.pending() > 1).map(|s| s.id);
        let order: Vec<SeqId> = decodes.chain(prefills).collect();
        let mut taken: Vec<(SeqId, usize)> = Vec::new();
        for id in order {
            if budget == 0 {
                break;
            }
            let Some(i) = self.running.iter().position(|s| s.id == id) else {
                continue; // preempted earlier in this step
            };
            let pending = self.running[i].pending();
            let take = if !self.cfg.chunked_prefill {
                pending
            } else if pending > 1 && !self.waiting.is_empty() {
                pending.min(budget).min(self.cfg.prefill_cap())
            } else {
                pending.min(budget)
            };
            if take > budget {
                continue; // without chunking, a running remainder that does not fit waits
            }
            let target = self.running[i].num_computed + take;
            // Make room, preempting the most recently admitted sequences.
            let mut preempted_self = false;
            while let Some(i) = self.running.iter().position(|s| s.id == id) {
                if self.running[i].table.as_mut().map(|t| t.reserve(target)).unwrap_or(false) {
                    break;
                }
                let victim = self.running.len() - 1;
                let v = self.preempt(victim);
                plan.preempted.push(v);
                if let Some(k) = taken.iter().position(|(t, _)| *t == v) {
                    budget += taken.remove(k).1; // its chunk is dropped below
                }
                if v == id {
                    preempted_self = true;
                    break;
                }
            }
            if preempted_self {
                continue;
            }
            let Some(s) = self.running.iter().find(|s| s.id == id) else { continue };
            let start = s.num_computed;
            let sample = target == s.tokens.len();
            plan.chunks.push(ScheduledChunk { seq: s.id, start, end: target, sample });
            taken.push((id, take));
            budget -= take;
        }
        // Chunks of sequences preempted later in the loop are dropped.
        plan.chunks.retain(|c| !plan.preempted.contains(&c.seq));
        for c in &plan.chunks {
            let s = self.running.iter().find(|s| s.id == c.seq);
            if c.end - c.start == 1 && s.is_some_and(|s| s.num_computed >= s.prompt_len) {
                plan.decode_tokens += 1;
            } else {
                plan.prefill_tokens += c.end - c.start;
            }
        }
        if !plan.preempted.is_empty() {
            return plan; // no admissions in a step that preempted
        }
        while budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(front) = self.waiting.front() else { break };
            let mut table = self.alloc.new_table();
            let reused = if self.cfg.prefix_caching && front.reuse_prefix {
                table.adopt_cached_prefix(&front.tokens)
            } else {
                0
            };
            let pending = front.tokens.len() - reused;
            let take = if self.cfg.chunked_prefill { pending.min(budget) } else { pending };
            if take > budget {
                break; // FCFS: the head waits, nobody overtakes it (its shared pages return on drop)
            }
            if !table.reserve(reused + take) {
                break;
            }
            let Some(mut s) = self.waiting.pop_front() else { break };
            s.table = Some(table);
            s.num_computed = reused;
            self.admissions += 1;
            s.admitted_order = self.admissions;
            if s.ever_admitted {
                plan.resumed.push(s.id);
            } else {
                plan.fresh.push(s.id);
            }
            s.ever_admitted = true;
            plan.prefill_tokens += take;
            plan.prefix_query_tokens += s.tokens.len();
            plan.prefix_hit_tokens += reused;
            plan.chunks.push(ScheduledChunk {
                seq: s.id,
                start: reused,
                end: reused + take,
                sample: reused + take == s.tokens.len(),
            });
            budget -= take;
            self.running.push(s);
        }
        plan
    }

    /// Appends a sampled token to a running sequence and decides a token-level
    /// finish: `stop` on a stop token once `min_tokens` are generated (the
    /// sampler never picks one earlier), else `length` at `max_tokens`. The
    /// engine loop then removes a finished sequence (`remove`); stop strings
    /// are text, matched by the loop (`serve::stop`).
    pub fn on_sampled(&mut self, id: SeqId, token: u32) -> Option<FinishReason> {
        let s = self.running.iter_mut().find(|s| s.id == id)?;
        s.tokens.push(token);
        let generated = s.tokens.len() - s.prompt_len;
        if generated >= s.rules.min_tokens && s.rules.stop_token_ids.contains(&token) {
            Some(FinishReason::Stop(StopReason::Token(token)))
        } else if generated >= s.rules.max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        }
    }

    /// Records that a sequence's tokens `..end` now have keys and values in the
    /// cache, registering newly completed pages for prefix sharing.
    pub fn mark_computed(&mut self, id: SeqId, end: usize) {
        let caching = self.cfg.prefix_caching;
        let Some(s) = self.running.iter_mut().find(|s| s.id == id) else { return };
        let before = s.num_computed;
        s.num_computed = end;
        if caching
            && end / crate::kv::PAGE_SIZE > before / crate::kv::PAGE_SIZE
            && let Some(t) = s.table.as_ref()
        {
            t.register_full_pages(&s.tokens, end);
        }
    }

    fn preempt(&mut self, index: usize) -> SeqId {
        let mut s = self.running.remove(index);
        s.table = None; // pages return to the pool
        s.num_computed = 0;
        s.preemptions += 1;
        let id = s.id;
        self.waiting.push_front(s);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(blocks: usize, max_seqs: usize, budget: usize, chunked: bool) -> Scheduler {
        Scheduler::new(
            SchedulerConfig {
                max_num_seqs: max_seqs,
                max_num_batched_tokens: budget,
                chunked_prefill: chunked,
                long_prefill_token_threshold: 0,
                prefix_caching: false,
            },
            BlockAllocator::new(blocks),
        )
    }

    /// Applies a plan as the engine loop would: marks computed tokens and, for
    /// sampling chunks, appends a token.
    fn run(s: &mut Scheduler, plan: &StepPlan) {
        for c in &plan.chunks {
            let seq = s.get_mut(c.seq).unwrap();
            seq.num_computed = c.end;
            if c.sample {
                seq.tokens.push(7);
            }
        }
    }

    #[test]
    fn decode_first_then_fcfs_admission_under_limits() {
        let mut s = sched(100, 2, 64, false);
        s.add(Sequence::new(1, vec![1; 10]));
        s.add(Sequence::new(2, vec![1; 20]));
        s.add(Sequence::new(3, vec![1; 5]));
        let p = s.schedule();
        assert_eq!(p.fresh, vec![1, 2], "max_num_seqs = 2");
        assert_eq!(p.prefill_tokens, 30);
        run(&mut s, &p);
        let p = s.schedule();
        assert_eq!(p.decode_tokens, 2);
        assert!(p.fresh.is_empty());
        assert_eq!(p.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn without_chunking_a_large_prompt_waits_and_blocks_the_queue() {
        let mut s = sched(100, 8, 32, false);
        s.add(Sequence::new(1, vec![1; 20]));
        s.add(Sequence::new(2, vec![1; 20]));
        s.add(Sequence::new(3, vec![1; 4]));
        let p = s.schedule();
        assert_eq!(p.fresh, vec![1], "seq 2 does not fit the remaining 12 tokens; seq 3 must not overtake");
    }

    #[test]
    fn chunked_prefill_splits_long_prompts_and_interleaves_decode() {
        let chunk = |seq, start, end, sample| ScheduledChunk { seq, start, end, sample };
        let mut s = sched(100, 8, 16, true);
        s.add(Sequence::new(1, vec![1; 40]));
        let p = s.schedule();
        assert_eq!(p.chunks, vec![chunk(1, 0, 16, false)]);
        run(&mut s, &p);
        s.add(Sequence::new(2, vec![1; 3]));
        // With a request waiting, the running prefill takes at most half the
        // budget and the newcomer is admitted in the same step.
        let p = s.schedule();
        assert_eq!(p.chunks, vec![chunk(1, 16, 24, false), chunk(2, 0, 3, true)]);
        assert_eq!(p.fresh, vec![2]);
        run(&mut s, &p);
        // Nobody waiting: decodes first, then the prefill takes what is left.
        let p = s.schedule();
        assert_eq!(p.chunks, vec![chunk(2, 3, 4, true), chunk(1, 24, 39, false)]);
        assert_eq!((p.decode_tokens, p.prefill_tokens), (1, 15));
    }

    #[test]
    fn preempts_most_recent_admission_and_admits_nothing_that_step() {
        // 4 pages of 16 slots. Two sequences of 32 tokens take 2 pages each.
        let mut s = sched(4, 8, 256, false);
        s.add(Sequence::new(1, vec![1; 32]));
        s.add(Sequence::new(2, vec![1; 32]));
        let p = s.schedule();
        assert_eq!(p.fresh, vec![1, 2]);
        run(&mut s, &p); // both now hold 33 tokens: the next decode needs a 3rd page each
        s.add(Sequence::new(3, vec![1; 2]));
        let p = s.schedule();
        assert_eq!(p.preempted, vec![2], "the most recently admitted is preempted");
        assert!(p.fresh.is_empty() && p.resumed.is_empty(), "no admissions in a preempting step");
        assert_eq!(p.chunks.len(), 1);
        assert_eq!(s.num_waiting(), 2);
        run(&mut s, &p);
        // Sequence 2 is at the front of the queue and resumes with all 33 tokens.
        let seq2 = s.get(2).unwrap();
        assert_eq!((seq2.num_computed, seq2.tokens.len(), seq2.preemptions), (0, 33, 1));
        s.remove(1);
        let p = s.schedule();
        assert_eq!(p.resumed, vec![2]);
        assert_eq!(p.chunks[0], ScheduledChunk { seq: 2, start: 0, end: 33, sample: true });
        assert_eq!(p.fresh, vec![3]);
    }

    #[test]
    fn a_lone_sequence_that_outgrows_the_pool_preempts_itself() {
        let mut s = sched(1, 8, 256, false);
        s.add(Sequence::new(1, vec![1; 16]));
        let p = s.schedule();
        run(&mut s, &p);
        let p = s.schedule();
        assert_eq!(p.preempted, vec![1]);
        assert!(p.chunks.is_empty());
    }

    #[test]
    fn on_sampled_appends_and_decides_token_finishes() {
        use super::super::sequence::StopRules;
        let mut s = sched(100, 8, 64, false);
        let rules = StopRules { max_tokens: 3, min_tokens: 1, stop_token_ids: vec![9] };
        s.add(Sequence::new(1, vec![1; 4]).with_rules(rules));
        let p = s.schedule();
        s.mark_computed(1, p.chunks[0].end);
        assert_eq!(s.get(1).unwrap().banned_tokens(), &[9], "no stop token before min_tokens");
        assert_eq!(s.on_sampled(1, 5), None);
        assert!(s.get(1).unwrap().banned_tokens().is_empty());
        assert_eq!(s.on_sampled(1, 9), Some(FinishReason::Stop(StopReason::Token(9))));
        assert_eq!(s.get(1).unwrap().generated(), &[5, 9]);
        assert_eq!(s.on_sampled(1, 5), Some(FinishReason::Length), "max_tokens 3");
        assert_eq!(s.on_sampled(2, 5), None, "unknown sequences are ignored");
    }

    #[test]
    fn never_fitting_requests_are_refused_up_front() {
        let s = sched(2, 8, 64, false);
        assert!(s.fit_limits().check(33).unwrap_err().contains("whole cache holds 32"));
        assert!(s.fit_limits().check(30).is_ok());
        let s = sched(100, 8, 64, false);
        assert!(s.fit_limits().check(70).unwrap_err().contains("max_num_batched_tokens"));
    }

    #[test]
    fn prefix_caching_skips_cached_pages_at_admission() {
        let mut s = Scheduler::new(
            SchedulerConfig {
                max_num_seqs: 8,
                max_num_batched_tokens: 256,
                chunked_prefill: false,
                long_prefill_token_threshold: 0,
                prefix_caching: true,
            },
            BlockAllocator::new(16),
        );
        let shared: Vec<u32> = (0..40).collect();
        s.add(Sequence::new(1, shared.clone()));
        let p = s.schedule();
        assert_eq!(p.prefix_hit_tokens, 0);
        s.mark_computed(1, 40);
        let mut b = shared[..32].to_vec();
        b.extend([500, 501, 502, 503]);
        s.add(Sequence::new(2, b));
        let p = s.schedule();
        assert_eq!(p.fresh, vec![2]);
        assert_eq!(p.prefix_hit_tokens, 32);
        let c = p.chunks.iter().find(|c| c.seq == 2).unwrap();
        assert_eq!((c.start, c.end), (32, 36), "only the uncached tail is computed");
    }
}
