//! The GRPO loop: per step, sample a group per prompt with the current policy (or take scored
//! groups given in memory), score each group with the gavel pipeline, skip groups whose
//! rewards all tie, and take one AdamW step on the LoRA adapters from the accumulated gradient.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Tensor, D};
use serde::Serialize;

use super::checkpoint::{self, TrainerState};
use super::config::TrainConfig;
use super::filter::FilterState;
use super::grpo::GrpoInputs;
use super::optim::{accumulate, clip_grad_norm, named_grads, AdamW};
use super::rollout::{sample_groups, PolicyModel, SampledCompletion};
use super::run_log::MetricsFile;
use super::scoring::Rewarder;
use super::tasks::Task;
use super::TrainError;
use crate::domain::rng::Rng;
use crate::domain::stats;
use crate::toolkit::progress::progress_bar;

/// One prompt's completions with their scores.
#[derive(Debug, Clone)]
pub struct GroupData {
    /// The prompt of each completion (sampled groups share one; logged ones may differ).
    pub prompts: Vec<Vec<u32>>,
    pub completions: Vec<SampledCompletion>,
    /// Per completion token: 1 where the policy wrote it, 0 for tool output; empty = all 1.
    pub masks: Vec<Vec<f32>>,
    pub rewards: Vec<Option<f64>>,
    pub advantages: Vec<f64>,
    /// Whether `completions[i].logp` came from the sampler (for truncated IS).
    pub has_sampler_logp: bool,
}

impl GroupData {
    /// Tokens the loss counts: completion tokens the policy wrote.
    pub fn policy_tokens(&self) -> f64 {
        self.completions
            .iter()
            .enumerate()
            .map(|(i, c)| match self.masks.get(i) {
                Some(m) => m.iter().take(c.tokens.len()).map(|&x| x as f64).sum(),
                None => c.tokens.len() as f64,
            })
            .sum()
    }

    /// Rewards all equal (or fewer than two scored): no learning signal.
    pub fn ties(&self) -> bool {
        let r: Vec<f64> = self.rewards.iter().flatten().copied().collect();
        r.len() < 2 || r.iter().all(|&x| x == r[0])
    }
}

/// What one step did (one JSON line of `metrics.jsonl`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepMetrics {
    pub step: u64,
    pub reward_mean: f64,
    pub reward_std: f64,
    pub frac_reward_zero_std: f64,
    pub skipped_groups: usize,
    /// Groups sampled and scored for the step: `prompts_per_step`, more under dynamic sampling.
    pub groups_drawn: usize,
    /// Mean reward over every group drawn for the step, tied ones set aside included: the
    /// policy's reward on tasks drawn at random. Without dynamic sampling it is `reward_mean`;
    /// with it, `reward_mean` is over the groups trained on, which leave out tied groups (late
    /// in a run mostly solved ones) and so understate or overstate the policy.
    pub drawn_reward_mean: f64,
    pub loss: f64,
    pub kl: f64,
    pub clip_ratio_low: f64,
    pub clip_ratio_high: f64,
    pub clip_ratio_region: f64,
    pub tis_clipped: f64,
    pub entropy: f64,
    pub grad_norm: f64,
    pub learning_rate: f64,
    pub completion_length_mean: f64,
    pub completion_length_max: usize,
    pub tokens_per_s: f64,
    pub seconds: f64,
    /// Time spent sampling, scoring and in forward/backward passes.
    pub sample_seconds: f64,
    pub score_seconds: f64,
    pub train_seconds: f64,
}

/// Where a step's groups come from.
pub enum Source {
    /// Sample from the policy on these tasks and score in `rewarder`.
    Online {
        tasks: Vec<Task>,
        rewarder: Rewarder,
        rt: tokio::runtime::Handle,
    },
    /// Scored groups from a file, taken in order (cycling).
    Offline(Vec<GroupData>),
    /// Supervised fine-tuning: the examples are [`super::sft::Sft`]'s, and no GRPO step runs.
    Supervised,
}

pub struct Trainer {
    pub cfg: TrainConfig,
    pub policy: PolicyModel,
    pub opt: AdamW,
    pub rng: Rng,
    /// Optimizer steps done.
    pub step: u64,
    pub source: Source,
    /// The tasks the difficulty filter keeps (all until its first survey).
    pub filter: FilterState,
}

impl Trainer {
    /// Loads the policy (adapters drawn from the seeded RNG, or `init_adapter`'s) and the
    /// optimizer.
    pub fn new(cfg: TrainConfig, source: Source) -> Result<Trainer, TrainError> {
        Trainer::with_source(cfg, |_| Ok(source))
    }

