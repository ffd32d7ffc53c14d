//! Reading token probabilities: the capability the pointwise and pairwise modes need, which the
//! local judge (from its model's logits) and the remote judge (from its server's `logprobs`)
//! both offer. It lives behind one narrow trait, reached through
//! [`super::Judge::probabilities`], so the scorer asks every backend alike and a judge without
//! the capability simply offers none.

use async_trait::async_trait;

use super::{Completion, JudgeError, JudgeFailure};
use crate::domain::prompt::ChatMessage;

/// Each choice's probability as a judge's next token (pointwise and pairwise judging).
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceProbabilities {
    /// Renormalised over the choices: they sum to 1.
    pub shares: Vec<f64>,
    /// The choices' total probability before renormalising.
    pub coverage: f64,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV was reused, not prefilled.
    pub cached_prompt_tokens: u64,
    /// Forward passes the model ran for it (one prefill).
    pub forward_passes: u64,
}

/// A judge that reads token probabilities. Calls are bounded by the judge's own limits; the
/// verdict deadline is the scorer's to keep.
#[async_trait]
pub trait ProbabilityJudge: Send + Sync {
    /// How likely each choice is as the first token of the judge's answer to each of
    /// `prompts`, asked together (a group's prompts: a local judge runs them on their shared
    /// prefix).
    async fn choice_probabilities(
        &self,
        prompts: Vec<Vec<ChatMessage>>,
        choices: &[Vec<String>],
    ) -> Result<Vec<ChoiceProbabilities>, JudgeFailure>;

    /// A free-text explanation of each of `prompts`, after probability-mode scores (asked only
    /// of judges whose settings say it [`super::JudgeSettings::explains`]): a group's
    /// explanations at once, decoded together. A judge that cannot decode them refuses.
    async fn explain(
        &self,
        _prompts: Vec<Vec<ChatMessage>>,
    ) -> Result<Vec<Completion>, JudgeError> {
        Err(JudgeError::Unavailable(
            "this judge does not explain probability-mode scores".into(),
        ))
    }
}
