//! The training loop of `gavel train judge`: steps over the examples' features in an order
//! that is a function of the step (so `--resume` continues exactly), class-balanced
//! cross-entropy on the verdict, AdamW, dev-split figures every `eval_every` steps with the
//! best checkpoint kept.

use std::collections::HashMap;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::examples::{Example, GroupTruth};
use super::features::{Context, Features};
use super::head::VerdictHead;
use crate::domain::prompt::JudgeMode;
use crate::domain::rng::Rng;
use crate::train::optim::{accumulate, clip_grad_norm, named_grads, AdamW, AdamWConfig, Schedule};
use crate::train::TrainError;

/// One split: its examples, their features and its groups' truth.
pub struct Split {
    pub examples: Vec<Example>,
    pub features: Vec<Features>,
    pub truths: Vec<GroupTruth>,
}

/// What the loop needs besides the data.
pub struct FitSettings {
    pub modes: Vec<JudgeMode>,
    pub epochs: u64,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub eval_every: u64,
    pub seed: u64,
    /// Per mode (in `modes` order): the weights of the first and the second answer.
    pub class_weights: Vec<(f64, f64)>,
    /// Per training example: a factor on its loss ([`super::examples::length_weights`] with
    /// `--balance-length`); empty = 1 for all.
    pub example_weights: Vec<f64>,
}

/// The best dev figures so far, by which a checkpoint is kept: the higher mean ranking
/// accuracy, and between equal ones the lower dev loss. On a few dozen dev groups the accuracy
/// moves in steps of 1/groups and ties are common; the first checkpoint to reach a figure is
/// often one still in warm-up, barely moved from the base model, and the loss tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Best {
    pub mean_ranking: f64,
    /// Absent from runs written before ties were broken by loss: then any tie improves.
    #[serde(default = "infinite")]
    pub loss: f64,
}

fn infinite() -> f64 {
    f64::INFINITY
}

impl Best {
    /// Before the first dev measurement: anything improves on it.
    pub const NONE: Best = Best {
        mean_ranking: f64::NEG_INFINITY,
        loss: f64::INFINITY,
    };

    /// Whether `f` is better than `self`: higher ranking accuracy, or the same (to rounding)
    /// and a lower dev loss.
    pub fn improved_by(&self, f: &DevFigures) -> bool {
        let tie = (f.mean_ranking - self.mean_ranking).abs() < 1e-9;
        if tie {
            f.loss < self.loss
        } else {
            f.mean_ranking > self.mean_ranking
        }
    }
}

impl FitSettings {
    /// Training example `i`'s loss factor.
    fn weight(&self, i: usize) -> f64 {
        self.example_weights.get(i).copied().unwrap_or(1.0)
    }
}

/// Dev-split figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DevFigures {
    /// Per mode: the share of a group's differently-ranked trajectory pairs the judge's scores
    /// order as the truth does (ties count half): `gavel eval`'s pairwise accuracy. With both
    /// modes, then [`COMBINED`]: the same for the mean of a trajectory's two scores.
    pub ranking: Vec<(String, f64)>,
    /// Mean over the modes: what the best checkpoint is chosen by (ties: by `loss`).
    pub mean_ranking: f64,
    /// Where the dev groups come from more than one file: `ranking` per file (file name, in
    /// the order first seen), so a checkpoint that gains on one kind of set and loses on
    /// another shows it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_file: Vec<(String, Vec<(String, f64)>)>,
    /// Mean cross-entropy of the dev examples (unweighted).
    pub loss: f64,
}

#[derive(Serialize)]
struct MetricsLine<'a> {
    step: u64,
    loss: f64,
    lr: f64,
    grad_norm: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dev: Option<&'a DevFigures>,
    elapsed_s: f64,
}

fn mode_index(modes: &[JudgeMode], m: JudgeMode) -> usize {
    modes.iter().position(|&x| x == m).unwrap_or(0)
}

/// Steps in all.
pub fn total_steps(n: usize, s: &FitSettings) -> u64 {
    (s.epochs * n as u64).div_ceil(s.batch_size.max(1) as u64)
}

