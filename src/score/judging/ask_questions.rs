//! Asking a probability-mode sample (pointwise or pairwise, [`crate::score::questions`]): every
//! prompt's reading (from the store, or asked together), the scores and confidences they give,
//! and, when the judge explains, one explanation per trajectory asked after the readings.

use crate::domain::prompt::{ChatMessage, JudgeMode};
use crate::domain::stats::tidy;
use crate::judge::{Judge, JudgeError, JudgeFailure};
use crate::score::confidence;
use crate::score::judge_stage::JudgeStage;
use crate::score::questions::{bradley_terry, verdict_choices, QuestionPlan};
use crate::store::{StoredScore, StoredVerdict};

impl JudgeStage {
    /// Asks a probability-mode sample: every prompt at once (the engine runs them as one job,
    /// on the prefix they share), bounded by the judge's verdict deadline.
    /// `m` is the group's number of distinct trajectories (candidates).
    pub(in crate::score) async fn ask_questions(
        &self,
        judge: &dyn Judge,
        m: usize,
        question: &QuestionPlan,
    ) -> Result<StoredVerdict, JudgeFailure> {
        let name = judge.settings().info.name.clone();
        let deadline = judge.settings().deadline;
        let explains = judge.settings().explains;
        // Planning refused a probability mode for a judge that offers no probabilities.
        let Some(reader) = judge.probabilities() else {
            return Err(JudgeError::Unavailable(format!(
                "judge {name:?} cannot read token probabilities: ask it listwise"
            ))
            .into());
        };
        let choices = verdict_choices(question.mode);
        let asking = async {
            let prompts: Vec<_> = question
                .prompts
                .iter()
                .map(|p| p.messages.clone())
                .collect();
            // Prompts read before, in this group or another, come from the store.
            let (readings, cost) = self.read_prompts(judge, reader, &prompts, &choices).await?;
            let mut t = Tally {
                prompt: cost.prompt_tokens,
                cached: cost.cached_prompt_tokens,
                forwards: cost.forward_passes,
                calls: cost.prompts_asked,
                ..Tally::default()
            };
            let firsts: Vec<f64> = readings.iter().map(|r| r.first).collect();
            let coverage: Vec<f64> = readings.iter().map(|r| r.coverage).collect();
            // Explanations come after every probability was read: they cannot move a score.
            let mut explanations = vec![String::new(); m];
            if explains {
                // All of them in one call: the judge decodes them together.
                let (which, prompts): (Vec<usize>, Vec<_>) = (0..m)
                    .filter_map(|c| Some((c, explanation_prompt(question, &firsts, c)?)))
                    .unzip();
                let answers = reader.explain(prompts).await?;
                for (c, r) in which.into_iter().zip(answers) {
                    t.prompt += r.prompt_tokens;
                    t.completion += r.completion_tokens;
                    t.cached += r.cached_prompt_tokens;
                    t.forwards += r.forward_passes;
                    t.calls += 1;
                    explanations[c] = r.text;
                }
            }
            Ok::<_, JudgeFailure>((firsts, coverage, explanations, t))
        };
        let (firsts, coverage, mut explanations, t) =
            tokio::time::timeout(deadline, asking).await.map_err(|_| {
                JudgeFailure::from(JudgeError::Timeout(format!(
                    "judge {name:?}: verdict deadline of {:.1}s passed",
                    deadline.as_secs_f64()
                )))
            })??;
        let (scores, confidence) = match question.mode {
            JudgeMode::Pairwise => (
                bradley_terry(m, &question.pairs, &firsts),
                confidence::pairwise(m, &question.pairs, &firsts, &coverage),
            ),
            _ => {
                let conf = firsts
                    .iter()
                    .zip(&coverage)
                    .map(|(&p, &c)| Some(confidence::pointwise(p, c)))
                    .collect();
                (firsts, conf)
            }
        };
        let calls = t.calls;
        Ok(StoredVerdict {
            scores: scores
                .into_iter()
                .enumerate()
                .map(|(c, s)| StoredScore {
                    id: (c + 1).to_string(),
                    score: Some(s),
                    explanation: std::mem::take(&mut explanations[c]),
                    items: Vec::new(),
                    confidence: confidence[c].map(tidy),
                })
                .collect(),
            prompt_tokens: t.prompt,
            completion_tokens: t.completion,
            cached_prompt_tokens: t.cached,
            forward_passes: t.forwards,
            calls,
            counted_prompt_tokens: t.prompt,
            counted_prompt_tokens_without_dedup: t.prompt,
            // Probabilities are in [0, 1] by construction.
            clamped_scores: 0,
            model: judge.settings().info.model.clone(),
            created_unix: crate::store::unix_now(),
            retries: Default::default(),
        })
    }
}

/// What asking a sample's prompts cost the judge.
#[derive(Default)]
struct Tally {
    prompt: u64,
    completion: u64,
    cached: u64,
    forwards: u64,
    /// Calls made: the prompts not read from the store, and explanations.
    calls: u32,
}

/// Asked after a score is read, in the same conversation (so the model explains the answer it
/// gave).
const EXPLAIN_QUESTION: &str = "In one or two sentences, explain your answer.";

/// The conversation that explains candidate `c`'s score: its pointwise prompt, or in pairwise
/// mode the first pair it was shown first in, followed by the answer the model found more
/// likely and [`EXPLAIN_QUESTION`]. None when it was never asked about.
fn explanation_prompt(
    question: &QuestionPlan,
    firsts: &[f64],
    c: usize,
) -> Option<Vec<ChatMessage>> {
    let (k, answer) = match question.mode {
        JudgeMode::Pairwise => {
            let k = question.pairs.iter().position(|&(a, _)| a == c)?;
            (k, if firsts[k] >= 0.5 { "1" } else { "2" })
        }
        _ => (c, if *firsts.get(c)? >= 0.5 { "Yes" } else { "No" }),
    };
    let mut messages = question.prompts.get(k)?.messages.clone();
    messages.push(ChatMessage {
        role: "assistant".into(),
        content: answer.into(),
    });
    messages.push(ChatMessage {
        role: "user".into(),
        content: EXPLAIN_QUESTION.into(),
    });
    Some(messages)
}
