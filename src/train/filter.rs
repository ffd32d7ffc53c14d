//! The difficulty filter of online GRPO (`[filter]` in `train.toml`).
//!
//! A group whose rewards all tie (every completion solved the task, or none did) has zero
//! advantage and teaches nothing. Before the first step, and every `resurvey_every` steps, the
//! trainer samples `survey_samples` completions of every task with the current policy, scores them
//! with the scorer it trains with, and estimates each task's pass rate: the share of its scored
//! completions whose reward is at least `pass_threshold` (null rewards — a judge failure the
//! task let through — count neither way; a task with none scored is `unscored`). Tasks whose
//! pass rate lies in `pass_rate = [lo, hi]` (both ends included) are the ones the following
//! steps draw their prompts from; the others are set aside until the next survey. Each survey
//! writes one `"event": "survey"` line to `metrics.jsonl` with the mix; a survey that leaves no
//! task inside the band stops training: with an error before the first step, at that step with a
//! checkpoint after it. This file holds the settings, the state and the rule; the survey that
//! samples and scores is [`super::survey`]. (The keys were `probe_samples` and `reprobe_every`
//! before "probe" meant only the daemon's health checks; those names are still read.)

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::TrainError;
use crate::domain::rng::Rng;

/// `[filter]`: which tasks online GRPO samples from, by their pass rate under the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// Keep tasks whose pass rate is in `[lo, hi]` (inclusive, within `[0, 1]`).
    pub pass_rate: [f64; 2],
    /// Completions sampled per task to estimate its pass rate (>= 2).
    #[serde(alias = "probe_samples")]
    pub survey_samples: usize,
    /// Survey again every N optimizer steps (0 = only before the first step).
    #[serde(alias = "reprobe_every")]
    pub resurvey_every: u64,
    /// A completion passes when its reward is at least this. 1.0 (the default) is full credit:
    /// a verifier's 0/1, or every weighted verifier right; with a judge in the reward, set the
    /// score that counts as solved (e.g. 0.5).
    pub pass_threshold: f64,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            pass_rate: [0.1, 0.9],
            survey_samples: 8,
            resurvey_every: 0,
            pass_threshold: 1.0,
        }
    }
}

impl FilterConfig {
    /// Checks the band, the sample count and the threshold; each message names its key.
    pub fn validate(&self) -> Result<(), String> {
        let [lo, hi] = self.pass_rate;
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        if !(unit(lo) && unit(hi) && lo <= hi) {
            return Err(format!(
                "filter.pass_rate: [{lo}, {hi}]: expected [lo, hi] with 0 <= lo <= hi <= 1"
            ));
        }
        if self.survey_samples < 2 {
            return Err(format!(
                "filter.survey_samples: {}: must be >= 2 (a pass rate from one sample is 0 or 1)",
                self.survey_samples
            ));
        }
        if !self.pass_threshold.is_finite() {
            return Err(format!(
                "filter.pass_threshold: {}: must be a finite number",
                self.pass_threshold
            ));
        }
        Ok(())
    }
}

/// Where a task's pass rate falls against the band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Band {
    /// Below `lo`: (almost) never solved.
    Below,
    /// In `[lo, hi]`: kept.
    Inside,
    /// Above `hi`: (almost) always solved.
    Above,
    /// No completion got a reward (all null).
    Unscored,
}

/// The share of scored completions with a reward >= `threshold`; `None` when none is scored.
pub fn pass_rate(rewards: &[Option<f64>], threshold: f64) -> Option<f64> {
    let scored: Vec<f64> = rewards.iter().flatten().copied().collect();
    if scored.is_empty() {
        return None;
    }
    let passed = scored.iter().filter(|&&r| r >= threshold).count();
    Some(passed as f64 / scored.len() as f64)
}

/// Classifies a pass rate against `[lo, hi]` (both ends inside).
pub fn classify(rate: Option<f64>, [lo, hi]: [f64; 2]) -> Band {
    match rate {
        None => Band::Unscored,
        Some(r) if r < lo => Band::Below,
        Some(r) if r > hi => Band::Above,
        Some(_) => Band::Inside,
    }
}

