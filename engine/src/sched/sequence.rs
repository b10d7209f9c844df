//! One request's scheduling state: its tokens (prompt, then generated), how
//! many of them have keys and values in the cache, its block table, and the
//! token-level rules that end it (`StopRules`). Fields are private to `sched`:
//! the scheduler is the only writer (`Scheduler::on_sampled` appends tokens and
//! decides token-level finishes); everyone else reads through accessors.

use crate::kv::BlockTable;

pub type SeqId = u64;

/// When a sequence ends on a token (`Scheduler::on_sampled`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRules {
    /// Generated tokens at which it ends with `length`.
    pub max_tokens: usize,
    /// Stop tokens are banned (never sampled) before this many are generated.
    pub min_tokens: usize,
    /// Tokens that end it with `stop`: the end-of-sequence ids (unless
    /// `ignore_eos`) and the request's `stop_token_ids`.
    pub stop_token_ids: Vec<u32>,
}

impl Default for StopRules {
    fn default() -> Self {
        StopRules { max_tokens: usize::MAX, min_tokens: 0, stop_token_ids: Vec::new() }
    }
}

#[derive(Debug)]
pub struct Sequence {
    pub(super) id: SeqId,
    /// Prompt followed by every generated token.
    pub(super) tokens: Vec<u32>,
    pub(super) prompt_len: usize,
    /// Tokens whose keys and values are in the cache (`table.len()` once
    /// the step that computes them has run).
    pub(super) num_computed: usize,
    /// Pages; `None` while waiting.
    pub(super) table: Option<BlockTable>,
    /// Order of the latest admission (fresh or resumed); preemption takes the largest.
    pub(super) admitted_order: u64,
    /// Times this sequence was preempted.
    pub(super) preemptions: u32,
    /// Whether it has ever been admitted (a later admission is a resumption).
    pub(super) ever_admitted: bool,
    /// Whether cached prefix pages may stand in for computing its prompt (not
    /// when every prompt position's logits are wanted).
    pub(super) reuse_prefix: bool,
    pub(super) rules: StopRules,
}

impl Sequence {
    pub fn new(id: SeqId, prompt: Vec<u32>) -> Self {
        let prompt_len = prompt.len();
        Sequence {
            id,
            tokens: prompt,
            prompt_len,
            num_computed: 0,
            table: None,
            admitted_order: 0,
            preemptions: 0,
            ever_admitted: false,
            reuse_prefix: true,
            rules: StopRules::default(),
        }
    }

    pub fn with_rules(mut self, rules: StopRules) -> Self {
        self.rules = rules;
        self
    }

    /// Whether cached prefix pages may stand in for computing its prompt.
    pub fn with_prefix_reuse(mut self, reuse: bool) -> Self {
        self.reuse_prefix = reuse;
        self
    }

    pub fn id(&self) -> SeqId {
        self.id
    }

    /// Prompt followed by every generated token.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    pub fn num_computed(&self) -> usize {
        self.num_computed
    }

    pub fn preemptions(&self) -> u32 {
        self.preemptions
    }

    /// Tokens still to compute before the next token can be sampled.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// Tokens the sampler must not pick now: the stop tokens, until
    /// `min_tokens` are generated.
    pub fn banned_tokens(&self) -> &[u32] {
        if self.generated().len() < self.rules.min_tokens { &self.rules.stop_token_ids } else { &[] }
    }

    /// Its tokens and its block table, borrowed together for a forward pass
    /// (the table is `None` while waiting).
    pub fn forward_parts(&mut self) -> (&[u32], Option<&mut BlockTable>) {
        (&self.tokens, self.table.as_mut())
    }
}
