//! Which KV cache to start a prompt from. The permutations of one group share the judge's
//! system prompt, the rubric and the group's shared context, and differ from the first
//! reordered trajectory on; requests with the same rubric share the system prompt. Every
//! prefilled sequence is kept (a KV snapshot costs no copy: its tensors are shared) in a small
//! LRU list, and a new prompt starts from the entry sharing its longest token prefix, cut there.
//!
//! Generic over the snapshot type so the policy is tested without a model.

/// Up to `cap` token sequences with their KV snapshots, least recently used dropped first.
#[derive(Debug)]
pub(crate) struct PrefixCache<S> {
    entries: Vec<Entry<S>>,
    cap: usize,
    tick: u64,
}

#[derive(Debug)]
struct Entry<S> {
    tokens: Vec<u32>,
    state: S,
    used: u64,
}

/// Length of the common prefix of `a` and `b`.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<S> PrefixCache<S> {
    /// A cache of `cap` entries; 0 turns reuse off.
    pub fn new(cap: usize) -> PrefixCache<S> {
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

    /// The entry sharing the longest prefix with `tokens`, and that length (0: none shares).
    pub fn best(&mut self, tokens: &[u32]) -> Option<(&S, usize)> {
        let (i, n) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, tokens)))
            .max_by_key(|&(i, n)| (n, self.entries[i].used))?;
        if n == 0 {
            return None;
        }
        self.tick += 1;
        self.entries[i].used = self.tick;
        Some((&self.entries[i].state, n))
    }

    /// Keeps `state` as the KV cache of `tokens`. Entries it extends are dropped (it serves
    /// every prompt they served, as well or better).
    pub fn insert(&mut self, tokens: Vec<u32>, state: S) {
        if self.cap == 0 {
            return;
        }
        self.entries
            .retain(|e| common_prefix(&e.tokens, &tokens) < e.tokens.len());
        self.tick += 1;
        self.entries.push(Entry {
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
        assert!(c.best(&[1, 2, 3]).is_none());
        c.insert(vec![1, 2, 3, 4], "a");
        c.insert(vec![1, 2, 9, 9, 9], "b");
        c.insert(vec![7, 7], "c");
        assert_eq!(c.best(&[1, 2, 3, 5]), Some((&"a", 3)));
        assert_eq!(c.best(&[1, 2, 9, 9, 0]), Some((&"b", 4)));
        assert_eq!(c.best(&[7]), Some((&"c", 1)));
        assert!(c.best(&[8, 1, 2]).is_none(), "a prefix must start at 0");
    }

    #[test]
    fn least_recently_used_goes_first_and_extensions_replace() {
        let mut c = PrefixCache::new(2);
        c.insert(vec![1, 1], "a");
        c.insert(vec![2, 2], "b");
        c.best(&[1, 1]);
        c.insert(vec![3, 3], "c");
        assert_eq!(c.len(), 2);
        assert!(c.best(&[2, 2]).is_none(), "b was least recently used");
        assert_eq!(c.best(&[1, 1]), Some((&"a", 2)));
        // [1, 1, 5] extends [1, 1]: the longer one replaces it.
        c.insert(vec![1, 1, 5], "a2");
        assert_eq!(c.len(), 2);
        assert_eq!(c.best(&[1, 1, 7]), Some((&"a2", 2)));
        assert_eq!(c.best(&[3]), Some((&"c", 1)));
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let mut c = PrefixCache::new(0);
        c.insert(vec![1], ());
        assert_eq!(c.len(), 0);
        assert!(c.best(&[1]).is_none());
    }
}
