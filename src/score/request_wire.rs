//! Scoring requests as callers send them: the types a body deserializes into, and, through
//! `ToSchema`, the OpenAPI document's request schemas. Serde reads shapes and types here, so
//! every refusal names its field; what the values mean (bounds, a panel's names, the group's
//! size) is `request.rs`'s conversion into [`super::ScoreRequest`]. Where serde's words would
//! differ from the API's (an option's values listed its way, a name or a panel, a rubric name
//! or an inline rubric) a small `Deserialize` or a `deserialize_with` says them.

use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Number, Value};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::domain::prompt::JudgeMode;
use crate::domain::reward::{Policy, ScaleRewards};
use crate::domain::rubric::RubricSpec;
use crate::domain::trajectory::{ReasoningRule, MAX_GROUP_SIZE};
use crate::domain::trajectory_wire::{array, Trajectory};
use crate::judge::Aggregate;

/// Most orders one group may be judged in.
pub const MAX_PERMUTATIONS: u32 = 16;

/// Most judges in one request's panel. No deployment configures more, and the limit keeps a
/// hostile panel of millions of names from costing more than a glance.
pub const MAX_PANEL: usize = 16;

/// Most verifiers one request (or one rubric plus the request's overrides) may carry.
pub const MAX_VERIFIERS: usize = 64;

/// Most groups in one batch request.
pub const MAX_BATCH_GROUPS: usize = 1024;

/// What to do when the judge fails after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(rename_all = "lowercase")]
pub enum OnJudgeError {
    /// Fail the request with the judge's error (HTTP 502/503/504).
    #[default]
    Fail,
    /// Answer with `reward: null` for every trajectory ("no reward": advantage 0).
    Null,
}