    /// [`Trainer::new`] with a source made from the loaded policy (scored groups are read with
    /// its tokenizer and chat template).
    pub fn with_source(
        cfg: TrainConfig,
        make_source: impl FnOnce(&PolicyModel) -> Result<Source, TrainError>,
    ) -> Result<Trainer, TrainError> {
        // What sampling takes; a training step checks the rest (a group of two or more).
        cfg.validate_for_sampling()?;
        let mut rng = Rng::new(cfg.seed);
        let policy = PolicyModel::load(&cfg.model, &cfg.device, &cfg.lora, &mut rng)?;
        let opt = AdamW::new(policy.model.lora_vars(), cfg.adamw.clone())?;
        if let Some(dir) = &cfg.init_adapter {
            checkpoint::load_init_adapter(dir, opt.vars(), &cfg.lora)?;
        }
        let source = make_source(&policy)?;
        Ok(Trainer {
            cfg,
            policy,
            opt,
            rng,
            step: 0,
            source,
            filter: FilterState::default(),
        })
    }

    /// Continues from a checkpoint directory: adapters, optimizer, RNG and step.
    pub fn resume(&mut self, dir: &Path) -> Result<(), TrainError> {
        checkpoint::load_adapters(dir, self.opt.vars())?;
        let (state, opt) = checkpoint::load_state(dir)?;
        if state.seed != self.cfg.seed {
            return Err(TrainError::Checkpoint(format!(
                "{}: saved with seed {}, this run has seed {}",
                dir.display(),
                state.seed,
                self.cfg.seed
            )));
        }
        self.opt
            .load_state(&opt, state.adam_t)
            .map_err(|m| TrainError::Checkpoint(format!("{}: {m}", dir.display())))?;
        self.rng = Rng::from_state(state.rng_state);
        self.step = state.step;
        self.filter = FilterState::load(dir)?;
        Ok(())
    }

    /// Writes `output_dir/checkpoint-STEP` and returns its path.
    pub fn save(&self) -> Result<std::path::PathBuf, TrainError> {
        let dir = checkpoint::checkpoint_dir(&self.cfg.output_dir, self.step);
        checkpoint::save_adapters(&dir, self.opt.vars(), &self.cfg.lora, &self.cfg.model)?;
        let state = TrainerState {
            step: self.step,
            adam_t: self.opt.t,
            rng_state: self.rng.state(),
            seed: self.cfg.seed,
        };
        checkpoint::save_state(&dir, &state, self.opt.state_tensors())?;
        if self.cfg.filter.is_some() {
            self.filter.save(&dir)?;
        }
        Ok(dir)
    }

