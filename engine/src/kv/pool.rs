//! Block accounting: which pages are free, how many block tables reference each
//! page, and — for prefix caching — which full pages hold which token prefix.
//! A `BlockTable` returns its pages when dropped, so a finished, aborted or
//! preempted sequence can never leak KV memory.
//!
//! Prefix cache: a full page is identified by its key, the hash of its parent
//! page's key and its 16 tokens (so a key stands for the whole prefix up to that
//! page). Lookups compare the stored parent key and tokens, never the hash alone.
//! A cached page whose last reference goes away stays cached but evictable
//! (least recently released first) and counts as free for admission.

use super::PAGE_SIZE;
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

/// The identity of a full page: parent page key and its tokens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    pub parent: u64,
    pub tokens: [u32; PAGE_SIZE],
}

impl PageKey {
    /// Keys of the full pages of `tokens`, in order.
    pub fn chain(tokens: &[u32]) -> Vec<(u64, PageKey)> {
        let mut parent = 0u64;
        tokens
            .chunks_exact(PAGE_SIZE)
            .map(|c| {
                let mut t = [0u32; PAGE_SIZE];
                t.copy_from_slice(c);
                let key = PageKey { parent, tokens: t };
                let mut h = DefaultHasher::new();
                key.hash(&mut h);
                parent = h.finish();
                (parent, key)
            })
            .collect()
    }
}

#[derive(Debug)]
struct PoolState {
    free: Vec<u32>,
    refcount: Vec<u32>,
    /// Key of each cached page.
    page_key: Vec<Option<(u64, PageKey)>>,
    cached: HashMap<u64, u32>,
    /// Cached pages with no reference, by release order (oldest evicted first).
    evictable: BTreeMap<u64, u32>,
    evictable_at: Vec<Option<u64>>,
    tick: u64,
}