/// What one survey found (one `"event": "survey"` line of `metrics.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SurveyReport {
    pub event: &'static str,
    /// Optimizer steps done when the survey ran (0: before the first).
    pub step: u64,
    pub tasks: usize,
    pub below: usize,
    pub inside: usize,
    pub above: usize,
    pub unscored: usize,
    pub pass_rate: [f64; 2],
    pub survey_samples: usize,
    /// Completion tokens sampled by the survey.
    pub survey_tokens: usize,
    /// Mean pass rate over the scored tasks.
    pub pass_rate_mean: f64,
    pub seconds: f64,
    /// Each task's band, in file order.
    #[serde(skip)]
    pub bands: Vec<Band>,
    /// Each task's pass rate, in file order (`None`: unscored).
    #[serde(skip)]
    pub task_pass_rates: Vec<Option<f64>>,
}

impl SurveyReport {
    /// The progress line's account of the survey.
    pub fn summary(&self) -> String {
        format!(
            "survey at step {}: {} of {} tasks in pass rate [{}, {}] ({} below, {} above, {} unscored; {} tokens)",
            self.step,
            self.inside,
            self.tasks,
            self.pass_rate[0],
            self.pass_rate[1],
            self.below,
            self.above,
            self.unscored,
            self.survey_tokens
        )
    }
}

/// Which tasks the steps draw from (saved with a checkpoint, so a resumed run draws like a
/// straight one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FilterState {
    /// Indices of the tasks inside the band; `None`: no survey yet (all tasks).
    pub active: Option<Vec<usize>>,
    /// The step of the last survey (`probed_at` in checkpoints written before the rename).
    #[serde(alias = "probed_at")]
    pub surveyed_at: Option<u64>,
}

/// The checkpoint file holding [`FilterState`].
pub const FILTER_STATE_FILE: &str = "filter_state.json";

impl FilterState {
    /// A task index for the next group: uniform over the kept tasks (over all when unfiltered).
    pub fn pick(&self, n_tasks: usize, rng: &mut Rng) -> usize {
        match &self.active {
            Some(a) => a[rng.below(a.len())],
            None => rng.below(n_tasks),
        }
    }

    /// The progress line's note: how many tasks the steps draw from (empty when unfiltered).
    pub fn progress(&self) -> String {
        match &self.active {
            Some(a) => format!(" tasks {} in band", a.len()),
            None => String::new(),
        }
    }

    /// Whether a survey is due before the step after `step`.
    pub fn due(&self, cfg: &FilterConfig, step: u64) -> bool {
        match self.surveyed_at {
            None => true,
            Some(at) => {
                cfg.resurvey_every > 0 && step.is_multiple_of(cfg.resurvey_every) && at != step
            }
        }
    }

    pub fn save(&self, dir: &Path) -> Result<(), TrainError> {
        let path = dir.join(FILTER_STATE_FILE);
        std::fs::write(&path, serde_json::to_string(self).expect("json"))
            .map_err(TrainError::file(&path))
    }

