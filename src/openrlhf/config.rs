//! `[openrlhf]`: how `POST /get_reward` assembles OpenRLHF's samples into groups. The
//! OpenRLHF adapter owns its section; `crate::config` only composes it with the others.

use serde::Deserialize;

/// `[openrlhf]`: how `POST /get_reward` (OpenRLHF's remote reward model protocol) assembles
/// samples into groups and judges them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenRlhfConfig {
    /// The rubric every group is judged with.
    pub rubric: String,
    /// The judge (a `[judges.NAME]`); unset = `default_judge`.
    pub judge: Option<String>,
    /// Samples per prompt (OpenRLHF's `n_samples_per_prompt`): a group is judged as soon as
    /// this many samples of one prompt have arrived.
    pub group_size: usize,
    /// How long a group waits for its remaining samples after its first one arrived before it
    /// is judged as it is, milliseconds.
    pub wait_ms: u64,
    /// The verifier a sample's label becomes the `expected` answer of: used when the rubric has
    /// a verifier of this name, or when `label_kind` is set.
    pub label_verifier: String,
    /// When set, labels feed an `answer_line` verifier of this kind even if the rubric has none
    /// (merged by name with the rubric's when it has one).
    pub label_kind: Option<String>,
    /// End-of-turn markers cut from the end of each response before judging (OpenRLHF decodes
    /// queries with special tokens, and a verifier reads the response's last line).
    pub strip_suffixes: Vec<String>,
    /// Most samples in one `/get_reward` request; more get 413 `payload_too_large`.
    pub max_samples: usize,
    /// Most groups filling up or being judged at once, across requests; a request that would
    /// start more gets 429 `overloaded`. This, not `[server] max_in_flight`, bounds the requests
    /// waiting for their groups (a request gives its slot back once its samples are placed).
    pub max_pending_groups: usize,
}

impl Default for OpenRlhfConfig {
    fn default() -> Self {
        OpenRlhfConfig {
            rubric: "default".into(),
            judge: None,
            group_size: 8,
            wait_ms: 2000,
            label_verifier: "answer_line".into(),
            label_kind: None,
            strip_suffixes: ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"]
                .map(String::from)
                .to_vec(),
            max_samples: 1024,
            max_pending_groups: 1024,
        }
    }
}

impl OpenRlhfConfig {
    /// Checks the section against the server's `max_group_size`; the error completes
    /// "[openrlhf] ...".
    pub fn validate(&self, max_group_size: usize) -> Result<(), String> {
        if self.group_size == 0 || self.group_size > max_group_size {
            return Err(format!(
                "group_size must be 1..={max_group_size} ([server] max_group_size)"
            ));
        }
        if self.max_samples == 0 || self.max_pending_groups == 0 {
            return Err("max_samples and max_pending_groups must be > 0".into());
        }
        Ok(())
    }
}