    fn collect_groups(&mut self, m: &mut StepMetrics) -> Result<Vec<GroupData>, TrainError> {
        let n = self.cfg.prompts_per_step;
        let (tasks, rewarder, rt) = match &self.source {
            Source::Supervised => {
                return Err(TrainError::Config(
                    "an SFT run has no GRPO steps (Sft::run trains it)".into(),
                ))
            }
            Source::Offline(groups) if groups.is_empty() => {
                return Err(TrainError::Input("no scored groups to train on".into()))
            }
            Source::Offline(groups) => {
                let start = (self.step as usize * n) % groups.len();
                m.groups_drawn = n;
                let step: Vec<GroupData> = (0..n)
                    .map(|i| groups[(start + i) % groups.len()].clone())
                    .collect();
                let rewards: Vec<f64> = step
                    .iter()
                    .flat_map(|g| g.rewards.iter().flatten().copied())
                    .collect();
                m.drawn_reward_mean = stats::mean_std(&rewards).map_or(0.0, |(mean, _)| mean);
                return Ok(step);
            }
            Source::Online {
                tasks,
                rewarder,
                rt,
            } => (tasks, rewarder, rt),
        };
        // With dynamic sampling, groups whose rewards tie are set aside and their places drawn
        // again, for at most `dynamic_sampling_rounds` more rounds; otherwise one round keeps all.
        let dynamic = self.cfg.dynamic_sampling_rounds > 0;
        let mut out: Vec<GroupData> = Vec::with_capacity(n);
        let mut tied: Vec<GroupData> = Vec::new();
        let mut drawn_rewards: Vec<f64> = Vec::new();
        let mut round = 0;
        loop {
            let draw = n - out.len();
            let t0 = Instant::now();
            let picked: Vec<&Task> = (0..draw)
                .map(|_| &tasks[self.filter.pick(tasks.len(), &mut self.rng)])
                .collect();
            let prompts = picked
                .iter()
                .map(|t| self.policy.prompt_ids(&t.messages))
                .collect::<Result<Vec<_>, _>>()?;
            let sampled = sample_groups(
                &self.policy,
                &prompts,
                self.cfg.group_size,
                &self.cfg.sampling,
                &mut self.rng,
            )?;
            let t1 = Instant::now();
            m.sample_seconds += (t1 - t0).as_secs_f64();
            let requests: Vec<_> = picked
                .iter()
                .zip(&sampled)
                .map(|(task, cs)| {
                    let texts: Vec<String> = cs.iter().map(|c| c.text.clone()).collect();
                    task.request(&texts)
                })
                .collect();
            // Every group of the step is scored at once (judges apply their own limits).
            let scored = rt.block_on(futures::future::join_all(
                requests.iter().map(|r| rewarder.score(r)),
            ));
            m.score_seconds += t1.elapsed().as_secs_f64();
            for ((task, prompt), (completions, scored)) in picked
                .iter()
                .zip(prompts)
                .zip(sampled.into_iter().zip(scored))
            {
                let mut scored = scored.map_err(|e| e.at(Some(&task.at)))?;
                if self.cfg.shuffle_rewards {
                    // Its own generator per step and group, not the sampler's: the control's first
                    // step samples exactly what the run unshuffled samples, and a resumed run
                    // shuffles alike.
                    let k = m.groups_drawn as u64;
                    let mut rng =
                        Rng::new(self.cfg.seed ^ 0x5348_5546_464C_4521 ^ (self.step << 20) ^ k);
                    scored = scored.shuffled(&mut rng);
                }
                let group = GroupData {
                    prompts: vec![prompt; completions.len()],
                    completions,
                    masks: Vec::new(),
                    rewards: scored.rewards,
                    advantages: scored.advantages,
                    has_sampler_logp: true,
                };
                m.groups_drawn += 1;
                drawn_rewards.extend(group.rewards.iter().flatten().copied());
                if dynamic && group.ties() {
                    tied.push(group);
                } else {
                    out.push(group);
                }
            }
            if out.len() == n || round == self.cfg.dynamic_sampling_rounds {
                break;
            }
            round += 1;
        }
        m.drawn_reward_mean = stats::mean_std(&drawn_rewards).map_or(0.0, |(mean, _)| mean);
        // What the rounds did not fill, the first tied groups do (they teach nothing, but the
        // step's reward figures stay over `prompts_per_step` groups).
        let missing = n - out.len();
        out.extend(tied.into_iter().take(missing));
        Ok(out)
    }

    /// One optimizer step.
    pub fn train_step(&mut self) -> Result<StepMetrics, TrainError> {
        self.cfg.validate()?;
        let started = Instant::now();
        let mut m = StepMetrics {
            step: self.step + 1,
            ..StepMetrics::default()
        };
        let groups = self.collect_groups(&mut m)?;
        let t_train = Instant::now();
        let rewards: Vec<f64> = groups
            .iter()
            .flat_map(|g| g.rewards.iter().flatten().copied())
            .collect();
        (m.reward_mean, m.reward_std) = stats::mean_std(&rewards).unwrap_or((0.0, 0.0));
        let lens: Vec<usize> = groups
            .iter()
            .flat_map(|g| g.completions.iter().map(|c| c.tokens.len()))
            .collect();
        m.completion_length_mean = lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64;
        m.completion_length_max = lens.iter().copied().max().unwrap_or(0);
        let active: Vec<&GroupData> = groups.iter().filter(|g| !g.ties()).collect();
        m.skipped_groups = groups.len() - active.len();
        m.frac_reward_zero_std = m.skipped_groups as f64 / groups.len().max(1) as f64;
        let total_steps = self.cfg.steps;
        m.learning_rate = self.cfg.schedule.lr(
            self.cfg.learning_rate,
            self.step,
            self.cfg.warmup_steps,
            total_steps,
        );
        if !active.is_empty() {
            let num_items: f64 = active.iter().map(|g| g.policy_tokens()).sum();
            let mut grads: HashMap<String, Tensor> = HashMap::new();
            let chunks: Vec<&[&GroupData]> = active.chunks(self.cfg.micro_batch_groups).collect();
            let k = chunks.len() as f64;
            for chunk in &chunks {
                let r = self.micro_batch(chunk, chunks.len(), num_items)?;
                m.loss += r.loss;
                m.kl += r.kl / k;
                m.clip_ratio_low += r.clip_low / k;
                m.clip_ratio_high += r.clip_high / k;
                m.clip_ratio_region += r.clip_region / k;
                m.tis_clipped += r.tis_clipped / k;
                m.entropy += r.entropy / k;
                accumulate(&mut grads, r.grads)?;
            }
            m.grad_norm = clip_grad_norm(&mut grads, self.cfg.max_grad_norm)?;
            self.opt.step(&grads, m.learning_rate)?;
        }
        self.step += 1;
        m.train_seconds = t_train.elapsed().as_secs_f64();
        m.seconds = started.elapsed().as_secs_f64();
        m.tokens_per_s = lens.iter().sum::<usize>() as f64 / m.seconds.max(1e-9);
        Ok(m)
    }

