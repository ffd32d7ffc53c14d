//! A trajectory as a caller sends it: the types a request's `trajectories` deserialize into,
//! and, through `ToSchema`, what the OpenAPI document says of them. Serde reads shapes and
//! types here, so every refusal names its field; what the values mean (a role that needs a
//! `tool_call_id`, something to judge) is `trajectory.rs`'s `TryFrom`. The `Deserialize`
//! impls are written out where serde's derive would refuse differently from the API: a
//! trajectory is an object or a bare array, an unknown role is named, a near miss of a field
//! is refused ("did you mean") while the fields other frameworks add are ignored.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::schema::{ArrayBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::spelling::near_miss;

/// The fields of a trajectory object gavel reads; others (ART's `tools`, `logs`, ...) are kept
/// out of judging, but a near miss of one of these is refused.
pub const TRAJECTORY_FIELDS: &[&str] = &[
    "messages",
    "messages_and_choices",
    "reward",
    "metrics",
    "metadata",
];

/// The fields of a message gavel reads (the reasoning ones included); as for a trajectory, a
/// near miss of one is refused, anything else (OpenAI's `refusal`, `audio`, ...) ignored.
pub const MESSAGE_FIELDS: &[&str] = &[
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "thinking",
    "reasoning",
];

/// A message role; `developer` is read as `system` and `function` as `tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

