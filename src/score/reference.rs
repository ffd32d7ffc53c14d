//! Reference-guided judging with the judge's own answer (a rubric's `reference = "judge"`).
//!
//! A small judge often knows the answer to a task better than it can tell a right answer from a
//! wrong one when shown each alone: on the policy QA dev questions the 1.5B judge model's own
//! greedy answers are right 0.780 of the time, while its pointwise verdicts pick a right answer
//! out of eight samples 0.600 of the time (experiments/policy-from-judge/NOTEBOOK.md, "What the
//! judge itself knows"). So, before judging a group that brings no `reference`, the judge
//! answers the task the group's trajectories share, and that answer is shown to it as the
//! reference (MT-Bench's reference-guided grading, with no gold answer anywhere). One answer per
//! judge and task, stored beside the verdicts: every group of the same task (each training step
//! that samples it again) asks for it once.

use serde_json::{json, Map};

use super::judge_stage::JudgeStage;
use super::response::Usage;
use super::{ScoreError, ScoreRequest, Scorer, CACHE_SCHEMA};
use crate::domain::prompt::ChatMessage;
use crate::domain::rubric::{ReferenceSource, Rubric};
use crate::domain::trajectory::{content_hash, InputError, Role, Trajectory};
use crate::judge::{Judge, JudgeError, JudgeFailure, Spent};
use crate::store::{StoredScore, StoredVerdict};

/// Shown by `render` in place of the judge's answer, which only scoring asks for.
pub const RENDER_PLACEHOLDER: &str =
    "[the judge's own answer to the task: written by the judge when the group is scored]";

/// The id the stored answer is kept under, in a [`StoredVerdict`]'s one score entry.
const ANSWER_ID: &str = "reference";

/// The judge's answer to a group's task, and what asking for it cost (nothing when stored).
#[derive(Debug)]
pub(super) struct JudgeReference {
    pub text: String,
    pub usage: Usage,
}

impl Scorer {
    /// The judge's own answer for a group whose rubric has `reference = "judge"` and whose
    /// request brings no reference (`None` otherwise): written by the first judge the request
    /// names (or the default judge). A request error when the group shares no task or names an
    /// unknown judge; the judge's own failure is [`ScoreError::Judge`].
    pub(super) async fn group_reference(
        &self,
        rubric: &Rubric,
        req: &ScoreRequest,
    ) -> Result<Option<JudgeReference>, ScoreError> {
        if !wants_judge_reference(rubric, req) {
            return Ok(None);
        }
        let panel = self.panel(req)?;
        let task = reference_task(
            task_messages(&req.trajectories)?,
            rubric.reference_instruction.as_deref(),
        );
        let reference = self
            .stage
            .judge_reference(panel.lead().as_ref(), task)
            .await?;
        Ok(Some(reference))
    }
}

