//! `gavel rescore`: logged groups in, re-scored JSONL out — resumable, shardable, and never
//! losing a group.
//!
//! Input lines are gavel request bodies, ART trajectory-group dumps (`{"trajectories": [...]}`
//! with ART's `messages_and_choices`), or one trajectory per line (`{"messages": [...],
//! "group_id": ...}`) grouped by `group_id`. Each group is a *unit*, named by a hash of its input
//! text. One writer appends results to the output (or the rejects file) and checkpoints, in one
//! atomic store write, the units finished and the byte length both files reached. After a crash
//! the same command truncates both files to the checkpoint and does the rest, so every group is
//! in the output exactly once.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::cli::{open_scorer, CliError, Common};
use crate::config::Secret;
use crate::score::request::REQUEST_FIELDS;
use crate::score::{RubricRef, ScoreError, ScoreRequest, Scorer, Usage};
use crate::store::{LogFilter, PgOptions, PgStore, VerdictStore};
use crate::trajectory::content_hash;

/// Trajectory fields in the one-trajectory-per-line form.
const TRAJECTORY_FIELDS: &[&str] = &[
    "messages",
    "messages_and_choices",
    "reward",
    "metrics",
    "metadata",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A progress bar on a terminal, periodic log lines otherwise.
    Auto,
    Bar,
    Log,
    None,
}

/// `I/N`: this worker's share of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
        let (index, count) = (i.trim().parse::<u64>(), n.trim().parse::<u64>());
        match (index, count) {
            (Ok(index), Ok(count)) if count > 0 && index < count => Ok(Shard { index, count }),
            _ => Err(format!("expected I/N with 0 <= I < N, got {s:?}")),
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct RescoreArgs {
    /// Logged groups, one JSON object per line (or `--from-log`).
    #[arg(required_unless_present = "from_log", conflicts_with = "from_log")]
    pub input: Option<PathBuf>,
    /// Read the groups from the scoring log of this Postgres store (`postgres://...`) instead
    /// of a file: every logged group (oldest first), narrowed by the `--log-*` filters.
    #[arg(long, env = "GAVEL_RESCORE_FROM_LOG", hide_env_values = true)]
    pub from_log: Option<Secret>,
    /// With --from-log: only groups scored with this rubric (by name).
    #[arg(long, env = "GAVEL_RESCORE_LOG_RUBRIC")]
    pub log_rubric: Option<String>,
    /// With --from-log: only groups scored at or after this time (e.g. 2025-06-01 or
    /// 2025-06-01T12:00:00Z).
    #[arg(long, env = "GAVEL_RESCORE_LOG_SINCE")]
    pub log_since: Option<String>,
    /// With --from-log: only groups scored before this time.
    #[arg(long, env = "GAVEL_RESCORE_LOG_UNTIL")]
    pub log_until: Option<String>,
    /// With --from-log: at most this many groups (the oldest that match).
    #[arg(long, env = "GAVEL_RESCORE_LOG_LIMIT")]
    pub log_limit: Option<u64>,
    /// Output file: one JSON line per input group.
    #[arg(short = 'o', long, env = "GAVEL_RESCORE_OUTPUT")]
    pub output: PathBuf,
    /// Score every group with this rubric instead of the one it names.
    #[arg(long, env = "GAVEL_RUBRIC")]
    pub rubric: Option<String>,
    /// Score every group with this judge instead of the one it names.
    #[arg(long, env = "GAVEL_JUDGE")]
    pub judge: Option<String>,
    /// Groups scored at once (each judge's own rate limits still apply).
    #[arg(long, env = "GAVEL_RESCORE_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Process only this deterministic share of the groups, `I/N` (0-based), so N workers can
    /// split one file; their outputs concatenate cleanly.
    #[arg(long, env = "GAVEL_RESCORE_SHARD")]
    pub shard: Option<Shard>,
    /// Where rejected groups go (default: OUTPUT with `.rejects.jsonl`).
    #[arg(long, env = "GAVEL_RESCORE_REJECTS")]
    pub rejects: Option<PathBuf>,
    /// Try again the groups rejected for a judge failure.
    #[arg(long, env = "GAVEL_RESCORE_RETRY_REJECTS", default_value_t = false)]
    pub retry_rejects: bool,
    /// Progress display.
    #[arg(long, env = "GAVEL_RESCORE_PROGRESS", value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
}

/// One group of the input.
#[derive(Debug, Clone)]
struct Unit {
    key: String,
    /// `group_id` from the input, when it has one.
    group_id: Option<Value>,
    /// 1-based input line numbers (one, or several in the one-trajectory-per-line form).
    lines: Vec<usize>,
    body: Result<(ScoreRequest, Map<String, Value>), String>,
}

/// What the writer gets for a unit.
enum Outcome {
    Scored(Value, Box<Usage>),
    Rejected(Value),
}

/// The input as JSONL text and its name: the file, or the scoring-log rows that match the
/// `--log-*` filters, one request body per line with `group_id` = `log:ID`.
async fn read_input(args: &RescoreArgs) -> Result<(String, String), CliError> {
    if let Some(url) = &args.from_log {
        let store = PgStore::connect(url.expose(), &PgOptions::default()).await?;
        let filter = LogFilter {
            rubric: args.log_rubric.clone(),
            since: args.log_since.clone(),
            until: args.log_until.clone(),
            limit: args.log_limit,
        };
        let mut text = String::new();
        for row in store.read_scoring_log(&filter).await? {
            let mut body = row.entry.request;
            if let Some(o) = body.as_object_mut() {
                o.insert("group_id".into(), json!(format!("log:{}", row.id)));
            }
            text.push_str(&body.to_string());
            text.push('\n');
        }
        return Ok((text, store.location().to_string()));
    }
    if args.log_rubric.is_some()
        || args.log_since.is_some()
        || args.log_until.is_some()
        || args.log_limit.is_some()
    {
        return Err(CliError::Other(
            "--log-rubric, --log-since, --log-until and --log-limit filter --from-log; \
             there is no --from-log"
                .into(),
        ));
    }
    let path = args
        .input
        .as_deref()
        .expect("clap requires INPUT without --from-log");
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Io(format!("{file}: cannot read: {e}")))?;
    Ok((text, file))
}

