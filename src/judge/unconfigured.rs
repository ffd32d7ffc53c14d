//! A configured judge that cannot run (for example, a remote judge without its API key): the
//! daemon still starts, says what is missing, and every call fails with
//! [`JudgeError::NotConfigured`] and that message.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::settings::DEFAULT_PAIRWISE_OPPONENTS;
use super::{
    ChoiceProbabilities, Completion, Judge, JudgeError, JudgeFailure, JudgeInfo, JudgeSettings,
    Prices, ProbabilityJudge, StructuredOutput,
};
use crate::domain::prompt::{ChatMessage, JudgeMode};

#[derive(Debug)]
pub struct UnconfiguredJudge {
    /// What is missing (`unconfigured`), as every call's error says it. It makes no call, so
    /// no budget here is ever spent.
    settings: JudgeSettings,
    /// Its config's `structured_output`, so `gavel render` shows the prompt it would send.
    structured_output: StructuredOutput,
}

impl UnconfiguredJudge {
    /// The judge `info` names, which cannot run for `reason`.
    pub fn new(info: JudgeInfo, reason: String, structured_output: StructuredOutput) -> Self {
        UnconfiguredJudge {
            settings: JudgeSettings {
                max_tokens: 0,
                deadline: Duration::from_secs(1),
                max_reference_bytes: 0,
                context_tokens: None,
                pairwise_opponents: DEFAULT_PAIRWISE_OPPONENTS,
                explains: false,
                unconfigured: Some(reason),
                info,
                adapter: None,
                prices: Prices::default(),
                mode: JudgeMode::Listwise,
            },
            structured_output,
        }
    }

    /// Why it cannot run.
    pub fn reason(&self) -> &str {
        self.settings.unconfigured.as_deref().unwrap_or_default()
    }

    fn refuse<T>(&self) -> Result<T, JudgeError> {
        Err(JudgeError::NotConfigured(self.reason().to_string()))
    }
}

#[async_trait]
impl Judge for UnconfiguredJudge {
    fn identity(&self) -> Value {
        let JudgeInfo { name, model } = &self.settings.info;
        json!({"backend": "unconfigured", "name": name, "model": model})
    }

    fn settings(&self) -> &JudgeSettings {
        &self.settings
    }

    fn structured_output(&self) -> StructuredOutput {
        self.structured_output.first()
    }

    async fn probe(&self) -> Result<(), String> {
        Err(self.reason().to_string())
    }

    async fn complete(
        &self,
        _messages: &[ChatMessage],
        _schema: &Value,
    ) -> Result<Completion, JudgeFailure> {
        Ok(self.refuse()?)
    }

    async fn answer(&self, _messages: &[ChatMessage]) -> Result<Completion, JudgeFailure> {
        Ok(self.refuse()?)
    }

    /// Offered, so that a request in a probability mode is refused for what is missing (the
    /// judge's key or model), as every other call is, not for a mode the judge cannot read.
    fn probabilities(&self) -> Option<&dyn ProbabilityJudge> {
        Some(self)
    }
}

#[async_trait]
impl ProbabilityJudge for UnconfiguredJudge {
    async fn choice_probabilities(
        &self,
        _prompts: Vec<Vec<ChatMessage>>,
        _choices: &[Vec<String>],
    ) -> Result<Vec<ChoiceProbabilities>, JudgeFailure> {
        Ok(self.refuse()?)
    }

    async fn explain(
        &self,
        _prompts: Vec<Vec<ChatMessage>>,
    ) -> Result<Vec<Completion>, JudgeError> {
        self.refuse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a probability mode, an unconfigured judge is refused for what it lacks, as in any
    /// other mode: it offers probabilities, and reading them says what is missing.
    #[tokio::test]
    async fn probability_modes_are_refused_for_what_is_missing() {
        let info = JudgeInfo {
            name: "j".into(),
            model: "m".into(),
        };
        let judge = UnconfiguredJudge::new(
            info,
            "judge \"j\" has no API key".into(),
            StructuredOutput::Off,
        );
        assert_eq!(judge.settings().mode, JudgeMode::Listwise);
        let reader = judge.probabilities().expect("offered");
        let missing = JudgeError::NotConfigured(judge.reason().to_string());
        assert_eq!(
            reader.choice_probabilities(Vec::new(), &[]).await,
            Err(missing.clone().into())
        );
        assert_eq!(reader.explain(Vec::new()).await, Err(missing));
    }
}
