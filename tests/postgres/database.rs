//! A throwaway PostgreSQL for the tests, and a fresh database per test.
//!
//! The server: `GAVEL_TEST_DATABASE_URL` (a superuser URL), else a cluster started here from the
//! PostgreSQL binaries (`initdb`, `postgres`; as the `postgres` user when run as root, since
//! initdb refuses root) on a Unix socket in a temp dir — no port to collide with — which a
//! watchdog shell stops and removes when this test binary exits, however it exits.
//!
//! The TLS tests get a second cluster of their own ([`tls_cluster`]), started only when they
//! run: TLS on, with a CA and server certificate the `openssl` command makes at start, and TCP
//! on 127.0.0.1, which a Unix socket cannot test.

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
    /// The directory holding the cluster (and its Unix socket).
    dir: PathBuf,
    /// The TCP port on 127.0.0.1 (TLS clusters only).
    port: Option<u16>,
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
            dir: PathBuf::new(),
            port: None,
            _watchdog: None,
        });
    }
    start_local(false)
}

/// A cluster started here; with `tls`, TLS on and listening on 127.0.0.1 too.
fn start_local(tls: bool) -> Result<Cluster, String> {
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
    let tag = if tls { "-tls" } else { "" };
    let dir = base.join(format!("gavel-pg{tag}-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let started = start_in(&dir, &bin, user, tls);
    if started.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    started
}

/// Creates and starts a cluster in `dir`, owned by `user` (when running as root).
fn start_in(dir: &Path, bin: &Path, user: Option<&str>, tls: bool) -> Result<Cluster, String> {
    let owner = user.map(|u| (id_of(&["-u", u]), id_of(&["-g", u])));
    let chown = |path: &Path| match owner {
        Some((uid, gid)) => std::os::unix::fs::chown(path, uid, gid)
            .map_err(|e| format!("chown {}: {e}", path.display())),
        None => Ok(()),
    };
    chown(dir)?;
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
    // Unix socket only (no port to collide with another server on this machine), unless TLS is
    // to be tested.
    let (port, server_args) = if tls {
        let (port, args) = set_up_tls(dir, &data)?;
        for f in [
            dir.join("server.crt"),
            dir.join("server.key"),
            data.join("pg_hba.conf"),
        ] {
            chown(&f)?;
        }
        (Some(port), args)
    } else {
        (
            None,
            vec!["-c".to_string(), "listen_addresses=".to_string()],
        )
    };
    let script = r#"data=$1 dir=$2 bin=$3; shift 3
        "$bin/postgres" -D "$data" -k "$dir" -c max_connections=200 \
        -c fsync=off -c full_page_writes=off "$@" >"$dir/server.log" 2>&1 &
        pg=$!; read -r _line; kill -INT "$pg"; wait "$pg"; rm -rf "$dir""#;
    let mut watchdog = as_user("sh")
        .args(["-c", script, "sh"])
        .arg(&data)
        .arg(dir)
        .arg(bin)
        .args(&server_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let stdin = watchdog.stdin.take();
    let port_arg = port.unwrap_or(5432).to_string();
    let ready = (0..300).any(|_| {
        let ok = std::process::Command::new(bin.join("pg_isready"))
            .arg("-q")
            .arg("-h")
            .arg(dir)
            .args(["-p", &port_arg, "-U", "gavel", "-d", "postgres"])
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
        admin_url: format!(
            "postgresql:///postgres?user=gavel&host={}&port={port_arg}",
            dir.display()
        ),
        dir: dir.to_path_buf(),
        port,
        _watchdog: stdin,
    })
}

/// Makes a CA and a server certificate for `localhost` (not for 127.0.0.1, so that
/// `verify-full` to the address fails) in `dir`, and configures `data`'s cluster to serve TLS
/// on a free 127.0.0.1 port: `gavel` may connect over TCP only with TLS, and `gavel_plain`
/// (which the caller creates) only without. Returns the port and the server's arguments.
fn set_up_tls(dir: &Path, data: &Path) -> Result<(u16, Vec<String>), String> {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run openssl (needed for the TLS tests): {e}"))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = ["req", "-x509", "-days", "2", "-subj", "/CN=gavel test CA"];
    let ca_out = ["-keyout", "ca.key", "-out", "ca.crt"];
    openssl(&[&ca[..], &ec[..], &ca_out[..]].concat())?;
    let csr = [
        "req",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ];
    openssl(&[&csr[..], &ec[..]].concat())?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ])?;
    // The server refuses a key file others may read.
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(
        data.join("pg_hba.conf"),
        "local     all all                     trust\n\
         hostssl   all gavel       127.0.0.1/32 scram-sha-256\n\
         hostnossl all gavel_plain 127.0.0.1/32 scram-sha-256\n",
    )
    .map_err(|e| e.to_string())?;
    // A port the kernel just handed out and took back: free unless another process takes it
    // in the moment before the server binds it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let args = [
        "listen_addresses=127.0.0.1".to_string(),
        format!("port={port}"),
        "ssl=on".to_string(),
        format!("ssl_cert_file={}", dir.join("server.crt").display()),
        format!("ssl_key_file={}", dir.join("server.key").display()),
    ];
    Ok((
        port,
        args.into_iter()
            .flat_map(|a| ["-c".to_string(), a])
            .collect(),
    ))
}

