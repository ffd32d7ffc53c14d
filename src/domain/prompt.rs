//! Judge prompts: minijinja templates from `prompts/` rendered into chat messages.
//!
//! A prompt is a pair of templates, `NAME.system.jinja` and `NAME.user.jinja`. The shipped pair
//! is compiled in; a `prompts_dir` in the configuration adds or replaces pairs from disk. Strict
//! undefined: a template that names a variable the renderer does not provide fails loudly.
//!
//! Trajectory content is quoted as data: every message is one JSON line with `<`, `>` and `&`
//! escaped as `\u003c`, `\u003e`, `\u0026`, so no content can close a tag, open a fake
//! `<trajectory>` or pose as the grader. A content that is itself a JSON object or array (a
//! tool's result, above all) is written as that JSON value, compacted, not re-quoted as a string
//! ([`crate::domain::json_text`]); the same escaping applies inside it. Everything else in the JSON stays as it is — non-ASCII
//! text is sent as UTF-8, which costs far fewer tokens than `\uXXXX` escapes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use crate::domain::dedup::{JudgeInput, JudgeMessage};
use crate::domain::json_text::JsonOrText;
use crate::domain::rubric::Rubric;
use crate::domain::trajectory::content_hash;

/// The prompt used when none is named.
pub const DEFAULT_PROMPT: &str = "relative";

/// How a judge is asked about a group. Listwise is the one verdict for the whole group that
/// every judge can give; pointwise and pairwise read token probabilities: a local judge's, or a
/// remote server's `logprobs` where it returns them.
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
pub enum JudgeMode {
    /// One JSON verdict scoring every trajectory relative to the others.
    #[default]
    Listwise,
    /// Each trajectory alone, one yes/no question: the score is P(yes) / (P(yes) + P(no)).
    Pointwise,
    /// Trajectories two at a time, both orders: P(1) / (P(1) + P(2)), averaged per trajectory.
    Pairwise,
}

impl std::str::FromStr for JudgeMode {
    type Err = String;

    fn from_str(s: &str) -> Result<JudgeMode, String> {
        match s {
            "listwise" => Ok(JudgeMode::Listwise),
            "pointwise" => Ok(JudgeMode::Pointwise),
            "pairwise" => Ok(JudgeMode::Pairwise),
            _ => Err(format!("expected {}", JudgeMode::NAMES)),
        }
    }
}

impl JudgeMode {
    /// A local judge's mode when its config names none: pointwise ranked best on every labelled
    /// set with both test models (BENCHMARKS.md, "Judge quality").
    pub const LOCAL_DEFAULT: JudgeMode = JudgeMode::Pointwise;

    pub const NAMES: &'static str = "\"listwise\", \"pointwise\" or \"pairwise\"";

    pub fn name(self) -> &'static str {
        match self {
            JudgeMode::Listwise => "listwise",
            JudgeMode::Pointwise => "pointwise",
            JudgeMode::Pairwise => "pairwise",
        }
    }

    /// The template pair that renders this mode's prompts.
    pub fn prompt(self) -> &'static str {
        match self {
            JudgeMode::Listwise => DEFAULT_PROMPT,
            JudgeMode::Pointwise => "pointwise",
            JudgeMode::Pairwise => "pairwise",
        }
    }

    /// Whether the mode reads token probabilities.
    pub fn reads_probabilities(self) -> bool {
        self != JudgeMode::Listwise
    }
}

const BUILT_IN: &[(&str, &str)] = &[
    (
        "relative.system.jinja",
        include_str!("../../prompts/relative.system.jinja"),
    ),
    (
        "relative.user.jinja",
        include_str!("../../prompts/relative.user.jinja"),
    ),
    (
        "pointwise.system.jinja",
        include_str!("../../prompts/pointwise.system.jinja"),
    ),
    (
        "pointwise.user.jinja",
        include_str!("../../prompts/pointwise.user.jinja"),
    ),
    (
        "pairwise.system.jinja",
        include_str!("../../prompts/pairwise.system.jinja"),
    ),
    (
        "pairwise.user.jinja",
        include_str!("../../prompts/pairwise.user.jinja"),
    ),
    ("reask.jinja", include_str!("../../prompts/reask.jinja")),
];

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("{file}: {message}")]
    Template { file: String, message: String },
    #[error("{0}: cannot read: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("unknown prompt {0:?}")]
    Unknown(String),
}

