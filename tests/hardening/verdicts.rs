//! No judge failure becomes a score: a checklist verdict without items, a stored verdict that
//! lacks a trajectory, a drafted verdict, an absurd `Retry-After`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use gavel::store::{
    Claims, JobLedger, JobProgress, ScoringLog, SledStore, StoreError, StoreStats, StoredVerdict,
    UnitChange, VerdictStore, Verdicts,
};
use serde_json::json;

use crate::common::{marked_group, rewards, Behaviour, Gavel, MockJudge};
use crate::start;

/// A store that, while `corrupt` is set, returns every verdict without its last score (as a
/// store written by other software, or damaged, might).
#[derive(Debug)]
struct DropsAScore {
    inner: Arc<dyn VerdictStore>,
    corrupt: AtomicBool,
}

#[async_trait]
impl Verdicts for DropsAScore {
    async fn get(&self, key: &str) -> Result<Option<StoredVerdict>, StoreError> {
        let v = self.inner.get(key).await?;
        Ok(v.map(|mut v| {
            if self.corrupt.load(Ordering::SeqCst) {
                v.scores.pop();
            }
            v
        }))
    }
    async fn put(&self, key: &str, verdict: &StoredVerdict) -> Result<(), StoreError> {
        self.inner.put(key, verdict).await
    }
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.inner.stats().await
    }
    async fn clear(&self) -> Result<u64, StoreError> {
        self.inner.clear().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
}

#[async_trait]
impl JobLedger for DropsAScore {
    async fn job_progress(&self, job: &str) -> Result<JobProgress, StoreError> {
        self.inner.job_progress(job).await
    }
    async fn job_update(
        &self,
        job: &str,
        change: UnitChange,
        units: &[String],
        offsets: (u64, u64),
    ) -> Result<(), StoreError> {
        self.inner.job_update(job, change, units, offsets).await
    }
}

impl Claims for DropsAScore {}
impl ScoringLog for DropsAScore {}

fn checklist_group() -> serde_json::Value {
    let mut g = marked_group(&[0.4, 0.9]);
    g["rubric"] = json!({"text": "Check the answer.", "items": [
        {"id": "correct", "text": "The answer is right."},
        {"id": "shown", "text": "The work is shown."}]});
    g
}

#[tokio::test]
async fn a_checklist_verdict_without_items_is_an_error_never_a_zero() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |_| {}).await;
    // Scores without items, first answer and after the re-ask.
    let no_items = r#"{"scores": [{"trajectory_id": "1"}, {"trajectory_id": "2"}]}"#;
    mock.push(Behaviour::Content(no_items.into()));
    mock.push(Behaviour::Content(
        no_items.replace("}, {", r#", "items": null}, {"#),
    ));
    let (status, body) = gavel.post("/v1/score_group", &checklist_group()).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["type"], "judge_invalid_output");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no \"items\""),
        "{body}"
    );
    assert_eq!(mock.calls(), 2, "one call and one re-ask");
    // Nothing was cached: the next request asks the judge again and gets real rewards.
    let (status, body) = gavel.post("/v1/score_group", &checklist_group()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(mock.calls(), 3);
    assert_eq!(body["usage"]["cache_hits"], 0);
}

#[tokio::test]
async fn a_stored_verdict_missing_a_trajectory_is_a_cache_miss() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = mock.config(&dir.path().join("store"));
    let store = Arc::new(DropsAScore {
        inner: Arc::new(SledStore::open(&cfg.store.path).unwrap()),
        corrupt: AtomicBool::new(false),
    });
    let gavel = Gavel::start_with_store(cfg, store.clone()).await;
    let group = marked_group(&[0.2, 0.8, 0.5]);
    let (status, first) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{first}");
    let (_, again) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(
        (again["usage"]["cache_hits"].as_u64(), mock.calls()),
        (Some(1), 1)
    );
    // Now every stored verdict lacks a trajectory: judged again (it panicked before), and the
    // rewards are the judge's, not a default.
    store.corrupt.store(true, Ordering::SeqCst);
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(mock.calls(), 2);
    assert_eq!(rewards(&body), rewards(&first));
    // The daemon still serves.
    assert_eq!(gavel.get("/healthz").await.0, 200);
}

#[tokio::test]
async fn the_last_verdict_of_a_reply_is_the_one_used() {
    let (mock, gavel, _dir) = crate::common::setup().await;
    mock.push(Behaviour::Content(
        "First thoughts: {\"scores\": [{\"trajectory_id\": \"1\", \"score\": 0.9}, \
         {\"trajectory_id\": \"2\", \"score\": 0.1}]}\nOn reflection, trajectory 2 is right:\n\
         {\"scores\": [{\"trajectory_id\": \"1\", \"score\": 0.2}, \
         {\"trajectory_id\": \"2\", \"score\": 0.7}]}"
            .into(),
    ));
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.01, 0.02]))
        .await;
    assert_eq!(status, 200, "{body}");
    let r = rewards(&body);
    assert!(r[1] > r[0], "the draft was used: {body}");
    let judge: Vec<f64> = (0..2)
        .map(|i| body["scores"][i]["components"]["judge"].as_f64().unwrap())
        .collect();
    assert_eq!(judge, vec![0.2, 0.7], "{body}");
}

#[tokio::test]
async fn an_absurd_retry_after_is_capped_not_a_panic() {
    let (mock, gavel, _dir) = crate::common::setup().await;
    for (i, text) in ["1e20", "18446744073709551616", "1e308"].iter().enumerate() {
        mock.push(Behaviour::RetryAfterText(text.to_string()));
        let (status, body) = gavel
            .post("/v1/score_group", &marked_group(&[0.3, 0.01 * i as f64]))
            .await;
        // Retried after max_backoff_s (0.05 s in the mock's config), then scored.
        assert_eq!(status, 200, "Retry-After {text}: {body}");
        assert_eq!(body["usage"]["retries"]["http_429"], 1, "{body}");
    }
    assert_eq!(mock.calls(), 6);
}