/// Reads the input into units, in input order. Lines that are not JSON objects become units
/// that are rejected with their reason.
/// A per-trajectory-form group being assembled: its first line's body, line numbers, trajectory
/// values, per-line extras, and the first line's key.
type PendingGroup = (Value, Vec<usize>, Vec<Value>, Vec<Value>, String);

fn read_units(
    text: &str,
    max_group_size: usize,
    args: &RescoreArgs,
) -> Result<Vec<Unit>, CliError> {
    let mut units = Vec::new();
    // group_id → (lines, trajectory values, per-line extras) for the per-trajectory form.
    let mut grouped: BTreeMap<String, PendingGroup> = BTreeMap::new();
    let mut group_order: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let key = content_hash(&(line, raw));
        let value: Value = match serde_json::from_str(raw) {
            Ok(Value::Object(o)) => Value::Object(o),
            Ok(_) => {
                units.push(Unit {
                    key,
                    group_id: None,
                    lines: vec![line],
                    body: Err("not a JSON object".into()),
                });
                continue;
            }
            Err(e) => {
                units.push(Unit {
                    key,
                    group_id: None,
                    lines: vec![line],
                    body: Err(format!("not valid JSON: {e}")),
                });
                continue;
            }
        };
        let obj = value.as_object().expect("checked above");
        let group_id = obj.get("group_id").filter(|v| !v.is_null()).cloned();
        if !obj.contains_key("trajectories")
            && (obj.contains_key("messages") || obj.contains_key("messages_and_choices"))
        {
            let Some(gid) = group_id else {
                units.push(Unit {
                    key,
                    group_id: None,
                    lines: vec![line],
                    body: Err("a one-trajectory line needs a \"group_id\"".into()),
                });
                continue;
            };
            let id = match &gid {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let entry = grouped.entry(id.clone()).or_insert_with(|| {
                group_order.push(id.clone());
                (
                    gid.clone(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    String::new(),
                )
            });
            let (traj, extra): (Map<String, Value>, Map<String, Value>) = obj
                .iter()
                .filter(|(k, _)| k.as_str() != "group_id")
                .map(|(k, v)| (k.clone(), v.clone()))
                .partition(|(k, _)| TRAJECTORY_FIELDS.contains(&k.as_str()));
            entry.1.push(line);
            entry.2.push(Value::Object(traj));
            entry.3.push(Value::Object(extra));
            entry.4.push_str(raw);
            entry.4.push('\n');
            continue;
        }
        let (req, extra): (Map<String, Value>, Map<String, Value>) = obj
            .iter()
            .filter(|(k, _)| k.as_str() != "group_id")
            .map(|(k, v)| (k.clone(), v.clone()))
            .partition(|(k, _)| REQUEST_FIELDS.contains(&k.as_str()));
        let body = ScoreRequest::from_json(&Value::Object(req), max_group_size)
            .map(|r| (r, extra))
            .map_err(|e| e.to_string());
        units.push(Unit {
            key,
            group_id,
            lines: vec![line],
            body,
        });
    }
    for id in group_order {
        let (gid, lines, trajs, extras, raw) = grouped.remove(&id).expect("every id was inserted");
        let body = ScoreRequest::from_json(&json!({ "trajectories": trajs }), max_group_size)
            .map(|r| {
                let mut meta = Map::new();
                if extras
                    .iter()
                    .any(|e| e.as_object().is_some_and(|o| !o.is_empty()))
                {
                    meta.insert("trajectories".into(), Value::Array(extras));
                }
                (r, meta)
            })
            .map_err(|e| e.to_string());
        units.push(Unit {
            key: content_hash(&("group", &raw)),
            group_id: Some(gid),
            lines,
            body,
        });
    }
    for u in &mut units {
        if let Ok((req, _)) = &mut u.body {
            if let Some(r) = &args.rubric {
                req.rubric = RubricRef::Named(r.clone());
            }
            if let Some(j) = &args.judge {
                req.judges = vec![j.clone()];
            }
        }
    }
    Ok(units)
}

/// Whether a unit falls in this worker's shard: by its group id (or first line), hashed, so the
/// split is deterministic and even.
fn in_shard(u: &Unit, shard: Option<Shard>) -> bool {
    let Some(s) = shard else { return true };
    let ident = match &u.group_id {
        Some(g) => g.to_string(),
        None => u.lines[0].to_string(),
    };
    let h = content_hash(&ident);
    let n = u64::from_str_radix(&h["sha256:".len()..][..15], 16).expect("hex digest");
    n % s.count == s.index
}

fn ident(u: &Unit, file: &str) -> Map<String, Value> {
    let mut m = Map::new();
    match &u.group_id {
        Some(g) => m.insert("group_id".into(), g.clone()),
        None => m.insert("line".into(), json!(u.lines[0])),
    };
    m.insert("input".into(), json!(file));
    m
}

async fn score_unit(scorer: &Scorer, u: &Unit, file: &str) -> Outcome {
    let mut out = ident(u, file);
    let (req, meta) = match &u.body {
        Ok(b) => b,
        Err(reason) => {
            out.insert("lines".into(), json!(u.lines));
            out.insert("error_type".into(), json!("invalid_input"));
            out.insert("reason".into(), json!(reason));
            out.insert("unit".into(), json!(u.key));
            return Outcome::Rejected(Value::Object(out));
        }
    };
    match scorer.score_group(req).await {
        Ok(resp) => {
            let usage = resp.usage.clone();
            let mut v = serde_json::to_value(&resp).expect("a response serialises");
            if let Some(o) = v.as_object_mut() {
                for (k, x) in std::mem::take(o) {
                    out.insert(k, x);
                }
            }
            if !meta.is_empty() {
                out.insert("input_meta".into(), Value::Object(meta.clone()));
            }
            Outcome::Scored(Value::Object(out), Box::new(usage))
        }
        Err(e) => {
            let kind = match &e {
                ScoreError::Judge(j) => j.error_type(),
                ScoreError::Store(_) | ScoreError::Prompt(_) => "internal",
                _ => "invalid_input",
            };
            out.insert("lines".into(), json!(u.lines));
            out.insert("error_type".into(), json!(kind));
            out.insert("reason".into(), json!(e.to_string()));
            out.insert("unit".into(), json!(u.key));
            Outcome::Rejected(Value::Object(out))
        }
    }
}

/// Opens `path` for appending after truncating it to `len` (what the last checkpoint saw).
fn open_at(path: &Path, len: u64) -> Result<std::fs::File, CliError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| CliError::Io(format!("{}: cannot open: {e}", path.display())))?;
    f.set_len(len)
        .map_err(|e| CliError::Io(format!("{}: cannot truncate: {e}", path.display())))?;
    Ok(f)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Removes the judge-failure lines from the rejects file and reopens their units.
