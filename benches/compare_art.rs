//! Judge prompt tokens and added latency: gavel against OpenPipe ART's RULER, on the benchmark
//! corpus `benches/data/groups.jsonl`, both judged by the same in-process mock judge on 127.0.0.1.
//!
//!     benches/compare_art.sh                 # installs ART in target/art-venv, then runs this
//!     cargo bench --bench compare_art        # gavel's side only when target/art-venv is missing
//!
//! 3. Tokens per group with and without dedup, from gavel's `POST /v1/render`.
//! 4. Every group through gavel (`POST /v1/score_group`, a fresh store each round, so every call
//!    is a cache miss) and through ART (`benches/art_ruler.py` calls `ruler_score_group` with the
//!    judge `openai/art-ruler` at the mock). The mock records both requests, told apart by model
//!    name. (a) Prompt tokens of each recorded request, counted alike with
//!    `gavel::domain::prompt::count_tokens` (o200k_base, OpenAI's message framing). (b) The latency each
//!    adds: its wall time (gavel: the HTTP call to the daemon; ART: the `ruler_score_group` call
//!    timed in Python) minus the wall time of its recorded judge request replayed to the mock with
//!    reqwest. Medians over rounds and replays. For attribution, the time `count_tokens` takes
//!    on the two prompts gavel counts per cache miss (as sent, and without dedup) is measured
//!    in-process.
//!
//! `ART_PYTHON` names the interpreter with openpipe-art installed (default
//! `target/art-venv/bin/python`). Without `--bench` (as `cargo test --all-targets` runs it): one
//! round, gavel only, as a smoke test.

// The allocator the `gavel` binary ships with, so the figures are the daemon's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::{Gavel, MockJudge};
use gavel::domain::prompt::{count_tokens, ChatMessage};
use gavel::domain::rubric::RubricSet;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ART_MODEL: &str = "art-ruler";
const REPLAYS: usize = 5;

struct Group {
    kind: String,
    id: String,
    n: usize,
    body: Value,
}

fn load_corpus(path: &str) -> Vec<Group> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run python3 benches/data/make_groups.py)"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("corpus line is JSON");
            let obj = v.as_object_mut().unwrap();
            let kind = obj.remove("kind").unwrap().as_str().unwrap().to_string();
            let id = obj.remove("id").unwrap().as_str().unwrap().to_string();
            let n = v["trajectories"].as_array().unwrap().len();
            Group {
                kind,
                id,
                n,
                body: v,
            }
        })
        .collect()
}

/// Prompt tokens of a recorded chat request: (system messages, other messages, total with
/// framing), each message counted as `count_tokens` counts it.
#[derive(Clone, Copy, Default)]
struct Tokens {
    system: usize,
    rest: usize,
    total: usize,
}

fn chat_messages(req: &Value) -> Vec<ChatMessage> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage {
            role: m["role"].as_str().unwrap().to_string(),
            content: match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            },
        })
        .collect()
}

fn tokens(req: &Value) -> Tokens {
    let msgs = chat_messages(req);
    let mut t = Tokens {
        total: count_tokens(&msgs),
        ..Tokens::default()
    };
    for m in msgs {
        let role = m.role.clone();
        let n = count_tokens(&[m]) - 3; // without the reply priming
        if role == "system" {
            t.system += n;
        } else {
            t.rest += n;
        }
    }
    t
}

fn schema_tokens(req: &Value) -> usize {
    let bpe = tiktoken_rs::o200k_base_singleton();
    bpe.encode_ordinary(&req["response_format"].to_string())
        .len()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

async fn post(c: &reqwest::Client, url: &str, body: &Value) -> (u16, Value, f64) {
    let (status, bytes, secs) = common::timed_post(c, url, serde_json::to_vec(body).unwrap()).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        secs,
    )
}

fn table(head: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", head.join(" | "));
    println!("|{}", "---|".repeat(head.len()));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
    println!();
}

