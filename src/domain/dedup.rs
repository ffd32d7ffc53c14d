//! Deduplication: what the judge must read, sent once.
//!
//! Three savings, in order:
//! 1. Tool-call ids are renumbered per trajectory (`call_1`, `call_2`, … in order of first use).
//!    Real rollouts give every call a fresh random id; without this, messages that are the same
//!    in every way that matters differ, and the shared prefix ends at the first tool call.
//! 2. Identical trajectories (after renumbering) become one candidate; the judge sees it once and
//!    every copy gets its score, so copies can never be scored differently.
//! 3. The longest common message prefix of the candidates is sent once as shared context, and a
//!    long message content that recurs after the divergence point (typically the same tool
//!    result) is sent once in a shared block and referenced by id from each place it occurs.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::domain::json_text::JsonOrText;
use crate::domain::trajectory::{Message, Role, ToolCall, Trajectory};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupConfig {
    /// A recurring message content is moved to a shared block only when it has at least this
    /// many characters; shorter ones (final answers, short tool results) stay inline, where the
    /// judge reads them in place and where a reference would save nothing.
    pub min_shared_chars: usize,
    /// Set false to send every trajectory whole (for comparisons and debugging).
    pub enabled: bool,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            min_shared_chars: 200,
            enabled: true,
        }
    }
}

/// `[dedup]` in `gavel.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DedupSection {
    /// Recurring message contents of at least this many characters are sent once.
    pub min_shared_chars: usize,
}

impl Default for DedupSection {
    fn default() -> Self {
        DedupSection {
            min_shared_chars: DedupConfig::default().min_shared_chars,
        }
    }
}

/// A message as the judge sees it: content either inline or a reference to a shared block.
/// Serialized as the prompt's message line: a content that is a JSON object or array is written
/// as that value, compacted ([`JsonOrText`]), not re-quoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct JudgeMessage {
    pub role: Role,
    /// The model's reasoning, where the request's reasoning rule shows it (it is dropped from
    /// the group before this is built otherwise); before the content, as it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "json_or_text_opt"
    )]
    pub content: Option<String>,
    /// Id of the shared block that holds this message's content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_ref: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<JudgeToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A tool call as the judge sees it. Its `arguments` stay the JSON string the API carries:
/// they are short, and written as values they would change prompts (and verdicts) that the
/// labelled sets measure, for a few tokens.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct JudgeToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl JudgeMessage {
    /// Whether the prompt writes this message's content as a JSON value (so the template says
    /// what such a value means).
    pub fn has_json_value(&self) -> bool {
        self.content
            .as_deref()
            .is_some_and(|c| JsonOrText(c).is_json())
    }
}

fn json_or_text_opt<S: serde::Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => JsonOrText(v).serialize(s),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SharedBlock {
    pub id: String,
    pub content: String,
}

/// One distinct trajectory the judge scores; `members` are the request indices (0-based) of
/// every trajectory identical to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub members: Vec<usize>,
    /// Messages after the shared prefix.
    pub messages: Vec<JudgeMessage>,
}

/// Everything the judge prompt is rendered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgeInput {
    pub prefix: Vec<JudgeMessage>,
    pub shared: Vec<SharedBlock>,
    pub candidates: Vec<Candidate>,
    /// Number of trajectories in the request.
    pub group_size: usize,
}

impl JudgeInput {
    /// Builds the deduplicated judge input for a group.
    pub fn build(group: &[Trajectory], cfg: &DedupConfig) -> JudgeInput {
        if !cfg.enabled {
            return Self::without_dedup(group);
        }
        let normalized: Vec<Vec<JudgeMessage>> = group.iter().map(renumber_tool_calls).collect();

        // Identical trajectories collapse into one candidate, in order of first appearance.
        let mut index: HashMap<&[JudgeMessage], usize> = HashMap::new();
        let mut distinct: Vec<(Vec<usize>, &[JudgeMessage])> = Vec::new();
        for (i, msgs) in normalized.iter().enumerate() {
            match index.get(msgs.as_slice()) {
                Some(&c) => distinct[c].0.push(i),
                None => {
                    index.insert(msgs.as_slice(), distinct.len());
                    distinct.push((vec![i], msgs.as_slice()));
                }
            }
        }

        // The shared prefix stops one message short of the shortest candidate, so every
        // candidate keeps at least its last message in its own section (a trajectory that is a
        // strict prefix of another still shows the judge its ending). A single candidate shares
        // nothing: it is sent whole, as ART's RULER sends a group of one, since a <context>
        // block would only add its tags and its sentence.
        let shortest = distinct.iter().map(|(_, m)| m.len()).min().unwrap_or(0);
        let mut prefix_len = 0;
        while distinct.len() > 1
            && prefix_len + 1 < shortest
            && distinct
                .iter()
                .all(|(_, m)| m[prefix_len] == distinct[0].1[prefix_len])
        {
            prefix_len += 1;
        }
        let prefix = distinct[0].1[..prefix_len].to_vec();

        // Long contents recurring after the divergence point go to shared blocks.
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for (_, msgs) in &distinct {
            for m in &msgs[prefix_len..] {
                if let Some(c) = m.content.as_deref() {
                    if c.chars().count() >= cfg.min_shared_chars {
                        *counts.entry(c).or_default() += 1;
                    }
                }
            }
        }
        let mut shared: Vec<SharedBlock> = Vec::new();
        let mut block_of: HashMap<&str, String> = HashMap::new();
        let candidates = distinct
            .iter()
            .map(|(members, msgs)| Candidate {
                members: members.clone(),
                messages: msgs[prefix_len..]
                    .iter()
                    .map(|m| {
                        let Some(c) = m.content.as_deref() else {
                            return m.clone();
                        };
                        if counts.get(c).copied().unwrap_or(0) < 2 {
                            return m.clone();
                        }
                        let id = block_of
                            .entry(c)
                            .or_insert_with(|| {
                                let id = format!("S{}", shared.len() + 1);
                                shared.push(SharedBlock {
                                    id: id.clone(),
                                    content: c.to_string(),
                                });
                                id
                            })
                            .clone();
                        JudgeMessage {
                            content: None,
                            content_ref: Some(id),
                            ..m.clone()
                        }
                    })
                    .collect(),
            })
            .collect();
        JudgeInput {
            prefix,
            shared,
            candidates,
            group_size: group.len(),
        }
    }