    /// One forward/backward pass over the completions of `groups`, right-padded: completion
    /// token j of row i sits at position `p_i + j` and is scored by the logits at `p_i + j − 1`.
    /// When every row has the same prompt (a sampled group), the prompt runs once for all of
    /// them ([`super::model::LoraQwen::completion_hidden`]).
    fn micro_batch(
        &self,
        groups: &[&GroupData],
        grad_accum: usize,
        num_items: f64,
    ) -> Result<MicroResult, TrainError> {
        self.micro_batch_with(groups, grad_accum, num_items, true)
    }

    /// [`Trainer::micro_batch`]; with `share_prompt` off every row runs its whole sequence
    /// (what the shared prompt is tested against).
    fn micro_batch_with(
        &self,
        groups: &[&GroupData],
        grad_accum: usize,
        num_items: f64,
        share_prompt: bool,
    ) -> Result<MicroResult, TrainError> {
        let model = &self.policy.model;
        let dev = model.device().clone();
        let rows: Vec<(&GroupData, usize)> = groups
            .iter()
            .flat_map(|g| (0..g.completions.len()).map(move |i| (*g, i)))
            .collect();
        let n = rows.len();
        let len =
            |(g, i): &(&GroupData, usize)| (g.prompts[*i].len(), g.completions[*i].tokens.len());
        let t = rows.iter().map(|r| len(r).0 + len(r).1).max().unwrap_or(1);
        let l = rows.iter().map(|r| len(r).1).max().unwrap_or(0).max(1);
        let mut ids = Vec::with_capacity(n * t);
        let mut at = Vec::with_capacity(n * l);
        let mut targets = Vec::with_capacity(n * l);
        let mut mask = Vec::with_capacity(n * l);
        let mut sampler = Vec::with_capacity(n * l);
        let mut adv = Vec::with_capacity(n);
        for (row, (g, i)) in rows.iter().enumerate() {
            let (prompt, c) = (&g.prompts[*i], &g.completions[*i]);
            if prompt.is_empty() {
                return Err(TrainError::Input(
                    "a completion with an empty prompt".into(),
                ));
            }
            ids.extend_from_slice(prompt);
            ids.extend_from_slice(&c.tokens);
            ids.resize((row + 1) * t, 0);
            for j in 0..l {
                let tok = c.tokens.get(j).copied();
                at.push(
                    (row * t
                        + if tok.is_some() {
                            prompt.len() - 1 + j
                        } else {
                            0
                        }) as u32,
                );
                targets.push(tok.unwrap_or(0));
                let keep = g
                    .masks
                    .get(*i)
                    .and_then(|m| m.get(j))
                    .copied()
                    .unwrap_or(1.0);
                mask.push(if tok.is_some() { keep } else { 0.0 });
                sampler.push(c.logp.get(j).copied().unwrap_or(0.0));
            }
            adv.push(g.advantages[*i] as f32);
        }
        let shared = rows
            .first()
            .map(|(g, i)| &g.prompts[*i])
            .filter(|p| share_prompt && rows.iter().all(|(g, i)| &g.prompts[*i] == *p));
        // The shared prompt `[1, P]` and the completions `[n, l]`, right-padded.
        let split = match shared {
            Some(p) => {
                let mut c = Vec::with_capacity(n * l);
                for (g, i) in &rows {
                    let tokens = &g.completions[*i].tokens;
                    c.extend_from_slice(tokens);
                    c.resize(c.len() + l - tokens.len(), 0);
                }
                let prompt = Tensor::new(p.as_slice(), &dev)?.unsqueeze(0)?;
                Some((prompt, Tensor::from_vec(c, (n, l), &dev)?))
            }
            None => None,
        };
        let ids = Tensor::from_vec(ids, (n, t), &dev)?;
        let at = Tensor::from_vec(at, n * l, &dev)?;
        let targets = Tensor::from_vec(targets, (n, l, 1), &dev)?;
        let mask = Tensor::from_vec(mask, (n, l), &dev)?;
        let sampler = Tensor::from_vec(sampler, (n, l), &dev)?;
        let adv = Tensor::from_vec(adv, n, &dev)?;
        let temp = self.cfg.sampling.temperature;
        let logp_of = |adapters: bool| -> candle_core::Result<(Tensor, Tensor)> {
            let h = match &split {
                Some((p, c)) => {
                    let h = model.completion_hidden(p, c, adapters)?;
                    let hidden = h.dim(D::Minus1)?;
                    h.reshape((n * l, hidden))?
                }
                None => {
                    let h = model.hidden(&ids, 0, None, adapters)?;
                    let hidden = h.dim(D::Minus1)?;
                    h.reshape((n * t, hidden))?.index_select(&at, 0)?
                }
            };
            let logits = model.logits(&h)?.reshape((n, l, ()))?;
            let lsm = self.policy.log_probs(&logits, temp)?;
            Ok((lsm.gather(&targets, D::Minus1)?.squeeze(D::Minus1)?, lsm))
        };
        let (logp, lsm) = logp_of(true)?;
        let ref_logp = if self.cfg.grpo.beta != 0.0 {
            Some(logp_of(false)?.0.detach())
        } else {
            None
        };
        let lsm = lsm.detach();
        let ent = (lsm.exp()? * &lsm)?.sum(D::Minus1)?.neg()?;
        let tokens = mask.sum_all()?.to_scalar::<f32>()?.max(1.0);
        let entropy = (ent * &mask)?.sum_all()?.to_scalar::<f32>()? / tokens;
        let has_sampler = groups.iter().all(|g| g.has_sampler_logp);
        let out = self.cfg.grpo.loss(&GrpoInputs {
            logp: &logp,
            old_logp: None,
            ref_logp: ref_logp.as_ref(),
            sampler_logp: has_sampler.then_some(&sampler),
            mask: &mask,
            advantages: &adv,
            grad_accum,
            num_items_in_batch: num_items,
        })?;
        let store = out.loss.backward()?;
        let grads = named_grads(self.opt.vars(), &store)?;
        Ok(MicroResult {
            loss: out.loss.to_dtype(DType::F64)?.to_scalar::<f64>()?,
            kl: out.kl,
            clip_low: out.clip_low,
            clip_high: out.clip_high,
            clip_region: out.clip_region,
            tis_clipped: out.tis_clipped,
            entropy: entropy as f64,
            grads,
        })
    }