/// One group. A bare array of trajectories is also accepted as the whole body.
#[derive(Debug, ToSchema)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
pub enum ScoreRequest {
    Group(#[schema(inline)] Group),
    Bare(#[schema(inline)] TrajectoryArray),
}

impl<'de> Deserialize<'de> for ScoreRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ScoreRequest, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ScoreRequest;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(NOT_A_GROUP)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ScoreRequest, A::Error> {
                Group::deserialize(MapAccessDeserializer::new(map)).map(ScoreRequest::Group)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ScoreRequest, A::Error> {
                let list = Vec::deserialize(SeqAccessDeserializer::new(seq))?;
                Ok(ScoreRequest::Bare(TrajectoryArray(list)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<ScoreRequest, E> {
                Err(E::custom(NOT_A_GROUP))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<ScoreRequest, E> {
                Err(E::custom(NOT_A_GROUP))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<ScoreRequest, E> {
                Err(E::custom(NOT_A_GROUP))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<ScoreRequest, E> {
                Err(E::custom(NOT_A_GROUP))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<ScoreRequest, E> {
                Err(E::custom(NOT_A_GROUP))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ScoreRequest, E> {
                Err(E::custom(NOT_A_GROUP))
            }
        }
        d.deserialize_any(V)
    }
}

/// What a group that is neither an object nor an array is told.
pub const NOT_A_GROUP: &str = "expected a JSON object with \"trajectories\"";

/// A bare array of trajectories: the whole group (1 to 64).
#[derive(Debug)]
pub struct TrajectoryArray(pub Vec<Trajectory>);

impl PartialSchema for TrajectoryArray {
    fn schema() -> RefOr<Schema> {
        array(Ref::from_schema_name("Trajectory"), 1, Some(MAX_GROUP_SIZE))
    }
}

impl ToSchema for TrajectoryArray {}

/// A group and how to score it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// The group, judged relative to each other.
    #[schema(min_items = 1, max_items = 64)] // trajectory::MAX_GROUP_SIZE
    pub trajectories: Vec<Trajectory>,
    #[schema(inline, default = "default")]
    pub rubric: Option<RubricRef>,
    #[schema(inline)]
    pub judge: Option<JudgeRef>,
    /// Judge the group in K orders and average (position-bias control); default: the
    /// rubric's, else 1.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 16)]
    pub permutations: Option<Permutations>,
    /// How a panel's scores combine.
    #[schema(default = "mean")]
    #[serde(default, deserialize_with = "aggregate")]
    pub aggregate: Option<Aggregate>,
    /// The agent's tool definitions, shown to the judge.
    #[schema(value_type = Option<Vec<serde_json::Map<String, Value>>>)]
    #[serde(default, deserialize_with = "tools")]
    pub tools: Option<Vec<Value>>,
    /// A reference answer, shown to the judge as correct.
    #[schema(min_length = 1)]
    #[serde(default, deserialize_with = "reference")]
    pub reference: Option<String>,
    /// How the judges are asked; pointwise and pairwise read token probabilities (a local
    /// judge's, or a remote server's `logprobs`) (default: each judge's configured mode).
    #[serde(default, deserialize_with = "judge_mode")]
    pub judge_mode: Option<JudgeMode>,
    /// Verifiers to run, merged by name with the rubric's.
    #[schema(max_items = 64, value_type = Option<Vec<Verifier>>)]
    #[serde(default, deserialize_with = "verifiers")]
    pub verifiers: Option<Vec<Value>>,
    /// Overrides the rubric's policy.
    pub policy: Option<Policy>,
    #[schema(default = "group")]
    #[serde(default, deserialize_with = "scale_rewards")]
    pub scale_rewards: Option<ScaleRewards>,
    /// `fail`: the judge's error fails the request (502/503/504); `null`: every reward is
    /// `null` (advantage 0) and `error` says why.
    #[serde(default, deserialize_with = "on_judge_error")]
    #[schema(default = "fail")]
    pub on_judge_error: OnJudgeError,
    /// Whether the judge sees the messages' reasoning (`reasoning_content`, `thinking`,
    /// `reasoning`): `drop` (the reply's `reasoning_dropped` counts the messages) or `show`
    /// (default: the rubric's `reasoning`, else `drop`).
    #[serde(default, deserialize_with = "reasoning")]
    pub reasoning: Option<ReasoningRule>,
}

/// `T`, null as `None`, or `words` as the whole refusal of anything else: these options are
/// refused in one phrase that names their values, whatever was wrong.
fn worded<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
    words: impl fmt::Display,
) -> Result<Option<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => T::deserialize(v)
            .map(Some)
            .map_err(|_| de::Error::custom(words)),
    }
}

fn aggregate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Aggregate>, D::Error> {
    worded(d, "expected \"mean\" or \"median\"")
}

fn tools<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    worded(d, "expected an array of tool definitions")
}

/// The refusal of a reference that is not a non-empty string (an empty one is refused after).
pub const REFERENCE: &str = "expected a non-empty string: the reference answer shown to the judge";

fn reference<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    worded(d, REFERENCE)
}

fn judge_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<JudgeMode>, D::Error> {
    worded(d, format_args!("expected {}", JudgeMode::NAMES))
}

fn verifiers<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    worded(d, "expected an array of verifier objects")
}

/// The refusal of a `scale_rewards` that is not one of its values.
const SCALE_REWARDS: &str = "expected \"group\", \"batch\" or \"none\"";

fn scale_rewards<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ScaleRewards>, D::Error> {
    worded(d, SCALE_REWARDS)
}

/// Unlike the other options, a null `on_judge_error` is refused: it would read as `null`.
fn on_judge_error<'de, D: Deserializer<'de>>(d: D) -> Result<OnJudgeError, D::Error> {
    const WORDS: &str = "expected \"fail\" or \"null\"";
    worded(d, WORDS)?.ok_or_else(|| de::Error::custom(WORDS))
}

fn reasoning<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ReasoningRule>, D::Error> {
    worded(d, "expected \"drop\" or \"show\"")
}

/// A rubric name (`GET /v1/rubrics`) or an inline rubric.
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum RubricRef {
    Name(String),
    Inline(Box<RubricSpec>),
}

impl<'de> Deserialize<'de> for RubricRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RubricRef, D::Error> {
        const WORDS: &str = "expected a rubric name or an object with \"text\"";
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RubricRef;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(WORDS)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RubricRef, E> {
                Ok(RubricRef::Name(s.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RubricRef, A::Error> {
                let spec = RubricSpec::deserialize(MapAccessDeserializer::new(map))?;
                Ok(RubricRef::Inline(Box::new(spec)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<RubricRef, A::Error> {
                Err(de::Error::custom(WORDS))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<RubricRef, E> {
                Err(E::custom(WORDS))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<RubricRef, E> {
                Err(E::custom(WORDS))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<RubricRef, E> {
                Err(E::custom(WORDS))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<RubricRef, E> {
                Err(E::custom(WORDS))
            }
        }
        d.deserialize_any(V)
    }
}

/// A `[judges.NAME]` from the config, or a panel of them (at most 16, no repeats).
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum JudgeRef {
    One(String),
    Panel(#[schema(inline)] Panel),
}

/// A panel of judge names (1 to 16). Read as JSON values: a panel with anything but names in
/// it is refused whole, as the one phrase [`JUDGE`] says.
#[derive(Debug)]
pub struct Panel(pub Vec<Value>);

/// The refusal of a `judge` that is neither a name nor a panel of names.
pub const JUDGE: &str = "expected a judge name or a non-empty array of judge names";

impl PartialSchema for Panel {
    fn schema() -> RefOr<Schema> {
        array(String::schema(), 1, Some(MAX_PANEL))
    }
}

impl ToSchema for Panel {}

impl<'de> Deserialize<'de> for JudgeRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JudgeRef, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JudgeRef;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(JUDGE)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<JudgeRef, E> {
                Ok(JudgeRef::One(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<JudgeRef, A::Error> {
                let names = Vec::deserialize(SeqAccessDeserializer::new(seq))?;
                Ok(JudgeRef::Panel(Panel(names)))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<JudgeRef, A::Error> {
                Err(de::Error::custom(JUDGE))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<JudgeRef, E> {
                Err(E::custom(JUDGE))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<JudgeRef, E> {
                Err(E::custom(JUDGE))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<JudgeRef, E> {
                Err(E::custom(JUDGE))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<JudgeRef, E> {
                Err(E::custom(JUDGE))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number of orders as sent: any JSON number, checked against 1..=16 after (so that the
/// refusal shows the number as written, `-2` or `2.5`); anything else is refused as not one.
#[derive(Debug)]
pub struct Permutations(pub Number);

/// What `permutations` must be, as refusals say it.
pub fn permutations_expected() -> String {
    format!("an integer from 1 to {MAX_PERMUTATIONS}")
}

impl<'de> Deserialize<'de> for Permutations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Permutations, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Permutations;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(&permutations_expected())
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Permutations, E> {
                Ok(Permutations(n.into()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Permutations, E> {
                Ok(Permutations(n.into()))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Permutations, E> {
                // JSON has no infinite or NaN numbers; a float is always one.
                Number::from_f64(x)
                    .map(Permutations)
                    .ok_or_else(|| E::custom(format_args!("expected {}", permutations_expected())))
            }
        }
        d.deserialize_any(V)
    }
}

/// A verifier spec. See the verifiers table of docs/rewards.md for each type's fields; every
/// verifier also takes `name` and `weight`.
// The document's only: a request's verifiers are read as JSON and compiled by
// `domain::verify`, which knows every type's own fields.
#[derive(ToSchema)]
pub struct Verifier {
    #[serde(rename = "type")]
    #[schema(inline)]
    pub kind: VerifierType,
    /// The component's name (default: the type).
    pub name: Option<String>,
    /// The component's weight under the default policy (default 1).
    #[schema(minimum = 0)]
    pub weight: Option<f64>,
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

/// Many groups (a training step) in one call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[schema(min_items = 1, max_items = 1024, value_type = Vec<ScoreRequest>, required = true)]
    pub groups: Option<Groups>,
    /// `batch` normalises advantages by the std of every reward in the batch.
    #[schema(default = "group")]
    #[serde(default, deserialize_with = "scale_rewards")]
    pub scale_rewards: Option<ScaleRewards>,
}

/// A batch's groups; anything but an array is refused as [`GROUPS`] says (as is none).
#[derive(Debug)]
pub struct Groups(pub Vec<ScoreRequest>);

/// The refusal of a batch without an array of groups.
pub const GROUPS: &str = "missing or not an array";

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Groups, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Groups;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of groups")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Groups, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(Groups)
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Groups, A::Error> {
                Err(de::Error::custom(GROUPS))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Groups, E> {
                Err(E::custom(GROUPS))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Groups, E> {
                Err(E::custom(GROUPS))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Groups, E> {
                Err(E::custom(GROUPS))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Groups, E> {
                Err(E::custom(GROUPS))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Groups, E> {
                Err(E::custom(GROUPS))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_limits_are_the_enforced_ones() {
        let group = serde_json::to_value(Group::schema()).unwrap();
        let field = |name: &str, key: &str| group["properties"][name][key].as_u64();
        assert_eq!(
            field("trajectories", "maxItems"),
            Some(MAX_GROUP_SIZE as u64)
        );
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
