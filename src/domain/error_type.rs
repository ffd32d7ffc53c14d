//! `error.type`: what went wrong, for programs. One enum for every layer that names a failure:
//! the judge's errors, the daemon's responses and their OpenAPI document, the batch tools'
//! reports, and `gavel rescore`'s ledger, which reads it back to tell a judge failure (worth a
//! retry) from a refusal of the input.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every `error.type` the API answers.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    InvalidRequest,
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    PayloadTooLarge,
    Overloaded,
    JudgeUnavailable,
    JudgeInvalidOutput,
    NoJudgeConfigured,
    JudgeTimeout,
    NotReady,
    Internal,
}

impl ErrorType {
    /// Every type, in the order the OpenAPI document lists them.
    pub const ALL: [ErrorType; 13] = [
        ErrorType::InvalidRequest,
        ErrorType::Unauthorized,
        ErrorType::NotFound,
        ErrorType::MethodNotAllowed,
        ErrorType::RequestTimeout,
        ErrorType::PayloadTooLarge,
        ErrorType::Overloaded,
        ErrorType::JudgeUnavailable,
        ErrorType::JudgeInvalidOutput,
        ErrorType::NoJudgeConfigured,
        ErrorType::JudgeTimeout,
        ErrorType::NotReady,
        ErrorType::Internal,
    ];

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::InvalidRequest => "invalid_request",
            ErrorType::Unauthorized => "unauthorized",
            ErrorType::NotFound => "not_found",
            ErrorType::MethodNotAllowed => "method_not_allowed",
            ErrorType::RequestTimeout => "request_timeout",
            ErrorType::PayloadTooLarge => "payload_too_large",
            ErrorType::Overloaded => "overloaded",
            ErrorType::JudgeUnavailable => "judge_unavailable",
            ErrorType::JudgeInvalidOutput => "judge_invalid_output",
            ErrorType::NoJudgeConfigured => "no_judge_configured",
            ErrorType::JudgeTimeout => "judge_timeout",
            ErrorType::NotReady => "not_ready",
            ErrorType::Internal => "internal",
        }
    }

    /// A failure of the judge, not of the input: the same request may pass later (`gavel
    /// rescore --retry` asks again for these). An overloaded judge refuses up front and is not
    /// one of them: its request was never judged.
    pub fn is_judge_failure(self) -> bool {
        matches!(
            self,
            ErrorType::JudgeUnavailable
                | ErrorType::JudgeInvalidOutput
                | ErrorType::JudgeTimeout
                | ErrorType::NoJudgeConfigured
        )
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ErrorType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown error type {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_from_str() {
        for t in ErrorType::ALL {
            let wire = serde_json::to_value(t).unwrap();
            assert_eq!(wire, serde_json::json!(t.as_str()));
            assert_eq!(serde_json::from_value::<ErrorType>(wire).unwrap(), t);
            assert_eq!(t.as_str().parse::<ErrorType>().unwrap(), t);
            assert_eq!(t.to_string(), t.as_str());
        }
        assert!("invalid_input".parse::<ErrorType>().is_err());
        let judge: Vec<_> = ErrorType::ALL
            .into_iter()
            .filter(|t| t.is_judge_failure())
            .collect();
        assert_eq!(
            judge,
            [
                ErrorType::JudgeUnavailable,
                ErrorType::JudgeInvalidOutput,
                ErrorType::NoJudgeConfigured,
                ErrorType::JudgeTimeout
            ]
        );
    }
}