/// Figure 3: gavel's own token counts, with and without dedup, from `/v1/render`.
async fn dedup_tokens(mock: &MockJudge, groups: &[Group]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let gavel = Gavel::start(mock.config(dir.path())).await;
    let mut rows = Vec::new();
    let mut renders = Vec::new();
    let mut per_kind: BTreeMap<&str, (u64, u64, usize)> = BTreeMap::new();
    for g in groups {
        let (status, r) = gavel.post("/v1/render", &g.body).await;
        assert_eq!(status, 200, "{}: {r}", g.id);
        let (d, w) = (
            r["prompt_tokens"].as_u64().unwrap(),
            r["prompt_tokens_without_dedup"].as_u64().unwrap(),
        );
        let e = per_kind.entry(&g.kind).or_default();
        e.0 += d;
        e.1 += w;
        e.2 += 1;
        rows.push(vec![
            g.id.clone(),
            g.n.to_string(),
            w.to_string(),
            d.to_string(),
            format!("{:.2}", d as f64 / w as f64),
            r["shared_prefix_messages"].to_string(),
            r["shared_blocks"].to_string(),
            r["distinct_trajectories"].to_string(),
        ]);
        renders.push(r);
    }
    gavel.stop().await;
    println!("## 3. Judge prompt tokens per group, gavel with and without dedup (o200k_base)\n");
    let kinds: Vec<Vec<String>> = per_kind
        .iter()
        .map(|(k, (d, w, n))| {
            vec![
                k.to_string(),
                n.to_string(),
                format!("{:.0}", *w as f64 / *n as f64),
                format!("{:.0}", *d as f64 / *n as f64),
                format!("{:.2}", *d as f64 / *w as f64),
            ]
        })
        .collect();
    table(
        &[
            "kind",
            "groups",
            "mean tokens without dedup",
            "mean tokens with dedup",
            "ratio",
        ],
        &kinds,
    );
    table(
        &[
            "group",
            "n",
            "without dedup",
            "with dedup",
            "ratio",
            "prefix msgs",
            "shared blocks",
            "distinct",
        ],
        &rows,
    );
    renders
}

/// Every group through gavel, `rounds` times, each round on a fresh store. Returns per group
/// the wall times and the judge request of the first round.
async fn gavel_side(
    mock: &MockJudge,
    groups: &[Group],
    rounds: usize,
) -> (Vec<Vec<f64>>, Vec<Value>, Vec<u64>) {
    let c = reqwest::Client::new();
    let mut walls = vec![Vec::new(); groups.len()];
    let mut reqs: Vec<Value> = Vec::new();
    let mut usage = vec![0; groups.len()];
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let gavel = Gavel::start(mock.config(dir.path())).await;
        let url = format!("{}/v1/score_group", gavel.url);
        // Warm-up on a group no round sends (its user turns tagged), outside the figures.
        let mut warm = groups[0].body.clone();
        for t in warm["trajectories"].as_array_mut().unwrap() {
            t["messages"][1]["content"] = Value::String(format!("warm-up {round}"));
        }
        assert_eq!(post(&c, &url, &warm).await.0, 200);
        let first = mock.calls();
        for (i, g) in groups.iter().enumerate() {
            let (status, v, s) = post(&c, &url, &g.body).await;
            assert_eq!(status, 200, "{}: {v}", g.id);
            assert_eq!(v["usage"]["judge_calls"], 1, "{}: a cache miss", g.id);
            walls[i].push(s);
            usage[i] = v["usage"]["prompt_tokens_deduped"].as_u64().unwrap();
        }
        let recorded = mock.requests();
        let these = &recorded[first..first + groups.len()];
        if round == 0 {
            reqs = these.to_vec();
        } else {
            for (a, b) in reqs.iter().zip(these) {
                assert_eq!(
                    a["messages"], b["messages"],
                    "gavel's prompt is deterministic"
                );
            }
        }
        gavel.stop().await;
    }
    (walls, reqs, usage)
}

