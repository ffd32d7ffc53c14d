//! Planning: which samples a group needs (each judge × each candidate order × each chunk of a
//! group too large for the judge's context), their rendered prompts and cache keys, and the
//! prompt-size check; and the exact token count without dedup that `render` shows.

use std::collections::HashMap;
use std::sync::Arc;

use super::run::cache_key;
use super::{Plan, SampleSpec, Skeleton, CHUNK_ANCHORS};
use crate::domain::dedup::JudgeInput;
use crate::domain::prompt::{
    count_tokens, quote_json, GroupExtras, RenderedPrompt, DEFAULT_PROMPT,
};
use crate::domain::rubric::Rubric;
use crate::domain::trajectory::content_hash;
use crate::judge::{Judge, Panel};
use crate::score::judge_stage::JudgeStage;
use crate::score::questions::{plan_questions, question_key};
use crate::score::samples::{chunk_candidates, permutation_orders};
use crate::score::{ScoreError, ScoreRequest};

/// Whether `judge` can judge `rubric` in `mode`: the probability modes need a judge that offers
/// to read token probabilities ([`Judge::probabilities`]) and a rubric without checklist items.
pub(in crate::score) fn check_mode(
    judge: &dyn Judge,
    rubric: &Rubric,
    mode: crate::domain::prompt::JudgeMode,
) -> Result<(), ScoreError> {
    if !mode.reads_probabilities() {
        return Ok(());
    }
    let bad = |problem: String| {
        ScoreError::Input(crate::domain::trajectory::InputError::new(
            "judge_mode",
            problem,
        ))
    };
    if judge.probabilities().is_none() {
        return Err(bad(format!(
            "\"{}\" reads token probabilities, which judge {:?} cannot give: ask it \
             \"listwise\"",
            mode.name(),
            judge.settings().info.name
        )));
    }
    if !rubric.items.is_empty() {
        return Err(bad(format!(
            "rubric {:?} is a checklist, which is judged listwise only",
            rubric.name
        )));
    }
    Ok(())
}

