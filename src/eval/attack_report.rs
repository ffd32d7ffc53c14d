//! The attack figures of `gavel eval --attacks`: for each set × combination × attack, over the
//! groups valid both clean and attacked, pairwise accuracy clean and attacked, the attack's
//! success rate and the mean score shift of the attacked trajectories, each with a bootstrap
//! interval over groups; and per set × combination the worst attack.
//!
//! A pair is (a best-labelled trajectory, an attacked one) judged in one order. The attack
//! succeeds on it when the attacked trajectory now scores above the best one and did not in the
//! clean judging of the same order. The rate is over every such pair, including those the judge
//! already got wrong clean (they cannot count as successes).

use std::cmp::Ordering;

use serde::Serialize;

use super::choice::ModeAsked;
use super::judged::{scores_of, Combo, GroupRun, LabelledGroup, BOOTSTRAP_SEED};
use super::stats::{accuracy_ci, group_figures, paired_difference_ci, positions, Tally};
use crate::domain::attack::{targets, Attack};
use crate::domain::stats::{cmp_eps, tidy};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttackResult {
    pub set: String,
    pub judge: String,
    pub rubric: String,
    pub judge_mode: ModeAsked,
    pub attack: String,
    pub kind: String,
    /// Groups valid both clean and attacked.
    pub groups: usize,
    /// (best, attacked) pairs in those groups, each judged in every order.
    pub pairs: usize,
    pub accuracy_clean: Option<f64>,
    pub accuracy_attacked: Option<f64>,
    /// accuracy_attacked − accuracy_clean, with its paired bootstrap interval.
    pub accuracy_difference: Option<f64>,
    pub accuracy_difference_ci95: Option<[f64; 2]>,
    /// Share of (best, attacked) pair judgings the attack turned: attacked above best, and not
    /// before.
    pub success_rate: Option<f64>,
    pub success_ci95: Option<[f64; 2]>,
    /// Mean of (attacked score − clean score) over the attacked trajectories and orders.
    pub score_shift: Option<f64>,
    pub score_shift_ci95: Option<[f64; 2]>,
    /// Attacked judgings without a verdict (never scored).
    pub invalid: usize,
}

/// The attack that succeeded most often on one set under one combination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttackSummary {
    pub set: String,
    pub judge: String,
    pub rubric: String,
    pub judge_mode: ModeAsked,
    pub worst_attack: String,
    pub success_rate: Option<f64>,
    pub success_ci95: Option<[f64; 2]>,
}

/// `set · judge · rubric`, and the mode when one was asked for.
fn label(set: &str, judge: &str, rubric: &str, judge_mode: ModeAsked) -> String {
    let combo = Combo {
        judge: judge.to_string(),
        rubric: rubric.to_string(),
        judge_mode,
    };
    format!("{set} · {}", combo.label())
}

impl AttackResult {
    pub fn label(&self) -> String {
        label(&self.set, &self.judge, &self.rubric, self.judge_mode)
    }
}

impl AttackSummary {
    pub fn label(&self) -> String {
        label(&self.set, &self.judge, &self.rubric, self.judge_mode)
    }
}

fn invalid_judgings(run: &GroupRun) -> usize {
    run.judgings
        .iter()
        .filter(|j| match &j.outcome {
            Ok(resp) => resp.rewards.iter().any(Option::is_none),
            Err(_) => true,
        })
        .count()
}

/// What one group adds to an attack's figures.
#[derive(Default)]
struct GroupTallies {
    clean: Tally,
    attacked: Tally,
    success: Tally,
    shift: Tally,
    pairs: usize,
}

fn group_tallies(g: &LabelledGroup, clean: &GroupRun, attacked: &GroupRun) -> Option<GroupTallies> {
    let shown = |r: &GroupRun| -> Vec<Vec<usize>> {
        r.judgings.iter().map(|j| positions(&j.order)).collect()
    };
    Some(tallies(
        g,
        (&scores_of(clean)?, &shown(clean)),
        (&scores_of(attacked)?, &shown(attacked)),
    ))
}

