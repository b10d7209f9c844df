//! The paged KV cache: fixed-size pages of 16 token slots drawn from one block
//! pool, per-sequence block tables, and the storage formats (f16, bf16, k16v8).
//! Owns KV memory and its accounting; it does not decide who gets blocks (the
//! scheduler does) and never reads a slot that was not written.

pub mod cache;
pub mod format;
pub mod pool;

pub use cache::{HeadValues, HeadView, KvCache, KvInventory};
pub use format::{KvFormat, ValueScales};
pub use pool::{BlockAllocator, BlockTable};

/// Token slots per page.
pub const PAGE_SIZE: usize = 16;
