//! Trajectories and groups: the validated, canonical form of what a training loop sends.
//!
//! Input is taken as a `serde_json::Value` and walked by hand rather than derived with serde,
//! because a refusal must name the trajectory index, the message index and the field — serde's
//! own errors only give a line and column of the request body.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::spelling::misspelt;

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
const MESSAGE_FIELDS: &[&str] = &[
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "thinking",
    "reasoning",
];

/// `at.key: unknown field, did you mean known?` for a near miss of a known field.
fn check_spelling(obj: &Map<String, Value>, known: &[&str], at: &str) -> Result<(), InputError> {
    match misspelt(obj, known) {
        Some((key, meant)) => Err(InputError::new(
            format!("{at}.{key}"),
            format!("unknown field, did you mean {meant}?"),
        )),
        None => Ok(()),
    }
}

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
    fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" | "function" => Role::Tool,
            _ => return None,
        })
    }

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

/// A refusal of input, naming where the problem is. `Display` is the message returned to the
/// caller, e.g. `trajectories[2].messages[5].tool_call_id: missing (required for role "tool")`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct InputError {
    pub path: String,
    pub problem: String,
}

impl InputError {
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        InputError {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

/// "a string", "an array", …: how errors name the JSON type they got.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses the `trajectories` array of a request: 1..=`max` trajectories, each either an OpenAI
/// message list (`{"messages": [...]}`), ART's serialised `Trajectory`
/// (`{"messages_and_choices": [...]}`), or a bare array of messages.
pub fn parse_trajectories(v: &Value, max: usize) -> Result<Vec<Trajectory>, InputError> {
    let arr = v.as_array().ok_or_else(|| {
        InputError::new(
            "trajectories",
            format!("expected an array, got {}", type_name(v)),
        )
    })?;
    if arr.is_empty() {
        return Err(InputError::new(
            "trajectories",
            "a group needs at least one trajectory",
        ));
    }
    let max = max.min(MAX_GROUP_SIZE);
    if arr.len() > max {
        return Err(InputError::new(
            "trajectories",
            format!(
                "{} trajectories, more than the maximum group size of {max}",
                arr.len()
            ),
        ));
    }
    arr.iter()
        .enumerate()
        .map(|(i, t)| parse_trajectory(t, &format!("trajectories[{i}]")))
        .collect()
}

/// Parses one trajectory; `at` is the path prefix used in errors.
pub fn parse_trajectory(v: &Value, at: &str) -> Result<Trajectory, InputError> {
    let (list, list_field, obj) = match v {
        Value::Array(list) => (list, "", None),
        Value::Object(obj) => {
            check_spelling(obj, TRAJECTORY_FIELDS, at)?;
            if let Some(m) = obj.get("messages") {
                let list = m.as_array().ok_or_else(|| {
                    InputError::new(
                        format!("{at}.messages"),
                        format!("expected an array, got {}", type_name(m)),
                    )
                })?;
                (list, ".messages", Some(obj))
            } else if let Some(m) = obj.get("messages_and_choices") {
                let list = m.as_array().ok_or_else(|| {
                    InputError::new(
                        format!("{at}.messages_and_choices"),
                        format!("expected an array, got {}", type_name(m)),
                    )
                })?;
                (list, ".messages_and_choices", Some(obj))
            } else {
                return Err(InputError::new(
                    at,
                    "missing \"messages\" (or ART's \"messages_and_choices\")",
                ));
            }
        }
        other => {
            return Err(InputError::new(
                at,
                format!(
                    "expected an object with \"messages\", got {}",
                    type_name(other)
                ),
            ))
        }
    };
    if list.is_empty() {
        return Err(InputError::new(format!("{at}{list_field}"), "no messages"));
    }
    let mut messages = Vec::with_capacity(list.len());
    for (j, m) in list.iter().enumerate() {
        let path = format!("{at}{list_field}[{j}]");
        // ART keeps the sampled turns as OpenAI `Choice` objects: the message is inside.
        let m = match m.get("message") {
            Some(inner) if m.get("role").is_none() => inner,
            _ => m,
        };
        messages.push(parse_message(m, &path)?);
    }
    // The judge scores the agent's turns: without one there is nothing to judge (a request
    // that sent only the prompt), and a score would be the judge's guess. An empty assistant
    // message is a turn (a policy that answered nothing) and is judged as one.
    if !messages.iter().any(|m| m.role == Role::Assistant) {
        return Err(InputError::new(
            format!("{at}{list_field}"),
            "no assistant message: nothing to judge",
        ));
    }
    let mut traj = Trajectory {
        messages,
        reward: None,
        metrics: Map::new(),
        metadata: Map::new(),
    };
    if let Some(obj) = obj {
        match obj.get("reward") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) => {
                let r = n.as_f64().filter(|r| r.is_finite()).ok_or_else(|| {
                    InputError::new(format!("{at}.reward"), "not a finite number")
                })?;
                traj.reward = Some(r);
            }
            Some(other) => {
                return Err(InputError::new(
                    format!("{at}.reward"),
                    format!("expected a number or null, got {}", type_name(other)),
                ))
            }
        }
        for (field, slot) in [
            ("metrics", &mut traj.metrics),
            ("metadata", &mut traj.metadata),
        ] {
            match obj.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::Object(o)) => *slot = o.clone(),
                Some(other) => {
                    return Err(InputError::new(
                        format!("{at}.{field}"),
                        format!("expected an object, got {}", type_name(other)),
                    ))
                }
            }
        }
    }
    Ok(traj)
}