impl JudgeStage {
    /// Plans the samples for each of `panel`'s judges × `permutations` orders × chunks.
    pub(in crate::score) fn plan<'a>(
        &'a self,
        rubric: &'a Rubric,
        panel: Panel,
        permutations: u32,
        req: &ScoreRequest,
    ) -> Result<Plan<'a>, ScoreError> {
        let input = JudgeInput::build(&req.trajectories, &self.dedup);
        let m = input.candidates.len();
        let all: Vec<usize> = (0..m).collect();
        let extras = |reply_schema| GroupExtras {
            tools: req.tools.as_ref(),
            reference: req.reference.as_deref(),
            reply_schema,
        };
        // Renders by (order, whether the judge follows the reply's schema): judges that differ
        // only in model or endpoint share them.
        let mut renders: HashMap<(Vec<usize>, bool), Arc<RenderedPrompt>> = HashMap::new();
        let mut render = |order: &[usize], reply_schema: bool| {
            let key = (order.to_vec(), reply_schema);
            if let Some(r) = renders.get(&key) {
                return Ok::<_, ScoreError>(r.clone());
            }
            let r = Arc::new(self.prompts.render(
                DEFAULT_PROMPT,
                &input,
                order,
                rubric,
                extras(reply_schema),
            )?);
            renders.insert(key, r.clone());
            Ok(r)
        };
        // Orders are seeded by the group's content (the same for every judge); hashing the
        // prompt is only worth it when there is more than one order to draw.
        let seed = if permutations > 1 {
            content_hash(&render(&all, true)?.messages)
        } else {
            String::new()
        };
        let mut samples = Vec::new();
        let mut prompts = Vec::new();
        let mut questions = Vec::new();
        let mut template: Option<(&'static str, String)> = None;
        let mut max_chunks = 1;
        for (j, judge) in panel.members().iter().enumerate() {
            let judge: &dyn Judge = judge.as_ref();
            let mode = req.judge_mode.unwrap_or(judge.settings().mode);
            check_mode(judge, rubric, mode)?;
            if mode.reads_probabilities() {
                let question = plan_questions(
                    &self.prompts,
                    mode,
                    &input,
                    rubric,
                    extras(false),
                    judge.settings().pairwise_opponents,
                )?;
                for p in &question.prompts {
                    self.check_prompt_size(p)?;
                }
                template.get_or_insert((mode.prompt(), question.template_version.clone()));
                samples.push(SampleSpec {
                    judge: j,
                    order_index: 0,
                    order: all.clone(),
                    ids: (1..=m).map(|i| i.to_string()).collect(),
                    key: question_key(judge, &question, rubric),
                });
                prompts.push(render(&all, judge.structured_output().holds_schema())?);
                questions.push(Some(question));
                continue;
            }
            let reply_schema = judge.structured_output().holds_schema();
            let full = render(&all, reply_schema)?;
            template.get_or_insert((DEFAULT_PROMPT, full.template_version.clone()));
            let chunks = self.chunks_for(judge, &input, &full)?;
            max_chunks = max_chunks.max(chunks.len());
            for (c, members) in chunks.iter().enumerate() {
                for (k, perm) in
                    permutation_orders(members.len(), permutations, &format!("{seed}/{c}"))
                        .into_iter()
                        .enumerate()
                {
                    let order: Vec<usize> = perm.iter().map(|&i| members[i]).collect();
                    let rendered = render(&order, reply_schema)?;
                    self.check_prompt_size(&rendered)?;
                    let key = cache_key(judge, &rendered, rubric, k as u32);
                    samples.push(SampleSpec {
                        judge: j,
                        order_index: k as u32,
                        order,
                        ids: rendered.ids.clone(),
                        key,
                    });
                    prompts.push(rendered);
                    questions.push(None);
                }
            }
        }
        let skeleton = Arc::new(Skeleton {
            samples,
            chunks: max_chunks,
            distinct: input.candidates.len(),
            candidate_of: input.candidate_of(),
            template_name: template.as_ref().map_or(DEFAULT_PROMPT, |t| t.0),
            template_version: template.map_or_else(String::new, |t| t.1),
        });
        Ok(Plan {
            rubric,
            panel,
            input,
            skeleton,
            rendered: prompts,
            questions,
        })
    }

    /// Refuses a judge call whose prompt is over `max_prompt_bytes` (checked per call: the
    /// orders of a group are the same size, and a chunk is smaller than the whole).
    fn check_prompt_size(&self, r: &RenderedPrompt) -> Result<(), ScoreError> {
        let bytes: usize = r.messages.iter().map(|m| m.content.len()).sum();
        if bytes > self.max_prompt_bytes {
            return Err(ScoreError::PromptTooLarge {
                bytes,
                max: self.max_prompt_bytes,
            });
        }
        Ok(())
    }

    /// The chunks a judge reads the group in: one unless the prompt would overflow the judge's
    /// `context_tokens`.
    fn chunks_for(
        &self,
        judge: &dyn Judge,
        input: &JudgeInput,
        full: &RenderedPrompt,
    ) -> Result<Vec<Vec<usize>>, ScoreError> {
        let m = input.candidates.len();
        let all = vec![(0..m).collect::<Vec<_>>()];
        let settings = judge.settings();
        let Some(context) = settings.context_tokens else {
            return Ok(all);
        };
        let budget = context.saturating_sub(settings.max_tokens as usize);
        // A token is at least one byte: a prompt of fewer bytes than the budget fits for sure.
        let bytes: usize = full.messages.iter().map(|m| m.content.len()).sum();
        if bytes <= budget || count_tokens(&full.messages) <= budget {
            return Ok(all);
        }
        let bpe = tiktoken_rs::o200k_base_singleton();
        let cost: Vec<usize> = input
            .candidates
            .iter()
            .map(|c| {
                c.messages
                    .iter()
                    .map(|msg| bpe.encode_ordinary(&quote_json(msg)).len() + 1)
                    .sum::<usize>()
                    + 8
            })
            .collect();
        let base = count_tokens(&full.messages).saturating_sub(cost.iter().sum());
        chunk_candidates(&cost, base, budget, CHUNK_ANCHORS).ok_or_else(|| {
            ScoreError::Input(crate::domain::trajectory::InputError::new(
                "trajectories",
                format!(
                    "the group cannot be split to fit judge {:?}'s context_tokens ({context}): \
                     a chunk of {CHUNK_ANCHORS} anchors and one more trajectory is already too long",
                    judge.settings().info.name
                ),
            ))
        })
    }

    /// Tokens of the same candidates' trajectories sent whole, with no dedup (exact, for
    /// `render`; scoring estimates it instead, see `ask::estimate_tokens`).
    pub(in crate::score) fn count_without_dedup(
        &self,
        plan: &Plan<'_>,
        order: &[usize],
        req: &ScoreRequest,
    ) -> Result<u64, ScoreError> {
        let members: Vec<_> = order
            .iter()
            .flat_map(|&c| {
                plan.input.candidates[c]
                    .members
                    .iter()
                    .map(|&i| req.trajectories[i].clone())
            })
            .collect();
        let naive = JudgeInput::without_dedup(&members);
        let all: Vec<usize> = (0..naive.candidates.len()).collect();
        let naive = self.prompts.render(
            DEFAULT_PROMPT,
            &naive,
            &all,
            plan.rubric,
            GroupExtras {
                tools: req.tools.as_ref(),
                reference: req.reference.as_deref(),
                reply_schema: plan.panel.lead().structured_output().holds_schema(),
            },
        )?;
        Ok(count_tokens(&naive.messages) as u64)
    }
}