    /// The state saved in `dir`, or a fresh one (survey again) when the checkpoint has none.
    pub fn load(dir: &Path) -> Result<FilterState, TrainError> {
        let path = dir.join(FILTER_STATE_FILE);
        if !path.is_file() {
            return Ok(FilterState::default());
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| TrainError::checkpoint_file(&path, e))?;
        serde_json::from_str(&text).map_err(|e| TrainError::checkpoint_file(&path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_rate_counts_scored_completions_at_the_threshold() {
        let r = [Some(1.0), Some(0.0), None, Some(0.5), Some(1.0)];
        assert_eq!(pass_rate(&r, 1.0), Some(0.5));
        assert_eq!(pass_rate(&r, 0.5), Some(0.75));
        assert_eq!(pass_rate(&r, 0.0), Some(1.0));
        assert_eq!(pass_rate(&[None, None], 1.0), None);
        assert_eq!(pass_rate(&[], 1.0), None);
    }

    #[test]
    fn classify_keeps_the_closed_band() {
        let band = [0.1, 0.9];
        assert_eq!(classify(Some(0.0), band), Band::Below);
        assert_eq!(classify(Some(0.05), band), Band::Below);
        // Both ends are inside: 1 of 10 and 9 of 10 are kept.
        assert_eq!(classify(Some(1.0 / 10.0), band), Band::Inside);
        assert_eq!(classify(Some(0.5), band), Band::Inside);
        assert_eq!(classify(Some(9.0 / 10.0), band), Band::Inside);
        assert_eq!(classify(Some(0.95), band), Band::Above);
        assert_eq!(classify(Some(1.0), band), Band::Above);
        assert_eq!(classify(None, band), Band::Unscored);
        // The full band keeps every scored task.
        for r in [0.0, 0.3, 1.0] {
            assert_eq!(classify(Some(r), [0.0, 1.0]), Band::Inside);
        }
        // With 8 samples, the default band keeps 1..=7 passes.
        let kept: Vec<usize> = (0..=8)
            .filter(|&p| classify(Some(p as f64 / 8.0), band) == Band::Inside)
            .collect();
        assert_eq!(kept, (1..=7).collect::<Vec<_>>());
    }

    #[test]
    fn bad_settings_name_their_key() {
        assert!(FilterConfig::default().validate().is_ok());
        for (c, want) in [
            (
                FilterConfig {
                    pass_rate: [0.9, 0.1],
                    ..FilterConfig::default()
                },
                "filter.pass_rate",
            ),
            (
                FilterConfig {
                    pass_rate: [-0.1, 0.5],
                    ..FilterConfig::default()
                },
                "filter.pass_rate",
            ),
            (
                FilterConfig {
                    pass_rate: [0.1, 1.5],
                    ..FilterConfig::default()
                },
                "filter.pass_rate",
            ),
            (
                FilterConfig {
                    pass_rate: [f64::NAN, 0.5],
                    ..FilterConfig::default()
                },
                "filter.pass_rate",
            ),
            (
                FilterConfig {
                    survey_samples: 1,
                    ..FilterConfig::default()
                },
                "filter.survey_samples",
            ),
            (
                FilterConfig {
                    pass_threshold: f64::INFINITY,
                    ..FilterConfig::default()
                },
                "filter.pass_threshold",
            ),
        ] {
            let e = c.validate().unwrap_err();
            assert!(e.starts_with(want), "{e}");
        }
    }

    #[test]
    fn the_filter_table_parses_with_defaults_and_is_checked() {
        use crate::train::config::TrainConfig;
        let base = "model = \"m\"\ntasks = \"t.jsonl\"\n";
        let c: TrainConfig = toml::from_str(base).unwrap();
        assert_eq!(c.filter, None, "off unless [filter] is given");
        let c: TrainConfig =
            toml::from_str(&format!("{base}[filter]\nresurvey_every = 5\n")).unwrap();
        let f = c.filter.clone().unwrap();
        assert_eq!((f.pass_rate, f.survey_samples), ([0.1, 0.9], 8));
        assert_eq!((f.resurvey_every, f.pass_threshold), (5, 1.0));
        c.validate().unwrap();
        // The keys' names before the rename are still read.
        let old: TrainConfig = toml::from_str(&format!(
            "{base}[filter]\nprobe_samples = 4\nreprobe_every = 5\n"
        ))
        .unwrap();
        let f = old.filter.unwrap();
        assert_eq!((f.survey_samples, f.resurvey_every), (4, 5));
        let bad: TrainConfig =
            toml::from_str(&format!("{base}[filter]\npass_rate = [0.8, 0.2]\n")).unwrap();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.starts_with("filter.pass_rate: [0.8, 0.2]"), "{e}");
        let e = toml::from_str::<TrainConfig>(&format!("{base}[filter]\nprobes = 4\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `probes`"), "{e}");
        let offline = TrainConfig {
            tasks: None,
            offline: Some("s.jsonl".into()),
            ..c
        };
        let e = offline.validate().unwrap_err().to_string();
        assert!(e.starts_with("filter: set with `offline`"), "{e}");
    }

    #[test]
    fn surveys_are_due_first_then_every_n_steps() {
        let cfg = FilterConfig {
            resurvey_every: 3,
            ..FilterConfig::default()
        };
        let mut s = FilterState::default();
        assert!(s.due(&cfg, 0));
        assert!(
            s.due(&cfg, 5),
            "a resumed run without a saved state surveys"
        );
        s.surveyed_at = Some(0);
        let due: Vec<u64> = (0..10).filter(|&t| s.due(&cfg, t)).collect();
        assert_eq!(due, vec![3, 6, 9]);
        let never = FilterConfig::default();
        assert!(!(1..10).any(|t| s.due(&never, t)));
        // Draws come only from the kept tasks.
        s.active = Some(vec![2, 5]);
        let mut rng = Rng::new(1);
        let picks: std::collections::BTreeSet<usize> =
            (0..50).map(|_| s.pick(10, &mut rng)).collect();
        assert_eq!(picks, [2, 5].into_iter().collect());
    }
}
