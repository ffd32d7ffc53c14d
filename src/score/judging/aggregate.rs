//! Aggregating: every sample's scores mapped back to the request's trajectories, chunks merged
//! on one scale, orders and judges combined.

use std::collections::BTreeMap;

use super::{ChunkScores, JudgeOutcome, JudgeScore, SampleResult, Skeleton, CHUNK_ANCHORS};
use crate::domain::rubric::Rubric;
use crate::domain::stats::{mean_std, tidy};
use crate::judge::Panel;
use crate::score::response::{ItemOut, Usage};
use crate::score::samples::merge_chunks;

/// Maps every sample's scores back to candidates, merges chunks, averages orders and judges.
pub(super) fn aggregate_samples(
    skeleton: &Skeleton,
    rubric: &Rubric,
    panel: &Panel,
    per_sample: Vec<SampleResult>,
) -> JudgeOutcome {
    let mut usage = Usage {
        distinct_trajectories: skeleton.distinct as u64,
        ..Usage::default()
    };
    for s in &per_sample {
        usage.add(&s.usage);
    }
    usage.chunks = skeleton.chunks as u64;
    let m = skeleton.distinct;
    let shift = rubric.items.is_empty();
    // (judge, order) → per-candidate scores, merging chunks.
    let mut by_judge_order: BTreeMap<(usize, u32), ChunkScores> = BTreeMap::new();
    let mut first_seen: Vec<Option<(String, Vec<ItemOut>)>> = vec![None; m];
    let mut confidences: Vec<Vec<f64>> = vec![Vec::new(); m];
    for (s, r) in skeleton.samples.iter().zip(&per_sample) {
        by_judge_order
            .entry((s.judge, s.order_index))
            .or_default()
            .push((s.order.clone(), r.scores.iter().map(|x| x.value).collect()));
        for (&c, x) in s.order.iter().zip(&r.scores) {
            if first_seen[c].is_none() {
                first_seen[c] = Some((x.explanation.clone(), x.items.clone()));
            }
            confidences[c].extend(x.confidence);
        }
    }
    let mut per_judge: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); m]; panel.members().len()];
    for ((j, _), chunks) in &by_judge_order {
        // Chunks list anchors first, in their own prompt order; merge expects anchors first.
        let normalized: ChunkScores = chunks
            .iter()
            .map(|(order, scores)| {
                let mut pairs: Vec<(usize, Option<f64>)> =
                    order.iter().copied().zip(scores.iter().copied()).collect();
                pairs.sort_by_key(|(c, _)| (*c >= CHUNK_ANCHORS, *c));
                pairs.into_iter().unzip()
            })
            .collect();
        let anchors = if normalized.len() > 1 {
            CHUNK_ANCHORS.min(m)
        } else {
            0
        };
        for (c, v) in merge_chunks(m, &normalized, anchors, shift)
            .into_iter()
            .enumerate()
        {
            if let Some(v) = v {
                per_judge[*j][c].push(v);
            }
        }
    }
    let names = panel.names();
    let candidate_scores: Vec<JudgeScore> = (0..m)
        .map(|c| {
            let judge_means: Vec<f64> = per_judge
                .iter()
                .filter_map(|pj| mean_std(&pj[c]).map(|(mean, _)| mean))
                .collect();
            let all: Vec<f64> = per_judge
                .iter()
                .flat_map(|pj| pj[c].iter().copied())
                .collect();
            let (explanation, items) = first_seen[c].clone().unwrap_or_default();
            JudgeScore {
                value: panel.combine(&judge_means),
                explanation,
                items,
                disagreement: if all.len() > 1 {
                    mean_std(&all).map(|(_, sd)| sd)
                } else {
                    None
                },
                confidence: mean_std(&confidences[c]).map(|(mean, _)| tidy(mean)),
                per_judge: if panel.reports_members() {
                    names
                        .iter()
                        .zip(&per_judge)
                        .map(|(name, pj)| (name.clone(), mean_std(&pj[c]).map(|(mean, _)| mean)))
                        .collect()
                } else {
                    BTreeMap::new()
                },
                stage: None,
            }
        })
        .collect();
    let scores = skeleton
        .candidate_of
        .iter()
        .map(|&c| candidate_scores[c].clone())
        .collect();
    JudgeOutcome { scores, usage }
}
