//! The request bodies as JSON, for the document. The daemon reads requests by hand (so that a
//! refusal names the trajectory, message and field: see `trajectory.rs`, `score::request` and
//! `openrlhf`), which makes [`crate::domain::trajectory::Trajectory`] and [`crate::score::ScoreRequest`]
//! the validated forms, not the shapes a caller sends: a message role of `developer`, content
//! given as parts, a bare array for a trajectory or a group. These types describe those shapes;
//! nothing is parsed with them. Everything they embed that serde does read (policies, inline
//! rubrics, modes) is the core type itself. The ops tests validate every example against these
//! schemas and send it to the daemon, and a unit test below keeps the field lists equal to the
//! ones the parsers accept.

// Never built: the derives read the types.
#![allow(dead_code)]

use serde_json::{Map, Value};
use utoipa::openapi::schema::{ArrayBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::domain::prompt::JudgeMode;
use crate::domain::reward::{Policy, ScaleRewards};
use crate::domain::rubric::RubricSpec;
use crate::domain::trajectory::ReasoningRule;
use crate::judge::Aggregate;
use crate::score::OnJudgeError;

/// A message role; `developer` is read as `system` and `function` as `tool`.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

/// A string, or a list of content parts (text parts are read).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Map<String, Value>>),
}

/// An OpenAI chat message.
#[derive(ToSchema)]
pub struct Message {
    #[schema(inline)]
    role: Role,
    /// A string, null, or a list of content parts (text parts are read).
    #[schema(inline)]
    content: Option<Content>,
    /// Only on assistant messages.
    #[schema(inline)]
    tool_calls: Option<Vec<ToolCall>>,
    /// Required for role `tool`.
    tool_call_id: Option<String>,
    name: Option<String>,
    /// The model's reasoning (as OpenAI-compatible servers write a reasoning model's
    /// thinking): shown to the judge or dropped by the request's `reasoning`.
    reasoning_content: Option<String>,
    /// The same, as some chat templates name it (read when `reasoning_content` is absent).
    thinking: Option<String>,
    /// The same, as yet others name it.
    reasoning: Option<String>,
}

/// A tool call in OpenAI's format.
#[derive(ToSchema)]
pub struct ToolCall {
    id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[schema(inline)]
    function: FunctionCall,
}

#[derive(ToSchema)]
pub struct FunctionCall {
    name: String,
    /// The arguments exactly as the model produced them (a JSON string).
    arguments: Option<String>,
}

