//! Load benchmarks of the daemon over real HTTP on 127.0.0.1, against the in-process mock judge:
//!
//! 1. Latency gavel adds per group on a cache miss: the wall time of `POST /v1/score_group` minus
//!    the wall time of the exact judge request gavel sent (recorded by the mock), replayed straight
//!    to the mock with reqwest. Sequential, then at concurrency 64 (the replays at the same
//!    concurrency). Distinct groups (each carries an `[episode N]` tag in its user turn), so every
//!    request is a cache miss; a fresh temporary store.
//! 2. Cache-hit throughput and latency: the corpus is scored once to warm the cache, then 64
//!    client tasks send cache hits for a fixed time with keep-alive connections.
//!
//! ```sh
//! cargo bench --bench load                     # about 40 s
//! GAVEL_BENCH_SECONDS=5 cargo bench --bench load
//! ```
//!
//! Groups come from `benches/data/groups.jsonl` (see `benches/data/make_groups.py`). Client, daemon
//! and mock judge share one tokio runtime with two worker threads on the same machine: every
//! figure includes the client's own CPU use. Without `--bench` (as `cargo test --all-targets`
//! runs it) every phase runs briefly, as a smoke test.

// The allocator the `gavel` binary ships with, so the figures are the daemon's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Gavel, MockJudge};
use serde_json::Value;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/data/groups.jsonl");

/// One corpus group: its kind label and the gavel request body (labels stripped).
struct Group {
    kind: String,
    body: Value,
}

fn load_corpus() -> Vec<Group> {
    let text = std::fs::read_to_string(CORPUS)
        .unwrap_or_else(|e| panic!("{CORPUS}: {e} (run python3 benches/data/make_groups.py)"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("corpus line is JSON");
            let obj = v.as_object_mut().unwrap();
            let kind = obj.remove("kind").unwrap().as_str().unwrap().to_string();
            obj.remove("id");
            Group { kind, body: v }
        })
        .collect()
}

/// A copy of `body` whose every user turn ends with `[episode k]`: a distinct group, the same
/// shape and size.
fn with_episode(body: &Value, k: usize) -> Value {
    let mut b = body.clone();
    for t in b["trajectories"].as_array_mut().unwrap() {
        for m in t["messages"].as_array_mut().unwrap() {
            if m["role"] == "user" {
                let c = m["content"].as_str().unwrap();
                m["content"] = Value::String(format!("{c}\n[episode {k:06}]"));
            }
        }
    }
    b
}

