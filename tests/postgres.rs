//! The shared Postgres store against a real PostgreSQL: migrations from empty, replicas sharing
//! verdicts with one judge call, restart persistence, the scoring log and `rescore --from-log`,
//! and a daemon killed mid-request.
//!
//! The server: `GAVEL_TEST_DATABASE_URL` (a superuser URL; each test creates and drops its own
//! database there), else a throwaway cluster this binary starts from the PostgreSQL binaries
//! (`initdb`, `postgres`; as the `postgres` user when run as root) on a Unix socket in a temp
//! dir, removed when the binary exits. Without either the tests print why and pass, unless
//! `GAVEL_REQUIRE_POSTGRES=1` (as in CI), where they fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::{close, marked_group, rewards, simple_traj, Behaviour, Gavel, MockJudge, MOCK_KEY};
use gavel::score::ScoreRequest;
use gavel::store::{LogFilter, PgOptions, PgStore};
use gavel::trajectory::content_hash;

const BIN: &str = env!("CARGO_BIN_EXE_gavel");

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

// ---------------------------------------------------------------------------------------------
// A throwaway PostgreSQL

struct Cluster {
    admin_url: String,
    /// The cluster's watchdog shell stops it and removes its directory when this pipe closes,
    /// i.e. when this test binary exits, however it exits.
    _watchdog: Option<std::process::ChildStdin>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The directory holding `initdb` and `postgres`.
fn pg_bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GAVEL_TEST_PG_BIN") {
        return Some(PathBuf::from(d));
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    debian.sort_by_key(|p| {
        let v = p
            .parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str());
        v.and_then(|v| v.parse::<u32>().ok()).unwrap_or(0)
    });
    if let Some(b) = debian.pop() {
        return Some(b);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
}

