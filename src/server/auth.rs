//! Bearer-token auth. A presented token is hashed (SHA-256) and compared with every key's digest
//! in constant time (`subtle`), all keys checked every time, so response timing says nothing
//! about how close a guess was. Neither a presented token nor a key is ever put in a log line
//! or an error message.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use super::error::ApiError;
use crate::domain::secret::Secret;

/// The keys the daemon accepts and the paths it serves without one.
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
    open_paths: Vec<String>,
}

impl ApiKeys {
    pub fn new(keys: &[Secret], open_paths: &[String]) -> ApiKeys {
        ApiKeys {
            digests: keys.iter().map(|k| digest(k.expose())).collect(),
            open_paths: open_paths.to_vec(),
        }
    }

    /// Whether auth is on (any key configured).
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    fn is_open(&self, path: &str) -> bool {
        self.open_paths.iter().any(|p| p == path)
    }

    /// Whether `token` is one of the keys.
    fn admits(&self, token: &str) -> bool {
        let presented = digest(token);
        let mut found = Choice::from(0);
        for key in &self.digests {
            found |= key.ct_eq(&presented);
        }
        found.into()
    }
}

/// Who sent a request, as the auth layer established it (a request extension on every request
/// that reaches a handler).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A valid API key was presented; the first 8 bytes of its SHA-256, in hex, name the caller
    /// (in group keys, never in logs) without revealing the key.
    Key(String),
    /// No valid key: auth is off, or an open path was called without one.
    Anonymous,
}

impl Caller {
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Caller::Key(_))
    }

    /// A name for the caller in group keys.
    pub fn id(&self) -> &str {
        match self {
            Caller::Key(id) => id,
            Caller::Anonymous => "anonymous",
        }
    }
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme is case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Middleware: with keys configured, every path outside `open_paths` (unknown ones included, so
/// the set of routes is not disclosed) needs a valid bearer token.
pub async fn require_key(
    State(keys): State<Arc<ApiKeys>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let caller = match bearer(req.headers()) {
        Some(token) if keys.enabled() && keys.admits(token) => {
            Caller::Key(hex::encode(&digest(token)[..8]))
        }
        _ => Caller::Anonymous,
    };
    let authenticated = caller.is_authenticated();
    req.extensions_mut().insert(caller);
    if !keys.enabled() || keys.is_open(req.uri().path()) || authenticated {
        return Ok(next.run(req).await);
    }
    match bearer(req.headers()) {
        Some(_) => {
            tracing::info!("request refused: the bearer token is not a valid API key");
            Err(ApiError::Unauthorized(
                "the bearer token is not a valid API key".into(),
            ))
        }
        None => Err(ApiError::Unauthorized(
            "this route needs an API key: send `Authorization: Bearer KEY`".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_exactly_the_configured_keys() {
        let keys = ApiKeys::new(
            &[Secret::new("alpha-key"), Secret::new("beta-key")],
            &["/healthz".to_string()],
        );
        assert!(keys.enabled());
        assert!(keys.admits("alpha-key") && keys.admits("beta-key"));
        for wrong in ["", "alpha", "alpha-key ", "ALPHA-KEY", "beta-key2"] {
            assert!(!keys.admits(wrong), "{wrong:?}");
        }
        assert!(
            keys.is_open("/healthz") && !keys.is_open("/healthz/") && !keys.is_open("/v1/render")
        );
        assert!(!ApiKeys::new(&[], &[]).enabled());
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("authorization", v.parse().unwrap());
            h
        };
        assert_eq!(bearer(&with("Bearer k1")), Some("k1"));
        assert_eq!(bearer(&with("bearer   k2 ")), Some("k2"));
        assert_eq!(bearer(&with("Basic k3")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
