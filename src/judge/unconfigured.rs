//! A configured judge that cannot run (for example, a remote judge without its API key): the
//! daemon still starts, says what is missing, and every call fails with
//! [`JudgeError::NotConfigured`] and that message.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{ChoiceProbabilities, Completion, Judge, JudgeError, JudgeInfo, StructuredOutput};
use crate::domain::prompt::ChatMessage;

#[derive(Debug)]
pub struct UnconfiguredJudge {
    pub name: String,
    pub model: String,
    /// What is missing, as every call's error says it.
    pub reason: String,
    /// Its config's `structured_output`, so `gavel render` shows the prompt it would send.
    pub structured_output: StructuredOutput,
}

impl UnconfiguredJudge {
    fn refuse<T>(&self) -> Result<T, JudgeError> {
        Err(JudgeError::NotConfigured(self.reason.clone()))
    }
}

#[async_trait]
impl Judge for UnconfiguredJudge {
    fn info(&self) -> JudgeInfo {
        JudgeInfo {
            name: self.name.clone(),
            model: self.model.clone(),
        }
    }

    fn identity(&self) -> Value {
        json!({"backend": "unconfigured", "name": self.name, "model": self.model})
    }

    fn max_tokens(&self) -> u32 {
        0
    }

    fn deadline(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn structured_output(&self) -> StructuredOutput {
        self.structured_output.first()
    }

    fn unconfigured_reason(&self) -> Option<&str> {
        Some(&self.reason)
    }

    async fn probe(&self) -> Result<(), String> {
        Err(self.reason.clone())
    }

    async fn complete(
        &self,
        _messages: &[ChatMessage],
        _schema: &Value,
    ) -> Result<Completion, JudgeError> {
        self.refuse()
    }

    async fn answer(&self, _messages: &[ChatMessage]) -> Result<Completion, JudgeError> {
        self.refuse()
    }

    fn max_reference_bytes(&self) -> usize {
        0
    }

    async fn explain(
        &self,
        _prompts: Vec<Vec<ChatMessage>>,
    ) -> Result<Vec<Completion>, JudgeError> {
        self.refuse()
    }

    async fn choice_probabilities(
        &self,
        _prompts: Vec<Vec<ChatMessage>>,
        _choices: &[Vec<String>],
    ) -> Result<Vec<ChoiceProbabilities>, JudgeError> {
        self.refuse()
    }
}