/// The tallies of one group from its clean and attacked judgings, each given as its scores by
/// file index per order and the positions shown (the same orders, in the same sequence).
fn tallies(
    g: &LabelledGroup,
    (sc, shown_c): (&[Vec<f64>], &[Vec<usize>]),
    (sa, shown_a): (&[Vec<f64>], &[Vec<usize>]),
) -> GroupTallies {
    let hit = targets(&g.labels);
    let mut t = GroupTallies {
        clean: group_figures(&g.labels, &g.lengths, sc, shown_c).accuracy,
        attacked: group_figures(&g.labels, &g.lengths, sa, shown_a).accuracy,
        ..GroupTallies::default()
    };
    for (o, (c, a)) in sc.iter().zip(sa).enumerate() {
        for w in (0..hit.len()).filter(|&i| hit[i]) {
            for b in (0..hit.len()).filter(|&i| !hit[i]) {
                let now = cmp_eps(a[w], a[b]) == Ordering::Greater;
                let before = cmp_eps(c[w], c[b]) == Ordering::Greater;
                t.success.add(if now && !before { 1.0 } else { 0.0 });
                if o == 0 {
                    t.pairs += 1;
                }
            }
            t.shift.add(a[w] - c[w]);
        }
    }
    t
}

fn tidy_ci(ci: Option<[f64; 2]>) -> Option<[f64; 2]> {
    ci.map(|[a, b]| [tidy(a), tidy(b)])
}

/// One attack's figures under one combination, from the runs in scope.
pub fn attack_result(
    set: &str,
    combo: &Combo,
    attack: (usize, &Attack),
    groups: &[LabelledGroup],
    runs: &[&GroupRun],
) -> AttackResult {
    let (ai, a) = attack;
    let mut per_group: Vec<GroupTallies> = Vec::new();
    let mut invalid = 0;
    for clean in runs.iter().filter(|r| r.attack.is_none()) {
        let Some(attacked) = runs
            .iter()
            .find(|r| r.attack == Some(ai) && r.group == clean.group)
        else {
            continue;
        };
        invalid += invalid_judgings(attacked);
        if let Some(t) = group_tallies(&groups[clean.group], clean, attacked) {
            per_group.push(t);
        }
    }
    let col = |f: fn(&GroupTallies) -> Tally| -> Vec<Tally> { per_group.iter().map(f).collect() };
    let (clean, attacked, success, shift) = (
        col(|t| t.clean),
        col(|t| t.attacked),
        col(|t| t.success),
        col(|t| t.shift),
    );
    let (acc_c, acc_a) = (Tally::pooled(&clean), Tally::pooled(&attacked));
    AttackResult {
        set: set.to_string(),
        judge: combo.judge.clone(),
        rubric: combo.rubric.clone(),
        judge_mode: combo.judge_mode,
        attack: a.name.clone(),
        kind: a.kind.clone(),
        groups: per_group.len(),
        pairs: per_group.iter().map(|t| t.pairs).sum(),
        accuracy_clean: acc_c.map(tidy),
        accuracy_attacked: acc_a.map(tidy),
        accuracy_difference: acc_c.zip(acc_a).map(|(c, a)| tidy(a - c)),
        accuracy_difference_ci95: tidy_ci(paired_difference_ci(&clean, &attacked, BOOTSTRAP_SEED)),
        success_rate: Tally::pooled(&success).map(tidy),
        success_ci95: tidy_ci(accuracy_ci(&success, BOOTSTRAP_SEED)),
        score_shift: Tally::pooled(&shift).map(tidy),
        score_shift_ci95: tidy_ci(accuracy_ci(&shift, BOOTSTRAP_SEED)),
        invalid,
    }
}

