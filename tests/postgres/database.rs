//! A throwaway PostgreSQL for the tests, and a fresh database per test.
//!
//! The server: `GAVEL_TEST_DATABASE_URL` (a superuser URL), else a cluster started here from the
//! PostgreSQL binaries (`initdb`, `postgres`; as the `postgres` user when run as root, since
//! initdb refuses root) on a Unix socket in a temp dir — no port to collide with — which a
//! watchdog shell stops and removes when this test binary exits, however it exits.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use gavel::store::{PgOptions, PgStore};

use crate::common::{Gavel, MockJudge};
use crate::secs;

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
    // The cluster's user must reach the directory: under root, a TMPDIR inside /root would not
    // do, /tmp does.
    let base = if user.is_some() {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("gavel-pg-{}-{nanos:x}", std::process::id()));
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
pub struct TestDb {
    pub url: String,
    pub name: String,
    admin_url: String,
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
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

/// The URL of the server's `postgres` database (after [`test_db`] found a server).
pub fn admin_url() -> String {
    match CLUSTER.get() {
        Some(Ok(c)) => c.admin_url.clone(),
        _ => panic!("no PostgreSQL started"),
    }
}

/// A new database, or `None` (after printing why) when no PostgreSQL can be had here.
pub async fn test_db() -> Option<TestDb> {
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
    pub async fn sql(&self) -> tokio_postgres::Client {
        connect(&self.url).await
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.sql()
            .await
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Waits (at most 5 s) until `table` has `n` rows; returns the last count.
    pub async fn wait_count(&self, table: &str, n: i64) -> i64 {
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

    pub async fn store(&self, claim_ttl_s: f64) -> Arc<PgStore> {
        let options = PgOptions {
            pool_size: 8,
            claim_ttl: secs(claim_ttl_s),
        };
        Arc::new(PgStore::connect(&self.url, &options).await.unwrap())
    }

    /// A daemon replica with its own connection pool and claims.
    pub async fn replica(&self, mock: &MockJudge, claim_ttl_s: f64) -> Gavel {
        let cfg = mock.config(Path::new("unused-sled-path"));
        Gavel::start_with_store(cfg, self.store(claim_ttl_s).await).await
    }

    pub async fn drop_db(self) {
        connect(&self.admin_url)
            .await
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .unwrap();
    }
}