/// The episode tag in a recorded judge request.
fn episode_of(req: &Value) -> usize {
    let text = req["messages"].to_string();
    let i = text
        .find("[episode ")
        .expect("judge request carries an episode tag");
    text[i + 9..i + 15].parse().unwrap()
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

use common::timed_post as post;

fn mock_url(mock: &MockJudge) -> String {
    format!("{}/chat/completions", mock.base_url())
}

/// Runs `jobs` through `workers` concurrent tasks (each takes the next job when free); returns
/// (job index, seconds) for each, and the wall time of the whole run.
async fn run_jobs(
    c: &reqwest::Client,
    url: &str,
    jobs: Vec<Vec<u8>>,
    workers: usize,
) -> (Vec<(usize, f64)>, f64) {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (c, url, jobs, next) = (c.clone(), url.to_string(), jobs.clone(), next.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs.len() {
                        return out;
                    }
                    let (status, body, s) = post(&c, &url, jobs[i].clone()).await;
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    out.push((i, s));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    (all, start.elapsed().as_secs_f64())
}

struct Sizes {
    seq_groups: usize,
    conc_groups: usize,
    concurrency: usize,
    hammer: Duration,
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1000.0)
}

/// Figure 1 at one concurrency: every group through gavel, then every recorded judge request
/// replayed to the mock at the same concurrency.
async fn added_latency(
    corpus: &[Group],
    groups: usize,
    concurrency: usize,
    episode_base: usize,
) -> BTreeMap<&'static str, String> {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockJudge::start().await;
    let gavel = Gavel::start(mock.config(dir.path())).await;
    let c = client();
    let kinds: Vec<&str> = (0..groups)
        .map(|k| corpus[k % corpus.len()].kind.as_str())
        .collect();
    let bodies: Vec<Vec<u8>> = (0..groups)
        .map(|k| {
            serde_json::to_vec(&with_episode(
                &corpus[k % corpus.len()].body,
                episode_base + k,
            ))
            .unwrap()
        })
        .collect();
    // Warm both paths (connections, lazy statics such as the tokenizer) outside the figures.
    let warm = serde_json::to_vec(&with_episode(&corpus[0].body, 999_999)).unwrap();
    post(&c, &format!("{}/v1/score_group", gavel.url), warm).await;
    let url = format!("{}/v1/score_group", gavel.url);
    let (through_gavel, gavel_wall) = run_jobs(&c, &url, bodies, concurrency).await;
    let recorded = mock.requests();
    assert_eq!(
        recorded.len(),
        groups + 1,
        "one judge call per group (all cache misses)"
    );
    let mut replay_of = vec![Vec::new(); groups];
    for r in &recorded[1..] {
        let k = episode_of(r) - episode_base;
        replay_of[k] = serde_json::to_vec(r).unwrap();
    }
    post(
        &c,
        &mock_url(&mock),
        serde_json::to_vec(&recorded[0]).unwrap(),
    )
    .await;
    let (raw, raw_wall) = run_jobs(&c, &mock_url(&mock), replay_of, concurrency).await;
    let mut gavel_s = vec![0.0; groups];
    let mut raw_s = vec![0.0; groups];
    for (i, s) in through_gavel {
        gavel_s[i] = s;
    }
    for (i, s) in raw {
        raw_s[i] = s;
    }
    let added: Vec<f64> = (0..groups).map(|i| gavel_s[i] - raw_s[i]).collect();
    let mut per_kind: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (i, a) in added.iter().enumerate() {
        per_kind.entry(kinds[i]).or_default().push(*a);
    }
    let (added, g, r) = (sorted(added), sorted(gavel_s), sorted(raw_s));
    let mut row = BTreeMap::new();
    row.insert("groups", groups.to_string());
    row.insert("concurrency", concurrency.to_string());
    row.insert("added_p50", ms(pct(&added, 0.5)));
    row.insert("added_p99", ms(pct(&added, 0.99)));
    row.insert("gavel_p50", ms(pct(&g, 0.5)));
    row.insert("gavel_p99", ms(pct(&g, 0.99)));
    row.insert("raw_p50", ms(pct(&r, 0.5)));
    row.insert("raw_p99", ms(pct(&r, 0.99)));
    row.insert("p50_diff", ms(pct(&g, 0.5) - pct(&r, 0.5)));
    row.insert("gavel_rate", format!("{:.0}", groups as f64 / gavel_wall));
    row.insert("raw_rate", format!("{:.0}", groups as f64 / raw_wall));
    let kinds_text: Vec<String> = per_kind
        .into_iter()
        .map(|(k, v)| {
            let v = sorted(v);
            format!("{k} {}/{}", ms(pct(&v, 0.5)), ms(pct(&v, 0.99)))
        })
        .collect();
    row.insert("per_kind", kinds_text.join("; "));
    gavel.stop().await;
    row
}

