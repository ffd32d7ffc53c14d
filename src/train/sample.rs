//! Sampling every task K times with the current policy and scoring each group: the difficulty
//! filter's survey, and `gavel train sample`, which writes the scored groups for `gavel select`
//! and `train --offline` (the best-of-N step of the four-stage recipe).

use std::path::Path;

use serde_json::Value;

use super::rollout::sample_groups;
use super::scoring::Scored;
use super::trainer::{Source, Trainer};
use super::TrainError;

/// One task's sampled group: its scoring request (the task's fields and the K trajectories),
/// the scores and how many tokens were sampled.
pub struct SampledGroup {
    pub request: Value,
    pub scored: Scored,
    pub tokens: usize,
}

impl Trainer {
    /// Samples `k` completions of every task (in task order) and scores each group with the
    /// trainer's scorer, `prompts_per_step` tasks at a time (as a step samples). Offline
    /// training has no tasks: an empty list.
    pub fn sample_tasks(&mut self, k: usize) -> Result<Vec<SampledGroup>, TrainError> {
        let Source::Online {
            tasks,
            rewarder,
            rt,
        } = &self.source
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(tasks.len());
        for chunk in tasks.chunks(self.cfg.prompts_per_step.max(1)) {
            let prompts = chunk
                .iter()
                .map(|t| self.policy.prompt_ids(&t.messages))
                .collect::<Result<Vec<_>, _>>()?;
            let sampled =
                sample_groups(&self.policy, &prompts, k, &self.cfg.sampling, &mut self.rng)?;
            let requests: Vec<(Value, usize)> = chunk
                .iter()
                .zip(&sampled)
                .map(|(task, cs)| {
                    let texts: Vec<String> = cs.iter().map(|c| c.text.clone()).collect();
                    let tokens = cs.iter().map(|c| c.tokens.len()).sum();
                    (task.request(&texts), tokens)
                })
                .collect();
            let scored = rt.block_on(futures::future::join_all(
                requests.iter().map(|(r, _)| rewarder.score(r)),
            ));
            for ((task, (request, tokens)), scored) in chunk.iter().zip(requests).zip(scored) {
                let scored = scored.map_err(|e| e.at(Some(&task.at)))?;
                out.push(SampledGroup {
                    request,
                    scored,
                    tokens,
                });
            }
        }
        Ok(out)
    }
}

/// `gavel train sample --out FILE`: `group_size` completions of every task, scored, one group
/// per line as a request body with its `rewards` and `advantages` added (the self-contained
/// form `gavel select` and `train --offline` read), whole or not at all
/// ([`crate::toolkit::output_file`]). Returns the number of groups.
pub fn write_samples(trainer: &mut Trainer, out: &Path) -> Result<usize, TrainError> {
    let groups = trainer.sample_tasks(trainer.cfg.group_size)?;
    let lines = groups.iter().map(|g| {
        let mut line = g.request.clone();
        line["rewards"] = serde_json::json!(g.scored.rewards);
        line["advantages"] = serde_json::json!(g.scored.advantages);
        line.to_string()
    });
    crate::toolkit::output_file::write_lines(out, lines).map_err(TrainError::file(out))?;
    Ok(groups.len())
}
