//! Which KV cache to start a prompt from. The prompts of one group share the judge's system
//! prompt, the rubric and the group's shared context, and differ from the first trajectory on;
//! requests with the same rubric share the system prompt. Every prefilled sequence is kept (a
//! KV snapshot costs no copy: its tensors are shared) up to a budget in bytes, least recently
//! used dropped first, and a new prompt starts from the entry sharing its longest token prefix,
//! cut there.
//!
//! The budget is in bytes, not entries: a training loop's groups differ tenfold in length, and
//! memory is what runs out. An entry costs its tokens times the model's KV bytes per token.
//! A group whose prompts are running pins its prefix: it is never dropped for another group's
//! entry until the group is done (the budget may be passed meanwhile, by pinned entries only).
//!
//! Every entry carries the key of the weights that wrote its keys and values (the base model, or
//! an adapter that changes every position): a prompt only starts from an entry of its own key.
//! The base model and the verdict adapters on it share one key, so a base judge and its tuned
//! judges reuse each other's prefixes.
//!
//! Generic over the key and snapshot types so the policy is tested without a model.

/// Positions of KV the default budget holds: a training step's worth of groups (16 groups of
/// 2,000-token prompts) with room to spare.
pub(crate) const DEFAULT_POSITIONS: u64 = 32_768;

/// The budget when `prefix_cache_bytes` is unset: [`DEFAULT_POSITIONS`] of the model's KV
/// (`bytes_per_token`), at most an eighth of `memory` (the machine's, when known).
pub(crate) fn default_budget(bytes_per_token: u64, memory: Option<u64>) -> u64 {
    let want = DEFAULT_POSITIONS * bytes_per_token;
    memory.map_or(want, |m| want.min(m / 8))
}

/// The machine's physical memory in bytes, when the system says.
pub(crate) fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf reads a system constant; it has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

/// Token sequences with their KV snapshots, within a byte budget.
#[derive(Debug)]
pub(crate) struct PrefixCache<K, S> {
    entries: Vec<Entry<K, S>>,
    budget: u64,
    bytes_per_token: u64,
    tick: u64,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Entry<K, S> {
    key: K,
    tokens: Vec<u32>,
    state: S,
    used: u64,
    /// Running groups whose prefix this entry holds.
    pins: u32,
}

/// Length of the common prefix of `a` and `b`.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<K: PartialEq, S> PrefixCache<K, S> {
    /// A cache of at most `budget` bytes of entries costing `bytes_per_token` a position; a
    /// budget of 0 turns reuse off.
    pub fn new(budget: u64, bytes_per_token: u64) -> PrefixCache<K, S> {
        PrefixCache {
            entries: Vec::new(),
            budget,
            bytes_per_token: bytes_per_token.max(1),
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drops every entry (pinned ones too); the lookup counts stay, as `/metrics` counters must
    /// never go back.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes the entries hold now.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| self.cost(&e.tokens)).sum()
    }

    /// Lookups that found a shared prefix, and lookups that found none, since the start.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    fn cost(&self, tokens: &[u32]) -> u64 {
        tokens.len() as u64 * self.bytes_per_token
    }

