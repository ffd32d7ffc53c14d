//! Trajectories and groups: the validated, canonical form of what a training loop sends.
//!
//! Serde reads what was sent into `trajectory_wire`'s types (every refusal naming its field,
//! from serde's path to it); the `TryFrom`s here say what it means: roles read, content as text,
//! the rules a role sets, something to judge. A refusal names the trajectory index, the message
//! index and the field.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::input::deserialize;
pub use super::input::{type_name, InputError};
use super::trajectory_wire as wire;
pub use super::trajectory_wire::{MESSAGE_FIELDS, TRAJECTORY_FIELDS};

/// Largest group gavel accepts regardless of configuration (the daemon's `max_group_size` can
/// only lower it).
pub const MAX_GROUP_SIZE: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role as chat messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model produced them (a JSON string in OpenAI's format).
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Message {
    pub role: Role,
    /// Text content; list-of-parts content is joined, `null` stays `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The model's reasoning before its answer, from `reasoning_content`, `thinking` or
    /// `reasoning` (what chat templates of reasoning models produce): shown to the judge or
    /// dropped by the [`ReasoningRule`], never silently.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// Fields of a message that may carry the model's reasoning, in the order they are read.
pub const REASONING_FIELDS: &[&str] = &["reasoning_content", "thinking", "reasoning"];

/// Whether the judge sees the reasoning messages carry (`reasoning = "drop" | "show"`, per
/// rubric or request; the request's wins). Dropped by default: the judge grades what the agent
/// said and did, and reasoning is often longer than the answer; the reply counts what was
/// dropped (`reasoning_dropped`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningRule {
    /// Left out of the judge's prompt (and of its cache keys).
    #[default]
    Drop,
    /// Shown to the judge, as the message's `reasoning`.
    Show,
}

/// The group without the reasoning its messages carry, and how many messages had some; `None`
/// when none had any (nothing to copy).
pub fn without_reasoning(group: &[Trajectory]) -> Option<(Vec<Trajectory>, usize)> {
    let count = group
        .iter()
        .flat_map(|t| &t.messages)
        .filter(|m| m.reasoning.is_some())
        .count();
    if count == 0 {
        return None;
    }
    let mut group = group.to_vec();
    for m in group.iter_mut().flat_map(|t| t.messages.iter_mut()) {
        m.reasoning = None;
    }
    Some((group, count))
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trajectory {
    pub messages: Vec<Message>,
    /// The caller's own reward, kept as the `independent_reward` component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub metrics: Map<String, Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Trajectory {
    /// The content of the last assistant message, where verifiers look for the answer.
    pub fn final_answer(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .and_then(|m| m.content.as_deref())
    }
}

/// Parses the `trajectories` array of a request: 1..=`max` trajectories, each either an OpenAI
/// message list (`{"messages": [...]}`), ART's serialised `Trajectory`
/// (`{"messages_and_choices": [...]}`), or a bare array of messages.
pub fn parse_trajectories(v: &Value, max: usize) -> Result<Vec<Trajectory>, InputError> {
    let list: Vec<wire::Trajectory> = deserialize(v, "trajectories")?;
    trajectories_from_wire(list, max)
}

/// Parses one trajectory; `at` is the path prefix used in errors.
pub fn parse_trajectory(v: &Value, at: &str) -> Result<Trajectory, InputError> {
    let t: wire::Trajectory = deserialize(v, at)?;
    Trajectory::try_from(t).map_err(|e| e.under(at))
}

/// The group from its deserialized trajectories: 1..=`max` of them, each validated. Errors
/// name `trajectories[i]...`, as a request's field.
pub fn trajectories_from_wire(
    list: Vec<wire::Trajectory>,
    max: usize,
) -> Result<Vec<Trajectory>, InputError> {
    if list.is_empty() {
        return Err(InputError::new(
            "trajectories",
            "a group needs at least one trajectory",
        ));
    }
    let max = max.min(MAX_GROUP_SIZE);
    if list.len() > max {
        return Err(InputError::new(
            "trajectories",
            format!(
                "{} trajectories, more than the maximum group size of {max}",
                list.len()
            ),
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, t)| Trajectory::try_from(t).map_err(|e| e.under(&format!("trajectories[{i}]"))))
        .collect()
}

/// What a trajectory means: messages to judge, among them the agent's; errors name the field
/// under the trajectory (`messages[5].tool_call_id`).
impl TryFrom<wire::Trajectory> for Trajectory {
    type Error = InputError;

    fn try_from(t: wire::Trajectory) -> Result<Trajectory, InputError> {
        let (list, field, reward, metrics, metadata) = match t {
            wire::Trajectory::Messages(l) => {
                (l.messages, "messages", l.reward, l.metrics, l.metadata)
            }
            wire::Trajectory::Art(a) => (
                a.messages_and_choices,
                "messages_and_choices",
                a.reward,
                a.metrics,
                a.metadata,
            ),
            wire::Trajectory::Bare(wire::MessageArray(list)) => (list, "", None, None, None),
        };
        if list.is_empty() {
            return Err(InputError::new(field, "no messages"));
        }
        let messages = list
            .into_iter()
            .enumerate()
            .map(|(j, m)| Message::try_from(m).map_err(|e| e.under(&format!("{field}[{j}]"))))
            .collect::<Result<Vec<_>, _>>()?;
        // The judge scores the agent's turns: without one there is nothing to judge (a request
        // that sent only the prompt), and a score would be the judge's guess. An empty assistant
        // message is a turn (a policy that answered nothing) and is judged as one.
        if !messages.iter().any(|m| m.role == Role::Assistant) {
            return Err(InputError::new(
                field,
                "no assistant message: nothing to judge",
            ));
        }
        if reward.is_some_and(|r| !r.is_finite()) {
            return Err(InputError::new("reward", "not a finite number"));
        }
        Ok(Trajectory {
            messages,
            reward,
            metrics: metrics.unwrap_or_default(),
            metadata: metadata.unwrap_or_default(),
        })
    }
}

/// What a message means: its role read (`developer` is a system message, `function` a tool's),
/// its content as text, and the rules a role sets; errors name the field under the message.
impl TryFrom<wire::Message> for Message {
    type Error = InputError;

    fn try_from(mut m: wire::Message) -> Result<Message, InputError> {
        // ART keeps the sampled turns as OpenAI `Choice` objects: the message is inside.
        match m.message.take() {
            Some(inner) if m.role.is_none() => message(deserialize(&inner, "")?),
            _ => message(m),
        }
    }
}

fn message(m: wire::Message) -> Result<Message, InputError> {
    use wire::Role as W;
    let sent = m.role.ok_or_else(|| InputError::new("role", "missing"))?;
    let role_s = sent.as_str();
    let role = match sent {
        W::System | W::Developer => Role::System,
        W::User => Role::User,
        W::Assistant => Role::Assistant,
        W::Tool | W::Function => Role::Tool,
    };
    let content = match m.content {
        None => None,
        Some(wire::Content::Text(s)) => Some(s),
        Some(wire::Content::Parts(parts)) => Some(text_of(parts)?),
    };
    let tool_calls = m.tool_calls.unwrap_or_default();
    if role != Role::Assistant && !tool_calls.is_empty() {
        return Err(InputError::new(
            "tool_calls",
            format!("only assistant messages carry tool calls (role is {role_s:?})"),
        ));
    }
    let tool_calls = tool_calls
        .into_iter()
        .map(|c| ToolCall {
            id: c.id.unwrap_or_default(),
            name: c.function.name,
            arguments: c.function.arguments.0,
        })
        .collect();
    if sent == W::Tool && m.tool_call_id.is_none() {
        return Err(InputError::new(
            "tool_call_id",
            "missing (required for role \"tool\")",
        ));
    }
    // (A message of another role with tool calls was refused above.)
    if content.is_none() && role != Role::Assistant {
        return Err(InputError::new(
            "content",
            format!("missing (a {role_s} message needs content)"),
        ));
    }
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id: m.tool_call_id,
        name: m.name,
        reasoning: m.reasoning_content.or(m.thinking).or(m.reasoning),
    })
}

/// A list of content parts as one text: text and refusal parts joined with newlines, anything
/// else (images, audio) refused — a text judge cannot see it.
fn text_of(parts: Vec<wire::Part>) -> Result<String, InputError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (k, wire::Part(p)) in parts.iter().enumerate() {
        let at = format!("content[{k}]");
        let kind = p
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| InputError::new(format!("{at}.type"), "missing (expected \"text\")"))?;
        let key = match kind {
            "text" | "input_text" | "output_text" => "text",
            "refusal" => "refusal",
            other => {
                return Err(InputError::new(
                    format!("{at}.type"),
                    format!("unsupported content part {other:?}: only text parts can be judged"),
                ))
            }
        };
        let text = p
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| InputError::new(format!("{at}.{key}"), "missing or not a string"))?;
        texts.push(text);
    }
    Ok(texts.join("\n"))
}

/// A stable content hash of any serialisable value: SHA-256 over its JSON text, prefixed with
/// `sha256:`. Struct fields serialise in declaration order and maps preserve insertion order, so
/// the same input always gives the same hash.
pub fn content_hash<T: Serialize + ?Sized>(v: &T) -> String {
    let bytes = serde_json::to_vec(v).expect("serialising plain data cannot fail");
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}

#[cfg(test)]
#[path = "trajectory_tests.rs"]
mod tests;
