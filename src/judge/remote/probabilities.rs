//! Pointwise and pairwise judging through a remote server's token probabilities: each prompt is
//! asked for one token at temperature 0 with `logprobs: true, top_logprobs: K`, and the verdict
//! is read from that first token's alternatives with the arithmetic the local judge uses
//! ([`crate::domain::verdict::answer_masses`]). A server that answers without `logprobs`, or
//! refuses them, is known from then on not to read probabilities: the judge says so in one line
//! (log, `/readyz`, and every request that asks it in a probability mode), and never falls back
//! to another mode.

use async_trait::async_trait;
use futures::future::join_all;

use super::{Ask, RemoteJudge};
use crate::domain::prompt::ChatMessage;
use crate::domain::verdict::answer_masses;
use crate::judge::{ChoiceProbabilities, JudgeError, JudgeFailure, ProbabilityJudge, Spent};

/// The question a judge configured for a probability mode is asked once at start, to learn
/// whether its server gives token probabilities (a few tokens, answered in one).
const CHECK: [(&str, &str); 2] = [
    ("system", "Answer with one word: yes or no."),
    ("user", "Is 2 greater than 1?"),
];

/// How many times a prompt is asked before a reply without either answer among its
/// alternatives is an invalid verdict (once more, as a listwise verdict is re-asked once).
const ASKS: usize = 2;

impl RemoteJudge {
    /// The judge's unusability in probability modes, as every caller is told it.
    pub(super) fn cannot_read_probabilities(&self, why: &str) -> JudgeError {
        let line = self.no_probabilities.get_or_init(|| {
            let line = format!(
                "judge {:?} (model {:?} at {}) cannot judge pointwise or pairwise: its server {why}; \
                 ask it listwise, or serve the model where token probabilities are returned \
                 (docs/judges.md, \"Remote judges: probability modes\")",
                self.name, self.model, self.base_url
            );
            tracing::error!(judge = %self.name, "{line}");
            line
        });
        JudgeError::UnsupportedMode(line.clone())
    }

    /// Why the judge is unusable in probability modes, once that is known.
    pub(super) fn probability_problem(&self) -> Option<&str> {
        self.no_probabilities.get().map(String::as_str)
    }

    /// One prompt's answer probabilities from the first token's `top_logprobs`.
    async fn read_one(
        &self,
        prompt: &[ChatMessage],
        choices: &[Vec<String>],
    ) -> Result<ChoiceProbabilities, JudgeFailure> {
        let mut began = String::new();
        let mut prompt_tokens = 0;
        // The reads that gave no usable answer, for a failure to report.
        let mut spent = Spent::default();
        for _ in 0..ASKS {
            let (completion, first) = self
                .call(prompt, Ask::Probabilities)
                .await
                .map_err(|f| f.after(spent))?;
            prompt_tokens += completion.prompt_tokens;
            spent.add(Spent::of(&completion));
            let Some(first) = first.filter(|f| !f.top_logprobs.is_empty()) else {
                return Err(JudgeFailure::new(
                    self.cannot_read_probabilities(
                        "answers without logprobs (or without top_logprobs)",
                    ),
                    spent,
                ));
            };
            let mut tokens: Vec<(String, f64)> = first
                .top_logprobs
                .iter()
                .map(|a| (a.token.clone(), a.logprob))
                .collect();
            // The chosen token is listed among its alternatives by every server seen so far;
            // where not, it still counts once.
            if !tokens.iter().any(|(t, _)| *t == first.token) {
                tokens.push((first.token.clone(), first.logprob));
            }
            let mass = answer_masses(&tokens, choices);
            let coverage: f64 = mass.iter().sum();
            if coverage > 0.0 && coverage.is_finite() {
                return Ok(ChoiceProbabilities {
                    shares: mass.iter().map(|m| m / coverage).collect(),
                    coverage: coverage.min(1.0),
                    prompt_tokens,
                    cached_prompt_tokens: 0,
                    forward_passes: 0,
                });
            }
            began = first.token;
        }
        let answers: Vec<&str> = choices
            .iter()
            .filter_map(|c| c.first().map(String::as_str))
            .collect();
        Err(JudgeFailure::new(
            JudgeError::InvalidOutput(format!(
                "judge {:?}: neither answer ({}) was among the {} most likely first tokens of its \
                 reply (it began {began:?}), asked {ASKS} times: no verdict",
                self.name,
                answers.join(", "),
                self.top_logprobs
            )),
            spent,
        ))
    }

    /// For a judge configured in a probability mode: whether its server gives token
    /// probabilities, asked once (a few tokens). `Err` says why not, or that it could not be
    /// asked (unreachable: it is asked again at the first verdict, as any call is retried).
    pub(super) async fn check_probabilities(&self) -> Result<(), String> {
        if !self.settings.mode.reads_probabilities() {
            return Ok(());
        }
        let prompt: Vec<ChatMessage> = CHECK
            .iter()
            .map(|(role, content)| ChatMessage {
                role: role.to_string(),
                content: content.to_string(),
            })
            .collect();
        let yes_no = vec![
            vec!["yes".to_string(), "Yes".to_string()],
            vec!["no".to_string(), "No".to_string()],
        ];
        match self.read_one(&prompt, &yes_no).await.map_err(|f| f.error) {
            Ok(_) | Err(JudgeError::InvalidOutput(_)) => Ok(()),
            Err(e @ JudgeError::UnsupportedMode(_)) => Err(e.to_string()),
            Err(e) => Err(format!(
                "judge {:?}: could not check that its server gives token probabilities: {e}",
                self.name
            )),
        }
    }
}

/// A remote judge does not explain its scores (`explain` is a local judge's setting): the
/// trait's refusal stands.
#[async_trait]
impl ProbabilityJudge for RemoteJudge {
    /// Each prompt's answer probabilities: identical prompts asked once, the others at once
    /// (each through the judge's limits and retries).
    async fn choice_probabilities(
        &self,
        prompts: Vec<Vec<ChatMessage>>,
        choices: &[Vec<String>],
    ) -> Result<Vec<ChoiceProbabilities>, JudgeFailure> {
        if let Some(line) = self.probability_problem() {
            return Err(JudgeError::UnsupportedMode(line.to_string()).into());
        }
        let mut unique: Vec<&Vec<ChatMessage>> = Vec::new();
        let mut which = Vec::with_capacity(prompts.len());
        for p in &prompts {
            let i = unique.iter().position(|u| *u == p).unwrap_or_else(|| {
                unique.push(p);
                unique.len() - 1
            });
            which.push(i);
        }
        // Every read to its end (each is bounded by the deadline), so that a failure reports
        // what its siblings spent too.
        let reads = join_all(unique.iter().map(|p| self.read_one(p, choices))).await;
        let mut spent = Spent::default();
        let mut failure: Option<JudgeFailure> = None;
        let mut read = Vec::with_capacity(reads.len());
        for r in reads {
            match r {
                Ok(c) => {
                    spent.add(Spent {
                        calls: 1,
                        prompt_tokens: c.prompt_tokens,
                        completion_tokens: 0,
                    });
                    read.push(c);
                }
                Err(f) => match &mut failure {
                    Some(first) => first.spent.add(f.spent),
                    None => failure = Some(f),
                },
            }
        }
        if let Some(f) = failure {
            return Err(f.after(spent));
        }
        let mut seen = vec![false; read.len()];
        Ok(which
            .into_iter()
            .map(|i| {
                let mut r = read[i].clone();
                // A prompt asked once is paid once.
                if std::mem::replace(&mut seen[i], true) {
                    r.prompt_tokens = 0;
                }
                r
            })
            .collect())
    }
}