async fn reopen_rejects(
    scorer: &Scorer,
    job: &str,
    output: &Path,
    rejects: &Path,
) -> Result<usize, CliError> {
    let text = std::fs::read_to_string(rejects).unwrap_or_default();
    let (mut keep, mut retry) = (String::new(), Vec::new());
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let kind = v["error_type"].as_str().unwrap_or("");
        match v["unit"].as_str() {
            Some(unit) if kind.starts_with("judge_") || kind == "no_judge_configured" => {
                retry.push(unit.to_string())
            }
            _ => {
                keep.push_str(line);
                keep.push('\n');
            }
        }
    }
    let tmp = rejects.with_extension("jsonl.tmp");
    std::fs::write(&tmp, &keep)
        .and_then(|()| std::fs::rename(&tmp, rejects))
        .map_err(|e| CliError::Io(format!("{}: {e}", rejects.display())))?;
    scorer
        .store()
        .job_reopen(job, &retry, (file_len(output), keep.len() as u64))
        .await?;
    Ok(retry.len())
}

/// Runs the job; returns the exit code (0 when nothing was rejected, 1 otherwise).
pub async fn run(common: &Common, args: &RescoreArgs) -> Result<u8, CliError> {
    let started = Instant::now();
    let cfg = common.load_config()?;
    let (text, file) = read_input(args).await?;
    let rejects_path = args.rejects.clone().unwrap_or_else(|| {
        let mut p = args.output.clone().into_os_string();
        p.push(".rejects.jsonl");
        PathBuf::from(p)
    });
    let units = read_units(&text, cfg.server.max_group_size, args)?;
    drop(text);
    let scorer = open_scorer(&cfg).await?;
    let abs = |p: &Path| {
        std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let job = content_hash(&(
        "rescore",
        match &args.input {
            Some(p) => abs(p),
            None => format!(
                "log {file} {:?}",
                (
                    &args.log_rubric,
                    &args.log_since,
                    &args.log_until,
                    args.log_limit
                )
            ),
        },
        abs(&args.output),
        &args.rubric,
        &args.judge,
        args.shard.map(|s| (s.index, s.count)),
    ));
    let mut progress = scorer.store().job_progress(&job).await?;
    if progress.offsets.is_none() && file_len(&args.output) > 0 {
        return Err(CliError::Other(format!(
            "{}: exists and is not the output of this job (same input, rubric, judge and shard); \
             remove it or choose another -o",
            args.output.display()
        )));
    }
    if args.retry_rejects && progress.offsets.is_some() {
        let n = reopen_rejects(&scorer, &job, &args.output, &rejects_path).await?;
        tracing::info!(groups = n, "retrying groups rejected for judge failures");
        progress = scorer.store().job_progress(&job).await?;
    }
    let (out_len, rej_len) = progress.offsets.unwrap_or((0, 0));
    let mut out = open_at(&args.output, out_len)?;
    let mut rej = open_at(&rejects_path, rej_len)?;
    let todo: Vec<&Unit> = units
        .iter()
        .filter(|u| in_shard(u, args.shard) && !progress.done.contains(&u.key))
        .collect();
    let already = units.iter().filter(|u| in_shard(u, args.shard)).count() - todo.len();
    let total = todo.len() as u64;
    let bar = progress_bar(args.progress, total, already);

    let mut stats = Summary::default();
    let mut last_log = Instant::now();
    let concurrency = args.concurrency.max(1);
    let mut results = futures::stream::iter(todo.iter().map(|u| {
        let scorer = scorer.clone();
        let file = file.clone();
        async move { (u.key.clone(), score_unit(&scorer, u, &file).await) }
    }))
    .buffer_unordered(concurrency);
    let (mut out_pos, mut rej_pos) = (out_len, rej_len);
    while let Some((key, outcome)) = results.next().await {
        let (target, pos, line) = match outcome {
            Outcome::Scored(v, usage) => {
                stats.add(&usage);
                (&mut out, &mut out_pos, v)
            }
            Outcome::Rejected(v) => {
                stats.rejects += 1;
                (&mut rej, &mut rej_pos, v)
            }
        };
        let mut text = serde_json::to_string(&line).expect("JSON serialises");
        text.push('\n');
        target
            .write_all(text.as_bytes())
            .and_then(|()| target.flush())
            .map_err(|e| CliError::Io(format!("cannot write: {e}")))?;
        *pos += text.len() as u64;
        scorer
            .store()
            .job_checkpoint(&job, &[key], (out_pos, rej_pos))
            .await?;
        stats.groups += 1;
        if let Some(b) = &bar {
            b.inc(1);
        } else if args.progress != ProgressMode::None
            && last_log.elapsed() >= Duration::from_secs(10)
        {
            last_log = Instant::now();
            tracing::info!(
                done = stats.groups,
                total,
                rejects = stats.rejects,
                "rescore progress"
            );
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let summary = json!({
        "groups": stats.groups,
        "skipped_already_done": already,
        "cache_hits": stats.usage.cache_hits,
        "judge_calls": stats.usage.judge_calls,
        "prompt_tokens": stats.usage.prompt_tokens,
        "completion_tokens": stats.usage.completion_tokens,
        "cost": stats.usage.cost,
        "rejects": stats.rejects,
        "rejects_file": rejects_path.display().to_string(),
        "wall_s": (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    });
    eprintln!("rescore: {summary}");
    Ok(if stats.rejects == 0 { 0 } else { 1 })
}

#[derive(Default)]
struct Summary {
    groups: u64,
    rejects: u64,
    usage: Usage,
}

impl Summary {
    fn add(&mut self, u: &Usage) {
        self.usage.add(u);
    }
}

fn progress_bar(mode: ProgressMode, total: u64, already: usize) -> Option<indicatif::ProgressBar> {
    let show = match mode {
        ProgressMode::Bar => true,
        ProgressMode::Auto => std::io::stderr().is_terminal(),
        ProgressMode::Log | ProgressMode::None => false,
    };
    if !show {
        if mode != ProgressMode::None {
            tracing::info!(total, already_done = already, "rescore starting");
        }
        return None;
    }
    Some(crate::cli::progress_bar(total, "groups"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_partition_the_input() {
        assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, count: 4 }));
        assert!("4/4".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
        let units: Vec<Unit> = (1..=200)
            .map(|l| Unit {
                key: l.to_string(),
                group_id: None,
                lines: vec![l],
                body: Err(String::new()),
            })
            .collect();
        let mut seen = vec![0; 200];
        for i in 0..4 {
            let shard = Some(Shard { index: i, count: 4 });
            let n = units
                .iter()
                .filter(|u| in_shard(u, shard))
                .inspect(|u| seen[u.lines[0] - 1] += 1)
                .count();
            assert!((30..=70).contains(&n), "shard {i} got {n} of 200");
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "every unit is in exactly one shard"
        );
    }
}