/// An OpenAI message list with optional `reward`, `metrics` and `metadata`; ART's serialised
/// Trajectory (`messages_and_choices`); or a bare array of messages.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum Trajectory {
    Messages(#[schema(inline)] MessageList),
    Art(#[schema(inline)] ArtTrajectory),
    Bare(#[schema(inline)] MessageArray),
}

#[derive(ToSchema)]
pub struct MessageList {
    #[schema(min_items = 1)]
    messages: Vec<Message>,
    /// The caller's own reward (component `independent_reward`).
    reward: Option<f64>,
    metrics: Option<Map<String, Value>>,
    metadata: Option<Map<String, Value>>,
}

#[derive(ToSchema)]
pub struct ArtTrajectory {
    /// Messages and OpenAI `Choice` objects (the message is read from a choice).
    #[schema(min_items = 1)]
    messages_and_choices: Vec<Map<String, Value>>,
    /// The caller's own reward (component `independent_reward`).
    reward: Option<f64>,
    metrics: Option<Map<String, Value>>,
    metadata: Option<Map<String, Value>>,
}

/// A rubric name (`GET /v1/rubrics`) or an inline rubric.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum RubricRef {
    Name(String),
    Inline(Box<RubricSpec>),
}

/// A `[judges.NAME]` from the config, or a panel of them (at most 16, no repeats).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum JudgeRef {
    One(String),
    Panel(#[schema(inline)] Panel),
}

/// An array with bounds: the derive takes `min_items`/`max_items` on fields only, not on the
/// bare-array alternatives of an untagged enum.
fn array(
    items: impl Into<utoipa::openapi::schema::ArrayItems>,
    min: usize,
    max: Option<usize>,
) -> RefOr<Schema> {
    ArrayBuilder::new()
        .items(items)
        .min_items(Some(min))
        .max_items(max)
        .into()
}

/// A bare array of messages (at least one).
pub struct MessageArray;

impl PartialSchema for MessageArray {
    fn schema() -> RefOr<Schema> {
        array(Ref::from_schema_name("Message"), 1, None)
    }
}

impl ToSchema for MessageArray {}

/// A bare array of trajectories: the whole group (1 to 64).
pub struct TrajectoryArray;

impl PartialSchema for TrajectoryArray {
    fn schema() -> RefOr<Schema> {
        let max = crate::domain::trajectory::MAX_GROUP_SIZE;
        array(Ref::from_schema_name("Trajectory"), 1, Some(max))
    }
}

impl ToSchema for TrajectoryArray {}

/// A panel of judge names (1 to 16).
pub struct Panel;

impl PartialSchema for Panel {
    fn schema() -> RefOr<Schema> {
        let max = crate::score::request::MAX_PANEL;
        array(String::schema(), 1, Some(max))
    }
}

impl ToSchema for Panel {}

/// A verifier spec. See the verifiers table of docs/rewards.md for each type's fields; every
/// verifier also takes `name` and `weight`.
#[derive(ToSchema)]
pub struct Verifier {
    #[serde(rename = "type")]
    #[schema(inline)]
    kind: VerifierType,
    /// The component's name (default: the type).
    name: Option<String>,
    /// The component's weight under the default policy (default 1).
    #[schema(minimum = 0)]
    weight: Option<f64>,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum VerifierType {
    AnswerLine,
    Regex,
    Contains,
    NotContains,
    JsonSchema,
    TurnBudget,
    ToolCallBudget,
    Length,
}

/// One group. A bare array of trajectories is also accepted as the whole body.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
pub enum ScoreRequest {
    Group(#[schema(inline)] Group),
    Bare(#[schema(inline)] TrajectoryArray),
}

/// A group and how to score it.
// The fields are `score::request::REQUEST_FIELDS` (a test below checks).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// The group, judged relative to each other.
    #[schema(min_items = 1, max_items = 64)] // trajectory::MAX_GROUP_SIZE
    trajectories: Vec<Trajectory>,
    #[schema(inline, default = "default")]
    rubric: Option<RubricRef>,
    #[schema(inline)]
    judge: Option<JudgeRef>,
    /// Judge the group in K orders and average (position-bias control); default: the
    /// rubric's, else 1.
    #[schema(minimum = 1, maximum = 16)]
    permutations: Option<u32>,
    /// How a panel's scores combine.
    #[schema(default = "mean")]
    aggregate: Option<Aggregate>,
    /// The agent's tool definitions, shown to the judge.
    tools: Option<Vec<Map<String, Value>>>,
    /// A reference answer, shown to the judge as correct.
    #[schema(min_length = 1)]
    reference: Option<String>,
    /// How the judges are asked; pointwise and pairwise read token probabilities (a local
    /// judge's, or a remote server's `logprobs`) (default: each judge's configured mode).
    judge_mode: Option<JudgeMode>,
    /// Verifiers to run, merged by name with the rubric's.
    #[schema(max_items = 64)]
    verifiers: Option<Vec<Verifier>>,
    /// Overrides the rubric's policy.
    policy: Option<Policy>,
    #[schema(default = "group")]
    scale_rewards: Option<ScaleRewards>,
    /// `fail`: the judge's error fails the request (502/503/504); `null`: every reward is
    /// `null` (advantage 0) and `error` says why.
    #[serde(default)]
    #[schema(default = "fail")]
    on_judge_error: OnJudgeError,
    /// Whether the judge sees the messages' reasoning (`reasoning_content`, `thinking`,
    /// `reasoning`): `drop` (the reply's `reasoning_dropped` counts the messages) or `show`
    /// (default: the rubric's `reasoning`, else `drop`).
    reasoning: Option<ReasoningRule>,
}

/// Many groups (a training step) in one call.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[schema(min_items = 1, max_items = 1024)]
    groups: Vec<ScoreRequest>,
    /// `batch` normalises advantages by the std of every reward in the batch.
    #[schema(default = "group")]
    scale_rewards: Option<ScaleRewards>,
}

/// OpenRLHF's remote reward model request.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRewardRequest {
    /// Each the prompt text followed by one sampled response.
    #[schema(min_items = 1)]
    query: Vec<String>,
    /// The prompt of each query, same length as `query`.
    prompts: Vec<String>,
    /// Optional reference answers, same length; fed to the rubric's `answer_line` verifier.
    #[schema(inline)]
    labels: Option<Vec<Option<Label>>>,
}

#[derive(ToSchema)]
#[serde(untagged)]
pub enum Label {
    Text(String),
    Number(f64),
    Flag(bool),
}

/// OpenRLHF's remote reward model answer.
// Built by `openrlhf::response_body`; the ops tests validate real answers against this.
#[derive(ToSchema)]
pub struct GetRewardResponse {
    /// One per query, in order; null only when the rubric gave no reward.
    rewards: Vec<Option<f64>>,
    /// The same as `rewards` (OpenRLHF reads either).
    scores: Vec<Option<f64>>,
    /// Per-query arrays: `group_size`, `advantage`, and one per reward component (`judge`,
    /// each verifier) that applies to every query.
    extra_logs: std::collections::BTreeMap<String, Vec<f64>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::PartialSchema;

    fn properties<T: PartialSchema>() -> Vec<String> {
        let schema = serde_json::to_value(T::schema()).unwrap();
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn the_documented_fields_are_the_parsed_ones() {
        assert_eq!(properties::<Group>(), crate::score::request::REQUEST_FIELDS);
        assert_eq!(properties::<GetRewardRequest>(), crate::openrlhf::FIELDS);
    }

    #[test]
    fn the_documented_limits_are_the_enforced_ones() {
        use crate::score::request::{MAX_BATCH_GROUPS, MAX_PERMUTATIONS, MAX_VERIFIERS};
        let group = serde_json::to_value(Group::schema()).unwrap();
        let field = |name: &str, key: &str| group["properties"][name][key].as_u64();
        let max_group = crate::domain::trajectory::MAX_GROUP_SIZE as u64;
        assert_eq!(field("trajectories", "maxItems"), Some(max_group));
        assert_eq!(
            field("permutations", "maximum"),
            Some(u64::from(MAX_PERMUTATIONS))
        );
        assert_eq!(field("verifiers", "maxItems"), Some(MAX_VERIFIERS as u64));
        let batch = serde_json::to_value(BatchRequest::schema()).unwrap();
        let groups = batch["properties"]["groups"]["maxItems"].as_u64();
        assert_eq!(groups, Some(MAX_BATCH_GROUPS as u64));
    }
}