/// Figure 2 on one set of groups: warm the cache, then `workers` tasks send hits for `dur`.
async fn cache_hits(label: &str, groups: &[&Group], workers: usize, dur: Duration) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockJudge::start().await;
    let gavel = Gavel::start(mock.config(dir.path())).await;
    let c = client();
    let url = format!("{}/v1/score_group", gavel.url);
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        groups
            .iter()
            .map(|g| serde_json::to_vec(&g.body).unwrap())
            .collect(),
    );
    for b in bodies.iter() {
        let (status, body, _) = post(&c, &url, b.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let (_, body, _) = post(&c, &url, bodies[0].clone()).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["usage"]["cache_hits"], 1, "second request is a cache hit");
    let judge_calls = mock.calls();
    let mean_body =
        bodies.iter().map(Vec::len).sum::<usize>() as f64 / bodies.len() as f64 / 1024.0;

    let start = Instant::now();
    let cpu_start = cpu_seconds();
    let deadline = start + dur;
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (c, url, bodies) = (c.clone(), url.clone(), bodies.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = w;
                while Instant::now() < deadline {
                    let (status, body, s) = post(&c, &url, bodies[i % bodies.len()].clone()).await;
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    lat.push(s);
                    i += workers;
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.await.unwrap());
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_start;
    assert_eq!(
        mock.calls(),
        judge_calls,
        "every hammered request was a cache hit"
    );
    gavel.stop().await;
    let n = lat.len();
    let lat = sorted(lat);
    vec![
        label.to_string(),
        groups.len().to_string(),
        format!("{mean_body:.1}"),
        n.to_string(),
        format!("{:.1}", wall),
        format!("{:.0}", n as f64 / wall),
        ms(pct(&lat, 0.5)),
        ms(pct(&lat, 0.99)),
        ms(pct(&lat, 0.999)),
        format!("{:.0}", cpu * 1e6 / n as f64),
        format!("{:.0}", 2.0 * n as f64 / cpu),
    ]
}

/// CPU seconds this process (client, daemon and mock together) has used, from /proc/self/stat.
/// Wall-clock rates drop when other work shares the cores; CPU per request does not (much), so
/// the table reports both: `2 / (CPU per hit)` is the rate two dedicated cores would sustain.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name; clock ticks of
    // 1/100 s on Linux.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn table(head: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", head.join(" | "));
    println!("|{}", "---|".repeat(head.len()));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
    println!();
}

async fn run(sizes: Sizes, full: bool) {
    let corpus = load_corpus();
    println!(
        "# gavel load benchmark ({} corpus groups, {} CPUs, {} mode, load average {})\n",
        corpus.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if full { "full" } else { "smoke" },
        loadavg()
    );

    println!("## 1. Latency gavel adds per group (cache misses), ms\n");
    let seq = added_latency(&corpus, sizes.seq_groups, 1, 0).await;
    let conc = added_latency(&corpus, sizes.conc_groups, sizes.concurrency, 100_000).await;
    let cols = [
        "concurrency",
        "groups",
        "added_p50",
        "added_p99",
        "gavel_p50",
        "gavel_p99",
        "raw_p50",
        "raw_p99",
        "p50_diff",
        "gavel_rate",
        "raw_rate",
    ];
    let rows: Vec<Vec<String>> = [&seq, &conc]
        .iter()
        .map(|r| cols.iter().map(|c| r[c].clone()).collect())
        .collect();
    table(&cols, &rows);
    println!("added p50/p99 per kind, sequential: {}", seq["per_kind"]);
    println!(
        "added p50/p99 per kind, concurrency {}: {}\n",
        sizes.concurrency, conc["per_kind"]
    );

    println!(
        "## 2. Cache hits, {} client tasks for {:.1} s each\n",
        sizes.concurrency,
        sizes.hammer.as_secs_f64()
    );
    let all: Vec<&Group> = corpus.iter().collect();
    let agent: Vec<&Group> = corpus.iter().filter(|g| g.kind == "agent_sheet").collect();
    let short: Vec<&Group> = corpus.iter().filter(|g| g.kind == "short").collect();
    let mut rows = Vec::new();
    for (label, set) in [
        ("whole corpus", &all),
        ("agent_sheet (8 rollouts)", &agent),
        ("short", &short),
    ] {
        rows.push(cache_hits(label, set, sizes.concurrency, sizes.hammer).await);
    }
    table(
        &[
            "groups sent",
            "distinct",
            "mean body KiB",
            "requests",
            "seconds",
            "groups/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "CPU µs per hit",
            "groups/s per 2 CPU-s",
        ],
        &rows,
    );
}

/// The machine's load average (1, 5, 15 min) from /proc/loadavg: other work on the 2 cores skews
/// every figure, so the report states it.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it.
    let full = std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("GAVEL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let sizes = if full {
        Sizes {
            seq_groups: 270,
            conc_groups: 640,
            concurrency: 64,
            hammer: Duration::from_secs_f64(secs),
        }
    } else {
        Sizes {
            seq_groups: 27,
            conc_groups: 64,
            concurrency: 64,
            hammer: Duration::from_millis(300),
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(sizes, full));
}
