//! `error.type`: what went wrong, for programs. One enum for every layer that names a failure:
//! the judge's errors, the daemon's responses and their OpenAPI document, the batch tools'
//! reports, and `gavel rescore`'s ledger, which reads it back to tell a judge failure (worth a
//! retry) from a refusal of the input. And [`RetryCause`]: why a judge call was made again.

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
    JudgeUnsupportedMode,
    JudgeTimeout,
    NotReady,
    Internal,
}

impl ErrorType {
    /// Every type, in the order the OpenAPI document lists them.
    pub const ALL: [ErrorType; 14] = [
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
        ErrorType::JudgeUnsupportedMode,
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
            ErrorType::JudgeUnsupportedMode => "judge_unsupported_mode",
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
                | ErrorType::JudgeUnsupportedMode
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

/// Why a judge call was made again, as `usage.retries` counts it and the
/// `gavel_judge_retries_total` metric labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCause {
    /// No reply within the attempt's time limit.
    Timeout,
    /// The connection failed (or the reply was not HTTP at all).
    Connection,
    Http408,
    Http409,
    Http429,
    Http5xx,
    /// The reply was not a chat completion.
    BadReply,
    /// The verdict could not be used, so the judge was asked once more, with the problem.
    Reask,
}

impl RetryCause {
    /// The cause of a retryable HTTP status (408, 409, 429, or 5xx).
    pub fn of_status(status: u16) -> RetryCause {
        match status {
            429 => RetryCause::Http429,
            408 => RetryCause::Http408,
            409 => RetryCause::Http409,
            _ => RetryCause::Http5xx,
        }
    }

    /// The name in `usage.retries` and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryCause::Timeout => "timeout",
            RetryCause::Connection => "connection",
            RetryCause::Http408 => "http_408",
            RetryCause::Http409 => "http_409",
            RetryCause::Http429 => "http_429",
            RetryCause::Http5xx => "http_5xx",
            RetryCause::BadReply => "bad_reply",
            RetryCause::Reask => "reask",
        }
    }
}

impl fmt::Display for RetryCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
                ErrorType::JudgeUnsupportedMode,
                ErrorType::JudgeTimeout
            ]
        );
    }
}