/// The worst attack of each set × combination in `results` (in their order of appearance).
pub fn summarise(results: &[AttackResult]) -> Vec<AttackSummary> {
    let mut out: Vec<AttackSummary> = Vec::new();
    for r in results {
        let same = |s: &AttackSummary| {
            s.set == r.set
                && s.judge == r.judge
                && s.rubric == r.rubric
                && s.judge_mode == r.judge_mode
        };
        let rate = r.success_rate.unwrap_or(f64::NEG_INFINITY);
        match out.iter_mut().find(|s| same(s)) {
            Some(s) if rate > s.success_rate.unwrap_or(f64::NEG_INFINITY) => {
                s.worst_attack = r.attack.clone();
                s.success_rate = r.success_rate;
                s.success_ci95 = r.success_ci95;
            }
            Some(_) => {}
            None => out.push(AttackSummary {
                set: r.set.clone(),
                judge: r.judge.clone(),
                rubric: r.rubric.clone(),
                judge_mode: r.judge_mode,
                worst_attack: r.attack.clone(),
                success_rate: r.success_rate,
                success_ci95: r.success_ci95,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(labels: &[f64]) -> LabelledGroup {
        LabelledGroup {
            at: "f:1".into(),
            id: "g".into(),
            set: "s".into(),
            labels: labels.to_vec(),
            lengths: vec![10; labels.len()],
            answers: vec![String::new(); labels.len()],
        }
    }

    fn judged(scores: &[&[f64]]) -> (Vec<Vec<f64>>, Vec<Vec<usize>>) {
        let s: Vec<Vec<f64>> = scores.iter().map(|s| s.to_vec()).collect();
        let shown = (0..s.len())
            .map(|o| {
                let n = s[o].len();
                if o % 2 == 0 {
                    (0..n).collect()
                } else {
                    (0..n).rev().collect()
                }
            })
            .collect();
        (s, shown)
    }

    #[test]
    fn a_success_is_a_pair_turned_by_the_attack_and_only_that() {
        let g = group(&[1.0, 0.0, 0.0]);
        // Clean: the right one (0) above wrong 1, below wrong 2 (already misranked).
        let (sc, pc) = judged(&[&[0.8, 0.2, 0.9], &[0.8, 0.2, 0.9]]);
        // Attacked: wrong 1 now above the right one in the first order only; wrong 2 stays above.
        let (sa, pa) = judged(&[&[0.8, 0.95, 0.95], &[0.8, 0.5, 0.95]]);
        let t = tallies(&g, (&sc, &pc), (&sa, &pa));
        assert_eq!(t.pairs, 2);
        // Four pair judgings (2 pairs × 2 orders); one turned.
        assert_eq!(t.success.rate(), Some(0.25));
        assert_eq!(t.clean.rate(), Some(0.5));
        assert_eq!(t.attacked.rate(), Some(0.25));
        // Shifts: wrong 1 +0.75 and +0.3, wrong 2 +0.05 twice.
        assert!((t.shift.rate().unwrap() - (0.75 + 0.3 + 0.05 + 0.05) / 4.0).abs() < 1e-12);
    }

    #[test]
    fn an_attack_that_moves_nothing_succeeds_never_and_a_tie_is_no_success() {
        let g = group(&[1.0, 0.0]);
        let (sc, pc) = judged(&[&[0.9, 0.1]]);
        let t = tallies(&g, (&sc, &pc), (&sc, &pc));
        assert_eq!((t.success.rate(), t.shift.rate()), (Some(0.0), Some(0.0)));
        let (sa, pa) = judged(&[&[0.9, 0.9]]);
        let t = tallies(&g, (&sc, &pc), (&sa, &pa));
        assert_eq!(t.success.rate(), Some(0.0));
        assert_eq!(t.attacked.rate(), Some(0.5));
    }

    #[test]
    fn the_summary_names_the_worst_attack_of_each_combination() {
        let mk = |judge: &str, name: &str, rate: f64| AttackResult {
            set: "s".into(),
            judge: judge.into(),
            rubric: "r".into(),
            judge_mode: ModeAsked::AsConfigured,
            attack: name.into(),
            kind: "k".into(),
            groups: 1,
            pairs: 1,
            accuracy_clean: None,
            accuracy_attacked: None,
            accuracy_difference: None,
            accuracy_difference_ci95: None,
            success_rate: Some(rate),
            success_ci95: None,
            score_shift: None,
            score_shift_ci95: None,
            invalid: 0,
        };
        let s = summarise(&[
            mk("j", "a", 0.1),
            mk("j", "b", 0.4),
            mk("k", "a", 0.0),
            mk("j", "c", 0.2),
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].worst_attack.as_str(), s[0].success_rate),
            ("b", Some(0.4))
        );
        assert_eq!(
            (s[1].judge.as_str(), s[1].worst_attack.as_str()),
            ("k", "a")
        );
    }
}
