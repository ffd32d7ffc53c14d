//! The one table from error kind to HTTP status and `error.type`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::error_type::ErrorType;
use crate::domain::rubric::RubricError;
use crate::domain::trajectory::InputError;
use crate::judge::JudgeError;
use crate::score::ScoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    /// A refusal of one field of the request: the message is `path: problem`, and the error
    /// body's `param` is the path.
    #[error(transparent)]
    Input(InputError),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The client did not send its body within `body_read_timeout_s`.
    #[error("{0}")]
    RequestTimeout(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Overloaded(String),
    #[error(transparent)]
    Judge(JudgeError),
    /// `/readyz`: a dependency is down (the message names it).
    #[error("{0}")]
    NotReady(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// Status and `error.type` for every kind of error the API returns.
    pub fn status_and_type(&self) -> (StatusCode, ErrorType) {
        match self {
            ApiError::InvalidRequest(_) | ApiError::Input(_) => {
                (StatusCode::BAD_REQUEST, ErrorType::InvalidRequest)
            }
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, ErrorType::Unauthorized),
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
            }
            ApiError::RequestTimeout(_) => (StatusCode::REQUEST_TIMEOUT, ErrorType::RequestTimeout),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorType::NotFound),
            ApiError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorType::MethodNotAllowed)
            }
            ApiError::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorType::Overloaded),
            ApiError::Judge(e) => {
                let status = match e {
                    JudgeError::Unavailable(_) | JudgeError::InvalidOutput(_) => {
                        StatusCode::BAD_GATEWAY
                    }
                    JudgeError::NotConfigured(_) | JudgeError::UnsupportedMode(_) => {
                        StatusCode::SERVICE_UNAVAILABLE
                    }
                    JudgeError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                    JudgeError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
                };
                (status, e.error_type())
            }
            ApiError::NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorType::NotReady),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::Internal),
        }
    }
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> Self {
        ApiError::Input(e)
    }
}

impl From<ScoreError> for ApiError {
    fn from(e: ScoreError) -> Self {
        match e {
            ScoreError::Input(e) => ApiError::Input(e),
            // The request named no judge: naming one is the fix.
            ScoreError::NoDefaultJudge(_) => {
                ApiError::Input(InputError::new("judge", e.to_string()))
            }
            ScoreError::Rubric(RubricError::Unknown { .. } | RubricError::Invalid { .. })
            | ScoreError::UnknownJudge { .. } => ApiError::InvalidRequest(e.to_string()),
            ScoreError::PromptTooLarge { .. } => ApiError::PayloadTooLarge(e.to_string()),
            ScoreError::Judge(f) => match f.error {
                JudgeError::Overloaded(m) => ApiError::Overloaded(m),
                j => ApiError::Judge(j),
            },
            ScoreError::Rubric(RubricError::Io(..))
            | ScoreError::Prompt(_)
            | ScoreError::Store(_) => {
                tracing::error!(error = %e, "internal error while scoring");
                ApiError::Internal(e.to_string())
            }
        }
    }
}

/// Every error the API returns: `{"error": {"type", "message", "param"}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorResponse {
    #[schema(inline)]
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for programs.
    #[serde(rename = "type")]
    #[schema(inline)]
    pub kind: ErrorType,
    /// What went wrong, for people: names the field, the limit or the dependency.
    pub message: String,
    /// The request field the error is about, as a path (`rubric`, `judge[1]`,
    /// `trajectories[2].messages[5].tool_call_id`), or null when it is about no one field.
    #[schema(required = true)]
    pub param: Option<String>,
}

impl ApiError {
    /// The request field the error is about (see [`ErrorDetail::param`]).
    pub fn param(&self) -> Option<&str> {
        match self {
            ApiError::Input(e) if crate::domain::input::is_field_path(&e.path) => Some(&e.path),
            _ => None,
        }
    }

    /// This error with the number of a "too large" refusal as `body` (the request's JSON text)
    /// wrote it (see [`crate::domain::input::as_written`]).
    pub fn as_written(self, body: &[u8]) -> ApiError {
        match (self, std::str::from_utf8(body)) {
            (ApiError::Input(e), Ok(text)) => {
                ApiError::Input(crate::domain::input::as_written(e, text))
            }
            (other, _) => other,
        }
    }

    /// The response body: `{"error": {"type", "message", "param"}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(self.response_body()).expect("an error body serialises")
    }

    /// The response body, typed.
    pub fn response_body(&self) -> ErrorResponse {
        ErrorResponse {
            error: ErrorDetail {
                kind: self.status_and_type().1,
                message: self.to_string(),
                param: self.param().map(str::to_string),
            },
        }
    }

    /// The response with `body` (the error body plus details) in place of the plain one.
    pub fn respond_with(&self, body: serde_json::Value) -> Response {
        let mut resp = (self.status_and_type().0, Json(body)).into_response();
        let headers = resp.headers_mut();
        match self {
            ApiError::Overloaded(_) => {
                headers.insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from_static("1"),
                );
            }
            ApiError::Unauthorized(_) => {
                headers.insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
            }
            _ => {}
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.respond_with(self.body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::PartialSchema;

    /// Every type is answered by some error, and the document lists exactly the types.
    #[test]
    fn every_error_type_is_in_the_documented_enum() {
        let doc = serde_json::to_value(ErrorType::schema()).unwrap();
        let names: std::collections::BTreeSet<&str> = doc["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let all: std::collections::BTreeSet<&str> =
            ErrorType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(all, names);
        let m = || "m".to_string();
        let judge = |e: JudgeError| ApiError::Judge(e);
        let kinds = [
            ApiError::InvalidRequest(m()),
            ApiError::Input(InputError::new("p", m())),
            ApiError::Unauthorized(m()),
            ApiError::PayloadTooLarge(m()),
            ApiError::RequestTimeout(m()),
            ApiError::NotFound(m()),
            ApiError::MethodNotAllowed(m()),
            ApiError::Overloaded(m()),
            judge(JudgeError::Unavailable(m())),
            judge(JudgeError::InvalidOutput(m())),
            judge(JudgeError::NotConfigured(m())),
            judge(JudgeError::Timeout(m())),
            judge(JudgeError::Overloaded(m())),
            judge(JudgeError::UnsupportedMode(m())),
            ApiError::NotReady(m()),
            ApiError::Internal(m()),
        ]
        .iter()
        .map(|e| e.status_and_type().1.as_str())
        .collect::<std::collections::BTreeSet<_>>();
        assert_eq!(
            kinds, names,
            "ErrorType and ApiError::status_and_type disagree"
        );
    }

    #[test]
    fn a_field_refusal_carries_its_path_as_param() {
        let e = ApiError::from(InputError::new("judge[1]", "unknown judge \"x\""));
        let body = e.body();
        assert_eq!(body["error"]["type"], "invalid_request");
        assert_eq!(body["error"]["message"], "judge[1]: unknown judge \"x\"");
        assert_eq!(body["error"]["param"], "judge[1]");
        // Not about one field: null, present.
        let body = ApiError::Overloaded("busy".into()).body();
        assert!(body["error"]["param"].is_null());
        assert!(body["error"].as_object().unwrap().contains_key("param"));
        let body = ApiError::from(InputError::new("body", "expected an object")).body();
        assert!(body["error"]["param"].is_null());
        let body = ApiError::from(ScoreError::NoDefaultJudge("a, b".into())).body();
        assert_eq!(body["error"]["param"], "judge");
    }
}