    /// Every trajectory whole, ids as given: what a judge would read with no deduplication.
    /// Used for the "without dedup" token count.
    pub fn without_dedup(group: &[Trajectory]) -> JudgeInput {
        JudgeInput {
            prefix: Vec::new(),
            shared: Vec::new(),
            candidates: group
                .iter()
                .enumerate()
                .map(|(i, t)| Candidate {
                    members: vec![i],
                    messages: t
                        .messages
                        .iter()
                        .map(|m| to_judge_message(m, |id| id.to_string()))
                        .collect(),
                })
                .collect(),
            group_size: group.len(),
        }
    }

    /// Bytes dedup kept out of the prompt for the candidates in `order`: what their trajectories
    /// would take sent whole (every member, the shared prefix in each, shared contents inline)
    /// minus what the deduplicated prompt holds for them. `size` is a message's size as the
    /// prompt writes it, `quoted` a content's size written inline: an estimate for usage
    /// reporting that costs one pass over the distinct messages, not a render and a BPE count.
    pub fn bytes_saved(
        &self,
        order: &[usize],
        size: impl Fn(&JudgeMessage) -> usize,
        quoted: impl Fn(&str) -> usize,
    ) -> usize {
        let prefix: usize = self.prefix.iter().map(&size).sum();
        let block = |id: &str| {
            self.shared
                .iter()
                .find(|b| b.id == id)
                .map_or(0, |b| quoted(&b.content))
        };
        let mut used: Vec<&str> = Vec::new();
        let (mut whole, mut deduped) = (0usize, prefix);
        for &c in order {
            let cand = &self.candidates[c];
            let mut one = prefix;
            for m in &cand.messages {
                let b = size(m);
                deduped += b;
                one += b;
                if let Some(r) = m.content_ref.as_deref() {
                    // Inline, the reference (`"content_ref":"S1"`) becomes `"content":…`.
                    one = (one + block(r) + "\"content\":".len())
                        .saturating_sub("\"content_ref\":\"\"".len() + r.len());
                    if !used.contains(&r) {
                        used.push(r);
                    }
                }
            }
            whole += one * cand.members.len();
        }
        // Each block is written once, framed as `<block id="S1">…</block>`.
        deduped += used.iter().map(|r| block(r) + r.len() + 24).sum::<usize>();
        whole.saturating_sub(deduped)
    }

    /// For each request trajectory (0-based), the index of its candidate.
    pub fn candidate_of(&self) -> Vec<usize> {
        let mut out = vec![0; self.group_size];
        for (c, cand) in self.candidates.iter().enumerate() {
            for &m in &cand.members {
                out[m] = c;
            }
        }
        out
    }
}

