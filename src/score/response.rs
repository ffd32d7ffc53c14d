//! What scoring returns.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::error_type::ErrorType;
use crate::domain::prompt::ChatMessage;
use crate::judge::{JudgeInfo, Spent};

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct VersionInfo {
    pub name: String,
    #[schema(pattern = "^sha256:")]
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorBody {
    // Documented as a plain string, as it always was: the daemon's error responses document the
    // enum.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: ErrorType,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ItemOut {
    pub id: String,
    pub met: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TrajectoryScore {
    /// 1-based index of the trajectory in the request.
    pub trajectory_id: String,
    /// The reward (the same number as in `rewards`).
    #[schema(required = true)]
    pub score: Option<f64>,
    /// The judge's explanation ("" when no judge was asked).
    pub explanation: String,
    /// Every component by name: `judge`, each verifier, `independent_reward`; `null` when not
    /// applicable.
    pub components: BTreeMap<String, Option<f64>>,
    /// Each verifier's short reason ("correct", "wrong: got 5, expected 4", "missing: ...").
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reasons: BTreeMap<String, String>,
    /// Checklist item verdicts, for checklist rubrics.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(inline)]
    pub items: Vec<ItemOut>,
    /// Standard deviation of the judge's score across orders (and panel judges); present when
    /// the group was judged more than once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagreement: Option<f64>,
    /// How sure a probability verdict (pointwise, pairwise) is, in [0, 1]: pointwise, how far
    /// P(yes) lies from ½ (times the share of the judge's distribution on the two answers);
    /// pairwise, how decisive the trajectory's comparisons were and how far their two orders
    /// agreed. `null` for a listwise verdict, or when no judge was asked.
    #[schema(required = true)]
    pub confidence: Option<f64>,
    /// The stage of a cascade whose verdict this is (`backend = "cascade"`: the first stage
    /// sure of the whole group, else the last); absent for any other judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
    /// Each panel judge's score (averaged over orders), when more than one judge scored.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub judges: BTreeMap<String, Option<f64>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct Usage {
    /// Calls that gave the verdicts this reply rests on (a verdict's retries and re-ask
    /// included).
    pub judge_calls: u64,
    pub cache_hits: u64,
    /// Tokens the judge reported for those calls (0 on a cache hit).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Calls that gave no verdict this reply uses, counted apart: every attempt of a judging
    /// that failed (after its retries, or an unusable verdict after the re-ask), a cascade
    /// stage that failed or was unsure of the group, and the calls judged beside a failure
    /// (their verdicts are stored, so asking again costs no call for them).
    pub failed_calls: u64,
    /// Tokens the judge reported for the failed calls (a server reports none with an error).
    pub failed_prompt_tokens: u64,
    pub failed_completion_tokens: u64,
    /// Of `prompt_tokens`, those a local judge did not prefill again (KV of a shared prefix
    /// reused across permutations and requests).
    #[serde(skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u64,
    /// Forward passes a local judge's model ran for this request (0 on a cache hit): a
    /// prefill is one, each decoded token one. With `prompt_tokens - cached_prompt_tokens`
    /// (the tokens prefilled) it says what the scoring cost the model.
    #[serde(skip_serializing_if = "is_zero")]
    pub forward_passes: u64,
    /// Scores in the verdicts used that the judge gave outside its scale and gavel clamped to
    /// 0 or 1 (also counted on `/metrics` as `gavel_judge_scores_clamped_total`).
    #[serde(skip_serializing_if = "is_zero")]
    pub clamped_scores: u64,
    /// Our count of the judge prompt as sent, and of the same group sent without dedup.
    pub prompt_tokens_deduped: u64,
    pub prompt_tokens_without_dedup: u64,
    pub tokens_saved_by_dedup: u64,
    /// Distinct trajectories the judge read (identical ones are judged once).
    pub distinct_trajectories: u64,
    /// Chunks the group was split into for the judge's context (1 when it fit).
    pub chunks: u64,
    /// Retries by cause (timeout, connection, http_429, http_5xx, http_408, http_409,
    /// bad_reply, reask) for the calls made.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub retries: BTreeMap<String, u64>,
    /// Estimated cost of the calls made, when the judge has prices configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// The usage of a judging that failed having spent `spent`.
    pub fn failed(spent: Spent) -> Usage {
        let mut u = Usage::default();
        u.add_failed(spent);
        u
    }

    /// Counts `spent` as failed calls and their tokens.
    pub fn add_failed(&mut self, spent: Spent) {
        self.failed_calls += spent.calls;
        self.failed_prompt_tokens += spent.prompt_tokens;
        self.failed_completion_tokens += spent.completion_tokens;
    }

    /// What the verdicts behind this usage spent, as calls and tokens (failed ones included):
    /// for a judging that fails after them, whose reply uses none of them.
    pub fn spent(&self) -> Spent {
        Spent {
            calls: self.judge_calls + self.failed_calls,
            prompt_tokens: self.prompt_tokens + self.failed_prompt_tokens,
            completion_tokens: self.completion_tokens + self.failed_completion_tokens,
        }
    }

    pub fn add(&mut self, o: &Usage) {
        self.add_spent(o);
        self.clamped_scores += o.clamped_scores;
        self.prompt_tokens_deduped += o.prompt_tokens_deduped;
        self.prompt_tokens_without_dedup += o.prompt_tokens_without_dedup;
        self.tokens_saved_by_dedup += o.tokens_saved_by_dedup;
        self.distinct_trajectories += o.distinct_trajectories;
        self.chunks = self.chunks.max(o.chunks);
    }

    /// Adds what `o` spent (calls, cache hits, tokens, retries, cost), not what it describes of
    /// its group (dedup counts, trajectories, chunks): the same group judged again, as by a
    /// cascade's earlier stages, costs more but is still one group.
    pub fn add_spent(&mut self, o: &Usage) {
        self.judge_calls += o.judge_calls;
        self.failed_calls += o.failed_calls;
        self.failed_prompt_tokens += o.failed_prompt_tokens;
        self.failed_completion_tokens += o.failed_completion_tokens;
        self.cache_hits += o.cache_hits;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.cached_prompt_tokens += o.cached_prompt_tokens;
        self.forward_passes += o.forward_passes;
        for (cause, n) in &o.retries {
            *self.retries.entry(cause.clone()).or_default() += n;
        }
        self.cost = match (self.cost, o.cost) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ScoreResponse {
    pub rewards: Vec<Option<f64>>,
    pub advantages: Vec<f64>,
    pub scores: Vec<TrajectoryScore>,
    pub usage: Usage,
    pub rubric: VersionInfo,
    /// The judge template; absent when no judge was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<VersionInfo>,
    pub judges: Vec<JudgeInfo>,
    /// Under a rubric with `reference = "judge"`: the judge's own answer to the task, which it
    /// graded against (absent when the request brought its reference, or the judge failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_reference: Option<String>,
    /// Set when the judge failed and the request asked for `on_judge_error: "null"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub error: Option<ErrorBody>,
    /// Messages whose reasoning (`reasoning_content`, `thinking`, `reasoning`) the judge did
    /// not see, under `reasoning = "drop"` (the default); absent when none had any.
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_dropped: u64,
}

/// `POST /v1/score_groups`: one result per group, in order.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BatchResponse {
    pub results: Vec<ScoreResponse>,
    pub scale_rewards: crate::domain::reward::ScaleRewards,
    pub usage: Usage,
}

/// What `render` returns: the exact judge messages and what dedup saved.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RenderResponse {
    #[schema(inline)]
    pub messages: Vec<ChatMessage>,
    pub trajectory_ids: Vec<String>,
    pub prompt_tokens: u64,
    pub prompt_tokens_without_dedup: u64,
    pub tokens_saved_by_dedup: u64,
    pub shared_prefix_messages: usize,
    pub shared_blocks: usize,
    pub distinct_trajectories: usize,
    pub rubric: VersionInfo,
    pub template: VersionInfo,
    /// Pointwise and pairwise: how many prompts the mode asks for the group (`messages` is the
    /// first of them). Absent for listwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub prompts_asked: Option<usize>,
    /// Tokens of every prompt the group asks in its mode, together (listwise: `prompt_tokens`).
    pub prompt_tokens_asked: u64,
    /// Of `prompt_tokens_asked`, what a server with a prefix cache prefills: the start every
    /// prompt shares (instructions, rubric, context) once, and each prompt's rest.
    pub prompt_tokens_after_prefix_cache: u64,
    pub cache_key: String,
    /// A cascade's plan, its stages cheapest first (the messages above are its first stage's);
    /// absent for any other judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cascade: Option<Vec<CascadeStage>>,
}

/// One stage of a cascade, as `render` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CascadeStage {
    pub judge: String,
    /// The mode it judges in (its table's `mode`).
    pub mode: crate::domain::prompt::JudgeMode,
    /// The confidence its least sure score must reach for its verdict to stand; absent for the
    /// last stage, which decides whatever reaches it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}