/// The examples of step `step`: positions `step·B..(step+1)·B` of the endless stream in which
/// each pass over the data has its own order, drawn from the seed and the pass.
pub fn batch(n: usize, step: u64, s: &FitSettings) -> Vec<usize> {
    let b = s.batch_size as u64;
    let mut order: Option<(u64, Vec<usize>)> = None;
    (step * b..(step + 1) * b)
        .filter(|&pos| pos < s.epochs * n as u64)
        .map(|pos| {
            let pass = pos / n as u64;
            if order.as_ref().is_none_or(|(p, _)| *p != pass) {
                let mut idx: Vec<usize> = (0..n).collect();
                Rng::new(s.seed ^ 0x3D6E_0000_0000 ^ pass).shuffle(&mut idx);
                order = Some((pass, idx));
            }
            order.as_ref().expect("set").1[(pos % n as u64) as usize]
        })
        .collect()
}

/// The weighted cross-entropy of example `e`, its loss scaled by `weight` (and its
/// probability of the first answer).
fn example_loss(
    head: &VerdictHead,
    e: &Example,
    f: &Features,
    s: &FitSettings,
    adapters: bool,
    weight: f64,
) -> Result<(Tensor, f64), TrainError> {
    let mi = mode_index(&s.modes, e.mode);
    let logits = head.logits(f, mi, adapters)?;
    let (first, second) = head.log_shares(&logits, mi)?;
    let p = first.to_scalar::<f32>()?.exp() as f64;
    let (w1, w0) = s.class_weights[mi];
    let (w1, w0) = (w1 * weight, w0 * weight);
    let loss = ((first * (-w1 * e.target))? + (second * (-w0 * (1.0 - e.target)))?)?;
    Ok((loss, p))
}

/// One optimizer step on `idx`: returns the mean loss and the gradient norm before clipping.
/// Verdict-position examples are one graph; examples of every position (K layers over the
/// whole prompt each) are backpropagated one at a time, their gradients summed, so memory holds
/// one example's activations, not a batch's.
pub fn step(
    head: &VerdictHead,
    opt: &mut AdamW,
    split: &Split,
    idx: &[usize],
    s: &FitSettings,
    lr: f64,
) -> Result<(f64, f64), TrainError> {
    if idx.is_empty() {
        return Ok((0.0, 0.0));
    }
    let n = idx.len() as f64;
    let one_by_one = idx
        .iter()
        .any(|&i| matches!(split.features[i].context, Context::All { .. }));
    let (mean, mut named) = if one_by_one {
        let (mut sum, mut acc) = (0.0, HashMap::new());
        for &i in idx {
            let (l, _) = example_loss(
                head,
                &split.examples[i],
                &split.features[i],
                s,
                true,
                s.weight(i),
            )?;
            let l = (l / n)?;
            sum += f64::from(l.to_scalar::<f32>()?);
            accumulate(&mut acc, named_grads(opt.vars(), &l.backward()?)?)?;
        }
        (sum, acc)
    } else {
        let mut total: Option<Tensor> = None;
        for &i in idx {
            let (l, _) = example_loss(
                head,
                &split.examples[i],
                &split.features[i],
                s,
                true,
                s.weight(i),
            )?;
            total = Some(match total {
                Some(t) => (t + l)?,
                None => l,
            });
        }
        let mean = (total.expect("a non-empty batch") / n)?;
        let named = named_grads(opt.vars(), &mean.backward()?)?;
        (f64::from(mean.to_scalar::<f32>()?), named)
    };
    let norm = clip_grad_norm(&mut named, 1.0)?;
    opt.step(&named, lr)?;
    Ok((mean, norm))
}

/// Each example's probability of the first answer under the head (or, without adapters, the
/// base model's as the features recorded it).
pub fn first_shares(
    head: &VerdictHead,
    split: &Split,
    s: &FitSettings,
    adapters: bool,
) -> Result<Vec<f64>, TrainError> {
    if !adapters {
        return Ok(split.features.iter().map(|f| f.base_first).collect());
    }
    split
        .examples
        .iter()
        .zip(&split.features)
        .map(|(e, f)| Ok(example_loss(head, e, f, s, true, 1.0)?.1))
        .collect()
}