fn parse_message(v: &Value, at: &str) -> Result<Message, InputError> {
    let obj = v.as_object().ok_or_else(|| {
        InputError::new(
            at,
            format!("expected a message object, got {}", type_name(v)),
        )
    })?;
    check_spelling(obj, MESSAGE_FIELDS, at)?;
    let role_v = obj
        .get("role")
        .ok_or_else(|| InputError::new(format!("{at}.role"), "missing"))?;
    let role_s = role_v.as_str().ok_or_else(|| {
        InputError::new(
            format!("{at}.role"),
            format!("expected a string, got {}", type_name(role_v)),
        )
    })?;
    let role = Role::parse(role_s).ok_or_else(|| {
        InputError::new(
            format!("{at}.role"),
            format!("unknown role {role_s:?} (expected system, user, assistant or tool)"),
        )
    })?;
    let content = parse_content(obj.get("content"), at, "content")?;
    let mut tool_calls = Vec::new();
    match obj.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            if role != Role::Assistant && !calls.is_empty() {
                return Err(InputError::new(
                    format!("{at}.tool_calls"),
                    format!("only assistant messages carry tool calls (role is {role_s:?})"),
                ));
            }
            for (k, c) in calls.iter().enumerate() {
                tool_calls.push(parse_tool_call(c, &format!("{at}.tool_calls[{k}]"))?);
            }
        }
        Some(other) => {
            return Err(InputError::new(
                format!("{at}.tool_calls"),
                format!("expected an array, got {}", type_name(other)),
            ))
        }
    }
    let tool_call_id = opt_string(obj.get("tool_call_id"), at, "tool_call_id")?;
    let name = opt_string(obj.get("name"), at, "name")?;
    let mut reasoning = None;
    for field in REASONING_FIELDS {
        if let Some(r) = opt_string(obj.get(*field), at, field)? {
            reasoning.get_or_insert(r);
        }
    }
    if role == Role::Tool && tool_call_id.is_none() && role_s == "tool" {
        return Err(InputError::new(
            format!("{at}.tool_call_id"),
            "missing (required for role \"tool\")",
        ));
    }
    if content.is_none() && tool_calls.is_empty() && role != Role::Assistant {
        return Err(InputError::new(
            format!("{at}.content"),
            format!("missing (a {role_s} message needs content)"),
        ));
    }
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id,
        name,
        reasoning,
    })
}

/// An optional string field `field` of the object at `at` (paths are built only on error: this
/// runs for every message of every request).
fn opt_string(v: Option<&Value>, at: &str, field: &str) -> Result<Option<String>, InputError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(InputError::new(
            format!("{at}.{field}"),
            format!("expected a string, got {}", type_name(other)),
        )),
    }
}

/// `content` may be a string, null, or a list of parts; text and refusal parts are joined with
/// newlines, anything else (images, audio) is refused — a text judge cannot see it.
fn parse_content(v: Option<&Value>, at: &str, field: &str) -> Result<Option<String>, InputError> {
    let at = || format!("{at}.{field}");
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (k, p) in parts.iter().enumerate() {
                let pat = format!("{}[{k}]", at());
                let kind = p.get("type").and_then(Value::as_str).ok_or_else(|| {
                    InputError::new(format!("{pat}.type"), "missing (expected \"text\")")
                })?;
                let key = match kind {
                    "text" | "input_text" | "output_text" => "text",
                    "refusal" => "refusal",
                    other => {
                        return Err(InputError::new(
                            format!("{pat}.type"),
                            format!(
                                "unsupported content part {other:?}: only text parts can be judged"
                            ),
                        ))
                    }
                };
                let text = p.get(key).and_then(Value::as_str).ok_or_else(|| {
                    InputError::new(format!("{pat}.{key}"), "missing or not a string")
                })?;
                texts.push(text);
            }
            Ok(Some(texts.join("\n")))
        }
        Some(other) => Err(InputError::new(
            at(),
            format!(
                "expected a string, null or a list of text parts, got {}",
                type_name(other)
            ),
        )),
    }
}

fn parse_tool_call(v: &Value, at: &str) -> Result<ToolCall, InputError> {
    let obj = v
        .as_object()
        .ok_or_else(|| InputError::new(at, format!("expected an object, got {}", type_name(v))))?;
    check_spelling(obj, &["id", "type", "function"], at)?;
    let id = opt_string(obj.get("id"), at, "id")?.unwrap_or_default();
    let func_v = obj
        .get("function")
        .ok_or_else(|| InputError::new(format!("{at}.function"), "missing"))?;
    let func = func_v.as_object().ok_or_else(|| {
        InputError::new(
            format!("{at}.function"),
            format!("expected an object, got {}", type_name(func_v)),
        )
    })?;
    check_spelling(func, &["name", "arguments"], &format!("{at}.function"))?;
    let name = opt_string(func.get("name"), at, "function.name")?
        .ok_or_else(|| InputError::new(format!("{at}.function.name"), "missing"))?;
    // Arguments are a JSON string in OpenAI's format; some loggers store the parsed object.
    let arguments = match func.get("arguments") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
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
