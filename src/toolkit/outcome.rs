//! A group's scoring outcome as the batch tools (`gavel diff`, `gavel eval`) record it: the
//! response, or the error type and message the daemon would have answered.

use crate::domain::error_type::ErrorType;
use crate::domain::rubric::RubricError;
use crate::score::{ScoreError, ScoreResponse, Usage};

/// The `error.type` of a scoring failure (as the daemon would answer it).
fn error_type(e: &ScoreError) -> ErrorType {
    match e {
        ScoreError::Judge(j) => j.error_type(),
        ScoreError::Input(_)
        | ScoreError::Rubric(RubricError::Unknown { .. } | RubricError::Invalid { .. })
        | ScoreError::UnknownJudge { .. }
        | ScoreError::NoDefaultJudge(_) => ErrorType::InvalidRequest,
        ScoreError::PromptTooLarge { .. } => ErrorType::PayloadTooLarge,
        ScoreError::Rubric(RubricError::Io(..)) | ScoreError::Prompt(_) | ScoreError::Store(_) => {
            ErrorType::Internal
        }
    }
}

/// A side's outcome for one group: the response, or how it failed.
pub type GroupOutcome = Result<ScoreResponse, FailedGroup>;

/// A group that got no rewards.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedGroup {
    /// The `error.type` the daemon would answer; a string, as `gavel eval` adds kinds of its
    /// own (`no_component`, `null_reward`) to the API's [`ErrorType`]s.
    pub kind: String,
    pub message: String,
    /// What the judge spent on it before it failed (as failed calls and tokens); boxed, as
    /// outcomes are kept by the thousand and mostly succeed.
    pub usage: Box<Usage>,
}

impl FailedGroup {
    /// A failure of gavel's own making after scoring (the response is dropped, its spending
    /// kept as it was).
    pub fn new(kind: impl Into<String>, message: impl Into<String>, usage: Usage) -> Self {
        FailedGroup {
            kind: kind.into(),
            message: message.into(),
            usage: Box::new(usage),
        }
    }
}

pub fn group_outcome(r: Result<ScoreResponse, ScoreError>) -> GroupOutcome {
    match r {
        // `on_judge_error: "null"` answers null rewards with the error: still a failure here.
        Ok(resp) => match &resp.error {
            Some(e) => Err(FailedGroup::new(
                e.kind.to_string(),
                e.message.clone(),
                resp.usage.clone(),
            )),
            None => Ok(resp),
        },
        Err(e) => Err(FailedGroup::new(
            error_type(&e).to_string(),
            e.to_string(),
            Usage::failed(e.spent()),
        )),
    }
}