fn template_error(e: &minijinja::Error) -> PromptError {
    PromptError::Template {
        file: match (e.name(), e.line()) {
            (Some(n), Some(l)) => format!("prompts/{n}:{l}"),
            (Some(n), None) => format!("prompts/{n}"),
            _ => "prompts".into(),
        },
        message: e
            .detail()
            .map(str::to_string)
            .unwrap_or_else(|| e.kind().to_string()),
    }
}

/// One chat message of the judge prompt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// A rendered judge prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderedPrompt {
    pub messages: Vec<ChatMessage>,
    /// The trajectory ids the judge sees, in prompt order ("1".."M").
    pub ids: Vec<String>,
    /// `sha256:` of the template pair that rendered this prompt.
    pub template_version: String,
}

/// The judge prompt templates.
pub struct Prompts {
    env: Environment<'static>,
    versions: BTreeMap<String, String>,
}

impl std::fmt::Debug for Prompts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompts")
            .field("versions", &self.versions)
            .finish()
    }
}

#[derive(Serialize)]
struct QuotedTrajectory {
    id: String,
    messages: Vec<String>,
}

#[derive(Serialize)]
struct QuotedBlock<'a> {
    id: &'a str,
    content: String,
}

#[derive(Serialize)]
struct Context<'a> {
    n: usize,
    ids: &'a [String],
    rubric: &'a Rubric,
    context: Vec<String>,
    shared: Vec<QuotedBlock<'a>>,
    trajectories: Vec<QuotedTrajectory>,
    tools: Option<String>,
    /// The reference answer, quoted as a JSON string.
    reference: Option<String>,
    /// Whether any message line writes its content as a JSON value (the
    /// system message then says what such a value is).
    json_values: bool,
    /// Whether the judge is held to the reply's JSON schema ([`GroupExtras::reply_schema`]).
    reply_schema: bool,
}

/// What a render takes besides the group and its rubric: the request's optional blocks, and
/// what the judge it is for needs to be told.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupExtras<'a> {
    /// The request's tool definitions (`<tools>`).
    pub tools: Option<&'a serde_json::Value>,
    /// The request's reference answer (`<reference>`).
    pub reference: Option<&'a str>,
    /// The judge's reply is held to its JSON schema (structured output), so the listwise prompt
    /// need not spell the reply's shape out: about 25 tokens fewer on every call.
    pub reply_schema: bool,
}

/// JSON text of `v` with `<`, `>` and `&` escaped (they only ever occur inside JSON strings,
/// where `\u003c` and friends are valid escapes).
pub fn quote_json<T: Serialize + ?Sized>(v: &T) -> String {
    let text = serde_json::to_string(v).expect("serialising plain data cannot fail");
    if !text.contains(['<', '>', '&']) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 32);
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

impl Prompts {
    /// The shipped templates, plus every `*.jinja` in `dir` when given.
    pub fn load(dir: Option<&Path>) -> Result<Prompts, PromptError> {
        let mut sources: BTreeMap<String, String> = BUILT_IN
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        if let Some(dir) = dir {
            let entries =
                std::fs::read_dir(dir).map_err(|e| PromptError::Io(dir.to_path_buf(), e))?;
            for entry in entries.filter_map(Result::ok) {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if name.ends_with(".jinja") {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| PromptError::Io(path.clone(), e))?;
                    sources.insert(name.to_string(), text);
                }
            }
        }
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Quoting is done in Rust (quote_json); HTML escaping would corrupt the JSON.
        env.set_auto_escape_callback(|_| AutoEscape::None);
        let mut versions = BTreeMap::new();
        for (name, text) in &sources {
            env.add_template_owned(name.clone(), text.clone())
                .map_err(|e| template_error(&e))?;
            if let Some(prompt) = name.strip_suffix(".system.jinja") {
                let user = sources
                    .get(&format!("{prompt}.user.jinja"))
                    .ok_or_else(|| PromptError::Template {
                        file: format!("prompts/{name}"),
                        message: format!("has no partner {prompt}.user.jinja"),
                    })?;
                versions.insert(prompt.to_string(), content_hash(&(text, user)));
            }
        }
        Ok(Prompts { env, versions })
    }

    /// Names of the prompts available.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.versions.keys().map(String::as_str)
    }

    pub fn version(&self, prompt: &str) -> Result<&str, PromptError> {
        self.versions
            .get(prompt)
            .map(String::as_str)
            .ok_or_else(|| PromptError::Unknown(prompt.to_string()))
    }

    /// Renders the judge messages for `input`, presenting candidates in `order` (candidate
    /// indices) labelled "1", "2", … by position.
    pub fn render(
        &self,
        prompt: &str,
        input: &JudgeInput,
        order: &[usize],
        rubric: &Rubric,
        extras: GroupExtras<'_>,
    ) -> Result<RenderedPrompt, PromptError> {
        let template_version = self.version(prompt)?.to_string();
        let ids: Vec<String> = (1..=order.len()).map(|i| i.to_string()).collect();
        let ctx = Context {
            n: order.len(),
            ids: &ids,
            rubric,
            context: input.prefix.iter().map(quote_json).collect(),
            shared: input
                .shared
                .iter()
                .map(|b| QuotedBlock {
                    id: &b.id,
                    content: quote_json(&JsonOrText(&b.content)),
                })
                .collect(),
            trajectories: order
                .iter()
                .zip(&ids)
                .map(|(&c, id)| QuotedTrajectory {
                    id: id.clone(),
                    messages: input.candidates[c]
                        .messages
                        .iter()
                        .map(quote_json)
                        .collect(),
                })
                .collect(),
            tools: extras.tools.filter(|t| !t.is_null()).map(quote_json),
            reference: extras.reference.map(quote_json),
            reply_schema: extras.reply_schema,
            json_values: input.prefix.iter().any(JudgeMessage::has_json_value)
                || input.shared.iter().any(|b| JsonOrText(&b.content).is_json())
                // Over the whole group, not the candidates shown: pointwise and pairwise prompts
                // of one group must share their system message (the same question after the
                // same prefix, and one prefill for all).
                || input
                    .candidates
                    .iter()
                    .any(|c| c.messages.iter().any(JudgeMessage::has_json_value)),
        };
        let mut messages = Vec::with_capacity(2);
        for role in ["system", "user"] {
            let tmpl = self
                .env
                .get_template(&format!("{prompt}.{role}.jinja"))
                .map_err(|e| template_error(&e))?;
            let content = tmpl
                .render(minijinja::value::Serde(&ctx))
                .map_err(|e| template_error(&e))?;
            messages.push(ChatMessage {
                role: role.to_string(),
                content,
            });
        }
        Ok(RenderedPrompt {
            messages,
            ids,
            template_version,
        })
    }
}