static TLS_CLUSTER: OnceLock<Result<TlsCluster, String>> = OnceLock::new();

/// The TLS cluster: its `gavel` role logs in over TCP with a password, and only over TLS;
/// `gavel_plain` (a superuser too) only without TLS.
pub struct TlsCluster {
    cluster: Cluster,
}

impl TlsCluster {
    pub const PASSWORD: &'static str = "tls-test-pw";

    /// The CA certificate that signed the server's, and the server's own certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.cluster.dir.join("ca.crt")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.cluster.dir.join("server.crt")
    }

    /// A URL of database `db` over TCP as `user`, with `options` (`k=v&k=v`) appended.
    pub fn tcp_url(&self, host: &str, user: &str, db: &str, options: &str) -> String {
        let port = self.cluster.port.expect("a TLS cluster listens on TCP");
        format!(
            "postgres://{user}:{}@{host}:{port}/{db}?{options}",
            Self::PASSWORD
        )
    }

    /// A URL of database `db` over the Unix socket (no password), with `options` appended.
    pub fn socket_url(&self, db: &str, options: &str) -> String {
        format!("{}&{options}", with_database(&self.cluster.admin_url, db))
    }

    /// Superuser SQL over the Unix socket.
    pub async fn admin(&self) -> tokio_postgres::Client {
        connect(&self.cluster.admin_url).await
    }
}

fn start_tls_cluster() -> Result<TlsCluster, String> {
    let cluster = start_local(true)?;
    let bin = pg_bin_dir().expect("found when the cluster started");
    let sql = format!(
        "ALTER ROLE gavel PASSWORD '{pw}'; CREATE ROLE gavel_plain SUPERUSER LOGIN PASSWORD '{pw}';",
        pw = TlsCluster::PASSWORD
    );
    let out = std::process::Command::new(bin.join("psql"))
        .args([
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-c",
            &sql,
            &cluster.admin_url,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !out.status.success() {
        return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(TlsCluster { cluster })
}

/// The TLS cluster, or `None` (after printing why) when it cannot be had here: no PostgreSQL
/// binaries (a `GAVEL_TEST_DATABASE_URL` server cannot be reconfigured for TLS) or no `openssl`.
pub async fn tls_cluster() -> Option<&'static TlsCluster> {
    let cluster =
        tokio::task::spawn_blocking(|| TLS_CLUSTER.get_or_init(start_tls_cluster).as_ref())
            .await
            .unwrap();
    match cluster {
        Ok(c) => Some(c),
        Err(reason) => {
            if std::env::var("GAVEL_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                panic!("GAVEL_REQUIRE_POSTGRES=1 but no TLS PostgreSQL cluster: {reason}");
            }
            eprintln!("skipping a Postgres TLS test: {reason}");
            None
        }
    }
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
