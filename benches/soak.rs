//! Soak: the `gavel` binary as a daemon (its own process, so its memory is its own) under 64
//! clients for a fixed time, against the in-process mock judge, on a mix of valid groups (a
//! bounded set, so most become cache hits), invalid bodies, oversized bodies, clients that stall
//! in their headers and clients that stall in their bodies. Reports requests served, answers by
//! status and error type, and the daemon's resident memory (VmRSS) before the load, after a
//! warm-up, in the middle and at the end.
//!
//! ```sh
//! cargo bench --bench soak                         # 60 s of load (BENCHMARKS.md "Soak")
//! GAVEL_BENCH_SECONDS=20 cargo bench --bench soak
//! ```
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it runs for 3 s as a smoke test.
//! The summary is also written to `target/soak.json`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{marked_group, MockJudge, MOCK_KEY};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const CLIENTS: usize = 64;
/// Distinct valid groups: the verdict store stops growing once each has been judged.
const DISTINCT_GROUPS: usize = 200;
/// The daemon's limits in this run: small, so refusals are exercised quickly.
const MAX_BODY: usize = 1 << 20;
const STALL_TIMEOUT_S: f64 = 2.0;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Sends `bytes` on a fresh connection and reads until the daemon answers or closes; returns
/// the status line's code, or "closed" when it closed without an answer.
async fn raw(addr: &str, bytes: &[u8]) -> String {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return "connect_failed".into();
    };
    if s.write_all(bytes).await.is_err() {
        return "write_failed".into();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if got.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .is_err()
    {
        return "no_answer_in_30s".into();
    }
    let text = String::from_utf8_lossy(&got);
    match text.split_whitespace().nth(1) {
        Some(code) => code.to_string(),
        None => "closed".into(),
    }
}

/// One request of kind `k` (0..10); returns the outcome's label.
async fn one(client: &reqwest::Client, base: &str, addr: &str, k: usize, n: usize) -> String {
    let post = |body: Vec<u8>| {
        client
            .post(format!("{base}/v1/score_group"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let answer = match k {
        // Valid groups, from a bounded set.
        0..=5 => {
            let i = n % DISTINCT_GROUPS;
            let g = marked_group(&[(i % 10) as f64 / 10.0, (i / 10) as f64 / 20.0]);
            post(serde_json::to_vec(&g).unwrap()).await
        }
        // Not JSON, and JSON of the wrong shape.
        6 => post(b"{\"trajectories\": [".to_vec()).await,
        7 => post(serde_json::to_vec(&json!({"trajectories": "no"})).unwrap()).await,
        // Over max_body_bytes.
        8 => post(vec![b' '; MAX_BODY + 1]).await,
        // A client that stalls in its headers, or in its body.
        _ if n.is_multiple_of(2) => {
            let head = "POST /v1/score_group HTTP/1.1\r\nHost: gavel\r\n";
            return format!("stalled headers: {}", raw(addr, head.as_bytes()).await);
        }
        _ => {
            let head = "POST /v1/score_group HTTP/1.1\r\nHost: gavel\r\n\
                        content-length: 5000\r\nconnection: close\r\n\r\n{\"traj";
            return format!("stalled body: {}", raw(addr, head.as_bytes()).await);
        }
    };
    match answer {
        Err(e) => format!("client error: {e}"),
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            match body["error"]["type"].as_str() {
                Some(t) => format!("{status} {t}"),
                None => format!("{status}"),
            }
        }
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let seconds: u64 = std::env::var("GAVEL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if bench { 60 } else { 3 });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run(seconds));
}

async fn run(seconds: u64) {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gavel.toml");
    std::fs::write(
        &cfg,
        format!(
            "default_judge = \"mock\"\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\n\
             model = \"mock\"\napi_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = 1\n\
             max_backoff_s = 0.05\n[server]\nmax_body_bytes = {MAX_BODY}\n\
             header_read_timeout_s = {STALL_TIMEOUT_S}\nbody_read_timeout_s = {STALL_TIMEOUT_S}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let mut daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GAVEL_CONFIG", &cfg)
        .env("GAVEL_STORE", dir.path().join("store"))
        .env("GAVEL_TEST_MOCK_KEY", MOCK_KEY)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = daemon.id().unwrap();
    let mut lines = BufReader::new(daemon.stdout.take().unwrap()).lines();
    let line = lines
        .next_line()
        .await
        .unwrap()
        .expect("gavel serve prints its address");
    let base = line.trim_start_matches("gavel listening on ").to_string();
    let addr = base.trim_start_matches("http://").to_string();
    let client = reqwest::Client::new();

    let mut rss = vec![("before load", rss_kib(pid))];
    let outcomes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (client, base, addr) = (client.clone(), base.clone(), addr.clone());
            let (outcomes, stop) = (outcomes.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = c;
                while !stop.load(Ordering::Relaxed) {
                    let label = one(&client, &base, &addr, n % 10, n / 10).await;
                    *outcomes.lock().unwrap().entry(label).or_default() += 1;
                    n += CLIENTS;
                }
            })
        })
        .collect();
    let total = Duration::from_secs(seconds);
    let warm = total / 6;
    tokio::time::sleep(warm).await;
    rss.push(("after warm-up", rss_kib(pid)));
    tokio::time::sleep(total / 2 - warm).await;
    rss.push(("middle", rss_kib(pid)));
    tokio::time::sleep(total - total / 2).await;
    rss.push(("end", rss_kib(pid)));
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The daemon still answers after the load.
    let health = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    daemon.kill().await.unwrap();

    let outcomes = outcomes.lock().unwrap().clone();
    let served: u64 = outcomes.values().sum();
    let steady: Vec<u64> = rss[1..].iter().map(|(_, k)| *k).collect();
    let (lo, hi) = (*steady.iter().min().unwrap(), *steady.iter().max().unwrap());
    let drift = (hi - lo) as f64 / lo.max(1) as f64;
    println!(
        "soak: {CLIENTS} clients, {elapsed:.1} s, {served} requests ({:.0}/s)",
        served as f64 / elapsed
    );
    for (label, n) in &outcomes {
        println!("  {n:>8}  {label}");
    }
    for (at, kib) in &rss {
        println!("  VmRSS {at:<13} {:>8.1} MiB", *kib as f64 / 1024.0);
    }
    println!(
        "  RSS spread after warm-up: {:.1}%; /healthz after: {health:?}",
        drift * 100.0
    );
    let report = json!({
        "clients": CLIENTS, "seconds": elapsed, "requests": served, "outcomes": outcomes,
        "rss_kib": rss.iter().map(|(at, k)| json!({"at": at, "kib": k})).collect::<Vec<_>>(),
        "rss_spread_after_warmup": drift, "judge_calls": mock.calls(),
    });
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak.json");
    let _ = std::fs::write(out, serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(health.ok(), Some(200), "the daemon stopped answering");
    assert!(
        !outcomes
            .keys()
            .any(|k| k.starts_with("5") || k.contains("no_answer")),
        "5xx or unanswered requests under load: {outcomes:?}"
    );
}
