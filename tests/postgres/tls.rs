//! TLS to the Postgres store, against a cluster that serves TLS on 127.0.0.1 and lets `gavel`
//! in over TCP only with it (`hostssl`), `gavel_plain` only without (`hostnossl`). Whether a
//! connection is encrypted is read on the server's side, from `pg_stat_ssl`, for the store's
//! own pooled connections (told apart by `application_name`).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gavel::store::{PgOptions, PgStore};

use crate::common::{marked_group, Gavel, MockJudge};
use crate::database::{tls_cluster, TlsCluster};

/// A fresh database on the TLS cluster.
async fn fresh_db(cluster: &TlsCluster) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "gavel_tls_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    cluster
        .admin()
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    name
}

async fn open(url: &str) -> Result<Arc<PgStore>, String> {
    let options = PgOptions {
        pool_size: 2,
        ..PgOptions::default()
    };
    PgStore::connect(url, &options)
        .await
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// Whether each open connection named `app` is encrypted, as the server sees it.
async fn encrypted(cluster: &TlsCluster, app: &str) -> Vec<bool> {
    cluster
        .admin()
        .await
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid
             WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn connections_are_encrypted_as_sslmode_says() {
    let Some(cluster) = tls_cluster().await else {
        return;
    };
    let db = fresh_db(cluster).await;
    let url = |user: &str, options: &str| cluster.tcp_url("127.0.0.1", user, &db, options);

    // `require`: encrypted, and the password exchange bound to the TLS channel (the server
    // checks the binding, so a wrong certificate hash fails the login). Nothing is verified:
    // the certificate names localhost, not 127.0.0.1, and no CA was given.
    let store = open(&url(
        "gavel",
        "sslmode=require&channel_binding=require&application_name=gv_require",
    ))
    .await
    .unwrap_or_else(|e| panic!("sslmode=require connects: {e}"));
    assert_eq!(encrypted(cluster, "gv_require").await, [true]);

    // A whole request through a daemon on that store: judged, stored, then reused.
    let mock = MockJudge::start().await;
    let daemon = Gavel::start_with_store(mock.config(Path::new("unused")), store.clone()).await;
    let group = marked_group(&[0.25, 0.75]);
    for hits in [0, 1] {
        let (s, r) = daemon.post("/v1/score_group", &group).await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["usage"]["cache_hits"], hits, "{r}");
    }
    assert_eq!(mock.calls(), 1);
    daemon.stop().await;

    // No sslmode is libpq's `prefer`: encrypted when the server offers TLS.
    let _prefer = open(&url("gavel", "application_name=gv_default"))
        .await
        .unwrap_or_else(|e| panic!("the default connects: {e}"));
    assert_eq!(encrypted(cluster, "gv_default").await, [true]);

    // `disable` where the server takes only TLS: refused, saying why, without the password.
    let e = open(&url("gavel", "sslmode=disable&application_name=gv_refused"))
        .await
        .unwrap_err();
    assert!(
        e.contains("no pg_hba.conf entry") && e.contains("no encryption"),
        "{e}"
    );
    assert!(!e.contains(TlsCluster::PASSWORD), "{e}");

    // `disable` where plaintext is allowed: a plaintext connection.
    let _plain = open(&url(
        "gavel_plain",
        "sslmode=disable&application_name=gv_plain",
    ))
    .await
    .unwrap_or_else(|e| panic!("sslmode=disable connects: {e}"));
    assert_eq!(encrypted(cluster, "gv_plain").await, [false]);

    // A Unix socket never carries TLS (the server refuses it there); as in libpq, `require`
    // does not make that an error.
    let _socket = open(&cluster.socket_url(&db, "sslmode=require&application_name=gv_socket"))
        .await
        .unwrap_or_else(|e| panic!("sslmode=require over a Unix socket connects: {e}"));
    assert_eq!(encrypted(cluster, "gv_socket").await, [false]);
}

#[tokio::test]
async fn certificates_are_checked_as_sslmode_says() {
    let Some(cluster) = tls_cluster().await else {
        return;
    };
    let db = fresh_db(cluster).await;
    let ca = cluster.ca_cert().display().to_string();
    let url = |host: &str, options: String| cluster.tcp_url(host, "gavel", &db, &options);
    // The certificate names `localhost`: that name, reached at 127.0.0.1 without a lookup.
    let localhost_url = |options: String| {
        let options = format!("hostaddr=127.0.0.1&{options}");
        cluster.tcp_url("localhost", "gavel", &db, &options)
    };

    // verify-full: the chain up to the CA, and the name.
    let _full = open(&localhost_url(format!(
        "sslmode=verify-full&sslrootcert={ca}&application_name=gv_full"
    )))
    .await
    .unwrap_or_else(|e| panic!("verify-full to the certificate's name connects: {e}"));
    assert_eq!(encrypted(cluster, "gv_full").await, [true]);
    let e = open(&url(
        "127.0.0.1",
        format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await
    .unwrap_err();
    assert!(e.contains("not valid for name"), "{e}");

    // verify-ca: the chain only, so the address will do.
    let _ca = open(&url(
        "127.0.0.1",
        format!("sslmode=verify-ca&sslrootcert={ca}&application_name=gv_ca"),
    ))
    .await
    .unwrap_or_else(|e| panic!("verify-ca connects: {e}"));
    assert_eq!(encrypted(cluster, "gv_ca").await, [true]);

    // A root that did not sign the server's certificate (here, that certificate itself) is
    // refused; `require` with a root certificate checks the chain too, as in libpq.
    let wrong = cluster.server_cert().display().to_string();
    for mode in ["verify-ca", "require"] {
        let e = open(&url(
            "127.0.0.1",
            format!("sslmode={mode}&sslrootcert={wrong}"),
        ))
        .await
        .unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{mode}: {e}");
    }
    // The system's trust store does not know the test CA.
    let e = open(&localhost_url("sslrootcert=system".to_string()))
        .await
        .unwrap_err();
    assert!(e.contains("invalid peer certificate"), "{e}");
}
