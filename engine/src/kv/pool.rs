//! Block accounting: which pages are free, and how many block tables reference
//! each page (prefix caching shares pages). A `BlockTable` returns its pages when
//! dropped, so a finished, aborted or preempted sequence can never leak KV memory.

use super::PAGE_SIZE;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug)]
struct PoolState {
    free: Vec<u32>,
    refcount: Vec<u32>,
}

/// Hands out page indices; cheap to clone (shared handle).
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    state: Arc<Mutex<PoolState>>,
    total: usize,
}

impl BlockAllocator {
    pub fn new(total: usize) -> Self {
        // Pop from the end: lowest indices are handed out first.
        let free = (0..total as u32).rev().collect();
        BlockAllocator { state: Arc::new(Mutex::new(PoolState { free, refcount: vec![0; total] })), total }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding this lock cannot leave the counts half-updated
        // (every update is a single push/pop and increment), so recover the guard.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn free_count(&self) -> usize {
        self.lock().free.len()
    }

    pub fn used_count(&self) -> usize {
        self.total - self.free_count()
    }

    /// An empty table bound to this pool.
    pub fn new_table(&self) -> BlockTable {
        BlockTable { blocks: Vec::new(), len: 0, alloc: self.clone() }
    }

    fn take(&self, n: usize) -> Option<Vec<u32>> {
        let mut st = self.lock();
        if st.free.len() < n {
            return None;
        }
        let at = st.free.len() - n;
        let got: Vec<u32> = st.free.split_off(at);
        for &b in &got {
            st.refcount[b as usize] = 1;
        }
        Some(got)
    }

    fn release(&self, blocks: &[u32]) {
        let mut st = self.lock();
        for &b in blocks {
            let rc = &mut st.refcount[b as usize];
            debug_assert!(*rc > 0, "block {b} released twice");
            *rc = rc.saturating_sub(1);
            if *rc == 0 {
                st.free.push(b);
            }
        }
    }
}

/// A sequence's pages, in position order, and how many token slots are written.
#[derive(Debug)]
pub struct BlockTable {
    blocks: Vec<u32>,
    len: usize,
    alloc: BlockAllocator,
}

impl BlockTable {
    /// Token slots written so far (positions `0..len` are valid data).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    pub fn capacity(&self) -> usize {
        self.blocks.len() * PAGE_SIZE
    }

    /// Pages needed to hold `new_len` tokens beyond those already held.
    pub fn blocks_needed(&self, new_len: usize) -> usize {
        new_len.div_ceil(PAGE_SIZE).saturating_sub(self.blocks.len())
    }

    /// Makes room for `new_len` tokens; false (and no change) if the pool is short.
    pub fn reserve(&mut self, new_len: usize) -> bool {
        let need = self.blocks_needed(new_len);
        if need == 0 {
            return true;
        }
        match self.alloc.take(need) {
            Some(b) => {
                self.blocks.extend(b);
                true
            }
            None => false,
        }
    }

    /// Page and slot of a position.
    #[inline]
    pub fn slot(&self, pos: usize) -> (usize, usize) {
        (self.blocks[pos / PAGE_SIZE] as usize, pos % PAGE_SIZE)
    }

    /// Marks positions `0..len` as written (the cache calls this after writing).
    pub(crate) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.capacity());
        self.len = len;
    }

    /// Forgets everything written (pages are returned to the pool).
    pub fn clear(&mut self) {
        self.alloc.release(&self.blocks);
        self.blocks.clear();
        self.len = 0;
    }
}

impl Drop for BlockTable {
    fn drop(&mut self) {
        self.alloc.release(&self.blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_return_blocks_on_drop() {
        let pool = BlockAllocator::new(4);
        let mut a = pool.new_table();
        assert!(a.reserve(17)); // 2 pages
        assert_eq!(pool.free_count(), 2);
        let mut b = pool.new_table();
        assert!(!b.reserve(48), "3 pages cannot come from 2 free");
        assert_eq!(pool.free_count(), 2, "a failed reserve takes nothing");
        assert!(b.reserve(32));
        assert_eq!(pool.free_count(), 0);
        drop(a);
        assert_eq!(pool.free_count(), 2);
        b.clear();
        assert_eq!(pool.free_count(), 4);
    }

    #[test]
    fn slots_follow_pages() {
        let pool = BlockAllocator::new(3);
        let mut t = pool.new_table();
        assert!(t.reserve(20));
        let (b0, s0) = t.slot(15);
        let (b1, s1) = t.slot(16);
        assert_eq!((s0, s1), (15, 0));
        assert_ne!(b0, b1);
        assert_eq!(t.blocks_needed(33), 1);
    }
}
