//! Best-of-N selection for SFT (`gavel select`): from each scored group keep the best
//! trajectory (or the top K), when it is good enough and clearly better than the rest, and
//! write it as a chat line TRL's `SFTTrainer` reads. Pure functions on plain data; the reading
//! is [`crate::toolkit::scored`]'s and the file writing the command's.
//!
//! The rule, per group:
//! 1. Rank the trajectories that have a reward (a null reward never wins and is never "next"):
//!    higher reward first; on equal rewards fewer turns (assistant messages) first, since the
//!    shorter of two equally good answers is the one worth imitating; then the earlier one.
//! 2. No reward at all: the group is dropped ("no reward").
//! 3. The best reward below `min_reward`: dropped ("below min-reward").
//! 4. The K-th reward must beat the (K+1)-th by at least `min_margin` (to within 1e-9, so that
//!    0.9 over 0.8 passes a margin of 0.1); a group with K or fewer rewards has no (K+1)-th and
//!    passes. A tie at the margin is a difference of 0: it passes a margin of 0 (the tie-break
//!    picks) and fails any positive margin ("margin too small"), since then the rubric could
//!    not tell the winner from the runner-up.
//! 5. Of the top K, those with a reward of at least `min_reward` are kept, with their rank.

use std::fmt;

use serde_json::{json, Map, Value};

use crate::domain::trajectory::{Message, Role, Trajectory};
use crate::toolkit::scored::ScoredGroup;

/// Slack for the margin test: rewards are sums and products of decimals.
const EPS: f64 = 1e-9;

/// Options that make no sense (clap checks the types, not these).
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("--top must be at least 1")]
    Top,
    #[error("--min-margin must be a number ≥ 0, got {0}")]
    Margin(f64),
    #[error("--min-reward must be a finite number, got {0}")]
    MinReward(f64),
}

/// How to choose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// How many to keep per group (K).
    pub top: usize,
    /// The least reward worth keeping; `None` keeps any.
    pub min_reward: Option<f64>,
    /// How much the K-th must beat the (K+1)-th by.
    pub min_margin: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            top: 1,
            min_reward: None,
            min_margin: 0.0,
        }
    }
}

impl Options {
    pub fn check(&self) -> Result<(), SelectError> {
        if self.top == 0 {
            return Err(SelectError::Top);
        }
        if !(self.min_margin.is_finite() && self.min_margin >= 0.0) {
            return Err(SelectError::Margin(self.min_margin));
        }
        match self.min_reward {
            Some(m) if !m.is_finite() => Err(SelectError::MinReward(m)),
            _ => Ok(()),
        }
    }
}

/// One kept trajectory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick {
    /// Its index in the group.
    pub index: usize,
    /// 1 for the best.
    pub rank: usize,
    pub reward: f64,
}

/// What became of a group.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Kept(Vec<Pick>),
    NoReward,
    BelowMinReward,
    MarginTooSmall,
}

/// The number of turns a trajectory takes: its assistant messages.
pub fn turns(t: &Trajectory) -> usize {
    t.messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count()
}

/// Applies the rule (module docs) to one group: `rewards` and `turns` have one entry per
/// trajectory.
pub fn select(rewards: &[Option<f64>], turns: &[usize], opts: &Options) -> Decision {
    debug_assert_eq!(rewards.len(), turns.len());
    let mut ranked: Vec<(usize, f64)> = rewards
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i, r)))
        .collect();
    // Stable sort, so the last key (first in the group) needs no comparison of its own.
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(turns[a.0].cmp(&turns[b.0])));
    let Some(&(_, best)) = ranked.first() else {
        return Decision::NoReward;
    };
    let good_enough = |r: f64| opts.min_reward.is_none_or(|m| r >= m);
    if !good_enough(best) {
        return Decision::BelowMinReward;
    }
    let k = opts.top.max(1);
    if let (Some(&(_, kth)), Some(&(_, next))) = (ranked.get(k - 1), ranked.get(k)) {
        if kth - next < opts.min_margin - EPS {
            return Decision::MarginTooSmall;
        }
    }
    let picks = ranked
        .iter()
        .take(k)
        .enumerate()
        .filter(|(_, (_, r))| good_enough(*r))
        .map(|(rank, &(index, reward))| Pick {
            index,
            rank: rank + 1,
            reward,
        })
        .collect();
    Decision::Kept(picks)
}

/// Counts for the summary line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelectSummary {
    pub groups: usize,
    pub kept_groups: usize,
    pub kept_trajectories: usize,
    pub no_reward: usize,
    pub below_min_reward: usize,
    pub margin_too_small: usize,
    kept_sum: f64,
    all_sum: f64,
    all_count: usize,
}

