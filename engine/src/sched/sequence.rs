//! One request's scheduling state: its tokens (prompt, then generated), how
//! many of them have keys and values in the cache, and its block table.

use crate::kv::BlockTable;

pub type SeqId = u64;

#[derive(Debug)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt followed by every generated token.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Tokens whose keys and values are in the cache (`table.len()` once
    /// the step that computes them has run).
    pub num_computed: usize,
    /// Pages; `None` while waiting.
    pub table: Option<BlockTable>,
    /// Order of the latest admission (fresh or resumed); preemption takes the largest.
    pub admitted_order: u64,
    /// Times this sequence was preempted.
    pub preemptions: u32,
    /// Whether it has ever been admitted (a later admission is a resumption).
    pub ever_admitted: bool,
    /// Whether cached prefix pages may stand in for computing its prompt (not
    /// when every prompt position's logits are wanted).
    pub reuse_prefix: bool,
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
        }
    }

    /// Tokens still to compute before the next token can be sampled.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }
}
