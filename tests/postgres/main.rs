//! The shared Postgres store against a real PostgreSQL: migrations from empty, replicas sharing
//! verdicts with one judge call, restart persistence, the scoring log and `rescore --from-log`,
//! and a daemon killed mid-request.
//!
//! The server is `GAVEL_TEST_DATABASE_URL` or a throwaway cluster (see `database.rs`); each test
//! creates and drops its own database. The TLS tests (`tls.rs`) start a second cluster of their
//! own. Without PostgreSQL the tests print why and pass, unless `GAVEL_REQUIRE_POSTGRES=1` (as
//! in CI), where they fail.

#[path = "../common/mod.rs"]
mod common;
mod database;
mod tls;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::{close, marked_group, rewards, simple_traj, Behaviour, Gavel, MockJudge, MOCK_KEY};
use database::test_db;
use gavel::domain::trajectory::content_hash;
use gavel::score::ScoreRequest;
use gavel::store::{LogFilter, PgOptions, PgStore, UnitChange};

const BIN: &str = env!("CARGO_BIN_EXE_gavel");

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// `gavel ARGS...` with nothing leaking in from the environment.
fn gavel(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    for k in [
        "GAVEL_CONFIG",
        "GAVEL_STORE",
        "GAVEL_STORE_URL",
        "GAVEL_ADDR",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "GAVEL_RUBRIC",
        "GAVEL_JUDGE",
        "RUST_LOG",
    ] {
        c.env_remove(k);
    }
    c.env("GAVEL_TEST_MOCK_KEY", MOCK_KEY)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(secs(60.0), gavel(args).output())
        .await
        .expect("gavel finished in 60 s")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A config file whose default judge `mock` is the mock.
fn config_file(dir: &Path, mock: &MockJudge, store_extra: &str) -> PathBuf {
    let path = dir.join("gavel.toml");
    let toml = format!(
        "default_judge = \"mock\"\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\n\
         model = \"mock-judge-1\"\napi_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = 1\n\
         max_backoff_s = 0.05\ntimeout_s = 120\ndeadline_s = 120\n[store]\n{store_extra}\n",
        mock.base_url()
    );
    std::fs::write(&path, toml).unwrap();
    path
}

#[tokio::test]
async fn migrations_apply_from_empty_once_and_refuse_a_newer_schema() {
    let Some(db) = test_db().await else { return };
    let (code, out, err) = run(&["migrate", "--store-url", &db.url]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("applied 0001_verdicts_claims_log_jobs\n"),
        "{out}"
    );
    assert!(
        out.contains("schema version 1 (1 migration(s) applied)"),
        "{out}"
    );
    let tables: i64 = db
        .sql()
        .await
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN
             ('gavel_schema_migrations', 'gavel_verdicts', 'gavel_claims', 'gavel_scoring_log',
              'gavel_job_units', 'gavel_job_offsets')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 6);
    let (code, out, err) = run(&["migrate", "--store-url", &db.url]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !out.contains("applied 0001"),
        "nothing left to apply: {out}"
    );
    assert!(out.contains("(0 migration(s) applied)"), "{out}");

    // A role that may not change the schema opens the migrated database and scores.
    let role = format!("{}_app", db.name);
    db.sql()
        .await
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'app-pw';
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    let sep = if db.url.contains('?') { '&' } else { '?' };
    let app_url = format!("{}{sep}user={role}&password=app-pw", db.url);
    let mock = MockJudge::start().await;
    let app = PgStore::connect(&app_url, &PgOptions::default()).await;
    let app = Arc::new(app.unwrap_or_else(|e| panic!("the app role opens the store: {e}")));
    let daemon = Gavel::start_with_store(mock.config(Path::new("unused")), app).await;
    let (s, r) = daemon
        .post("/v1/score_group", &marked_group(&[0.5, 0.25]))
        .await;
    assert_eq!(s, 200, "{r}");
    daemon.stop().await;

    // Replicas starting at once on an empty database: each migration runs exactly once.
    let fresh = test_db().await.unwrap();
    let reports = futures::future::join_all((0..4).map(|_| PgStore::migrate(&fresh.url))).await;
    let applied: usize = reports
        .iter()
        .map(|r| r.as_ref().unwrap().applied.len())
        .sum();
    assert_eq!(applied, 1, "{reports:?}");
    assert_eq!(fresh.count("gavel_schema_migrations").await, 1);

    // A database a newer gavel migrated is refused with a clear error, not misread.
    fresh
        .sql()
        .await
        .batch_execute(
            "INSERT INTO gavel_schema_migrations (version, name, checksum)
             VALUES (99, '0099_future', 'sha256:x')",
        )
        .await
        .unwrap();
    let e = PgStore::connect(&fresh.url, &PgOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("schema version 99 (0099_future), newer than this gavel knows (up to 1)"),
        "{e}"
    );
    let (code, _, err) = run(&["migrate", "--store-url", &fresh.url]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("newer than this gavel knows"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    // Without a Postgres URL there is nothing to migrate, and gavel says so.
    let (code, _, err) = run(&["migrate"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("no Postgres store configured"), "{err}");
    db.drop_db().await;
    fresh.drop_db().await;
    database::connect(&database::admin_url())
        .await
        .batch_execute(&format!("DROP ROLE {role}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn two_replicas_scoring_the_same_group_at_once_make_one_judge_call() {
    let Some(db) = test_db().await else { return };
    let mock = MockJudge::start().await;
    // The first judge call is slow, so the second replica arrives while it is in flight; it
    // outlasts the 2 s claim TTL, so only the holder's renewals keep the claim.
    mock.push(Behaviour::Hang(secs(3.5)));
    let a = db.replica(&mock, 2.0).await;
    let b = db.replica(&mock, 2.0).await;
    let group = marked_group(&[0.9, 0.2, 0.6]);
    let ((sa, ra), (sb, rb)) = tokio::join!(
        a.post("/v1/score_group", &group),
        b.post("/v1/score_group", &group)
    );
    assert_eq!((sa, sb), (200, 200), "{ra} {rb}");
    assert_eq!(mock.calls(), 1, "one judge call across both replicas");
    assert!(close(&rewards(&ra), &[0.9, 0.2, 0.6]), "{ra}");
    assert_eq!(rewards(&ra), rewards(&rb));
    let calls = |r: &Value| r["usage"]["judge_calls"].as_u64().unwrap();
    let hits = |r: &Value| r["usage"]["cache_hits"].as_u64().unwrap();
    assert_eq!((calls(&ra) + calls(&rb), hits(&ra) + hits(&rb)), (1, 1));
    assert_eq!(db.count("gavel_verdicts").await, 1);
    assert_eq!(
        db.wait_count("gavel_claims", 0).await,
        0,
        "claims are released"
    );
    // Both replicas logged their answer, each under its own name.
    let replicas: Vec<String> = db
        .sql()
        .await
        .query("SELECT DISTINCT replica FROM gavel_scoring_log", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    assert!(a.scorer.store().ping().await.is_ok());
    let metrics = reqwest::get(format!("{}/metrics", a.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("gavel_store_claims_total{outcome=\"verdict_stored\"}"),
        "{metrics}"
    );
    a.stop().await;
    b.stop().await;
    db.drop_db().await;
}

#[tokio::test]
async fn verdicts_and_job_progress_survive_a_restart() {
    let Some(db) = test_db().await else { return };
    let mock = MockJudge::start().await;
    let group = marked_group(&[0.3, 0.8]);
    let first = db.replica(&mock, 30.0).await;
    let (s, r1) = first.post("/v1/score_group", &group).await;
    assert_eq!(s, 200, "{r1}");
    first
        .scorer
        .store()
        .job_update(
            "job",
            UnitChange::Finish,
            &["u1".into(), "u2".into()],
            (120, 7),
        )
        .await
        .unwrap();
    first.stop().await;

    let second = db.replica(&mock, 30.0).await;
    let (s, r2) = second.post("/v1/score_group", &group).await;
    assert_eq!(s, 200, "{r2}");
    assert_eq!(
        mock.calls(),
        1,
        "the restarted daemon reuses the stored verdict"
    );
    assert_eq!(r2["usage"]["cache_hits"], 1);
    assert_eq!(rewards(&r1), rewards(&r2));
    let store = second.scorer.store();
    let p = store.job_progress("job").await.unwrap();
    assert_eq!(p.offsets, Some((120, 7)));
    assert_eq!(p.done.len(), 2);
    store
        .job_update("job", UnitChange::Reopen, &["u1".into()], (120, 0))
        .await
        .unwrap();
    let p = store.job_progress("job").await.unwrap();
    assert_eq!(
        (p.done.into_iter().collect::<Vec<_>>(), p.offsets),
        (vec!["u2".to_string()], Some((120, 0)))
    );
    second.stop().await;

    let (code, out, err) = run(&["cache", "stats", "--store-url", &db.url]).await;
    assert_eq!(code, Some(0), "{err}");
    let stats: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (stats["backend"].clone(), stats["verdicts"].clone()),
        (json!("postgres"), json!(1))
    );
    db.drop_db().await;
}

#[tokio::test]
async fn the_log_records_every_scored_group_and_rescore_reads_it() {
    let Some(db) = test_db().await else { return };
    let mock = MockJudge::start().await;
    let g = db.replica(&mock, 30.0).await;
    let mut answered: Vec<Value> = Vec::new();
    // A judged group.
    let (s, r) = g.post("/v1/score_group", &marked_group(&[0.9, 0.1])).await;
    assert_eq!(s, 200, "{r}");
    answered.push(r);
    // A verifier-only group: no judge, no template.
    let mut verified =
        json!({"trajectories": [simple_traj("ANSWER: 4000"), simple_traj("ANSWER: 4001")]});
    verified["verifiers"] = json!([{"type": "answer_line", "kind": "integer", "expected": 4000}]);
    verified["policy"] = json!({"type": "weighted", "weights": {"answer_line": 1.0}});
    let (s, r) = g.post("/v1/score_group", &verified).await;
    assert_eq!(s, 200, "{r}");
    answered.push(r);
    // Two groups of one batch: two rows.
    let batch = json!({"groups": [marked_group(&[0.4, 0.7]), marked_group(&[0.2, 0.25])]});
    let (s, r) = g.post("/v1/score_groups", &batch).await;
    assert_eq!(s, 200, "{r}");
    answered.extend(r["results"].as_array().unwrap().iter().cloned());
    // A judge failure answered as reward null: scored, logged with its error. (The mock judge
    // config makes 1 + max_retries = 3 attempts.)
    for _ in 0..3 {
        mock.push(Behaviour::Status(500, None, "down".into()));
    }
    let mut null_group = marked_group(&[0.6, 0.3]);
    null_group["on_judge_error"] = json!("null");
    let (s, r) = g.post("/v1/score_group", &null_group).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["rewards"], json!([null, null]));
    answered.push(r);
    // A judge failure that fails the request: nothing was scored, nothing is logged.
    for _ in 0..3 {
        mock.push(Behaviour::Status(500, None, "down".into()));
    }
    let (s, r) = g.post("/v1/score_group", &marked_group(&[0.1, 0.2])).await;
    assert_eq!(s, 502, "{r}");

    let store = g.scorer.store().clone();
    let log = store.read_scoring_log(&LogFilter::default()).await.unwrap();
    assert_eq!(log.len(), answered.len(), "one row per scored group");
    // Batch groups are scored concurrently, so rows are matched to answers by their scores
    // (every group here scores differently).
    let mut matched = Vec::new();
    for resp in &answered {
        let row = log
            .iter()
            .find(|r| r.entry.scores == resp["scores"])
            .unwrap_or_else(|| panic!("no log row for {resp}"));
        matched.push(row.id);
        let e = &row.entry;
        assert_eq!(e.rewards, resp["rewards"], "row {}", row.id);
        assert_eq!(e.usage, resp["usage"], "row {}", row.id);
        assert_eq!(e.rubric_name, "default");
        assert_eq!(
            e.rubric_version,
            resp["rubric"]["version"].as_str().unwrap()
        );
        assert_eq!(
            e.template_version.as_deref(),
            resp["template"]["version"].as_str()
        );
        assert_eq!(e.judges, resp["judges"]);
        assert_eq!(e.error.as_ref(), resp.get("error"));
        assert_eq!(e.request_hash, content_hash(&e.request));
        assert_eq!(e.request["trajectories"].as_array().unwrap().len(), 2);
        assert!(e.latency_ms >= 0.0);
        assert!(row.scored_at.ends_with('Z'), "{}", row.scored_at);
        ScoreRequest::from_json(&e.request, 64).expect("the logged request reads back");
    }
    matched.sort_unstable();
    matched.dedup();
    assert_eq!(matched.len(), log.len(), "each answer has its own row");
    assert_eq!(
        log[1].entry.template_name, None,
        "no judge for the verifier-only group"
    );
    assert_eq!(log[1].entry.rewards, json!([1.0, 0.0]));
    assert_eq!(
        log[4].entry.error.as_ref().unwrap()["type"],
        "judge_unavailable"
    );
    let some = store
        .read_scoring_log(&LogFilter {
            rubric: Some("default".into()),
            limit: Some(2),
            ..LogFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        some.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![log[0].id, log[1].id]
    );
    let none = store
        .read_scoring_log(&LogFilter {
            since: Some("2999-01-01".into()),
            ..LogFilter::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());

    // Append-only.
    let sql = db.sql().await;
    for stmt in [
        "DELETE FROM gavel_scoring_log",
        "UPDATE gavel_scoring_log SET rewards = '[]'",
    ] {
        let e = sql.batch_execute(stmt).await.unwrap_err();
        let msg = e
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_default();
        assert!(msg.contains("append-only"), "{stmt}: {msg}");
    }
    g.stop().await;

    // `gavel rescore --from-log`: the logged groups, scored again through the same store.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(dir.path(), &mock, "");
    let out = dir.path().join("rescored.jsonl");
    let calls_before = mock.calls();
    let (code, _, err) = run(&[
        "rescore",
        "--from-log",
        &db.url,
        "-o",
        out.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--store-url",
        &db.url,
        "--progress",
        "none",
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), log.len());
    for row in &log {
        let line = lines
            .iter()
            .find(|l| l["group_id"] == json!(format!("log:{}", row.id)))
            .unwrap_or_else(|| panic!("log row {} rescored", row.id));
        if row.entry.error.is_none() {
            assert_eq!(line["rewards"], row.entry.rewards, "row {}", row.id);
            assert_eq!(
                line["usage"]["judge_calls"], 0,
                "cached verdicts are reused"
            );
        } else {
            assert_eq!(line["rewards"], json!([0.6, 0.3]), "the judge answers now");
        }
    }
    assert_eq!(
        mock.calls(),
        calls_before + 1,
        "only the failed group is judged again"
    );
    assert_eq!(db.count("gavel_scoring_log").await, 2 * log.len() as i64);

    let out2 = dir.path().join("two.jsonl");
    let (code, _, err) = run(&[
        "rescore",
        "--from-log",
        &db.url,
        "--log-limit",
        "2",
        "-o",
        out2.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--store",
        dir.path().join("sled").to_str().unwrap(),
        "--progress",
        "none",
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read_to_string(&out2).unwrap().lines().count(), 2);
    db.drop_db().await;
}

#[tokio::test]
async fn a_daemon_killed_mid_request_leaves_nothing_half_written() {
    let Some(db) = test_db().await else { return };
    let mock = MockJudge::start().await;
    // The killed daemon's judge call never returns in time.
    mock.push(Behaviour::Hang(secs(60.0)));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(dir.path(), &mock, "claim_ttl_s = 1.0");
    let mut child = gavel(&[
        "serve",
        "--config",
        cfg.to_str().unwrap(),
        "--store-url",
        &db.url,
        "--addr",
        "127.0.0.1:0",
    ])
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let pid = child.id().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(secs(30.0), async {
        while let Some(l) = stdout.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("gavel listening on ") {
                return u.to_string();
            }
        }
        panic!("gavel serve exited before listening");
    })
    .await
    .expect("listening in 30 s");
    let group = marked_group(&[0.7, 0.4]);
    let pending = {
        let (url, group) = (url.clone(), group.clone());
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{url}/v1/score_group"))
                .json(&group)
                .send()
                .await
        })
    };
    for _ in 0..200 {
        if mock.calls() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(mock.calls(), 1, "the daemon is inside its judge call");
    let owner: String = db
        .sql()
        .await
        .query_one("SELECT owner FROM gavel_claims", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        owner.contains(&format!("/{pid}/")),
        "the daemon holds the claim: {owner}"
    );

    child.start_kill().unwrap(); // SIGKILL
    child.wait().await.unwrap();
    let answer = pending.await.unwrap();
    assert!(answer.is_err(), "the killed daemon answered: {answer:?}");
    assert_eq!(
        db.count("gavel_verdicts").await,
        0,
        "no verdict from the dead call"
    );
    assert_eq!(
        db.count("gavel_scoring_log").await,
        0,
        "no log row for an unanswered group"
    );

    // Another replica takes over the dead claim once it expires, and scores the group.
    let g = db.replica(&mock, 1.0).await;
    let (s, r) = g.post("/v1/score_group", &group).await;
    assert_eq!(s, 200, "{r}");
    assert!(close(&rewards(&r), &[0.7, 0.4]), "{r}");
    assert_eq!(mock.calls(), 2);
    assert_eq!(db.count("gavel_verdicts").await, 1);
    assert_eq!(db.count("gavel_scoring_log").await, 1);
    assert_eq!(db.wait_count("gavel_claims", 0).await, 0);
    g.stop().await;
    db.drop_db().await;
}

/// Postgres refuses U+0000 in `text` and `jsonb`. A NUL in a verifier's reason, an inline
/// rubric's name, a judge's explanation or a checklist item id once failed the insert after the
/// judge was paid; now the verdict is stored exactly and reused, and the log keeps the row.
#[tokio::test]
async fn nul_characters_are_stored_and_the_verdict_reused() {
    let Some(db) = test_db().await else { return };
    let mock = MockJudge::start().await;
    let g = db.replica(&mock, 30.0).await;

    // The verifier quotes the NUL-bearing answer in its reason; the rubric's name holds one.
    let mut quoted = json!({"trajectories": [
        simple_traj("SCORE=0.8\nANSWER: x\u{0}y"),
        simple_traj("SCORE=0.3\nANSWER: abc")]});
    quoted["rubric"] = json!({"name": "nul\u{0}rubric", "text": "Prefer the right answer."});
    quoted["verifiers"] = json!([{"type": "answer_line", "kind": "id", "expected": "abc"}]);

    // The judge's explanation and a checklist item id hold one: the verdict itself.
    let mut checked = json!({"trajectories": [simple_traj("ANSWER: 1"), simple_traj("ANSWER: 2")]});
    checked["rubric"] = json!({"text": "Cite a source.",
        "items": [{"id": "cites\u{0}source", "text": "Cites a source"}]});
    mock.push(Behaviour::Content(
        json!({"scores": [
            {"trajectory_id": "1", "explanation": "fine\u{0}print", "score": 0.9,
             "items": [{"id": "cites\u{0}source", "met": true}]},
            {"trajectory_id": "2", "explanation": "none", "score": 0.2,
             "items": [{"id": "cites\u{0}source", "met": false}]}]})
        .to_string(),
    ));
    let (s, c1) = g.post("/v1/score_group", &checked).await;
    assert_eq!(s, 200, "{c1}");
    let (s, q1) = g.post("/v1/score_group", &quoted).await;
    assert_eq!(s, 200, "{q1}");
    // The NULs really reached what gavel writes.
    assert!(
        q1["scores"][0]["reasons"]["answer_line"]
            .as_str()
            .unwrap()
            .contains('\u{0}'),
        "{q1}"
    );
    assert_eq!(q1["rubric"]["name"], "nul\u{0}rubric");
    assert_eq!(c1["scores"][0]["explanation"], "fine\u{0}print");
    assert_eq!(
        c1["scores"][0]["items"],
        json!([{"id": "cites\u{0}source", "met": true}])
    );
    assert_eq!(
        c1["rewards"],
        json!([1.0, 0.0]),
        "the item verdicts counted"
    );
    assert_eq!(mock.calls(), 2);

    // Asked again: both answered from the stored verdicts, exactly as the first time.
    for (first, group) in [(&c1, &checked), (&q1, &quoted)] {
        let (s, again) = g.post("/v1/score_group", group).await;
        assert_eq!(s, 200, "{again}");
        assert_eq!(
            (
                again["usage"]["judge_calls"].clone(),
                again["usage"]["cache_hits"].clone()
            ),
            (json!(0), json!(1)),
            "{again}"
        );
        assert_eq!(again["scores"], first["scores"]);
        assert_eq!(again["rewards"], first["rewards"]);
    }
    assert_eq!(mock.calls(), 2, "no judge call for a stored verdict");
    assert_eq!(db.count("gavel_verdicts").await, 2);

    // The log: text and jsonb columns hold U+FFFD for each NUL; the request (a `json` column)
    // is kept exactly, so it still hashes to its request_hash and scores again.
    let store = g.scorer.store().clone();
    let log = store.read_scoring_log(&LogFilter::default()).await.unwrap();
    assert_eq!(log.len(), 4);
    let named: Vec<_> = log
        .iter()
        .filter(|r| r.entry.rubric_name == "nul\u{FFFD}rubric")
        .collect();
    assert_eq!(named.len(), 2, "{log:?}");
    for row in &named {
        let reason = row.entry.scores[0]["reasons"]["answer_line"]
            .as_str()
            .unwrap();
        assert!(
            reason.contains("x\u{FFFD}y") && !reason.contains('\u{0}'),
            "{reason}"
        );
        assert_eq!(row.entry.request["rubric"]["name"], "nul\u{0}rubric");
        assert_eq!(row.entry.request_hash, content_hash(&row.entry.request));
        ScoreRequest::from_json(&row.entry.request, 64).expect("the logged request reads back");
    }
    // A filter by the name as the caller wrote it finds the rows.
    let by_name = store
        .read_scoring_log(&LogFilter {
            rubric: Some("nul\u{0}rubric".into()),
            ..LogFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_name.len(), 2);
    g.stop().await;
    db.drop_db().await;
}