impl SelectSummary {
    /// Counts one group's decision; `rewards` are all of the group's.
    pub fn add(&mut self, rewards: &[Option<f64>], d: &Decision) {
        self.groups += 1;
        self.all_sum += rewards.iter().flatten().sum::<f64>();
        self.all_count += rewards.iter().flatten().count();
        match d {
            Decision::Kept(picks) => {
                self.kept_groups += 1;
                self.kept_trajectories += picks.len();
                self.kept_sum += picks.iter().map(|p| p.reward).sum::<f64>();
            }
            Decision::NoReward => self.no_reward += 1,
            Decision::BelowMinReward => self.below_min_reward += 1,
            Decision::MarginTooSmall => self.margin_too_small += 1,
        }
    }

    /// Mean reward of the kept trajectories.
    pub fn kept_mean(&self) -> Option<f64> {
        (self.kept_trajectories > 0).then(|| self.kept_sum / self.kept_trajectories as f64)
    }

    /// Mean of every reward read (null rewards left out).
    pub fn all_mean(&self) -> Option<f64> {
        (self.all_count > 0).then(|| self.all_sum / self.all_count as f64)
    }
}

impl fmt::Display for SelectSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mean = |m: Option<f64>| m.map_or("n/a".to_string(), |m| format!("{m:.4}"));
        let dropped = self.groups - self.kept_groups;
        writeln!(
            f,
            "select: {} groups read, {} kept ({} trajectories), {dropped} dropped: \
             {} no reward, {} below min-reward, {} margin too small",
            self.groups,
            self.kept_groups,
            self.kept_trajectories,
            self.no_reward,
            self.below_min_reward,
            self.margin_too_small
        )?;
        write!(
            f,
            "select: mean reward {} kept, {} all ({} rewards read)",
            mean(self.kept_mean()),
            mean(self.all_mean()),
            self.all_count
        )
    }
}

/// One SFT line for a kept trajectory: `{"messages", "tools"?, "group_id"?, "line"?, "reward",
/// "rank"}`, messages in OpenAI's chat format.
pub fn sft_line(g: &ScoredGroup, p: &Pick) -> Value {
    let messages: Vec<Value> = g.trajectories[p.index]
        .messages
        .iter()
        .map(chat_message)
        .collect();
    let mut o = Map::new();
    o.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = &g.tools {
        o.insert("tools".into(), tools.clone());
    }
    if let Some(id) = &g.group_id {
        o.insert("group_id".into(), id.clone());
    }
    if let Some(line) = g.source_line {
        o.insert("line".into(), json!(line));
    }
    o.insert("reward".into(), json!(p.reward));
    o.insert("rank".into(), json!(p.rank));
    Value::Object(o)
}

