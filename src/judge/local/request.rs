//! What the local engine is asked and answers: the request and response types shared by the
//! async side ([`super::engine::Engine`], [`super::LocalJudge`]) and the model thread
//! (`generate`). In a file of their own so that the engine depends on the worker and the worker
//! on these, never back.

use std::time::Duration;

use crate::domain::prompt::ChatMessage;
use crate::model::LocalError;

/// How the engine generates and queues.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// Requests queued or running at once; more are refused with [`EngineError::Overloaded`].
    pub max_queue: usize,
    /// Constrain generation to the verdict JSON for the prompt's ids (the default).
    pub constrained: bool,
    /// Cap on each explanation, bytes (constrained generation).
    pub max_explanation_bytes: usize,
    /// Cap on completion tokens without constraints (constrained output is bounded by the
    /// grammar and only by the context).
    pub max_tokens: usize,
    /// Write each score as the model's expected score rather than its most likely digits: the
    /// probabilities of `1` vs `0`, of `0.` vs `0`, and of the first decimal digit, read at the
    /// score's position (constrained output only).
    pub expected_score: bool,
    /// 0 = greedy.
    pub temperature: f64,
    /// Seed of sampling when `temperature` > 0 (mixed with the prompt, so a prompt always
    /// draws the same tokens).
    pub seed: u64,
    /// Most suffix tokens of a group's prompts packed into one forward after their shared
    /// prefix; 0 runs each prompt alone.
    pub max_batch_tokens: usize,
    /// Generations (listwise verdicts, explanations) decoded together, one batched forward a
    /// step; 1 decodes one at a time.
    pub max_decode_batch: usize,
    /// Bytes of prefilled sequences' KV kept for prefix reuse (0 turns reuse off); None: the
    /// default for the model and machine ([`super::prefix_cache::default_budget`]).
    pub prefix_cache_bytes: Option<u64>,
}

/// The default of [`EngineSettings::max_batch_tokens`] (BENCHMARKS.md, "Local judge under
/// load").
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 1024;

/// The default of [`EngineSettings::max_decode_batch`] (BENCHMARKS.md, "Local judge under
/// load").
pub const DEFAULT_MAX_DECODE_BATCH: usize = 8;

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            max_queue: 64,
            constrained: true,
            max_explanation_bytes: 400,
            max_tokens: 4096,
            expected_score: true,
            temperature: 0.0,
            seed: 0,
            prefix_cache_bytes: None,
            max_batch_tokens: DEFAULT_MAX_BATCH_TOKENS,
            max_decode_batch: DEFAULT_MAX_DECODE_BATCH,
        }
    }
}

/// One judge prompt to complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub messages: Vec<ChatMessage>,
    /// Trajectory ids the verdict must score, in order.
    pub ids: Vec<String>,
    /// Checklist item ids each trajectory's verdict lists (empty: no checklist).
    pub items: Vec<String>,
    /// Free text of at most this many bytes instead of a verdict: no grammar, greedy, ends at
    /// the model's end of turn or the cap (explanations in the probability modes).
    pub free_text_bytes: Option<usize>,
    /// The attached adapter (by slot) to run, or none: the base model.
    pub adapter: Option<usize>,
}

/// Prompts whose next-token distributions are read instead of decoded: how likely each choice
/// is as the answer's first token (pointwise and pairwise judging). A group's prompts come as
/// one request: they run back to back on their shared prefix, their suffixes packed into
/// batched forwards ([`EngineSettings::max_batch_tokens`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRequest {
    pub prompts: Vec<Vec<ChatMessage>>,
    /// Each choice's spellings (`["yes", "Yes"]`); a choice's probability is that of the first
    /// tokens of its spellings (each token counted once).
    pub choices: Vec<Vec<String>>,
    /// The attached adapter (by slot) to run, or none: the base model.
    pub adapter: Option<usize>,
}

/// One prompt's choice probabilities and what reading them took.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Each choice's probability, renormalised over the choices (they sum to 1).
    pub shares: Vec<f64>,
    /// The probability of any choice before renormalising: how much of its mass the model put
    /// on the answers it was offered.
    pub coverage: f64,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV came from an earlier sequence (not prefilled again).
    pub cached_prompt_tokens: u64,
    /// Forward passes of the model this took (prefill chunks count as one pass; a packed
    /// forward counts for the first prompt in it, the shared prefix's for the first prompt).
    pub forward_passes: u64,
    pub queued: Duration,
    /// This prompt's share of the prefill: its packed forward's time split evenly, the shared
    /// prefix's counted for the first prompt.
    pub prefill: Duration,
}

/// A completion and what producing it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub text: String,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV came from an earlier sequence (not prefilled again).
    pub cached_prompt_tokens: u64,
    /// Generated tokens, forced ones included.
    pub completion_tokens: u64,
    /// Of them, tokens the grammar forced and that were run as one batch each.
    pub forced_tokens: u64,
    /// Forward passes of the model this took: the prefill, each decoded token, each batch of
    /// forced tokens.
    pub forward_passes: u64,
    pub queued: Duration,
    pub prefill: Duration,
    pub decode: Duration,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("local judge busy: {0} requests queued or running (max_queue); retry later")]
    Overloaded(usize),
    #[error("prompt of {prompt} tokens leaves no room in the model's context of {context}")]
    TooLong { prompt: usize, context: usize },
    #[error("the caller gave up")]
    Cancelled,
    #[error("the local judge's model thread stopped")]
    Stopped,
    /// The model thread panicked on this request; it was reset and serves on.
    #[error("the local judge failed on this request (a panic, logged); it was reset")]
    Panicked,
    #[error(transparent)]
    Local(#[from] LocalError),
}
