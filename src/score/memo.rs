//! The plan memo: a cache hit without re-running dedup and rendering.
//!
//! A group's cache keys depend only on what the judge would read — its trajectories' messages,
//! tools, reference answer, rubric, judges and number of orders — and on the scorer's fixed templates and dedup
//! settings. So the keys (and what is needed to map verdicts back) are remembered in memory under
//! a SHA-256 of those inputs. A request seen before then costs a hash of its messages and store
//! lookups, not dedup + render + a hash of the rendered prompt; any miss in the store falls back
//! to the full path, which renders the prompt the judge needs anyway.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::judging::Skeleton;
use super::ScoreRequest;
use crate::domain::rubric::Rubric;

/// Entries per generation; the memo holds at most twice this many plans.
const GENERATION: usize = 4096;

/// Feeds `Hash` into SHA-256. `Hash` for strings and collections is prefix-free (strings end in
/// 0xff, collections start with their length), so distinct inputs give distinct byte streams.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        unreachable!("only the SHA-256 digest is read")
    }
}

pub(super) type MemoKey = [u8; 32];

/// The memo key of a request judged by `judges` (names, in panel order) with `permutations`.
pub(super) fn memo_key(
    rubric: &Rubric,
    judges: &[String],
    permutations: u32,
    req: &ScoreRequest,
) -> MemoKey {
    let mut h = Sha256Hasher(Sha256::new());
    super::CACHE_SCHEMA.hash(&mut h);
    rubric.version.hash(&mut h);
    judges.hash(&mut h);
    permutations.hash(&mut h);
    match &req.tools {
        Some(t) => {
            1u8.hash(&mut h);
            serde_json::to_string(t)
                .expect("serialising plain data cannot fail")
                .hash(&mut h);
        }
        None => 0u8.hash(&mut h),
    }
    req.reference.hash(&mut h);
    req.judge_mode.hash(&mut h);
    req.trajectories.len().hash(&mut h);
    for t in &req.trajectories {
        t.messages.hash(&mut h);
    }
    h.0.finalize().into()
}

/// Two generations of plans: lookups promote from the old one; when the new one fills, the old
/// one is dropped. Bounded memory, and plans in use stay.
#[derive(Debug, Default)]
pub(super) struct PlanMemo {
    inner: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    current: HashMap<MemoKey, Arc<Skeleton>>,
    previous: HashMap<MemoKey, Arc<Skeleton>>,
}

impl Generations {
    fn insert(&mut self, key: MemoKey, plan: Arc<Skeleton>) {
        if self.current.len() >= GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, plan);
    }
}

impl PlanMemo {
    pub(super) fn get(&self, key: &MemoKey) -> Option<Arc<Skeleton>> {
        let mut g = self.inner.lock().expect("plan memo poisoned");
        if let Some(p) = g.current.get(key) {
            return Some(p.clone());
        }
        let p = g.previous.remove(key)?;
        g.insert(*key, p.clone());
        Some(p)
    }

    pub(super) fn insert(&self, key: MemoKey, plan: Arc<Skeleton>) {
        self.inner
            .lock()
            .expect("plan memo poisoned")
            .insert(key, plan);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let g = self.inner.lock().unwrap();
        g.current.len() + g.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::rubric::RubricSet;
    use serde_json::json;

    fn request(answer: &str, tools: Option<serde_json::Value>) -> ScoreRequest {
        let mut body = json!({"trajectories": [
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]},
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}
        ]});
        if let Some(t) = tools {
            body["tools"] = t;
        }
        ScoreRequest::from_json(&body, 64).unwrap()
    }

    #[test]
    fn key_changes_with_everything_the_judge_reads() {
        let rubrics = RubricSet::load(None).unwrap();
        let default = rubrics.get("default").unwrap();
        let other = rubrics.get("rag_faithfulness").unwrap();
        let j = vec!["a".to_string()];
        let base = memo_key(default, &j, 1, &request("a", None));
        assert_eq!(base, memo_key(default, &j, 1, &request("a", None)));
        let variants = [
            memo_key(default, &j, 1, &request("a2", None)),
            memo_key(other, &j, 1, &request("a", None)),
            memo_key(default, &["b".to_string()], 1, &request("a", None)),
            memo_key(default, &j, 3, &request("a", None)),
            memo_key(
                default,
                &j,
                1,
                &request("a", Some(json!([{"type": "function"}]))),
            ),
            {
                let mut r = request("a", None);
                r.reference = Some("4120".into());
                memo_key(default, &j, 1, &r)
            },
        ];
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(&base, v, "variant {i} must change the key");
        }
        // Strings are length-delimited: moving a boundary between two contents changes the key.
        let ab = json!({"trajectories": [{"messages": [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "c"}]}]});
        let a_bc = json!({"trajectories": [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "bc"}]}]});
        assert_ne!(
            memo_key(default, &j, 1, &ScoreRequest::from_json(&ab, 64).unwrap()),
            memo_key(default, &j, 1, &ScoreRequest::from_json(&a_bc, 64).unwrap())
        );
    }

    #[test]
    fn memo_is_bounded_and_keeps_recent_plans() {
        let memo = PlanMemo::default();
        let plan = Arc::new(Skeleton::empty_for_tests());
        let key = |i: usize| {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_le_bytes());
            k
        };
        for i in 0..3 * GENERATION {
            memo.insert(key(i), plan.clone());
            // Key 0 is used all along, so it survives every generation change.
            assert!(memo.get(&key(0)).is_some(), "after {i} inserts");
        }
        assert!(memo.len() <= 2 * GENERATION);
        assert!(
            memo.get(&key(1)).is_none(),
            "an old, unused plan is dropped"
        );
    }
}