impl JudgeStage {
    /// The reference `judge` writes for `task`: from the store when it answered the same task
    /// before, else asked (once across concurrent requests and replicas, like a verdict).
    pub(super) async fn judge_reference(
        &self,
        judge: &dyn Judge,
        task: Vec<ChatMessage>,
    ) -> Result<JudgeReference, ScoreError> {
        let key = reference_key(judge, &task);
        if let Some(text) = stored_answer(self.store.get(&key).await?) {
            return Ok(JudgeReference {
                text,
                usage: Usage::default(),
            });
        }
        let _guard = self.inflight.lock(&key).await;
        let _claim = self.store.claim(&key).await?;
        if let Some(text) = stored_answer(self.store.get(&key).await?) {
            return Ok(JudgeReference {
                text,
                usage: Usage::default(),
            });
        }
        let completion = judge.answer(&task).await?;
        if completion.text.is_empty() {
            return Err(JudgeFailure::new(
                JudgeError::InvalidOutput(format!(
                    "judge {:?} wrote an empty answer to the task (rubric reference = \"judge\")",
                    judge.settings().info.name
                )),
                Spent::of(&completion),
            )
            .into());
        }
        let stored = StoredVerdict {
            scores: vec![StoredScore {
                id: ANSWER_ID.into(),
                score: None,
                explanation: completion.text.clone(),
                items: Vec::new(),
                confidence: None,
            }],
            prompt_tokens: completion.prompt_tokens,
            completion_tokens: completion.completion_tokens,
            cached_prompt_tokens: completion.cached_prompt_tokens,
            forward_passes: completion.forward_passes,
            calls: completion.attempts,
            counted_prompt_tokens: 0,
            counted_prompt_tokens_without_dedup: 0,
            model: judge.settings().info.model.clone(),
            created_unix: crate::store::unix_now(),
            retries: completion.retries.clone(),
            clamped_scores: 0,
        };
        self.store.put(&key, &stored).await?;
        let usage = Usage {
            judge_calls: 1,
            prompt_tokens: completion.prompt_tokens,
            completion_tokens: completion.completion_tokens,
            cached_prompt_tokens: completion.cached_prompt_tokens,
            forward_passes: completion.forward_passes,
            retries: completion.retries.into_iter().collect(),
            cost: judge
                .settings()
                .prices
                .cost(completion.prompt_tokens, completion.completion_tokens),
            ..Usage::default()
        };
        Ok(JudgeReference {
            text: completion.text,
            usage,
        })
    }
}

/// Whether the judge writes this group's reference: its rubric asks for it and the request
/// brings none.
pub(super) fn wants_judge_reference(rubric: &Rubric, req: &ScoreRequest) -> bool {
    rubric.reference == Some(ReferenceSource::Judge) && req.reference.is_none()
}

/// The answer a stored record holds, if it is one (anything else under the key is a miss, asked
/// again and overwritten).
fn stored_answer(stored: Option<StoredVerdict>) -> Option<String> {
    let v = stored?;
    match v.scores.as_slice() {
        [s] if s.id == ANSWER_ID && !s.explanation.is_empty() => Some(s.explanation.clone()),
        _ => None,
    }
}

/// The store key of `judge`'s answer to `task`: everything that decides the answer (the judge's
/// identity, its cap, the task), apart from verdicts' keys by its `kind`.
fn reference_key(judge: &dyn Judge, task: &[ChatMessage]) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("kind".into(), json!("judge_reference"));
    m.insert("judge".into(), judge.identity());
    m.insert(
        "max_bytes".into(),
        json!(judge.settings().max_reference_bytes),
    );
    m.insert("messages".into(), json!(task));
    content_hash(&m)
}

/// The messages the judge answers: the group's task, under the rubric's
/// `reference_instruction` in place of the task's system message when it has one (else first).
fn reference_task(mut task: Vec<ChatMessage>, instruction: Option<&str>) -> Vec<ChatMessage> {
    if let Some(instruction) = instruction {
        task.retain(|m| m.role != Role::System.as_str());
        task.insert(
            0,
            ChatMessage {
                role: Role::System.as_str().to_string(),
                content: instruction.to_string(),
            },
        );
    }
    task
}