/// The dev figures of probabilities `p` (one per example of `split`).
pub fn dev_figures(split: &Split, p: &[f64], modes: &[JudgeMode]) -> DevFigures {
    let per_mode: Vec<Vec<Vec<f64>>> = modes
        .iter()
        .map(|&mode| {
            (0..split.truths.len())
                .map(|g| group_scores(split, p, mode, g))
                .collect()
        })
        .collect();
    // Both modes' scores averaged per trajectory: a combined mode, measured here before any
    // judge serves it. Reported beside the modes, never chosen on.
    let combined: Option<Vec<Vec<f64>>> = match &per_mode[..] {
        [a, b] => Some(
            a.iter()
                .zip(b)
                .map(|(x, y)| x.iter().zip(y).map(|(x, y)| (x + y) / 2.0).collect())
                .collect(),
        ),
        _ => None,
    };
    let ranking_of = |file: Option<&str>| -> Vec<(String, f64)> {
        let mut r: Vec<(String, f64)> = modes
            .iter()
            .zip(&per_mode)
            .map(|(mode, scores)| (mode.name().to_string(), accuracy(split, scores, file)))
            .collect();
        if let Some(both) = &combined {
            r.push((COMBINED.to_string(), accuracy(split, both, file)));
        }
        r
    };
    let ranking = ranking_of(None);
    let mean_ranking =
        ranking.iter().take(modes.len()).map(|r| r.1).sum::<f64>() / modes.len().max(1) as f64;
    let mut files: Vec<&str> = Vec::new();
    for t in &split.truths {
        if !files.contains(&t.file.as_str()) {
            files.push(&t.file);
        }
    }
    let by_file = if files.len() > 1 {
        files
            .iter()
            .map(|f| (f.to_string(), ranking_of(Some(f))))
            .collect()
    } else {
        Vec::new()
    };
    let loss = split
        .examples
        .iter()
        .zip(p)
        .map(|(e, &q)| {
            let q = q.clamp(1e-7, 1.0 - 1e-7);
            -(e.target * q.ln() + (1.0 - e.target) * (1.0 - q).ln())
        })
        .sum::<f64>()
        / split.examples.len().max(1) as f64;
    DevFigures {
        ranking,
        mean_ranking,
        by_file,
        loss,
    }
}

/// The name of the combined figure in [`DevFigures::ranking`].
pub const COMBINED: &str = "pointwise+pairwise";

/// Group `g`'s score per trajectory in `mode`, as the judge scores it: pointwise, each
/// trajectory's probability; pairwise, Bradley–Terry over both orders of each pair.
fn group_scores(split: &Split, p: &[f64], mode: JudgeMode, g: usize) -> Vec<f64> {
    let m = split.truths[g].scores.len();
    let mine: Vec<(usize, &Example)> = split
        .examples
        .iter()
        .enumerate()
        .filter(|(_, e)| e.group == g && e.mode == mode)
        .collect();
    match mode {
        JudgeMode::Pairwise => {
            let pairs: Vec<(usize, usize)> =
                mine.iter().map(|(_, e)| (e.shows[0], e.shows[1])).collect();
            let prefs: Vec<f64> = mine.iter().map(|(i, _)| p[*i]).collect();
            crate::score::bradley_terry(m, &pairs, &prefs)
        }
        _ => {
            let mut s = vec![0.5; m];
            for (i, e) in &mine {
                s[e.shows[0]] = p[*i];
            }
            s
        }
    }
}

/// Pairwise ranking accuracy of `scores` (per group, per trajectory) against the truth: the
/// share of differently labelled pairs in the right order, a tie counting half.
fn accuracy(split: &Split, scores: &[Vec<f64>], file: Option<&str>) -> f64 {
    let (mut right, mut pairs) = (0.0, 0.0);
    let groups = split.truths.iter().zip(scores);
    for (truth, scores) in groups.filter(|(t, _)| file.is_none_or(|f| t.file == f)) {
        let m = truth.scores.len();
        for a in 0..m {
            for b in a + 1..m {
                let (ta, tb) = (truth.scores[a], truth.scores[b]);
                if ta == tb {
                    continue;
                }
                pairs += 1.0;
                let (sa, sb) = (scores[a], scores[b]);
                right += if sa == sb {
                    0.5
                } else if (sa > sb) == (ta > tb) {
                    1.0
                } else {
                    0.0
                };
            }
        }
    }
    if pairs > 0.0 {
        right / pairs
    } else {
        0.0
    }
}