    /// Runs until `cfg.steps`, writing metrics.jsonl and checkpoints; `progress` shows a bar.
    pub fn run(&mut self, progress: bool) -> Result<Vec<StepMetrics>, TrainError> {
        let out = &self.cfg.output_dir;
        let mut metrics = MetricsFile::open(out, self.step)?;
        let bar = progress_bar(self.cfg.steps, self.step, "steps", progress);
        let mut all = Vec::new();
        while self.step < self.cfg.steps {
            if let Some(p) = self.survey_if_due()? {
                metrics.write(&p)?;
                bar.println(p.summary());
                if p.inside == 0 {
                    bar.suspend(|| {
                        eprintln!(
                            "difficulty filter: no task left inside the band at step {}: \
                             training ends here (checkpoint-{})",
                            self.step, self.step
                        )
                    });
                    self.save()?;
                    break;
                }
            }
            let m = self.train_step()?;
            metrics.write(&m)?;
            bar.set_position(self.step);
            bar.set_message(format!(
                "reward {:.3}±{:.3} loss {:+.4} kl {:.4} ent {:.2} |g| {:.3} lr {:.1e} len {:.1} skip {} {:.0} tok/s{}",
                m.reward_mean,
                m.reward_std,
                m.loss,
                m.kl,
                m.entropy,
                m.grad_norm,
                m.learning_rate,
                m.completion_length_mean,
                m.skipped_groups,
                m.tokens_per_s,
                self.filter.progress()
            ));
            all.push(m);
            let every = self.cfg.save_every;
            if (every > 0 && self.step.is_multiple_of(every)) || self.step == self.cfg.steps {
                self.save()?;
            }
        }
        bar.finish();
        Ok(all)
    }
}

struct MicroResult {
    loss: f64,
    kl: f64,
    clip_low: f64,
    clip_high: f64,
    clip_region: f64,
    tis_clipped: f64,
    entropy: f64,
    grads: HashMap<String, Tensor>,
}

#[cfg(test)]
#[path = "trainer_tests.rs"]
mod trainer_tests;