impl PoolState {
    fn available(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    fn pop_block(&mut self) -> Option<u32> {
        if let Some(b) = self.free.pop() {
            return Some(b);
        }
        let (&tick, &b) = self.evictable.iter().next()?;
        self.evictable.remove(&tick);
        self.evictable_at[b as usize] = None;
        if let Some((h, _)) = self.page_key[b as usize].take() {
            self.cached.remove(&h);
        }
        Some(b)
    }
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
        let st = PoolState {
            free,
            refcount: vec![0; total],
            page_key: vec![None; total],
            cached: HashMap::new(),
            evictable: BTreeMap::new(),
            evictable_at: vec![None; total],
            tick: 0,
        };
        BlockAllocator { state: Arc::new(Mutex::new(st)), total }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Every update below keeps the state consistent between statements that
        // cannot panic, so a poisoned lock is still sound to use.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Pages that can be handed out now (free, or cached with no reference).
    pub fn free_count(&self) -> usize {
        self.lock().available()
    }

    /// Pages referenced by at least one table.
    pub fn used_count(&self) -> usize {
        self.total - self.free_count()
    }

    /// Full pages currently registered in the prefix cache.
    pub fn cached_count(&self) -> usize {
        self.lock().cached.len()
    }

    /// An empty table bound to this pool.
    pub fn new_table(&self) -> BlockTable {
        BlockTable { blocks: Vec::new(), len: 0, alloc: self.clone() }
    }

    fn take(&self, n: usize) -> Option<Vec<u32>> {
        let mut st = self.lock();
        if st.available() < n {
            return None;
        }
        let mut got = Vec::with_capacity(n);
        for _ in 0..n {
            let b = st.pop_block()?;
            st.refcount[b as usize] = 1;
            got.push(b);
        }
        Some(got)
    }

    fn release(&self, blocks: &[u32]) {
        let mut st = self.lock();
        for &b in blocks {
            let i = b as usize;
            debug_assert!(st.refcount[i] > 0, "block {b} released twice");
            st.refcount[i] = st.refcount[i].saturating_sub(1);
            if st.refcount[i] == 0 {
                if st.page_key[i].is_some() {
                    st.tick += 1;
                    let t = st.tick;
                    st.evictable.insert(t, b);
                    st.evictable_at[i] = Some(t);
                } else {
                    st.free.push(b);
                }
            }
        }
    }

    /// Takes a reference to the cached page for `key`, if there is one.
    fn lookup(&self, hash: u64, key: &PageKey) -> Option<u32> {
        let mut st = self.lock();
        let b = *st.cached.get(&hash)?;
        let i = b as usize;
        if st.page_key[i].as_ref().map(|(_, k)| k) != Some(key) {
            return None; // a hash collision: never share a page that differs
        }
        if st.refcount[i] == 0
            && let Some(t) = st.evictable_at[i].take()
        {
            st.evictable.remove(&t);
        }
        st.refcount[i] += 1;
        Some(b)
    }

    /// Registers a full, computed page under its key (first writer wins).
    fn register(&self, block: u32, hash: u64, key: PageKey) {
        let mut st = self.lock();
        let i = block as usize;
        if st.page_key[i].is_some() || st.cached.contains_key(&hash) {
            return;
        }
        st.cached.insert(hash, block);
        st.page_key[i] = Some((hash, key));
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

    /// For an empty table: shares the cached pages holding the longest cached
    /// prefix of `tokens`, leaving at least one token to compute (its logits are
    /// needed). Returns the number of tokens whose keys and values are reused.
    pub fn adopt_cached_prefix(&mut self, tokens: &[u32]) -> usize {
        if !self.blocks.is_empty() || tokens.len() < 2 {
            return 0;
        }
        let usable = (tokens.len() - 1) / PAGE_SIZE * PAGE_SIZE;
        for (hash, key) in PageKey::chain(&tokens[..usable]) {
            match self.alloc.lookup(hash, &key) {
                Some(b) => self.blocks.push(b),
                None => break,
            }
        }
        self.len = self.blocks.len() * PAGE_SIZE;
        self.len
    }

    /// Registers every full page among the first `computed` tokens of `tokens`
    /// (those whose keys and values are now in the cache).
    pub fn register_full_pages(&self, tokens: &[u32], computed: usize) {
        let full = computed.min(tokens.len()) / PAGE_SIZE;
        for (i, (hash, key)) in PageKey::chain(&tokens[..full * PAGE_SIZE]).into_iter().enumerate() {
            if let Some(&b) = self.blocks.get(i) {
                self.alloc.register(b, hash, key);
            }
        }
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

    #[test]
    fn prefix_pages_are_shared_counted_and_evicted_last_released_last() {
        let pool = BlockAllocator::new(6);
        let tokens: Vec<u32> = (0..40).collect();
        let mut a = pool.new_table();
        assert!(a.reserve(40));
        a.set_len(40);
        a.register_full_pages(&tokens, 40);
        assert_eq!(pool.cached_count(), 2, "two full pages of 40 tokens");

        // Same first 32 tokens, then different: shares both pages.
        let mut other: Vec<u32> = (0..32).collect();
        other.extend([900, 901, 902]);
        let mut b = pool.new_table();
        assert_eq!(b.adopt_cached_prefix(&other), 32);
        assert_eq!(b.blocks()[..2], a.blocks()[..2]);
        assert_eq!(pool.used_count(), 3, "shared pages are counted once");

        // A prompt of exactly 32 tokens reuses only 16: the last token is recomputed.
        let mut c = pool.new_table();
        assert_eq!(c.adopt_cached_prefix(&tokens[..32]), 16);

        // Diverging in the first page shares nothing.
        let mut d = pool.new_table();
        let mut diff = tokens.clone();
        diff[3] = 77;
        assert_eq!(d.adopt_cached_prefix(&diff), 0);

        drop((a, b, c, d));
        assert_eq!(pool.free_count(), 6, "cached pages with no reference are free for admission");
        assert_eq!(pool.cached_count(), 2);
        // Taking all six pages evicts the cached ones.
        let mut e = pool.new_table();
        assert!(e.reserve(96));
        assert_eq!(pool.cached_count(), 0);
        let mut f = pool.new_table();
        assert_eq!(f.adopt_cached_prefix(&tokens), 0);
        drop(e);
    }
}