/// How close the usage figures of a real `/v1/score_group` are to the exact counts of
/// `/v1/render`: with the mock reporting real token counts (as OpenAI does), a fresh daemon scores
/// every group once; `prompt_tokens_deduped` is the judge's count, `prompt_tokens_without_dedup`
/// gavel's estimate from it.
async fn usage_accuracy(mock: &MockJudge, groups: &[Group], renders: &[Value], sent: &[Value]) {
    mock.report_token_counts(true);
    let c = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let gavel = Gavel::start(mock.config(dir.path())).await;
    let url = format!("{}/v1/score_group", gavel.url);
    let (mut mismatches, mut errors) = (Vec::new(), Vec::new());
    for (i, g) in groups.iter().enumerate() {
        let (status, v, _) = post(&c, &url, &g.body).await;
        assert_eq!(status, 200, "{}: {v}", g.id);
        let deduped = v["usage"]["prompt_tokens_deduped"].as_u64().unwrap();
        let exact = renders[i]["prompt_tokens"].as_u64().unwrap();
        let recount = tokens(&sent[i]).total as u64;
        if deduped != exact || deduped != recount {
            mismatches.push(format!(
                "{}: usage {deduped} render {exact} recount {recount}",
                g.id
            ));
        }
        let estimate = v["usage"]["prompt_tokens_without_dedup"].as_f64().unwrap();
        let exact = renders[i]["prompt_tokens_without_dedup"].as_f64().unwrap();
        errors.push((estimate - exact) / exact);
    }
    gavel.stop().await;
    mock.report_token_counts(false);
    if mismatches.is_empty() {
        println!("usage.prompt_tokens_deduped (the judge's count), /v1/render's count and a recount of the request gavel sent agree on every group.");
    } else {
        println!("Token count mismatches: {}", mismatches.join("; "));
    }
    let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    println!(
        "usage.prompt_tokens_without_dedup (estimated) vs /v1/render's exact count: median |error| {:.1} %, worst {:+.1} %.\n",
        100.0 * median(abs.clone()),
        100.0 * errors.iter().copied().fold(0.0, |w: f64, e| if e.abs() > w.abs() { e } else { w })
    );
}

/// Every group through ART's RULER in a child Python process. Returns per group the wall times
/// of `ruler_score_group` and its judge request of the first round.
async fn art_side(
    mock: &MockJudge,
    python: &PathBuf,
    corpus: &str,
    groups: &[Group],
    rounds: usize,
) -> Result<(Vec<Vec<f64>>, Vec<Value>), String> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let first = mock.calls();
    // The child's stdout (ART prints warnings there) goes to our stderr, keeping stdout a report.
    let to_stderr = std::os::fd::AsFd::as_fd(&std::io::stderr())
        .try_clone_to_owned()
        .unwrap();
    let mut child = tokio::process::Command::new(python)
        .arg(format!("{ROOT}/benches/art_ruler.py"))
        .args(["--api-base", &mock.base_url(), "--model", ART_MODEL])
        .args(["--groups", corpus, "--rounds", &rounds.to_string()])
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::from(to_stderr))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", python.display()))?;
    let status = tokio::time::timeout(Duration::from_secs(300), child.wait())
        .await
        .map_err(|_| "art_ruler.py ran past 300 s; killed".to_string())?
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("art_ruler.py failed: {status}"));
    }
    let lines: Vec<Value> = std::fs::read_to_string(out.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let recorded: Vec<Value> = mock.requests()[first..].to_vec();
    if recorded.len() != lines.len() || recorded.iter().any(|r| r["model"] != ART_MODEL) {
        return Err(format!(
            "expected {} judge requests from ART, the mock recorded {}",
            lines.len(),
            recorded.len()
        ));
    }
    let mut walls = vec![Vec::new(); groups.len()];
    let mut reqs = vec![Value::Null; groups.len()];
    for (line, req) in lines.iter().zip(&recorded).skip(1) {
        let i = groups
            .iter()
            .position(|g| line["id"] == g.id.as_str())
            .unwrap();
        walls[i].push(line["seconds"].as_f64().unwrap());
        if reqs[i].is_null() {
            reqs[i] = req.clone();
        } else if reqs[i]["messages"] != req["messages"] {
            return Err(format!(
                "{}: ART's prompt changed between rounds",
                groups[i].id
            ));
        }
    }
    Ok((walls, reqs))
}

