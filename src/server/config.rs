//! `[server]`: the daemon's address, limits, timeouts and API keys. The server owns its section;
//! `crate::config` composes it and resolves the keys from file and environment.

use std::path::PathBuf;

use serde::Deserialize;

use crate::domain::seconds::check_seconds;
use crate::domain::secret::Secret;

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub addr: String,
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// Most trajectories in one group (at most 64).
    pub max_group_size: usize,
    /// Limit on one HTTP request, seconds; past it the daemon answers 504 `judge_timeout`.
    pub request_timeout_s: f64,
    /// Scoring requests handled at once; beyond it the daemon answers 429 `overloaded` at once.
    pub max_in_flight: usize,
    /// File of API keys, one a line (blank lines and `#` comments skipped). With keys from it or
    /// from `GAVEL_API_KEYS` (comma-separated), every route outside `open_paths` needs
    /// `Authorization: Bearer KEY`.
    pub api_keys_file: Option<PathBuf>,
    /// Routes served without a key when keys are set (default: the probes and `/metrics`, so
    /// kubelet and Prometheus need no secret).
    pub open_paths: Vec<String>,
    /// How long `/readyz` reuses a judge reachability probe, seconds (kubelet probes every few
    /// seconds per pod; judges should not see that traffic).
    pub ready_cache_s: f64,
    /// Serve without API keys on an address other than loopback. Off by default: without
    /// keys on a reachable address anyone could spend the judges' budget, so the daemon refuses
    /// to start unless this says that is meant (e.g. behind an authenticating proxy).
    pub allow_unauthenticated: bool,
    /// How long a client may take to send a request's headers, seconds; a connection that is
    /// slower is closed (slow-header clients would otherwise hold connections for ever).
    pub header_read_timeout_s: f64,
    /// How long a client may take to send a request's body once admitted, seconds; past it the
    /// request gets 408 `request_timeout`.
    pub body_read_timeout_s: f64,
    /// Largest rendered judge prompt of one judge call, bytes; a group whose prompt is larger
    /// gets 413 `payload_too_large` before any judge is asked.
    pub max_prompt_bytes: usize,
    /// The API keys, resolved from `api_keys_file` and `GAVEL_API_KEYS` at load time.
    #[serde(skip)]
    pub api_keys: Vec<Secret>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: "127.0.0.1:8080".into(),
            max_body_bytes: 16 * 1024 * 1024,
            max_group_size: crate::domain::trajectory::MAX_GROUP_SIZE,
            request_timeout_s: 900.0,
            max_in_flight: 256,
            api_keys_file: None,
            open_paths: ["/healthz", "/readyz", "/metrics"]
                .map(String::from)
                .to_vec(),
            ready_cache_s: 5.0,
            allow_unauthenticated: false,
            header_read_timeout_s: 10.0,
            body_read_timeout_s: 30.0,
            max_prompt_bytes: 2 * 1024 * 1024,
            api_keys: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Checks the section; the error completes "[server] ...".
    pub fn validate(&self) -> Result<(), String> {
        if self.max_group_size == 0
            || self.max_group_size > crate::domain::trajectory::MAX_GROUP_SIZE
        {
            return Err(format!(
                "max_group_size must be 1..={}",
                crate::domain::trajectory::MAX_GROUP_SIZE
            ));
        }
        check_seconds(self.request_timeout_s, true)
            .map_err(|why| format!("request_timeout_s {why}"))?;
        if self.max_in_flight == 0 {
            return Err("max_in_flight must be > 0".into());
        }
        if let Some(p) = self.open_paths.iter().find(|p| !p.starts_with('/')) {
            return Err(format!(
                "open_paths: {p:?} is not a path (it must start with /)"
            ));
        }
        check_seconds(self.ready_cache_s, false).map_err(|why| format!("ready_cache_s {why}"))?;
        for (key, value) in [
            ("header_read_timeout_s", self.header_read_timeout_s),
            ("body_read_timeout_s", self.body_read_timeout_s),
        ] {
            check_seconds(value, true).map_err(|why| format!("{key} {why}"))?;
        }
        if self.max_prompt_bytes == 0 {
            return Err("max_prompt_bytes must be > 0".into());
        }
        Ok(())
    }
}
