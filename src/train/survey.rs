//! The difficulty filter's survey: samples every task with the current policy, scores the
//! groups, and narrows the tasks the next steps draw from ([`super::filter`] has the settings,
//! the state and the rule). Apart from the filter so that `filter` (a `train.toml` section)
//! does not import the trainer that imports the config.

use std::time::Instant;

use super::filter::{classify, pass_rate, Band, FilterState, SurveyReport};
use super::trainer::{Source, Trainer};
use super::TrainError;

impl Trainer {
    /// Surveys the tasks if the filter is on and a survey is due at this step, and narrows the
    /// tasks the next steps draw from. No task inside the band is an error before the first step
    /// (nothing would be trained); at a later survey the report says so (`inside == 0`) and
    /// [`Trainer::run`] ends the run there, with a checkpoint: the policy has outgrown (or
    /// collapsed out of) every task, and further steps would sample groups that all tie.
    pub fn survey_if_due(&mut self) -> Result<Option<SurveyReport>, TrainError> {
        let Some(fcfg) = self.cfg.filter.clone() else {
            return Ok(None);
        };
        if !self.filter.due(&fcfg, self.step) {
            return Ok(None);
        }
        if !matches!(self.source, Source::Online { .. }) {
            return Ok(None);
        }
        let started = Instant::now();
        let k = fcfg.survey_samples;
        let groups = self.sample_tasks(k)?;
        let survey_tokens = groups.iter().map(|g| g.tokens).sum();
        let rates: Vec<Option<f64>> = groups
            .iter()
            .map(|g| pass_rate(&g.scored.rewards, fcfg.pass_threshold))
            .collect();
        let bands: Vec<Band> = rates.iter().map(|&r| classify(r, fcfg.pass_rate)).collect();
        let tasks = groups.len();
        let count = |b: Band| bands.iter().filter(|&&x| x == b).count();
        let report = SurveyReport {
            event: "survey",
            step: self.step,
            tasks,
            below: count(Band::Below),
            inside: count(Band::Inside),
            above: count(Band::Above),
            unscored: count(Band::Unscored),
            pass_rate: fcfg.pass_rate,
            survey_samples: k,
            survey_tokens,
            pass_rate_mean: rates.iter().flatten().sum::<f64>()
                / rates.iter().flatten().count().max(1) as f64,
            seconds: started.elapsed().as_secs_f64(),
            bands,
            task_pass_rates: rates,
        };
        if report.inside == 0 && self.step == 0 {
            return Err(TrainError::Input(format!(
                "difficulty filter: no task inside filter.pass_rate [{}, {}] at step {} \
                 ({} tasks: {} below, {} above, {} unscored; pass = reward >= \
                 filter.pass_threshold {}): nothing to train on — widen the band or change the tasks",
                fcfg.pass_rate[0],
                fcfg.pass_rate[1],
                self.step,
                report.tasks,
                report.below,
                report.above,
                report.unscored,
                fcfg.pass_threshold
            )));
        }
        if report.inside == 0 {
            // The run ends at this step; the kept tasks stay as they were, so a checkpoint
            // resumed from here surveys again rather than drawing from nothing.
            return Ok(Some(report));
        }
        self.filter = FilterState {
            active: Some(
                (0..report.bands.len())
                    .filter(|&i| report.bands[i] == Band::Inside)
                    .collect(),
            ),
            surveyed_at: Some(self.step),
        };
        Ok(Some(report))
    }
}