impl Prompts {
    /// The follow-up message of a structural re-ask, stating the exact problem.
    pub fn render_reask(&self, problem: &str, ids: &[String]) -> Result<ChatMessage, PromptError> {
        let tmpl = self
            .env
            .get_template("reask.jinja")
            .map_err(|e| template_error(&e))?;
        let content = tmpl
            .render(minijinja::context! { problem => problem, ids => minijinja::Value::from(minijinja::value::Serde(ids)) })
            .map_err(|e| template_error(&e))?;
        Ok(ChatMessage {
            role: "user".into(),
            content,
        })
    }
}

/// Prompt tokens of a chat request, counted with the `o200k_base` encoding plus OpenAI's
/// per-message framing (3 tokens a message, 3 to prime the reply). Exact for OpenAI's current
/// models; for other judges a close estimate, and the same yardstick for every prompt.
pub fn count_tokens(messages: &[ChatMessage]) -> usize {
    let bpe = tiktoken_rs::o200k_base_singleton();
    3 + messages
        .iter()
        .map(|m| 3 + bpe.encode_ordinary(&m.role).len() + bpe.encode_ordinary(&m.content).len())
        .sum::<usize>()
}

/// Of each of `prompts`, the leading tokens they all share byte for byte (whole messages, then
/// the common start of the first message that differs), counted as [`count_tokens`] counts: what
/// a server with a prefix cache prefills once for all of them. Every prompt, for one prompt.
pub fn shared_prefix_tokens(prompts: &[&[ChatMessage]]) -> usize {
    let Some((first, rest)) = prompts.split_first() else {
        return 0;
    };
    let bpe = tiktoken_rs::o200k_base_singleton();
    let mut tokens = 3;
    for (i, m) in first.iter().enumerate() {
        let same_role = rest
            .iter()
            .all(|p| p.get(i).is_some_and(|o| o.role == m.role));
        if !same_role {
            break;
        }
        let mut common = m.content.len();
        for p in rest {
            let other = &p[i].content;
            common = common.min(
                m.content
                    .bytes()
                    .zip(other.bytes())
                    .take_while(|(a, b)| a == b)
                    .count(),
            );
        }
        while !m.content.is_char_boundary(common) {
            common -= 1;
        }
        tokens += 3 + bpe.encode_ordinary(&m.role).len();
        tokens += bpe.encode_ordinary(&m.content[..common]).len();
        if common < m.content.len() || rest.iter().any(|p| p[i].content.len() != common) {
            break;
        }
    }
    tokens
}

#[cfg(test)]
#[path = "prompt_tests.rs"]
mod tests;
