//! OpenRLHF's remote reward model request and answer as JSON: the request deserializes into
//! [`GetRewardRequest`] (serde names the field of any refusal) and the answer is serialized
//! from [`GetRewardResponse`]; through `ToSchema`, both are what the OpenAPI document says.
//! What the request means (one prompt per query, labels) is `parse_request`'s.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

/// OpenRLHF's remote reward model request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRewardRequest {
    /// Each the prompt text followed by one sampled response.
    #[schema(min_items = 1, value_type = Vec<String>, required = true)]
    pub query: Option<Strings>,
    /// The prompt of each query, same length as `query`.
    #[schema(value_type = Vec<String>, required = true)]
    pub prompts: Option<Strings>,
    /// Optional reference answers, same length; fed to the rubric's `answer_line` verifier.
    #[schema(inline)]
    pub labels: Option<Vec<Option<Label>>>,
}

/// An array of strings; null counts as missing (`parse_request` says so).
#[derive(Debug)]
pub struct Strings(pub Vec<String>);

impl<'de> Deserialize<'de> for Strings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strings, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strings;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strings, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element()? {
                    out.push(s);
                }
                Ok(Strings(out))
            }
        }
        d.deserialize_seq(V)
    }
}

// A dataset's label: text, a number or a flag, read as text (no doc comment: the document
// would show it).
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum Label {
    Text(String),
    Number(#[schema(inline)] LabelNumber),
    Flag(bool),
}

// A numeric label as written (`4120`, not `4120.0`, however large); a number in the document.
#[derive(Debug)]
pub struct LabelNumber(pub Number);

impl PartialSchema for LabelNumber {
    fn schema() -> RefOr<Schema> {
        f64::schema()
    }
}

impl ToSchema for LabelNumber {}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Label;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a number or null")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Label, E> {
                Ok(Label::Text(s.to_string()))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Label, E> {
                Ok(Label::Flag(b))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Label, E> {
                Ok(Label::Number(LabelNumber(n.into())))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Label, E> {
                Ok(Label::Number(LabelNumber(n.into())))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Label, E> {
                Number::from_f64(x)
                    .map(|n| Label::Number(LabelNumber(n)))
                    .ok_or_else(|| E::custom("expected a finite number"))
            }
        }
        d.deserialize_any(V)
    }
}

/// OpenRLHF's remote reward model answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct GetRewardResponse {
    /// One per query, in order; null only when the rubric gave no reward.
    pub rewards: Vec<Option<f64>>,
    /// The same as `rewards` (OpenRLHF reads either).
    pub scores: Vec<Option<f64>>,
    /// Per-query arrays: `group_size`, `advantage`, and one per reward component (`judge`,
    /// each verifier) that applies to every query.
    #[schema(value_type = std::collections::BTreeMap<String, Vec<f64>>)]
    pub extra_logs: Map<String, Value>,
}
