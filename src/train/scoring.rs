//! Where rewards come from: the gavel scoring pipeline in-process (the same rubric files,
//! verdict cache and judges as the daemon) or a running daemon over HTTP (`--scorer-url`).

use std::sync::Arc;

use serde_json::Value;

use super::TrainError;
use crate::score::{ScoreRequest, Scorer};

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
    pub async fn score(&self, body: &Value) -> Result<Scored, TrainError> {
        match self {
            Rewarder::InProcess(scorer) => {
                let req = ScoreRequest::from_json(body, usize::MAX)
                    .map_err(|e| TrainError::Score(e.to_string()))?;
                let r = scorer
                    .score_group(&req)
                    .await
                    .map_err(|e| TrainError::Score(e.to_string()))?;
                Ok(Scored {
                    rewards: r.rewards,
                    advantages: r.advantages,
                })
            }
            Rewarder::Http { url, client } => {
                let endpoint = format!("{url}/v1/score_group");
                let resp = client
                    .post(&endpoint)
                    .json(body)
                    .send()
                    .await
                    .map_err(|e| TrainError::Score(format!("{endpoint}: {e}")))?;
                let status = resp.status();
                let v: Value = resp
                    .json()
                    .await
                    .map_err(|e| TrainError::Score(format!("{endpoint}: bad response: {e}")))?;
                if !status.is_success() {
                    let msg = v["error"]["message"].as_str().unwrap_or("no message");
                    let kind = v["error"]["type"].as_str().unwrap_or("error");
                    return Err(TrainError::Score(format!(
                        "{endpoint}: {status} {kind}: {msg}"
                    )));
                }
                let rewards: Vec<Option<f64>> = serde_json::from_value(v["rewards"].clone())
                    .map_err(|e| TrainError::Score(format!("{endpoint}: rewards: {e}")))?;
                let advantages: Vec<f64> = serde_json::from_value(v["advantages"].clone())
                    .map_err(|e| TrainError::Score(format!("{endpoint}: advantages: {e}")))?;
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