/// A message as an OpenAI chat message, shaped for Hugging Face chat templates: content is a
/// string (`""` for none: templates concatenate it), tool calls are
/// `{"type": "function", "function": {"name", "arguments"}}` with the arguments decoded into an
/// object when they are one (templates such as Qwen2.5's write `arguments | tojson`, which would
/// quote a string a second time).
fn chat_message(m: &Message) -> Value {
    let mut o = Map::new();
    o.insert("role".into(), json!(m.role));
    o.insert(
        "content".into(),
        json!(m.content.clone().unwrap_or_default()),
    );
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let args = match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => Value::String(c.arguments.clone()),
                };
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": args}})
            })
            .collect();
        o.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id".into(), json!(id));
    }
    if let Some(name) = &m.name {
        o.insert("name".into(), json!(name));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(top: usize, min_reward: Option<f64>, min_margin: f64) -> Options {
        Options {
            top,
            min_reward,
            min_margin,
        }
    }

    fn kept(d: &Decision) -> Vec<(usize, usize)> {
        match d {
            Decision::Kept(p) => p.iter().map(|p| (p.index, p.rank)).collect(),
            other => panic!("dropped: {other:?}"),
        }
    }

    #[test]
    fn the_best_wins_and_ties_go_to_fewer_turns_then_the_first() {
        let o = Options::default();
        let r = [Some(0.2), Some(0.9), Some(0.5)];
        assert_eq!(kept(&select(&r, &[1, 1, 1], &o)), vec![(1, 1)]);
        // A tie: the one with fewer turns, wherever it is.
        let r = [Some(0.9), Some(0.1), Some(0.9)];
        assert_eq!(kept(&select(&r, &[3, 1, 2], &o)), vec![(2, 1)]);
        // Same turns too: the first.
        assert_eq!(kept(&select(&r, &[2, 1, 2], &o)), vec![(0, 1)]);
    }

    #[test]
    fn null_rewards_never_win_and_are_never_next() {
        let o = opts(1, None, 0.5);
        let r = [None, Some(0.3), None];
        assert_eq!(kept(&select(&r, &[1, 1, 1], &o)), vec![(1, 1)]);
        assert_eq!(select(&[None, None], &[1, 1], &o), Decision::NoReward);
    }

    #[test]
    fn margins_compare_the_kth_with_the_next() {
        let r = [Some(0.8), Some(0.9), Some(0.85)];
        let t = [1, 1, 1];
        assert_eq!(
            select(&r, &t, &opts(1, None, 0.1)),
            Decision::MarginTooSmall
        );
        assert_eq!(kept(&select(&r, &t, &opts(1, None, 0.05))), vec![(1, 1)]);
        // With K = 2 the margin is between 0.85 and 0.8.
        assert_eq!(
            kept(&select(&r, &t, &opts(2, None, 0.05))),
            vec![(1, 1), (2, 2)]
        );
        assert_eq!(
            select(&r, &t, &opts(2, None, 0.06)),
            Decision::MarginTooSmall
        );
        // 0.9 − 0.8 is 0.0999… in floating point: it still passes a margin of 0.1.
        assert_eq!(
            kept(&select(
                &[Some(0.9), Some(0.8)],
                &[1, 1],
                &opts(1, None, 0.1)
            )),
            vec![(0, 1)]
        );
        // A tie for first passes a margin of 0 and fails any positive one.
        let tie = [Some(0.7), Some(0.7)];
        assert_eq!(
            kept(&select(&tie, &[1, 1], &opts(1, None, 0.0))),
            vec![(0, 1)]
        );
        assert_eq!(
            select(&tie, &[1, 1], &opts(1, None, 0.01)),
            Decision::MarginTooSmall
        );
        // No (K+1)-th: nothing to beat.
        assert_eq!(
            kept(&select(&[Some(0.4), None], &[1, 1], &opts(1, None, 0.5))),
            vec![(0, 1)]
        );
    }

    #[test]
    fn min_reward_drops_the_group_or_the_weaker_of_the_top_k() {
        let r = [Some(0.5), Some(0.7), Some(0.2)];
        let t = [1, 1, 1];
        assert_eq!(
            select(&r, &t, &opts(1, Some(0.8), 0.0)),
            Decision::BelowMinReward
        );
        assert_eq!(
            kept(&select(&r, &t, &opts(1, Some(0.7), 0.0))),
            vec![(1, 1)]
        );
        assert_eq!(
            kept(&select(&r, &t, &opts(2, Some(0.6), 0.0))),
            vec![(1, 1)]
        );
    }

    #[test]
    fn the_summary_counts_every_rule() {
        let mut s = SelectSummary::default();
        let o = opts(1, Some(0.5), 0.1);
        for (r, want) in [
            (
                vec![Some(1.0), Some(0.0)],
                Decision::Kept(vec![Pick {
                    index: 0,
                    rank: 1,
                    reward: 1.0,
                }]),
            ),
            (vec![None, None], Decision::NoReward),
            (vec![Some(0.4), Some(0.0)], Decision::BelowMinReward),
            (vec![Some(0.9), Some(0.85)], Decision::MarginTooSmall),
        ] {
            let d = select(&r, &vec![1; r.len()], &o);
            assert_eq!(d, want, "{r:?}");
            s.add(&r, &d);
        }
        assert_eq!(
            (
                s.groups,
                s.kept_groups,
                s.no_reward,
                s.below_min_reward,
                s.margin_too_small
            ),
            (4, 1, 1, 1, 1)
        );
        assert_eq!(s.kept_mean(), Some(1.0));
        assert!((s.all_mean().unwrap() - 3.15 / 6.0).abs() < 1e-12);
        assert!(s
            .to_string()
            .contains("4 groups read, 1 kept (1 trajectories), 3 dropped"));
    }

    #[test]
    fn options_are_checked() {
        assert!(opts(0, None, 0.0).check().is_err());
        assert!(opts(1, None, -0.1).check().is_err());
        assert!(opts(1, Some(f64::NAN), 0.0).check().is_err());
        assert!(Options::default().check().is_ok());
    }

    #[test]
    fn tool_calls_are_written_as_openai_chat_messages() {
        let v = json!({"trajectories": [{"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
            {"role": "assistant", "content": "ANSWER: 2"}]}]});
        let trajs = crate::domain::trajectory::parse_trajectories(&v["trajectories"], 4).unwrap();
        let g = ScoredGroup {
            line: 3,
            group_id: Some(json!("g")),
            source_line: None,
            trajectories: trajs,
            rewards: vec![Some(1.0)],
            advantages: None,
            tools: Some(json!([{"type": "function", "function": {"name": "f"}}])),
        };
        let line = sft_line(
            &g,
            &Pick {
                index: 0,
                rank: 1,
                reward: 1.0,
            },
        );
        assert_eq!(line["messages"][1]["content"], "");
        assert_eq!(
            line["messages"][1]["tool_calls"][0],
            json!({"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}})
        );
        assert_eq!(line["messages"][2]["tool_call_id"], "c1");
        assert_eq!(line["tools"][0]["function"]["name"], "f");
        assert_eq!(
            (line["group_id"].clone(), line.get("line")),
            (json!("g"), None)
        );
        assert_eq!(
            (line["reward"].clone(), line["rank"].clone()),
            (json!(1.0), json!(1))
        );
    }
}
