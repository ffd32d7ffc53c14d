//! Where rewards come from: the gavel scoring pipeline in-process (the same rubric files,
//! verdict cache and judges as the daemon) or a running daemon over HTTP (`--scorer-url`).

use std::sync::Arc;

use serde_json::Value;

use super::TrainError;
use crate::domain::trajectory::InputError;
use crate::score::{ScoreError, ScoreRequest, Scorer};

/// Rewards and advantages of one group (`None`: no reward, e.g. the judge failed and the task
/// asked for `on_judge_error: "null"`).
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub rewards: Vec<Option<f64>>,
    pub advantages: Vec<f64>,
}

impl Scored {
    /// The same rewards and advantages, each pair moved to a completion drawn by `rng` (a
    /// uniform permutation): the shuffled-reward control.
    pub fn shuffled(mut self, rng: &mut crate::domain::rng::Rng) -> Scored {
        let mut order: Vec<usize> = (0..self.rewards.len()).collect();
        rng.shuffle(&mut order);
        self.rewards = order.iter().map(|&i| self.rewards[i]).collect();
        if self.advantages.len() == order.len() {
            self.advantages = order.iter().map(|&i| self.advantages[i]).collect();
        }
        self
    }
}

/// Why a group got no rewards.
#[derive(Debug, thiserror::Error)]
pub enum ScoreFailure {
    /// The task's request was refused before scoring (in-process).
    #[error(transparent)]
    Request(#[from] InputError),
    /// The in-process scorer failed.
    #[error(transparent)]
    Scorer(#[from] ScoreError),
    /// The daemon could not be reached, or did not answer JSON.
    #[error("{endpoint}: {source}")]
    Http {
        endpoint: String,
        source: reqwest::Error,
    },
    /// The daemon refused the group: its typed error.
    #[error("{endpoint}: {status} {kind}: {message}")]
    Refused {
        endpoint: String,
        status: reqwest::StatusCode,
        kind: String,
        message: String,
    },
    /// The daemon's answer lacks a field the trainer reads.
    #[error("{endpoint}: {field}: {source}")]
    Response {
        endpoint: String,
        field: &'static str,
        source: serde_json::Error,
    },
    /// A teacher judge left a trajectory without a score.
    #[error("teacher {teacher:?} gave no score to a trajectory")]
    NoTeacherScore { teacher: String },
}

impl ScoreFailure {
    /// This failure as the trainer's error, at `at` (a task's `FILE:LINE`), if known.
    pub fn at(self, at: Option<&str>) -> TrainError {
        TrainError::Score {
            at: at.map(str::to_string),
            source: self,
        }
    }
}

/// A scorer the trainer calls once per group.
pub enum Rewarder {
    InProcess(Arc<Scorer>),
    Http {
        /// The daemon's base URL (`http://127.0.0.1:8080`).
        url: String,
        client: reqwest::Client,
    },
}

impl Rewarder {
    pub fn http(url: &str) -> Rewarder {
        Rewarder::Http {
            url: url.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
        }
    }

    /// Scores one group given as a request body.
    pub async fn score(&self, body: &Value) -> Result<Scored, ScoreFailure> {
        match self {
            Rewarder::InProcess(scorer) => {
                let req = ScoreRequest::from_json(body, usize::MAX)?;
                let r = scorer.score_group(&req).await?;
                Ok(Scored {
                    rewards: r.rewards,
                    advantages: r.advantages,
                })
            }
            Rewarder::Http { url, client } => {
                let endpoint = format!("{url}/v1/score_group");
                let http = |source| ScoreFailure::Http {
                    endpoint: endpoint.clone(),
                    source,
                };
                let resp = client
                    .post(&endpoint)
                    .json(body)
                    .send()
                    .await
                    .map_err(http)?;
                let status = resp.status();
                let v: Value = resp.json().await.map_err(http)?;
                if !status.is_success() {
                    let text = |k: &str, or: &str| v["error"][k].as_str().unwrap_or(or).to_string();
                    return Err(ScoreFailure::Refused {
                        endpoint,
                        status,
                        kind: text("type", "error"),
                        message: text("message", "no message"),
                    });
                }
                let field = |field: &'static str| {
                    let endpoint = endpoint.clone();
                    move |source| ScoreFailure::Response {
                        endpoint,
                        field,
                        source,
                    }
                };
                let rewards: Vec<Option<f64>> =
                    serde_json::from_value(v["rewards"].clone()).map_err(field("rewards"))?;
                let advantages: Vec<f64> =
                    serde_json::from_value(v["advantages"].clone()).map_err(field("advantages"))?;
                Ok(Scored {
                    rewards,
                    advantages,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::rng::Rng;

    #[test]
    fn shuffled_rewards_keep_their_advantages_and_are_a_seeded_permutation() {
        let scored = Scored {
            rewards: vec![Some(0.1), Some(0.9), None, Some(0.5), Some(0.7), Some(0.3)],
            advantages: vec![-1.0, 1.5, 0.0, 0.2, 0.8, -0.6],
        };
        let pairs = |s: &Scored| -> Vec<String> {
            let mut v: Vec<String> = s
                .rewards
                .iter()
                .zip(&s.advantages)
                .map(|(r, a)| format!("{r:?}/{a}"))
                .collect();
            v.sort();
            v
        };
        let a = scored.clone().shuffled(&mut Rng::new(7));
        // The same (reward, advantage) pairs, moved.
        assert_eq!(pairs(&a), pairs(&scored));
        assert_ne!(a.rewards, scored.rewards);
        // Seeded: the same seed, the same order; another seed, another.
        assert_eq!(a, scored.clone().shuffled(&mut Rng::new(7)));
        assert_ne!(a, scored.clone().shuffled(&mut Rng::new(8)));
    }
}