/// One run of the loop: the head being trained and its optimizer, the splits, the settings,
/// and where the run starts.
pub struct Fit<'a> {
    pub head: &'a VerdictHead,
    pub opt: AdamW,
    pub train: &'a Split,
    pub dev: &'a Split,
    pub settings: &'a FitSettings,
    /// Steps already taken: 0, or the step of the checkpoint a resumed run continues from.
    pub start: u64,
    /// The best dev figures so far ([`Best::NONE`] on a fresh run).
    pub best: Best,
}

/// A dev measurement, for the caller to keep as a checkpoint.
pub struct Measured<'a> {
    pub step: u64,
    /// Better than every earlier measurement: the checkpoint is the run's best so far.
    pub is_best: bool,
    pub figures: &'a DevFigures,
    pub best: Best,
    pub opt: &'a AdamW,
}

impl Fit<'_> {
    /// Runs the steps from `start` to the end, a line per step in `metrics`; at each dev
    /// measurement `save` writes the checkpoint.
    pub fn run(
        mut self,
        metrics: &mut crate::train::run_log::MetricsFile,
        progress: &indicatif::ProgressBar,
        mut save: impl FnMut(Measured<'_>) -> Result<(), TrainError>,
    ) -> Result<(), TrainError> {
        let (head, s) = (self.head, self.settings);
        let n = self.train.examples.len();
        let total = total_steps(n, s);
        let warmup = (total / 20).max(1);
        let t0 = std::time::Instant::now();
        for step_no in self.start..total {
            let idx = batch(n, step_no, s);
            let lr = Schedule::Cosine.lr(s.learning_rate, step_no, warmup, total);
            let (loss, grad_norm) = step(head, &mut self.opt, self.train, &idx, s, lr)?;
            let done = step_no + 1;
            progress.inc(1);
            progress.set_message(format!("loss {loss:.4}"));
            let figures = if done % s.eval_every.max(1) == 0 || done == total {
                let p = first_shares(head, self.dev, s, true)?;
                Some(dev_figures(self.dev, &p, &s.modes))
            } else {
                None
            };
            metrics.write(&MetricsLine {
                step: done,
                loss,
                lr,
                grad_norm,
                dev: figures.as_ref(),
                elapsed_s: t0.elapsed().as_secs_f64(),
            })?;
            if let Some(f) = figures {
                let is_best = self.best.improved_by(&f);
                if is_best {
                    self.best = Best {
                        mean_ranking: f.mean_ranking,
                        loss: f.loss,
                    };
                }
                save(Measured {
                    step: done,
                    is_best,
                    figures: &f,
                    best: self.best,
                    opt: &self.opt,
                })?;
            }
        }
        Ok(())
    }
}