/// Median wall time of `REPLAYS` raw calls of each request to the mock, interleaved.
async fn replays(mock: &MockJudge, sets: &[&[Value]]) -> Vec<Vec<f64>> {
    let c = reqwest::Client::new();
    let url = format!("{}/chat/completions", mock.base_url());
    for _ in 0..3 {
        post(&c, &url, &sets[0][0]).await;
    }
    let mut out = vec![vec![Vec::new(); sets[0].len()]; sets.len()];
    for _ in 0..REPLAYS {
        for i in 0..sets[0].len() {
            for (s, set) in sets.iter().enumerate() {
                let (status, v, secs) = post(&c, &url, &set[i]).await;
                assert_eq!(status, 200, "replay: {v}");
                out[s][i].push(secs);
            }
        }
    }
    out.into_iter()
        .map(|set| set.into_iter().map(median).collect())
        .collect()
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1000.0)
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}", a / b)
}

async fn run(full: bool) {
    let corpus = format!("{ROOT}/benches/data/groups.jsonl");
    let groups = load_corpus(&corpus);
    let rounds = if full { 3 } else { 1 };
    println!(
        "# gavel vs ART RULER ({} groups, {} CPUs, {} rounds, load average {})\n",
        groups.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        rounds,
        loadavg()
    );
    let mock = MockJudge::start().await;
    let renders = dedup_tokens(&mock, &groups).await;

    let (g_walls, g_reqs, _) = gavel_side(&mock, &groups, rounds).await;
    let python = std::env::var_os("ART_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{ROOT}/target/art-venv/bin/python")));
    let art = if !full {
        Err("smoke mode (no --bench): ART not run".to_string())
    } else if !python.exists() {
        Err(format!(
            "{} not found: run benches/compare_art.sh to install openpipe-art",
            python.display()
        ))
    } else {
        art_side(&mock, &python, &corpus, &groups, rounds).await
    };

    println!("## 4. gavel vs ART RULER on the same groups and mock judge\n");
    usage_accuracy(&mock, &groups, &renders, &g_reqs).await;
    let (a_walls, a_reqs) = match art {
        Ok(a) => a,
        Err(why) => {
            println!("ART side skipped: {why}\n");
            let raw = replays(&mock, &[&g_reqs]).await.remove(0);
            let added: Vec<f64> = (0..groups.len())
                .map(|i| median(g_walls[i].clone()) - raw[i])
                .collect();
            println!(
                "gavel alone: added latency median {} ms over {} groups\n",
                ms(median(added)),
                groups.len()
            );
            return;
        }
    };
    let raw = replays(&mock, &[&g_reqs, &a_reqs]).await;
    let rubrics = RubricSet::load(None).unwrap();
    let mut rows = Vec::new();
    let mut per_kind: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let (mut g_added, mut a_added) = (Vec::new(), Vec::new());
    let mut over = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let (gt, at) = (tokens(&g_reqs[i]), tokens(&a_reqs[i]));
        let ga = median(g_walls[i].clone()) - raw[0][i];
        let aa = median(a_walls[i].clone()) - raw[1][i];
        g_added.push(ga);
        a_added.push(aa);
        per_kind.entry(&g.kind).or_default().push(i);
        let r = gt.total as f64 / at.total as f64;
        if r > 1.1 {
            over.push(format!("{} ({r:.2})", g.id));
        }
        rows.push(vec![
            g.id.clone(),
            g.n.to_string(),
            format!("{} + {}", gt.system, gt.rest),
            gt.total.to_string(),
            format!("{} + {}", at.system, at.rest),
            at.total.to_string(),
            format!("{r:.2}"),
            ms(ga),
            ms(aa),
            ratio(ga, aa),
        ]);
    }
    println!("Per group (tokens: system + user message; latency: median over {rounds} rounds minus median of {REPLAYS} replays):\n");
    table(
        &[
            "group",
            "n",
            "gavel sys + user",
            "gavel total",
            "ART sys + user",
            "ART total",
            "tokens gavel/ART",
            "gavel added ms",
            "ART added ms",
            "latency gavel/ART",
        ],
        &rows,
    );
    let kinds: Vec<Vec<String>> = per_kind
        .iter()
        .map(|(k, idx)| {
            let sum = |f: &dyn Fn(usize) -> usize| idx.iter().map(|&i| f(i)).sum::<usize>();
            let gt = sum(&|i| tokens(&g_reqs[i]).total);
            let at = sum(&|i| tokens(&a_reqs[i]).total);
            let gs = sum(&|i| tokens(&g_reqs[i]).system);
            let as_ = sum(&|i| tokens(&a_reqs[i]).system);
            let n = idx.len() as f64;
            let ga = median(idx.iter().map(|&i| g_added[i]).collect());
            let aa = median(idx.iter().map(|&i| a_added[i]).collect());
            vec![
                k.to_string(),
                idx.len().to_string(),
                format!("{:.0}", gs as f64 / n),
                format!("{:.0}", (gt - gs) as f64 / n),
                format!("{:.0}", as_ as f64 / n),
                format!("{:.0}", (at - as_) as f64 / n),
                ratio(gt as f64, at as f64),
                ms(ga),
                ms(aa),
                ratio(ga, aa),
            ]
        })
        .collect();
    println!("Per kind (means of tokens; ratio of summed tokens; medians of added latency):\n");
    table(
        &[
            "kind",
            "groups",
            "gavel system",
            "gavel rest",
            "ART system",
            "ART rest",
            "tokens gavel/ART",
            "gavel added ms",
            "ART added ms",
            "latency gavel/ART",
        ],
        &kinds,
    );
    let all_g: usize = (0..groups.len()).map(|i| tokens(&g_reqs[i]).total).sum();
    let all_a: usize = (0..groups.len()).map(|i| tokens(&a_reqs[i]).total).sum();
    let (gm, am) = (median(g_added.clone()), median(a_added.clone()));
    println!("All groups: tokens gavel/ART {}; added latency median gavel {} ms, ART {} ms, ratio {}; raw replay median gavel's request {} ms, ART's {} ms.",
        ratio(all_g as f64, all_a as f64), ms(gm), ms(am), ratio(gm, am),
        ms(median(raw[0].clone())), ms(median(raw[1].clone())));
    let rubric = rubrics.get("default").unwrap();
    let rubric_tokens = count_tokens(&[ChatMessage {
        role: String::new(),
        content: rubric.text.clone(),
    }]) - 3;
    println!("gavel's system message: {} tokens, of which the default rubric's text {} tokens; ART's system message (its preamble and DEFAULT_RUBRIC) {} tokens.",
        tokens(&g_reqs[0]).system, rubric_tokens, tokens(&a_reqs[0]).system);
    let sg: Vec<f64> = g_reqs.iter().map(|r| schema_tokens(r) as f64).collect();
    let sa: Vec<f64> = a_reqs.iter().map(|r| schema_tokens(r) as f64).collect();
    println!("response_format (not in the counts above): median {} tokens of JSON schema from gavel, {} from ART.",
        median(sg), median(sa));
    println!(
        "Groups above 1.1x ART's tokens: {}\n",
        if over.is_empty() {
            "none".to_string()
        } else {
            over.join(", ")
        }
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
    let full = std::env::args().any(|a| a == "--bench");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(full));
}
