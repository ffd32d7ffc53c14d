//! Which KV cache to start a prompt from. The permutations of one group share the judge's
//! system prompt, the rubric and the group's shared context, and differ from the first
//! reordered trajectory on; requests with the same rubric share the system prompt. Every
//! prefilled sequence is kept (a KV snapshot costs no copy: its tensors are shared) in a small
//! LRU list, and a new prompt starts from the entry sharing its longest token prefix, cut there.
//!
//! Every entry carries the key of the weights that wrote its keys and values (the base model, or
//! an adapter that changes every position): a prompt only starts from an entry of its own key.
//! The base model and the verdict adapters on it share one key, so a base judge and its tuned
//! judges reuse each other's prefixes.
//!
//! Generic over the key and snapshot types so the policy is tested without a model.

/// Up to `cap` token sequences with their KV snapshots, least recently used dropped first.
#[derive(Debug)]
pub(crate) struct PrefixCache<K, S> {
    entries: Vec<Entry<K, S>>,
    cap: usize,
    tick: u64,
}

#[derive(Debug)]
struct Entry<K, S> {
    key: K,
    tokens: Vec<u32>,
    state: S,
    used: u64,
}

/// Length of the common prefix of `a` and `b`.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<K: PartialEq, S> PrefixCache<K, S> {
    /// A cache of `cap` entries; 0 turns reuse off.
    pub fn new(cap: usize) -> PrefixCache<K, S> {
        PrefixCache {
            entries: Vec::new(),
            cap,
            tick: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry of `key` sharing the longest prefix with `tokens`, and that length (0: none
    /// shares).
    pub fn best(&mut self, key: &K, tokens: &[u32]) -> Option<(&S, usize)> {
        let (i, n) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.key == *key)
            .map(|(i, e)| (i, common_prefix(&e.tokens, tokens)))
            .max_by_key(|&(i, n)| (n, self.entries[i].used))?;
        if n == 0 {
            return None;
        }
        self.tick += 1;
        self.entries[i].used = self.tick;
        Some((&self.entries[i].state, n))
    }

    /// Keeps `state` as the KV cache of `tokens` under `key`. Entries of the same key it
    /// extends are dropped (it serves every prompt they served, as well or better); when an
    /// entry already holds `tokens` or extends them, that one is kept instead (a verdict
    /// adapter's probe, which keeps all but its last position, would otherwise push out the
    /// base model's entry it started from).
    pub fn insert(&mut self, key: K, tokens: Vec<u32>, state: S) {
        if self.cap == 0 {
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
        self.entries
            .retain(|e| e.key != key || common_prefix(&e.tokens, &tokens) < e.tokens.len());
        self.entries.push(Entry {
            key,
            tokens,
            state,
            used: self.tick,
        });
        while self.entries.len() > self.cap {
            let oldest = (0..self.entries.len())
                .min_by_key(|&i| self.entries[i].used)
                .expect("not empty");
            self.entries.remove(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_shared_prefix_wins() {
        let mut c = PrefixCache::new(3);
        assert!(c.best(&0, &[1, 2, 3]).is_none());
        c.insert(0, vec![1, 2, 3, 4], "a");
        c.insert(0, vec![1, 2, 9, 9, 9], "b");
        c.insert(0, vec![7, 7], "c");
        assert_eq!(c.best(&0, &[1, 2, 3, 5]), Some((&"a", 3)));
        assert_eq!(c.best(&0, &[1, 2, 9, 9, 0]), Some((&"b", 4)));
        assert_eq!(c.best(&0, &[7]), Some((&"c", 1)));
        assert!(c.best(&0, &[8, 1, 2]).is_none(), "a prefix must start at 0");
    }

    #[test]
    fn least_recently_used_goes_first_and_extensions_replace() {
        let mut c = PrefixCache::new(2);
        c.insert(0, vec![1, 1], "a");
        c.insert(0, vec![2, 2], "b");
        c.best(&0, &[1, 1]);
        c.insert(0, vec![3, 3], "c");
        assert_eq!(c.len(), 2);
        assert!(c.best(&0, &[2, 2]).is_none(), "b was least recently used");
        assert_eq!(c.best(&0, &[1, 1]), Some((&"a", 2)));
        // [1, 1, 5] extends [1, 1]: the longer one replaces it.
        c.insert(0, vec![1, 1, 5], "a2");
        assert_eq!(c.len(), 2);
        assert_eq!(c.best(&0, &[1, 1, 7]), Some((&"a2", 2)));
        assert_eq!(c.best(&0, &[3]), Some((&"c", 1)));
        // A sequence an entry already extends is not kept: that entry is, as the most recent.
        c.insert(0, vec![1, 1], "a3");
        c.insert(0, vec![4], "d");
        assert_eq!(c.len(), 2);
        assert_eq!(c.best(&0, &[1, 1, 5, 6]), Some((&"a2", 3)));
        assert!(c.best(&0, &[3]).is_none(), "c was least recently used");
    }

    #[test]
    fn a_prompt_starts_from_entries_of_its_own_key_only() {
        let mut c = PrefixCache::new(3);
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
    fn zero_capacity_keeps_nothing() {
        let mut c = PrefixCache::new(0);
        c.insert(0, vec![1], ());
        assert_eq!(c.len(), 0);
        assert!(c.best(&0, &[1]).is_none());
    }
}