    /// The entry of `key` sharing the longest prefix with `tokens`, and that length (0: none
    /// shares).
    pub fn best(&mut self, key: &K, tokens: &[u32]) -> Option<(&S, usize)> {
        let found = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.key == *key)
            .map(|(i, e)| (i, common_prefix(&e.tokens, tokens)))
            .max_by_key(|&(i, n)| (n, self.entries[i].used))
            .filter(|&(_, n)| n > 0);
        let Some((i, n)) = found else {
            self.misses += 1;
            return None;
        };
        self.hits += 1;
        self.tick += 1;
        self.entries[i].used = self.tick;
        Some((&self.entries[i].state, n))
    }

    /// How many of `tokens` the best entry of `key` holds ([`PrefixCache::best`] without using
    /// it: nothing is counted or touched).
    pub fn covered(&self, key: &K, tokens: &[u32]) -> usize {
        self.entries
            .iter()
            .filter(|e| e.key == *key)
            .map(|e| common_prefix(&e.tokens, tokens))
            .max()
            .unwrap_or(0)
    }

    /// Keeps `state` as the KV cache of `tokens` under `key`. Entries of the same key it
    /// extends are dropped (it serves every prompt they served, as well or better), and their
    /// pins pass to it; when an entry already holds `tokens` or extends them, that one is kept
    /// instead (a verdict adapter's question, which keeps all but its last position, would
    /// otherwise push out the base model's entry it started from). Then unpinned entries go,
    /// least recently used first, until the rest fit the budget. An entry larger than the whole
    /// budget is not kept.
    pub fn insert(&mut self, key: K, tokens: Vec<u32>, state: S) {
        // An entry over the whole budget would only push everything else out, then itself.
        if tokens.is_empty() || self.cost(&tokens) > self.budget {
            return;
        }
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.key == key && common_prefix(&e.tokens, &tokens) == tokens.len())
        {
            e.used = tick;
            return;
        }
        let mut pins = 0;
        self.entries.retain(|e| {
            let extended = e.key == key && common_prefix(&e.tokens, &tokens) == e.tokens.len();
            if extended {
                pins += e.pins;
            }
            !extended
        });
        self.entries.push(Entry {
            key,
            tokens,
            state,
            used: tick,
            pins,
        });
        self.evict();
    }

    /// Drops unpinned entries, least recently used first, until the cache fits its budget.
    fn evict(&mut self) {
        let mut bytes = self.bytes();
        while bytes > self.budget {
            let Some(oldest) = (0..self.entries.len())
                .filter(|&i| self.entries[i].pins == 0)
                .min_by_key(|&i| self.entries[i].used)
            else {
                return;
            };
            bytes -= self.cost(&self.entries[oldest].tokens);
            self.entries.remove(oldest);
        }
    }

    /// Pins the entry of `key` that holds `tokens` (or the shortest one extending them): it
    /// stays until [`PrefixCache::unpin`]. False when no entry holds them.
    pub fn pin(&mut self, key: &K, tokens: &[u32]) -> bool {
        match self.holder(key, tokens, false) {
            Some(i) => {
                self.entries[i].pins += 1;
                true
            }
            None => false,
        }
    }

    /// Undoes one [`PrefixCache::pin`] of `tokens`, and evicts what no longer fits.
    pub fn unpin(&mut self, key: &K, tokens: &[u32]) {
        if let Some(i) = self.holder(key, tokens, true) {
            self.entries[i].pins -= 1;
        }
        self.evict();
    }

    /// The shortest entry of `key` whose tokens start with `tokens` (a pinned one, with
    /// `pinned`).
    fn holder(&self, key: &K, tokens: &[u32], pinned: bool) -> Option<usize> {
        (0..self.entries.len())
            .filter(|&i| {
                let e = &self.entries[i];
                e.key == *key
                    && (!pinned || e.pins > 0)
                    && common_prefix(&e.tokens, tokens) == tokens.len()
            })
            .min_by_key(|&i| self.entries[i].tokens.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One byte a token: budgets read as token counts.
    fn cache<S>(budget: u64) -> PrefixCache<i32, S> {
        PrefixCache::new(budget, 1)
    }

    #[test]
    fn longest_shared_prefix_wins() {
        let mut c = cache(100);
        assert!(c.best(&0, &[1, 2, 3]).is_none());
        c.insert(0, vec![1, 2, 3, 4], "a");
        c.insert(0, vec![1, 2, 9, 9, 9], "b");
        c.insert(0, vec![7, 7], "c");
        assert_eq!(c.best(&0, &[1, 2, 3, 5]), Some((&"a", 3)));
        assert_eq!(c.best(&0, &[1, 2, 9, 9, 0]), Some((&"b", 4)));
        assert_eq!(c.best(&0, &[7]), Some((&"c", 1)));
        assert!(c.best(&0, &[8, 1, 2]).is_none(), "a prefix must start at 0");
        assert_eq!(c.hits_and_misses(), (3, 2));
        assert_eq!(
            (c.covered(&0, &[1, 2, 9, 9, 0]), c.covered(&1, &[1, 2])),
            (4, 0)
        );
        assert_eq!(c.hits_and_misses(), (3, 2), "covered counts nothing");
    }

    #[test]
    fn least_recently_used_goes_first_and_extensions_replace() {
        let mut c = cache(4);
        c.insert(0, vec![1, 1], "a");
        c.insert(0, vec![2, 2], "b");
        c.best(&0, &[1, 1]);
        c.insert(0, vec![3, 3], "c");
        assert_eq!((c.len(), c.bytes()), (2, 4));
        assert!(c.best(&0, &[2, 2]).is_none(), "b was least recently used");
        assert_eq!(c.best(&0, &[1, 1]), Some((&"a", 2)));
        // [1, 1, 5] extends [1, 1]: the longer one replaces it, and c goes for the room.
        c.insert(0, vec![1, 1, 5], "a2");
        assert_eq!((c.len(), c.bytes()), (1, 3));
        assert_eq!(c.best(&0, &[1, 1, 7]), Some((&"a2", 2)));
        // A sequence an entry already extends is not kept: that entry is, as the most recent.
        c.insert(0, vec![1, 1], "a3");
        c.insert(0, vec![4], "d");
        assert_eq!(c.len(), 2);
        assert_eq!(c.best(&0, &[1, 1, 5, 6]), Some((&"a2", 3)));
    }

    #[test]
    fn the_budget_is_bytes_so_one_long_entry_can_push_out_several_short_ones() {
        let mut c = PrefixCache::new(40, 4);
        c.insert(0, vec![1, 1], "a");
        c.insert(0, vec![2, 2], "b");
        c.insert(0, vec![3, 3], "c");
        assert_eq!((c.len(), c.bytes()), (3, 24));
        c.insert(0, vec![4; 8], "long");
        assert_eq!((c.len(), c.bytes()), (2, 40), "a and b went, oldest first");
        // An entry over the whole budget is not kept, and pushes nothing else out for nothing.
        c.insert(0, vec![5; 11], "huge");
        assert!(c.best(&0, &[5]).is_none());
        assert_eq!(c.best(&0, &[4]), Some((&"long", 1)));
    }

    #[test]
    fn a_pinned_prefix_outlives_other_groups_until_unpinned() {
        let mut c = cache(6);
        c.insert(0, vec![1, 1, 1], "group a");
        assert!(c.pin(&0, &[1, 1, 1]));
        assert!(!c.pin(&0, &[9]), "nothing holds it");
        c.insert(0, vec![2, 2, 2], "group b");
        c.insert(0, vec![3, 3, 3], "group c");
        // The budget holds two: b, the oldest unpinned, went; a stayed though older.
        assert_eq!(c.best(&0, &[1, 1, 1]), Some((&"group a", 3)));
        assert!(c.best(&0, &[2, 2, 2]).is_none());
        // A question of group a that extends its prefix takes its place, and its pin.
        c.insert(0, vec![1, 1, 1, 4], "a + question");
        c.insert(0, vec![5, 5], "group e");
        assert_eq!(c.best(&0, &[1, 1, 1, 4]), Some((&"a + question", 4)));
        // Unpinned, it goes like any other entry: group f's room takes e, then it.
        c.unpin(&0, &[1, 1, 1]);
        c.insert(0, vec![6, 6, 6], "group f");
        assert!(c.best(&0, &[1, 1, 1]).is_none());
        assert_eq!(c.best(&0, &[6]), Some((&"group f", 1)));
    }

    #[test]
    fn a_prompt_starts_from_entries_of_its_own_key_only() {
        let mut c = PrefixCache::new(100, 1);
        c.insert(None, vec![1, 2, 3], "base");
        c.insert(Some(0), vec![1, 2, 3, 4], "adapter 0");
        assert_eq!(c.best(&None, &[1, 2, 3, 4]), Some((&"base", 3)));
        assert_eq!(c.best(&Some(0), &[1, 2, 3, 4]), Some((&"adapter 0", 4)));
        assert!(c.best(&Some(1), &[1, 2, 3]).is_none());
        // An extension under another key replaces nothing.
        c.insert(Some(1), vec![1, 2, 3, 4, 5], "adapter 1");
        assert_eq!(c.len(), 3);
        assert_eq!(c.best(&None, &[1, 2, 3, 4, 5]), Some((&"base", 3)));
    }

    #[test]
    fn the_default_budget_is_positions_of_kv_capped_by_memory() {
        // The 1.5B's KV: 28 layers × keys and values × 2 heads × 128 × 4 bytes.
        let kv = 28 * 2 * 2 * 128 * 4;
        assert_eq!(default_budget(kv, None), 32_768 * kv);
        assert_eq!(default_budget(kv, Some(64 << 30)), 32_768 * kv);
        assert_eq!(default_budget(kv, Some(8 << 30)), 1 << 30);
        assert!(physical_memory().is_some_and(|m| m > 1 << 20));
    }

    #[test]
    fn clearing_keeps_the_lookup_counts() {
        let mut c = cache(10);
        c.insert(0, vec![1, 2], ());
        c.best(&0, &[1]);
        c.best(&0, &[3]);
        c.clear();
        assert_eq!((c.len(), c.bytes(), c.hits_and_misses()), (0, 0, (1, 1)));
        assert!(c.best(&0, &[1]).is_none());
    }

    #[test]
    fn zero_budget_keeps_nothing() {
        let mut c = cache(0);
        c.insert(0, vec![1], ());
        assert_eq!(c.len(), 0);
        assert!(c.best(&0, &[1]).is_none());
    }
}