/// AdamW as the loop uses it: no weight decay on the adapters.
pub fn optimizer(vars: Vec<(String, candle_core::Var)>) -> Result<AdamW, TrainError> {
    Ok(AdamW::new(
        vars,
        AdamWConfig {
            weight_decay: 0.0,
            ..AdamWConfig::default()
        },
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(mode: JudgeMode, group: usize, shows: Vec<usize>) -> Example {
        Example {
            messages: Vec::new(),
            mode,
            target: 0.5,
            group,
            shows,
            length_sign: 0,
        }
    }

    /// Each mode is scored as the judge scores it, and the combined figure ranks by the mean
    /// of a trajectory's two scores: here pointwise ranks both groups right, pairwise both
    /// wrong, and the mean follows whichever mode is the more decided in each group.
    #[test]
    fn dev_figures_per_mode_and_combined() {
        let modes = [JudgeMode::Pointwise, JudgeMode::Pairwise];
        let mut examples = Vec::new();
        let mut p = Vec::new();
        // Group 0: pointwise barely right (0.55 vs 0.45), pairwise firmly wrong.
        // Group 1: pointwise firmly right (0.95 vs 0.05), pairwise barely wrong.
        for (g, point, pair) in [(0, [0.55, 0.45], 0.1), (1, [0.95, 0.05], 0.45)] {
            examples.push(example(JudgeMode::Pointwise, g, vec![0]));
            examples.push(example(JudgeMode::Pointwise, g, vec![1]));
            p.extend(point);
            examples.push(example(JudgeMode::Pairwise, g, vec![0, 1]));
            examples.push(example(JudgeMode::Pairwise, g, vec![1, 0]));
            p.extend([pair, 1.0 - pair]);
        }
        let truth = |file: &str| GroupTruth {
            scores: vec![1.0, 0.0],
            soft: false,
            file: file.into(),
        };
        let mut split = Split {
            examples,
            features: Vec::new(),
            truths: vec![truth("a.jsonl"), truth("a.jsonl")],
        };
        // One file: no figures per file.
        assert!(dev_figures(&split, &p, &modes).by_file.is_empty());
        // Two: each file's own figures (the combined mode gets group 0 wrong and 1 right).
        split.truths[1].file = "b.jsonl".into();
        let f = dev_figures(&split, &p, &modes);
        let of = |file: &str, combined: f64| {
            let r = [("pointwise", 1.0), ("pairwise", 0.0), (COMBINED, combined)];
            (
                file.to_string(),
                r.map(|(m, a)| (m.to_string(), a)).to_vec(),
            )
        };
        assert_eq!(f.by_file, [of("a.jsonl", 0.0), of("b.jsonl", 1.0)]);
        assert_eq!(f.ranking[0], ("pointwise".to_string(), 1.0));
        assert_eq!(f.ranking[1], ("pairwise".to_string(), 0.0));
        assert_eq!(f.mean_ranking, 0.5);
        let bt0 = crate::score::bradley_terry(2, &[(0, 1), (1, 0)], &[0.1, 0.9]);
        let bt1 = crate::score::bradley_terry(2, &[(0, 1), (1, 0)], &[0.45, 0.55]);
        let right = |pt: [f64; 2], bt: &[f64]| f64::from(pt[0] + bt[0] > pt[1] + bt[1]);
        let expect = (right([0.55, 0.45], &bt0) + right([0.95, 0.05], &bt1)) / 2.0;
        assert_eq!(f.ranking[2], (COMBINED.to_string(), expect));
        assert_eq!(expect, 0.5, "one group each way: {bt0:?} {bt1:?}");
    }

    /// A checkpoint is kept for a higher accuracy, or for the same accuracy at a lower dev
    /// loss; never for a lower accuracy, however low its loss.
    #[test]
    fn the_best_checkpoint_breaks_ties_by_dev_loss() {
        let figures = |mean_ranking: f64, loss: f64| DevFigures {
            ranking: Vec::new(),
            mean_ranking,
            by_file: Vec::new(),
            loss,
        };
        assert!(Best::NONE.improved_by(&figures(0.0, 9.0)));
        let best = Best {
            mean_ranking: 0.82,
            loss: 0.60,
        };
        assert!(best.improved_by(&figures(0.84, 0.70)), "higher accuracy");
        assert!(best.improved_by(&figures(0.82, 0.55)), "tie, lower loss");
        // The same figure reached by another sum of fractions rounds differently.
        assert!(best.improved_by(&figures((0.64 + 1.0) / 2.0 + 1e-15, 0.55)));
        assert!(!best.improved_by(&figures(0.82, 0.65)), "tie, higher loss");
        assert!(!best.improved_by(&figures(0.80, 0.10)), "lower accuracy");
        // A best file from before ties were broken has no loss: any tie improves on it.
        let old: Best = serde_json::from_str(r#"{"mean_ranking":0.82}"#).unwrap();
        assert_eq!(old.loss, f64::INFINITY);
        assert!(old.improved_by(&figures(0.82, 5.0)));
    }
}
