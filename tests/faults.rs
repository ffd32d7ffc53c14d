//! The fault suite: every way a judge misbehaves ends in the right scores mapped by id, or in a
//! typed error / null reward — never in a wrong score.

mod common;

use std::time::Duration;

use common::{marked_group, rewards, Behaviour, Gavel, MockJudge};
use serde_json::json;

/// The group every fault is tried on: markers 0.9, 0.2, 0.6 (what a healthy judge answers).
const MARKERS: [f64; 3] = [0.9, 0.2, 0.6];

async fn setup() -> (MockJudge, Gavel, tempfile::TempDir) {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = mock.config(&dir.path().join("store"));
    let j = common::remote(&mut cfg, "mock");
    j.timeout_s = 0.5;
    j.max_retries = 2;
    let gavel = Gavel::start(cfg).await;
    (mock, gavel, dir)
}

fn content(text: &str) -> Behaviour {
    Behaviour::Content(text.to_string())
}

/// Faults after which the judge recovers (by retry or re-ask): the right scores come back.
#[tokio::test]
async fn transient_faults_end_in_the_right_scores() {
    let cases: Vec<(&str, Behaviour)> = vec![
        (
            "429 with Retry-After",
            Behaviour::Status(429, Some(0), "rate limited".into()),
        ),
        ("500", Behaviour::Status(500, None, "internal".into())),
        (
            "502 html",
            Behaviour::Status(502, None, "<html>bad gateway</html>".into()),
        ),
        ("connection reset", Behaviour::Reset),
        ("hang past timeout", Behaviour::Hang(Duration::from_secs(3))),
        (
            "malformed JSON",
            content(r#"{"scores": [{"trajectory_id": "1", "score": 0.9"#),
        ),
        (
            "wrong number of scores",
            content(r#"{"scores": [{"trajectory_id": "1", "explanation": "", "score": 0.9}]}"#),
        ),
        (
            "duplicate ids",
            content(
                r#"{"scores": [{"trajectory_id": "1", "score": 0.9}, {"trajectory_id": "1", "score": 0.2}, {"trajectory_id": "3", "score": 0.6}]}"#,
            ),
        ),
        (
            "unknown ids",
            content(
                r#"{"scores": [{"trajectory_id": "1", "score": 0.9}, {"trajectory_id": "2", "score": 0.2}, {"trajectory_id": "4", "score": 0.6}]}"#,
            ),
        ),
        ("no JSON at all", content("I think the first one is best.")),
        (
            "non-numeric score",
            content(
                r#"{"scores": [{"trajectory_id": "1", "score": "great"}, {"trajectory_id": "2", "score": 0.2}, {"trajectory_id": "3", "score": 0.6}]}"#,
            ),
        ),
    ];
    for (name, fault) in cases {
        let (mock, gavel, _dir) = setup().await;
        mock.push(fault);
        let (status, r) = gavel.post("/v1/score_group", &marked_group(&MARKERS)).await;
        assert_eq!(status, 200, "{name}: {r}");
        assert_eq!(rewards(&r), MARKERS, "{name}");
        assert_eq!(mock.calls(), 2, "{name}: one fault, one good answer");
    }
}

/// Verdicts that are usable as they are, read correctly and mapped by id (never by position).
#[tokio::test]
async fn odd_but_usable_verdicts_are_read_correctly() {
    let cases: Vec<(&str, &str, [f64; 3])> = vec![
        ("ids out of order", r#"{"scores": [{"trajectory_id": "3", "score": 0.6}, {"trajectory_id": "1", "score": 0.9}, {"trajectory_id": "2", "score": 0.2}]}"#, [0.9, 0.2, 0.6]),
        ("integer ids", r#"{"scores": [{"trajectory_id": 2, "score": 0.2}, {"trajectory_id": 1, "score": 0.9}, {"trajectory_id": 3, "score": 0.6}]}"#, [0.9, 0.2, 0.6]),
        ("scores as strings", r#"{"scores": [{"trajectory_id": "1", "score": "0.7"}, {"trajectory_id": "2", "score": "3/10"}, {"trajectory_id": "3", "score": "45%"}]}"#, [0.7, 0.3, 0.45]),
        ("0-10 scale", r#"{"scores": [{"trajectory_id": "1", "score": 9}, {"trajectory_id": "2", "score": 2}, {"trajectory_id": "3", "score": 6}]}"#, [0.9, 0.2, 0.6]),
        ("0-100 scale", r#"{"scores": [{"trajectory_id": "1", "score": 90}, {"trajectory_id": "2", "score": 20}, {"trajectory_id": "3", "score": 65}]}"#, [0.9, 0.2, 0.65]),
        ("lone out of range clamped", r#"{"scores": [{"trajectory_id": "1", "score": 3}, {"trajectory_id": "2", "score": 0.2}, {"trajectory_id": "3", "score": -0.5}]}"#, [1.0, 0.2, 0.0]),
        ("code fence and commentary", "Sure! Here you go:\n```json\n{\"scores\": [{\"trajectory_id\": \"1\", \"explanation\": \"uses {x}\", \"score\": 0.9}, {\"trajectory_id\": \"2\", \"score\": 0.2}, {\"trajectory_id\": \"3\", \"score\": 0.6}]}\n```\nHope this helps.", [0.9, 0.2, 0.6]),
    ];
    for (name, text, want) in cases {
        let (mock, gavel, _dir) = setup().await;
        mock.push(content(text));
        let (status, r) = gavel
            .post("/v1/score_group", &marked_group(&[0.0, 0.0, 0.0]))
            .await;
        assert_eq!(status, 200, "{name}: {r}");
        let got = rewards(&r);
        assert!(
            got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{name}: {got:?} != {want:?}"
        );
        assert_eq!(mock.calls(), 1, "{name}: read without a re-ask");
    }
}

/// Faults that persist end in a typed error, or in null rewards when asked — never a score.
#[tokio::test]
async fn persistent_faults_end_in_typed_errors_or_null_rewards() {
    let cases: Vec<(&str, Behaviour, u16, &str)> = vec![
        (
            "429 forever",
            Behaviour::Status(429, Some(0), "rate limited".into()),
            502,
            "judge_unavailable",
        ),
        (
            "500 forever",
            Behaviour::Status(500, None, "internal".into()),
            502,
            "judge_unavailable",
        ),
        (
            "401",
            Behaviour::Status(401, None, r#"{"error": {"message": "bad key"}}"#.into()),
            502,
            "judge_unavailable",
        ),
        ("reset forever", Behaviour::Reset, 502, "judge_unavailable"),
        (
            "hang forever",
            Behaviour::Hang(Duration::from_secs(3)),
            504,
            "judge_timeout",
        ),
        (
            "wrong ids twice",
            content(r#"{"scores": [{"trajectory_id": "9", "score": 1}]}"#),
            502,
            "judge_invalid_output",
        ),
        (
            "garbage twice",
            content("no idea"),
            502,
            "judge_invalid_output",
        ),
    ];
    for (name, fault, status_want, kind) in cases {
        let (mock, gavel, _dir) = setup().await;
        mock.set_fallback(fault);
        let (status, r) = gavel.post("/v1/score_group", &marked_group(&MARKERS)).await;
        assert_eq!(status, status_want, "{name}: {r}");
        assert_eq!(r["error"]["type"], kind, "{name}");
        assert!(r.get("rewards").is_none(), "{name}");
        let mut group = marked_group(&MARKERS);
        group["on_judge_error"] = json!("null");
        let (status, r) = gavel.post("/v1/score_group", &group).await;
        assert_eq!(status, 200, "{name}: {r}");
        assert_eq!(r["rewards"], json!([null, null, null]), "{name}");
        assert_eq!(r["advantages"], json!([0.0, 0.0, 0.0]), "{name}");
        assert_eq!(r["error"]["type"], kind, "{name}");
    }
}

/// OpenAI-compatible servers that leave out fields no verdict needs (`created`, `id`, `object`,
/// `model`) are read at once, not retried as bad replies.
#[tokio::test]
async fn a_reply_without_created_or_id_is_accepted_at_once() {
    for missing in [vec!["created"], vec!["created", "id", "object", "model"]] {
        let (mock, gavel, _dir) = setup().await;
        mock.push(Behaviour::Without(missing.clone()));
        let (status, r) = gavel.post("/v1/score_group", &marked_group(&MARKERS)).await;
        assert_eq!(status, 200, "{missing:?}: {r}");
        assert_eq!(rewards(&r), MARKERS, "{missing:?}");
        assert_eq!(mock.calls(), 1, "{missing:?}: asked more than once");
        assert_eq!(r["usage"]["prompt_tokens"], 100, "{missing:?}: {r}");
    }
}