fn to_judge_message(m: &Message, map_id: impl Fn(&str) -> String) -> JudgeMessage {
    JudgeMessage {
        role: m.role,
        reasoning: m.reasoning.clone(),
        content: m.content.clone(),
        content_ref: None,
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c: &ToolCall| JudgeToolCall {
                id: map_id(&c.id),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect(),
        tool_call_id: m.tool_call_id.as_deref().map(&map_id),
        name: m.name.clone(),
    }
}

/// Renumbers tool-call ids in order of first appearance within one trajectory. A tool message
/// answering an id never issued still gets a consistent number.
fn renumber_tool_calls(t: &Trajectory) -> Vec<JudgeMessage> {
    let mut ids: HashMap<&str, String> = HashMap::new();
    for m in &t.messages {
        let issued = m.tool_calls.iter().map(|c| c.id.as_str());
        for id in issued.chain(m.tool_call_id.as_deref()) {
            let next = ids.len() + 1;
            ids.entry(id).or_insert_with(|| format!("call_{next}"));
        }
    }
    t.messages
        .iter()
        .map(|m| to_judge_message(m, |id| ids[id].clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::trajectory::parse_trajectories;
    use serde_json::json;

    fn group(v: serde_json::Value) -> Vec<Trajectory> {
        parse_trajectories(&v, 64).unwrap()
    }

    fn tool_traj(call_id: &str, result: &str, answer: &str) -> serde_json::Value {
        json!({"messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Find the total."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
            {"role": "assistant", "content": answer}]})
    }

    #[test]
    fn tool_call_ids_do_not_end_the_shared_prefix() {
        let big = "x".repeat(500);
        let g = group(json!([
            tool_traj("call_abc", &big, "ANSWER: 1"),
            tool_traj("call_zzz", &big, "ANSWER: 2")
        ]));
        let input = JudgeInput::build(&g, &DedupConfig::default());
        // system, user, tool call and tool result are shared; only the answers differ.
        assert_eq!(input.prefix.len(), 4);
        assert_eq!(input.prefix[2].tool_calls[0].id, "call_1");
        assert_eq!(input.prefix[3].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(input.candidates.len(), 2);
        assert_eq!(
            input.candidates[1].messages[0].content.as_deref(),
            Some("ANSWER: 2")
        );
    }

    #[test]
    fn recurring_long_tool_results_after_divergence_are_shared_once() {
        let big = "row,".repeat(100);
        let mk = |first: &str, answer: &str| {
            json!({"messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": first, "tool_calls": [
                    {"id": format!("id-{first}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": format!("id-{first}"), "content": big},
                {"role": "assistant", "content": answer}]})
        };
        let g = group(json!([
            mk("plan A", "ANSWER: 1"),
            mk("plan B", "ANSWER: 1"),
            mk("plan C", "ANSWER: 2")
        ]));
        let input = JudgeInput::build(&g, &DedupConfig::default());
        assert_eq!(input.prefix.len(), 1);
        assert_eq!(
            input.shared,
            vec![SharedBlock {
                id: "S1".into(),
                content: big.clone()
            }]
        );
        for c in &input.candidates {
            assert_eq!(c.messages[1].content_ref.as_deref(), Some("S1"));
            assert_eq!(c.messages[1].content, None);
            // Short final answers stay inline even though two are identical.
            assert!(c.messages[2].content.is_some());
        }
    }

    #[test]
    fn short_recurring_messages_stay_inline() {
        let g = group(json!([
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "ok"}, {"role": "assistant", "content": "x"}]},
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "ok"}, {"role": "assistant", "content": "y"}]}]));
        let input = JudgeInput::build(&g, &DedupConfig::default());
        assert!(input.shared.is_empty());
    }

    #[test]
    fn identical_trajectories_collapse_into_one_candidate() {
        let t = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
        let g = group(json!([t, t, t]));
        let input = JudgeInput::build(&g, &DedupConfig::default());
        assert_eq!(input.candidates.len(), 1);
        assert_eq!(input.candidates[0].members, vec![0, 1, 2]);
        // One candidate shares nothing: it is sent whole.
        assert_eq!(input.prefix.len(), 0);
        assert_eq!(input.candidates[0].messages.len(), 2);
        assert_eq!(input.candidate_of(), vec![0, 0, 0]);
    }

    #[test]
    fn strict_prefix_trajectory_keeps_its_last_message() {
        let short = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
        let long = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                        {"role": "user", "content": "more?"}, {"role": "assistant", "content": "b"}]});
        let input = JudgeInput::build(&group(json!([short, long])), &DedupConfig::default());
        assert_eq!(input.prefix.len(), 1);
        assert_eq!(input.candidates[0].messages.len(), 1);
        assert_eq!(input.candidates[1].messages.len(), 3);
    }

    #[test]
    fn group_of_one_is_sent_whole() {
        let t = json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
        let input = JudgeInput::build(&group(json!([t])), &DedupConfig::default());
        assert_eq!(input.prefix.len(), 0);
        assert_eq!(input.candidates.len(), 1);
        let contents: Vec<_> = input.candidates[0]
            .messages
            .iter()
            .map(|m| m.content.as_deref())
            .collect();
        assert_eq!(contents, [Some("s"), Some("q"), Some("a")]);
    }

    #[test]
    fn disabled_dedup_sends_everything_as_given() {
        let big = "x".repeat(500);
        let g = group(json!([
            tool_traj("c1", &big, "A"),
            tool_traj("c2", &big, "A")
        ]));
        let input = JudgeInput::build(
            &g,
            &DedupConfig {
                enabled: false,
                ..Default::default()
            },
        );
        assert!(input.prefix.is_empty() && input.shared.is_empty());
        assert_eq!(input.candidates.len(), 2);
        assert_eq!(input.candidates[1].messages[2].tool_calls[0].id, "c2");
    }
}
