//! `gavel train --offline SCORED.jsonl`: GRPO steps on groups scored already, without sampling.
//!
//! Each line is one group with its `rewards` (and, optionally, `advantages`), in either form:
//! - self-contained: the group's `trajectories` on the line itself (a request body with its
//!   rewards added);
//! - `gavel rescore` output: `input` (the file rescore read) and `line` or `group_id` say where
//!   the trajectories are; they are read from that file (its path as written, else relative to
//!   SCORED.jsonl's folder), in any of rescore's input forms.
//!
//! Reading and resolving the lines is [`crate::toolkit::scored`]'s (shared with `gavel select`); this
//! file tokenizes what it reads. Every trajectory is split at its last user (or system) message: what comes before is the
//! prompt, rendered with the chat template and the assistant turn opened; what comes after (the
//! final assistant turns, with any tool results between them) is the completion, tokenized turn
//! by turn so that tool output is masked out of the loss. Advantages are the line's own, or
//! computed from the rewards as TRL does, `(r − mean) / (std + 1e-4)` over the group;
//! trajectories with a null reward are left out.

use std::path::Path;

use super::rollout::{Finish, PolicyModel, SampledCompletion};
use super::trainer::GroupData;
use super::TrainError;
use crate::domain::prompt::ChatMessage;
use crate::domain::trajectory::{Role, Trajectory};
use crate::toolkit::scored::{read_scored_with, ScoredGroup};

/// Reads scored groups (with [`crate::toolkit::scored`]'s reader) and tokenizes them for `policy`; a bad
/// line is `FILE:LINE: problem`.
pub fn read_scored(path: &Path, policy: &PolicyModel) -> Result<Vec<GroupData>, TrainError> {
    let groups = read_scored_with(path, |g| group_data(&g, policy))?;
    let groups: Vec<GroupData> = groups.into_iter().flatten().collect();
    if groups.is_empty() {
        return Err(TrainError::Input(format!(
            "{}: no groups with two or more rewards to learn from",
            path.display()
        )));
    }
    Ok(groups)
}

/// One group's tokenized trajectories, those with a reward only; `None` under two of them.
fn group_data(sg: &ScoredGroup, policy: &PolicyModel) -> Result<Option<GroupData>, String> {
    let rewards = &sg.rewards;
    let advantages = sg
        .advantages
        .clone()
        .unwrap_or_else(|| advantages_of(rewards));
    let mut g = GroupData {
        prompts: Vec::new(),
        completions: Vec::new(),
        masks: Vec::new(),
        rewards: Vec::new(),
        advantages: Vec::new(),
        has_sampler_logp: false,
    };
    for (k, t) in sg.trajectories.iter().enumerate() {
        let Some(r) = rewards[k] else { continue };
        let (prompt, tokens, mask) =
            tokenize(t, policy).map_err(|m| format!("trajectories[{k}]: {m}"))?;
        g.prompts.push(prompt);
        g.completions.push(SampledCompletion {
            tokens,
            logp: Vec::new(),
            text: t.final_answer().unwrap_or_default().to_string(),
            finish: Finish::Eos,
        });
        g.masks.push(mask);
        g.rewards.push(Some(r));
        g.advantages.push(advantages[k]);
    }
    Ok((g.completions.len() >= 2).then_some(g))
}

/// TRL's group advantages over the non-null rewards (0 for null ones).
pub fn advantages_of(rewards: &[Option<f64>]) -> Vec<f64> {
    let r: Vec<f64> = rewards.iter().flatten().copied().collect();
    let n = r.len().max(1) as f64;
    let mean = r.iter().sum::<f64>() / n;
    // torch.std: the unbiased estimate.
    let var = r.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0).max(1.0);
    let std = var.sqrt();
    rewards
        .iter()
        .map(|x| x.map_or(0.0, |x| (x - mean) / (std + 1e-4)))
        .collect()
}

fn chat_message(m: &crate::domain::trajectory::Message) -> ChatMessage {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut content = m.content.clone().unwrap_or_default();
    // ChatMessage carries text only: tool calls are written as Qwen writes them.
    for c in &m.tool_calls {
        let call = serde_json::json!({"name": c.name, "arguments": c.arguments});
        content.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
    }
    ChatMessage {
        role: role.into(),
        content,
    }
}

/// Prompt ids, completion ids and the completion's loss mask.
type Tokenized = (Vec<u32>, Vec<u32>, Vec<f32>);

/// One trajectory's prompt, completion and mask.
pub(crate) fn tokenize(t: &Trajectory, policy: &PolicyModel) -> Result<Tokenized, String> {
    let msgs: Vec<ChatMessage> = t.messages.iter().map(chat_message).collect();
    let split = t
        .messages
        .iter()
        .rposition(|m| matches!(m.role, Role::User | Role::System))
        .map_or(0, |i| i + 1);
    if split == 0 {
        return Err("no user or system message before the completion".into());
    }
    if t.messages.get(split).map(|m| m.role) != Some(Role::Assistant) {
        return Err("no assistant turn after the last user message".into());
    }
    let err = |e: TrainError| e.to_string();
    let mut prev = policy.render(&msgs[..split], true).map_err(err)?;
    let prompt = policy.encode(&prev).map_err(err)?;
    let (mut tokens, mut mask) = (Vec::new(), Vec::new());
    for j in split..msgs.len() {
        let full = policy.render(&msgs[..=j], false).map_err(err)?;
        let Some(segment) = full.strip_prefix(prev.as_str()) else {
            return Err(format!(
                "messages[{j}]: the chat template does not render the conversation as a \
                 continuation of its prompt, so the completion's tokens cannot be found"
            ));
        };
        let ids = policy.encode(segment).map_err(err)?;
        let keep = if t.messages[j].role == Role::Assistant {
            1.0
        } else {
            0.0
        };
        mask.extend(std::iter::repeat_n(keep, ids.len()));
        tokens.extend(ids);
        prev = full;
    }
    if tokens.is_empty() {
        return Err("an empty completion".into());
    }
    Ok((prompt, tokens, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_are_trls() {
        let a = advantages_of(&[Some(1.0), None, Some(0.0), Some(0.5)]);
        // mean 0.5, unbiased std 0.5
        assert!((a[0] - 0.5 / 0.5001).abs() < 1e-9, "{a:?}");
        assert_eq!(a[1], 0.0);
        assert!((a[2] + 0.5 / 0.5001).abs() < 1e-9);
        assert_eq!(a[3], 0.0);
    }
}
