//! `render`: what the judge would be sent for a request, planned exactly as scoring plans it,
//! without asking any judge.

use crate::domain::prompt::{count_tokens, shared_prefix_tokens, ChatMessage, DEFAULT_PROMPT};
use crate::judge::Panel;
use crate::score::response::{CascadeStage, RenderResponse, VersionInfo};
use crate::score::{reasoning_shown, reference, ScoreError, ScoreRequest, Scorer};

impl Scorer {
    /// Renders the judge prompt for a request without calling a judge.
    pub fn render(&self, req: &ScoreRequest) -> Result<RenderResponse, ScoreError> {
        let rubric = self.rubric(&req.rubric)?;
        let (_, shown) = reasoning_shown(&rubric, req);
        let req = shown.as_ref().unwrap_or(req);
        // The first judge's prompt, as a panel of one.
        let panel = Panel::of_one(self.panel(req)?.lead().clone());
        // The judge's own answer is only asked for when scoring: a placeholder stands in.
        let with_placeholder;
        let req = if reference::wants_judge_reference(&rubric, req) {
            reference::task_messages(&req.trajectories)?;
            with_placeholder = ScoreRequest {
                reference: Some(reference::RENDER_PLACEHOLDER.into()),
                ..req.clone()
            };
            &with_placeholder
        } else {
            req
        };
        let plan = self.stage.plan(&rubric, panel, 1, req)?;
        let s = &plan.skeleton.samples[0];
        // A probability mode asks several prompts: show the first (the first trajectory alone,
        // or the first pair) under its own template, and say how many there are.
        let (rendered, template, prompts_asked) = match &plan.questions[0] {
            Some(question) => (
                question.prompts.first().unwrap_or(&plan.rendered[0]),
                VersionInfo {
                    name: question.mode.prompt().into(),
                    version: question.template_version.clone(),
                },
                Some(question.prompts.len()),
            ),
            None => (
                &*plan.rendered[0],
                VersionInfo {
                    name: DEFAULT_PROMPT.into(),
                    version: plan.rendered[0].template_version.clone(),
                },
                None,
            ),
        };
        let deduped = count_tokens(&rendered.messages) as u64;
        let without = self.stage.count_without_dedup(&plan, &s.order, req)?;
        // Every prompt the mode asks: what a server without a prefix cache prefills, and what
        // one with a prefix cache does (the prompts' shared start once).
        let (asked, after_prefix_cache) = match &plan.questions[0] {
            Some(question) => {
                let all: Vec<&[ChatMessage]> = question
                    .prompts
                    .iter()
                    .map(|p| p.messages.as_slice())
                    .collect();
                let total: u64 = all.iter().map(|m| count_tokens(m) as u64).sum();
                let prefix = shared_prefix_tokens(&all) as u64;
                let repeats = (all.len() as u64).saturating_sub(1);
                (total, total.saturating_sub(repeats * prefix))
            }
            None => (deduped, deduped),
        };
        Ok(RenderResponse {
            messages: rendered.messages.clone(),
            trajectory_ids: rendered.ids.clone(),
            prompt_tokens: deduped,
            prompt_tokens_without_dedup: without,
            tokens_saved_by_dedup: without.saturating_sub(deduped),
            shared_prefix_messages: plan.input.prefix.len(),
            shared_blocks: plan.input.shared.len(),
            distinct_trajectories: plan.input.candidates.len(),
            rubric: VersionInfo {
                name: rubric.name.clone(),
                version: rubric.version.clone(),
            },
            template,
            prompts_asked,
            prompt_tokens_asked: asked,
            prompt_tokens_after_prefix_cache: after_prefix_cache,
            cache_key: s.key.clone(),
            cascade: self.cascade_of(req)?.map(|c| {
                c.stages
                    .iter()
                    .enumerate()
                    .map(|(i, (name, judge))| CascadeStage {
                        judge: name.clone(),
                        mode: judge.settings().mode,
                        threshold: c.thresholds.get(i).copied(),
                    })
                    .collect()
            }),
        })
    }
}