impl Role {
    /// The role as the caller wrote it (refusals quote it).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Function => "function",
        }
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Role;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Role, E> {
                Ok(match s {
                    "system" => Role::System,
                    "developer" => Role::Developer,
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "tool" => Role::Tool,
                    "function" => Role::Function,
                    _ => {
                        return Err(E::custom(format_args!(
                            "unknown role {s:?} (expected system, user, assistant or tool)"
                        )))
                    }
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// A string, or a list of content parts (text parts are read).
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(#[schema(inline)] Vec<Part>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Content, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, null or a list of text parts")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
                Ok(Content::Text(s.to_string()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Content, E> {
                Ok(Content::Text(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

// One content part as sent: any JSON value, so that a part of another shape is refused for
// what it lacks (its `type`, its text) rather than for its shape; an object in the document.
#[derive(Debug, ToSchema)]
#[schema(value_type = Map<String, Value>)]
pub struct Part(pub Value);

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Part, D::Error> {
        Value::deserialize(d).map(Part)
    }
}

/// An OpenAI chat message.
// Also an OpenAI `Choice` as ART logs the sampled turns: no `role`, the message inside
// (`message`). (Comments, not doc comments: the document shows those.)
#[derive(Debug, Default, ToSchema)]
pub struct Message {
    // `None` only for a choice (a message without one is refused).
    #[schema(inline, value_type = Role)]
    pub role: Option<Role>,
    /// A string, null, or a list of content parts (text parts are read).
    #[schema(inline)]
    pub content: Option<Content>,
    /// Only on assistant messages.
    #[schema(inline)]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Required for role `tool`.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
    /// The model's reasoning (as OpenAI-compatible servers write a reasoning model's
    /// thinking): shown to the judge or dropped by the request's `reasoning`.
    pub reasoning_content: Option<String>,
    /// The same, as some chat templates name it (read when `reasoning_content` is absent).
    pub thinking: Option<String>,
    /// The same, as yet others name it.
    pub reasoning: Option<String>,
    /// A choice's message, read only when there is no `role` (then it is the message); kept as
    /// JSON until then, as the hand-written paths never named it.
    #[schema(ignore)]
    pub message: Option<Value>,
}

/// A message's keys as serde reads them; `Other` is any key gavel does not read.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum MessageKey {
    Role,
    Content,
    ToolCalls,
    ToolCallId,
    Name,
    ReasoningContent,
    Thinking,
    Reasoning,
    Message,
    Other(String),
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Message;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
                let mut m = Message::default();
                // Which of MESSAGE_FIELDS were present (null included), for the spelling check.
                let mut seen = 0u16;
                let mut unknown = Vec::new();
                while let Some(key) = map.next_key()? {
                    let index = match key {
                        MessageKey::Role => {
                            m.role = Some(map.next_value()?);
                            0
                        }
                        MessageKey::Content => {
                            m.content = map.next_value()?;
                            1
                        }
                        MessageKey::ToolCalls => {
                            m.tool_calls = map.next_value()?;
                            2
                        }
                        MessageKey::ToolCallId => {
                            m.tool_call_id = map.next_value()?;
                            3
                        }
                        MessageKey::Name => {
                            m.name = map.next_value()?;
                            4
                        }
                        MessageKey::ReasoningContent => {
                            m.reasoning_content = map.next_value()?;
                            5
                        }
                        MessageKey::Thinking => {
                            m.thinking = map.next_value()?;
                            6
                        }
                        MessageKey::Reasoning => {
                            m.reasoning = map.next_value()?;
                            7
                        }
                        MessageKey::Message => {
                            m.message = Some(map.next_value()?);
                            continue;
                        }
                        MessageKey::Other(k) => {
                            map.next_value::<IgnoredAny>()?;
                            unknown.push(k);
                            continue;
                        }
                    };
                    seen |= 1 << index;
                }
                // A choice's own keys (`finish_reason`, `logprobs`) are not a message's.
                let choice = m.role.is_none() && m.message.is_some();
                if !choice {
                    refuse_near_miss::<A::Error>(&unknown, MESSAGE_FIELDS, seen)?;
                }
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

/// A refusal of the first of `unknown` that looks like a misspelling of a field in `known`
/// that was not given (`seen`: a bit per field of `known`, in order), worded by serde so that
/// the error names the key and the field meant (`domain::input` words it "did you mean").
fn refuse_near_miss<E: de::Error>(
    unknown: &[String],
    known: &'static [&'static str],
    seen: u16,
) -> Result<(), E> {
    let present = |f: &str| {
        let i = known.iter().position(|k| *k == f);
        i.is_some_and(|i| seen & (1 << i) != 0)
    };
    match near_miss(unknown, known, present) {
        Some((key, _)) => Err(E::unknown_field(key, known)),
        None => Ok(()),
    }
}

/// A tool call in OpenAI's format.
#[derive(Debug, ToSchema)]
pub struct ToolCall {
    pub id: Option<String>,
    // Read as any value and ignored: every call is a function call.
    #[serde(rename = "type")]
    #[schema(value_type = Option<String>)]
    pub kind: Option<IgnoredAny>,
    #[schema(inline)]
    pub function: FunctionCall,
}

const TOOL_CALL_FIELDS: &[&str] = &["id", "type", "function"];

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolCall, D::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum Key {
            Id,
            Type,
            Function,
            Other(String),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolCall;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolCall, A::Error> {
                let (mut id, mut kind, mut function) = (None, None, None);
                let (mut seen, mut unknown) = (0u16, Vec::new());
                while let Some(key) = map.next_key()? {
                    seen |= match key {
                        Key::Id => {
                            id = map.next_value()?;
                            1
                        }
                        Key::Type => {
                            kind = Some(map.next_value()?);
                            2
                        }
                        Key::Function => {
                            function = Some(map.next_value()?);
                            4
                        }
                        Key::Other(k) => {
                            map.next_value::<IgnoredAny>()?;
                            unknown.push(k);
                            0
                        }
                    };
                }
                refuse_near_miss::<A::Error>(&unknown, TOOL_CALL_FIELDS, seen)?;
                let function = function.ok_or_else(|| de::Error::missing_field("function"))?;
                Ok(ToolCall { id, kind, function })
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments exactly as the model produced them (a JSON string).
    #[schema(value_type = Option<String>)]
    pub arguments: Arguments,
}

/// A call's arguments: the JSON string OpenAI's format has, or the JSON text of what some
/// loggers store instead (the parsed object); empty when absent or null.
#[derive(Debug, Default)]
pub struct Arguments(pub String);

impl<'de> Deserialize<'de> for Arguments {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Arguments, D::Error> {
        Ok(Arguments(match Value::deserialize(d)? {
            Value::Null => String::new(),
            Value::String(s) => s,
            other => other.to_string(),
        }))
    }
}

const FUNCTION_FIELDS: &[&str] = &["name", "arguments"];

impl<'de> Deserialize<'de> for FunctionCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FunctionCall, D::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum Key {
            Name,
            Arguments,
            Other(String),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FunctionCall;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FunctionCall, A::Error> {
                let (mut name, mut arguments) = (None::<String>, Arguments::default());
                let (mut seen, mut unknown) = (0u16, Vec::new());
                while let Some(key) = map.next_key()? {
                    seen |= match key {
                        Key::Name => {
                            name = map.next_value()?;
                            1
                        }
                        Key::Arguments => {
                            arguments = map.next_value()?;
                            2
                        }
                        Key::Other(k) => {
                            map.next_value::<IgnoredAny>()?;
                            unknown.push(k);
                            0
                        }
                    };
                }
                refuse_near_miss::<A::Error>(&unknown, FUNCTION_FIELDS, seen)?;
                // A null name is as missing as an absent one.
                let name = name.ok_or_else(|| de::Error::missing_field("name"))?;
                Ok(FunctionCall { name, arguments })
            }
        }
        d.deserialize_map(V)
    }
}

/// An OpenAI message list with optional `reward`, `metrics` and `metadata`; ART's serialised
/// Trajectory (`messages_and_choices`); or a bare array of messages.
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum Trajectory {
    Messages(#[schema(inline)] MessageList),
    Art(#[schema(inline)] ArtTrajectory),
    Bare(#[schema(inline)] MessageArray),
}

#[derive(Debug, ToSchema)]
pub struct MessageList {
    #[schema(min_items = 1)]
    pub messages: Vec<Message>,
    /// The caller's own reward (component `independent_reward`).
    pub reward: Option<f64>,
    pub metrics: Option<Map<String, Value>>,
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, ToSchema)]
pub struct ArtTrajectory {
    /// Messages and OpenAI `Choice` objects (the message is read from a choice).
    #[schema(min_items = 1, value_type = Vec<Map<String, Value>>)]
    pub messages_and_choices: Vec<Message>,
    /// The caller's own reward (component `independent_reward`).
    pub reward: Option<f64>,
    pub metrics: Option<Map<String, Value>>,
    pub metadata: Option<Map<String, Value>>,
}

/// A bare array of messages (at least one).
#[derive(Debug)]
pub struct MessageArray(pub Vec<Message>);

impl PartialSchema for MessageArray {
    fn schema() -> RefOr<Schema> {
        array(Ref::from_schema_name("Message"), 1, None)
    }
}

impl ToSchema for MessageArray {}

/// An array with bounds: the derive takes `min_items`/`max_items` on fields only, not on the
/// bare-array alternatives of an untagged enum.
pub fn array(
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

/// The caller's reward: any JSON number (serde would say "f64" where the API says what it takes).
struct Reward(f64);

impl<'de> Deserialize<'de> for Reward {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Reward, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Reward;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or null")
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Reward, E> {
                Ok(Reward(x))
            }
            fn visit_i64<E: de::Error>(self, x: i64) -> Result<Reward, E> {
                Ok(Reward(x as f64))
            }
            fn visit_u64<E: de::Error>(self, x: u64) -> Result<Reward, E> {
                Ok(Reward(x as f64))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Trajectory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Trajectory, D::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum Key {
            Messages,
            MessagesAndChoices,
            Reward,
            Metrics,
            Metadata,
            Other(String),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Trajectory;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object with \"messages\"")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Trajectory, A::Error> {
                let mut messages = Vec::new();
                while let Some(m) = seq.next_element()? {
                    messages.push(m);
                }
                Ok(Trajectory::Bare(MessageArray(messages)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Trajectory, A::Error> {
                let (mut messages, mut art) = (None, None);
                let (mut reward, mut metrics, mut metadata) = (None, None, None);
                let (mut seen, mut unknown) = (0u16, Vec::new());
                while let Some(key) = map.next_key()? {
                    seen |= match key {
                        Key::Messages => {
                            messages = Some(map.next_value()?);
                            1
                        }
                        Key::MessagesAndChoices => {
                            art = Some(map.next_value()?);
                            2
                        }
                        Key::Reward => {
                            reward = map.next_value::<Option<Reward>>()?.map(|r| r.0);
                            4
                        }
                        Key::Metrics => {
                            metrics = map.next_value()?;
                            8
                        }
                        Key::Metadata => {
                            metadata = map.next_value()?;
                            16
                        }
                        Key::Other(k) => {
                            map.next_value::<IgnoredAny>()?;
                            unknown.push(k);
                            0
                        }
                    };
                }
                refuse_near_miss::<A::Error>(&unknown, TRAJECTORY_FIELDS, seen)?;
                match (messages, art) {
                    (Some(messages), _) => Ok(Trajectory::Messages(MessageList {
                        messages,
                        reward,
                        metrics,
                        metadata,
                    })),
                    (None, Some(messages_and_choices)) => Ok(Trajectory::Art(ArtTrajectory {
                        messages_and_choices,
                        reward,
                        metrics,
                        metadata,
                    })),
                    (None, None) => Err(de::Error::custom(
                        "missing \"messages\" (or ART's \"messages_and_choices\")",
                    )),
                }
            }
        }
        d.deserialize_any(V)
    }
}
