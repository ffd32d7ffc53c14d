//! Asking the judge for one sample's verdict: one call, one structural re-ask stating the exact
//! problem if the first answer cannot be used, all bounded by the judge's verdict deadline; and
//! the usage figures of the verdict.

use super::Plan;
use crate::domain::error_type::RetryCause;
use crate::domain::prompt::{count_tokens, quote_json, ChatMessage};
use crate::domain::verdict::{parse_verdict, verdict_schema, ParseOptions};
use crate::judge::{JudgeError, JudgeFailure, JudgeInfo, Spent};
use crate::score::judge_stage::JudgeStage;
use crate::store::{StoredScore, StoredVerdict};

impl JudgeStage {
    /// Asks the judge for a verdict: one call, and one structural re-ask stating the exact
    /// problem if the first answer cannot be used. Bounded by the judge's verdict deadline. A
    /// failure carries the calls and tokens spent on it (an unusable first answer included).
    pub(super) async fn ask_judge(
        &self,
        plan: &Plan<'_>,
        i: usize,
    ) -> Result<StoredVerdict, JudgeFailure> {
        if let Some(question) = &plan.questions[i] {
            let judge = &plan.panel.members()[plan.skeleton.samples[i].judge];
            return self
                .ask_questions(judge.as_ref(), plan.input.candidates.len(), question)
                .await;
        }
        let s = &plan.skeleton.samples[i];
        let rendered = &plan.rendered[i];
        let judge = &plan.panel.members()[s.judge];
        let item_ids: Vec<String> = plan.rubric.items.iter().map(|i| i.id.clone()).collect();
        let schema = verdict_schema(&rendered.ids, &item_ids);
        let opts = ParseOptions {
            expected_ids: &rendered.ids,
            allow_missing_score: !item_ids.is_empty(),
            expected_items: &item_ids,
        };
        let JudgeInfo { name, model } = judge.settings().info.clone();
        let deadline = judge.settings().deadline;
        let conversation = async {
            let mut messages = rendered.messages.clone();
            let first = judge.complete(&messages, &schema).await?;
            let first_spent = Spent::of(&first);
            let first_prompt_tokens = first.prompt_tokens;
            let (mut prompt_tokens, mut completion_tokens, mut calls) =
                (first.prompt_tokens, first.completion_tokens, 1u32);
            let mut cached = first.cached_prompt_tokens;
            let mut forwards = first.forward_passes;
            let mut retries = first.retries;
            let parsed = match parse_verdict(&first.text, &opts) {
                Ok(scores) => scores,
                Err(problem) => {
                    tracing::info!(judge = %name, %problem, "verdict unusable; re-asking once");
                    metrics::counter!("gavel_judge_reasks_total", "judge" => name.clone())
                        .increment(1);
                    let reask = self
                        .prompts
                        .render_reask(&problem.to_string(), &rendered.ids)
                        .map_err(|e| {
                            JudgeFailure::new(JudgeError::InvalidOutput(e.to_string()), first_spent)
                        })?;
                    messages.push(ChatMessage {
                        role: "assistant".into(),
                        content: first.text,
                    });
                    messages.push(reask);
                    let second = judge
                        .complete(&messages, &schema)
                        .await
                        .map_err(|f| f.after(first_spent))?;
                    let mut both = first_spent;
                    both.add(Spent::of(&second));
                    prompt_tokens += second.prompt_tokens;
                    completion_tokens += second.completion_tokens;
                    cached += second.cached_prompt_tokens;
                    forwards += second.forward_passes;
                    calls += 1;
                    for (cause, n) in second.retries {
                        *retries.entry(cause).or_default() += n;
                    }
                    *retries
                        .entry(RetryCause::Reask.as_str().into())
                        .or_default() += 1;
                    parse_verdict(&second.text, &opts).map_err(|again| {
                        JudgeFailure::new(
                            JudgeError::InvalidOutput(format!(
                                "judge {name:?} gave an unusable verdict twice; first: {problem}; after the re-ask: {again}"
                            )),
                            both,
                        )
                    })?
                }
            };
            let tokens = (
                prompt_tokens,
                completion_tokens,
                cached,
                first_prompt_tokens,
                forwards,
            );
            Ok::<_, JudgeFailure>((parsed, tokens, calls, retries))
        };
        let (
            parsed,
            (
                prompt_tokens,
                completion_tokens,
                cached_prompt_tokens,
                first_prompt_tokens,
                forward_passes,
            ),
            calls,
            retries,
        ) = tokio::time::timeout(deadline, conversation)
            .await
            .map_err(|_| {
                // What the calls cut off by the deadline spent is not known: none is counted.
                JudgeFailure::from(JudgeError::Timeout(format!(
                    "judge {name:?}: verdict deadline of {:.1}s passed",
                    deadline.as_secs_f64()
                )))
            })??;
        let (counted, without) = estimate_tokens(plan, i, first_prompt_tokens);
        let clamped_scores = parsed.iter().filter(|x| x.clamped).count() as u32;
        Ok(StoredVerdict {
            clamped_scores,
            scores: parsed
                .into_iter()
                .map(|x| StoredScore {
                    id: x.trajectory_id,
                    score: x.score,
                    explanation: x.explanation,
                    items: x.items.into_iter().map(|i| (i.id, i.met)).collect(),
                    confidence: None,
                })
                .collect(),
            prompt_tokens,
            completion_tokens,
            cached_prompt_tokens,
            forward_passes,
            calls,
            counted_prompt_tokens: counted,
            counted_prompt_tokens_without_dedup: without,
            model,
            created_unix: crate::store::unix_now(),
            retries,
        })
    }
}

/// The prompt's tokens and an estimate of what the same candidates would cost without dedup.
///
/// The judge's own count of the prompt (its reported `prompt_tokens`, in its own tokenizer) is
/// the base; without it, the prompt is counted with `o200k_base`. The no-dedup figure scales that
/// count by the bytes dedup kept out ([`JudgeInput::bytes_saved`]) at the prompt's own rate of
/// tokens per byte (measured on the whole prompt, so it is an estimate: `gavel render` counts both
/// prompts exactly). Exact counts of both prompts (`gavel render`) take milliseconds of BPE on
/// large groups, which a cache miss should not pay for a usage figure.
fn estimate_tokens(plan: &Plan<'_>, i: usize, judge_counted: u64) -> (u64, u64) {
    let rendered = &plan.rendered[i];
    let counted = if judge_counted > 0 {
        judge_counted
    } else {
        count_tokens(&rendered.messages) as u64
    };
    // The rate of tokens per byte of the material (the user message): the whole prompt less the
    // system message, which is counted exactly (a few hundred tokens of instructions and rubric,
    // whose English packs more bytes into a token than JSON tool output does).
    let system = count_tokens(&rendered.messages[..1]) as u64;
    let bytes: usize = rendered.messages[1..].iter().map(|m| m.content.len()).sum();
    let material = if counted > system {
        counted - system
    } else {
        counted
    };
    // Sizes as the prompt writes them: one JSON line per message, escaped.
    let saved = plan.input.bytes_saved(
        &plan.skeleton.samples[i].order,
        |m| quote_json(m).len() + 1,
        |c| quote_json(&crate::domain::json_text::JsonOrText(c)).len(),
    );
    let extra = (saved as f64 * material as f64 / bytes.max(1) as f64).round() as u64;
    (counted, counted + extra)
}