fn id_of(args: &[&str]) -> Option<u32> {
    let out = std::process::Command::new("id").args(args).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn start_cluster() -> Result<Cluster, String> {
    if let Ok(url) = std::env::var("GAVEL_TEST_DATABASE_URL") {
        return Ok(Cluster {
            admin_url: url,
            _watchdog: None,
        });
    }
    let bin = pg_bin_dir().ok_or(
        "no GAVEL_TEST_DATABASE_URL and no PostgreSQL binaries (initdb) found; \
         install PostgreSQL (Debian: apt-get install postgresql) or set GAVEL_TEST_DATABASE_URL",
    )?;
    // initdb refuses to run as root: the cluster then belongs to an unprivileged user.
    let user = if id_of(&["-u"]) == Some(0) {
        let user = ["postgres", "nobody"]
            .into_iter()
            .find(|u| id_of(&["-u", u]).is_some())
            .ok_or("running as root and neither a postgres nor a nobody user exists")?;
        Some(user)
    } else {
        None
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let dir = std::env::temp_dir().join(format!("gavel-pg-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let started = start_in(&dir, &bin, user);
    if started.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    started
}

/// Creates and starts a cluster in `dir`, owned by `user` (when running as root).
fn start_in(dir: &Path, bin: &Path, user: Option<&str>) -> Result<Cluster, String> {
    if let Some(u) = user {
        let (uid, gid) = (id_of(&["-u", u]), id_of(&["-g", u]));
        std::os::unix::fs::chown(dir, uid, gid).map_err(|e| format!("chown: {e}"))?;
    }
    let as_user = |program: &str| {
        let mut c = match user {
            Some(u) => {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", u, "--", program]);
                c
            }
            None => std::process::Command::new(program),
        };
        c.stdin(Stdio::null());
        c
    };
    let data = dir.join("data");
    let initdb = as_user(&bin.join("initdb").display().to_string())
        .arg("-D")
        .arg(&data)
        .args([
            "-A",
            "trust",
            "-U",
            "gavel",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !initdb.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        ));
    }
    // Unix socket only: no port to collide with another server on this machine.
    let script = r#""$3/postgres" -D "$1" -k "$2" -c listen_addresses= -c max_connections=200 \
        -c fsync=off -c full_page_writes=off >"$2/server.log" 2>&1 &
        pg=$!; read -r _line; kill -INT "$pg"; wait "$pg"; rm -rf "$2""#;
    let mut watchdog = as_user("sh")
        .args(["-c", script, "sh"])
        .arg(&data)
        .arg(dir)
        .arg(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let stdin = watchdog.stdin.take();
    let ready = (0..300).any(|_| {
        let ok = std::process::Command::new(bin.join("pg_isready"))
            .arg("-q")
            .arg("-h")
            .arg(dir)
            .args(["-U", "gavel", "-d", "postgres"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    if !ready {
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        return Err(format!("postgres did not become ready in 30 s: {log}"));
    }
    Ok(Cluster {
        admin_url: format!("postgresql:///postgres?user=gavel&host={}", dir.display()),
        _watchdog: stdin,
    })
}

/// A fresh, empty database for one test.
struct TestDb {
    url: String,
    name: String,
    admin_url: String,
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to the test database: {e}"));
    tokio::spawn(conn);
    client
}

/// The URL of database `db` on the same server as `admin` (a URL naming database `postgres`
/// or another one).
fn with_database(admin: &str, db: &str) -> String {
    let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut url = format!("{}/{db}", &base[..path_start]);
    if !query.is_empty() {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// A new database, or `None` (after printing why) when no PostgreSQL can be had here.
async fn test_db() -> Option<TestDb> {
    let cluster = tokio::task::spawn_blocking(|| CLUSTER.get_or_init(start_cluster).as_ref())
        .await
        .unwrap();
    let cluster = match cluster {
        Ok(c) => c,
        Err(reason) => {
            if std::env::var("GAVEL_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                panic!("GAVEL_REQUIRE_POSTGRES=1 but no PostgreSQL: {reason}");
            }
            eprintln!("skipping a Postgres test: {reason}");
            return None;
        }
    };
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!(
        "gavel_test_{}_{nanos:x}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    connect(&cluster.admin_url)
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    Some(TestDb {
        url: with_database(&cluster.admin_url, &name),
        name,
        admin_url: cluster.admin_url.clone(),
    })
}

impl TestDb {
    async fn sql(&self) -> tokio_postgres::Client {
        connect(&self.url).await
    }

    async fn count(&self, table: &str) -> i64 {
        self.sql()
            .await
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Waits (at most 5 s) until `table` has `n` rows; returns the last count.
    async fn wait_count(&self, table: &str, n: i64) -> i64 {
        let mut c = -1;
        for _ in 0..100 {
            c = self.count(table).await;
            if c == n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        c
    }

    async fn store(&self, claim_ttl_s: f64) -> Arc<PgStore> {
        let options = PgOptions {
            pool_size: 8,
            claim_ttl: secs(claim_ttl_s),
        };
        Arc::new(PgStore::connect(&self.url, &options).await.unwrap())
    }

    /// A daemon replica with its own connection pool and claims.
    async fn replica(&self, mock: &MockJudge, claim_ttl_s: f64) -> Gavel {
        let cfg = mock.config(Path::new("unused-sled-path"));
        Gavel::start_with_store(cfg, self.store(claim_ttl_s).await).await
    }

    async fn drop_db(self) {
        connect(&self.admin_url)
            .await
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .unwrap();
    }
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

// ---------------------------------------------------------------------------------------------
// Tests

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
}

#[tokio::test]
async fn two_replicas_scoring_the_same_group_at_once_make_one_judge_call() {
    let Some(db) = test_db().await else { return };
    let mock = MockJudge::start().await;
    // The first judge call is slow, so the second replica arrives while it is in flight.
    mock.push(Behaviour::Hang(secs(0.8)));
    let a = db.replica(&mock, 30.0).await;
    let b = db.replica(&mock, 30.0).await;
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
        .job_checkpoint("job", &["u1".into(), "u2".into()], (120, 7))
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
        .job_reopen("job", &["u1".into()], (120, 0))
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