/// The messages that set the group's task: every message before the first assistant message,
/// which must be the same in every trajectory (a group answers one task).
pub(super) fn task_messages(trajectories: &[Trajectory]) -> Result<Vec<ChatMessage>, InputError> {
    let refuse = |problem: &str| {
        InputError::new(
            "rubric.reference",
            format!("\"judge\" has the judge answer the group's task first, but {problem}"),
        )
    };
    let task_of = |t: &Trajectory| {
        t.messages
            .iter()
            .take_while(|m| m.role != Role::Assistant)
            .cloned()
            .collect::<Vec<_>>()
    };
    let Some(first) = trajectories.first() else {
        return Err(refuse("the group has no trajectories"));
    };
    let task = task_of(first);
    if !task.iter().any(|m| m.role == Role::User) {
        return Err(refuse(
            "trajectories[0] has no user message before its first assistant message",
        ));
    }
    if let Some(i) = trajectories.iter().position(|t| task_of(t) != task) {
        return Err(refuse(&format!(
            "trajectories[{i}]'s messages before its first assistant message differ from \
             trajectories[0]'s: a group's trajectories must answer one task"
        )));
    }
    Ok(task
        .iter()
        .map(|m| ChatMessage {
            role: m.role.as_str().to_string(),
            content: m.content.clone().unwrap_or_default(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::trajectory::parse_trajectories;

    fn group(v: serde_json::Value) -> Vec<Trajectory> {
        parse_trajectories(&v, 64).expect("valid trajectories")
    }

    #[test]
    fn the_task_is_what_every_trajectory_shares_before_its_answer() {
        let g = group(json!([
            {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Capital of France?"},
                          {"role": "assistant", "content": "Paris"}]},
            {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Capital of France?"},
                          {"role": "assistant", "content": "Lyon"},
                          {"role": "user", "content": "Sure?"}]}
        ]));
        let task = task_messages(&g).unwrap();
        assert_eq!(
            task,
            vec![
                ChatMessage {
                    role: "system".into(),
                    content: "Be brief.".into()
                },
                ChatMessage {
                    role: "user".into(),
                    content: "Capital of France?".into()
                },
            ]
        );
    }

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    #[test]
    fn an_instruction_takes_the_place_of_the_tasks_system_message() {
        let task = vec![
            msg("system", "Be brief."),
            msg("user", "Capital of France?"),
        ];
        assert_eq!(reference_task(task.clone(), None), task);
        assert_eq!(
            reference_task(task, Some("Name the city alone.")),
            vec![
                msg("system", "Name the city alone."),
                msg("user", "Capital of France?")
            ]
        );
        // A task without a system message gets the instruction first.
        assert_eq!(
            reference_task(vec![msg("user", "Capital of France?")], Some("City alone.")),
            vec![
                msg("system", "City alone."),
                msg("user", "Capital of France?")
            ]
        );
    }

    #[test]
    fn trajectories_of_different_tasks_are_refused_by_index() {
        let g = group(json!([
            {"messages": [{"role": "user", "content": "Capital of France?"},
                          {"role": "assistant", "content": "Paris"}]},
            {"messages": [{"role": "user", "content": "Capital of Spain?"},
                          {"role": "assistant", "content": "Madrid"}]}
        ]));
        let e = task_messages(&g).unwrap_err();
        assert_eq!(e.path, "rubric.reference");
        assert!(e.problem.contains("trajectories[1]"), "{}", e.problem);

        let no_user = group(json!([
            {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "assistant", "content": "Paris"}]}
        ]));
        let e = task_messages(&no_user).unwrap_err();
        assert!(e.problem.contains("no user message"), "{}", e.problem);
    }

    #[test]
    fn only_a_record_holding_an_answer_is_one() {
        let record = |id: &str, text: &str| StoredVerdict {
            scores: vec![StoredScore {
                id: id.into(),
                score: None,
                explanation: text.into(),
                items: Vec::new(),
                confidence: None,
            }],
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_prompt_tokens: 0,
            forward_passes: 0,
            calls: 1,
            counted_prompt_tokens: 0,
            counted_prompt_tokens_without_dedup: 0,
            model: "m".into(),
            created_unix: 0,
            retries: Default::default(),
            clamped_scores: 0,
        };
        assert_eq!(
            stored_answer(Some(record(ANSWER_ID, "Paris"))).as_deref(),
            Some("Paris")
        );
        assert_eq!(stored_answer(Some(record("1", "Paris"))), None);
        assert_eq!(stored_answer(Some(record(ANSWER_ID, ""))), None);
        assert_eq!(stored_answer(None), None);
    }
}
