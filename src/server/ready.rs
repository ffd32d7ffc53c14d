//! `/readyz`: the store answers and every configured judge can be reached. Judge probes are
//! cached for `ready_cache_s`, and concurrent callers share one probe, so kubelet probing many
//! pods every few seconds does not become judge traffic. The store is asked every time (a ping
//! is cheap, and a lost database should take a pod out of the Service at once).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::score::Scorer;

/// The longest `/readyz` waits for the store.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// One dependency's state.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Check {
    /// `store`, or a judge's name.
    pub name: String,
    pub ok: bool,
    /// What is wrong; only for callers with a valid API key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// False for a judge that lacks what it needs to run (an API key): it is not configured,
    /// which is not the same as unreachable. (`/healthz` shows it to anyone as `configured`.)
    #[serde(skip)]
    pub configured: bool,
}

impl Check {
    fn new(name: String, result: Result<(), String>) -> Check {
        Check {
            name,
            ok: result.is_ok(),
            problem: result.err(),
            configured: true,
        }
    }
}

/// `GET /readyz` when ready.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Ready {
    #[schema(inline)]
    status: ReadyStatus,
    pub store: Check,
    pub judges: Vec<Check>,
}

impl Ready {
    pub fn new(store: Check, judges: Vec<Check>) -> Ready {
        Ready {
            status: ReadyStatus::Ready,
            store,
            judges,
        }
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
enum ReadyStatus {
    Ready,
}

/// `GET /readyz` when not ready: the error, and every check.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NotReady {
    #[serde(flatten)]
    pub error: super::error::ErrorResponse,
    pub store: Check,
    pub judges: Vec<Check>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReadyReport {
    pub store: Check,
    pub judges: Vec<Check>,
}

impl ReadyReport {
    pub fn ready(&self) -> bool {
        self.store.ok && self.judges.iter().all(|j| j.ok)
    }

    /// What is wrong with the judges, counted, without any problem's text: e.g. "of 4 judges,
    /// 2 unreachable, 1 not configured".
    pub fn judge_counts(&self) -> String {
        let n = self.judges.len();
        let down = |configured: bool| {
            self.judges
                .iter()
                .filter(|j| !j.ok && j.configured == configured)
                .count()
        };
        let (unreachable, unconfigured) = (down(true), down(false));
        let mut parts = Vec::new();
        if unreachable > 0 || unconfigured == 0 {
            parts.push(format!("{unreachable} unreachable"));
        }
        if unconfigured > 0 {
            parts.push(format!("{unconfigured} not configured"));
        }
        let judges = if n == 1 { "judge" } else { "judges" };
        format!("of {n} {judges}, {}", parts.join(", "))
    }

    /// What is down, one clause each.
    pub fn problems(&self) -> String {
        std::iter::once(&self.store)
            .chain(&self.judges)
            .filter_map(|c| c.problem.clone())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The judge probe cache.
pub struct Readiness {
    ttl: Duration,
    judges: tokio::sync::Mutex<Option<(Instant, Vec<Check>)>>,
}

impl Readiness {
    pub fn new(ttl: Duration) -> Readiness {
        Readiness {
            ttl,
            judges: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn check(&self, scorer: &Scorer) -> ReadyReport {
        let store = match tokio::time::timeout(STORE_TIMEOUT, scorer.store().ping()).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "verdict store: no answer within {}s",
                STORE_TIMEOUT.as_secs()
            )),
        };
        ReadyReport {
            store: Check::new("store".into(), store),
            judges: self.judges(scorer).await,
        }
    }

    async fn judges(&self, scorer: &Scorer) -> Vec<Check> {
        // Held across the probe: callers arriving meanwhile wait for its result.
        let mut cached = self.judges.lock().await;
        if let Some((at, checks)) = cached.as_ref() {
            if at.elapsed() < self.ttl {
                return checks.clone();
            }
        }
        let probes = scorer.judges().map(|j| async move {
            match j.settings().unconfigured.as_deref() {
                // Nothing to probe: it lacks its key.
                Some(reason) => Check {
                    configured: false,
                    ..Check::new(
                        j.settings().info.name.clone(),
                        Err(format!("not configured: {reason}")),
                    )
                },
                None => Check::new(j.settings().info.name.clone(), j.probe().await),
            }
        });
        let checks = futures::future::join_all(probes).await;
        *cached = Some((Instant::now(), checks.clone()));
        checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(name: &str, ok: bool, configured: bool) -> Check {
        Check {
            name: name.into(),
            ok,
            problem: None,
            configured,
        }
    }

    #[test]
    fn a_judge_without_its_key_counts_as_not_configured_not_unreachable() {
        let store = judge("store", true, true);
        let report = |judges| ReadyReport {
            store: store.clone(),
            judges,
        };
        let r = report(vec![judge("a", false, false)]);
        assert_eq!(r.judge_counts(), "of 1 judge, 1 not configured");
        let r = report(vec![
            judge("a", false, true),
            judge("b", false, false),
            judge("c", true, true),
        ]);
        assert_eq!(
            r.judge_counts(),
            "of 3 judges, 1 unreachable, 1 not configured"
        );
        let r = report(vec![judge("a", true, true), judge("b", true, true)]);
        assert_eq!(r.judge_counts(), "of 2 judges, 0 unreachable");
    }
}
