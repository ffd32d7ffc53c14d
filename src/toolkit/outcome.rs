//! A group's scoring outcome as the batch tools (`gavel diff`, `gavel eval`) record it: the
//! response, or the error type and message the daemon would have answered.

use crate::domain::error_type::ErrorType;
use crate::domain::rubric::RubricError;
use crate::score::{ScoreError, ScoreResponse};

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

/// A side's outcome for one group: the response, or the error type and message.
///
/// The type is a string: `gavel eval` adds kinds of its own (`no_component`, `null_reward`) to
/// the API's [`ErrorType`]s.
pub type GroupOutcome = Result<ScoreResponse, (String, String)>;

pub fn group_outcome(r: Result<ScoreResponse, ScoreError>) -> GroupOutcome {
    match r {
        // `on_judge_error: "null"` answers null rewards with the error: still a failure here.
        Ok(resp) => match &resp.error {
            Some(e) => Err((e.kind.to_string(), e.message.clone())),
            None => Ok(resp),
        },
        Err(e) => Err((error_type(&e).to_string(), e.to_string())),
    }
}
