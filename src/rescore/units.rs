//! Rescore's input side: the input text (a file or the scoring log) read into units — one per
//! group, named by a hash of its input text — and each unit scored into an outcome.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{RescoreOptions, Shard};
use crate::cli::CliError;
use crate::domain::error_type::ErrorType;
use crate::domain::rubric::RubricArg;
use crate::domain::trajectory::{content_hash, TRAJECTORY_FIELDS};
use crate::score::{ScoreError, ScoreRequest, Scorer, Usage};
use crate::store::{LogFilter, PgOptions, PgStore, ScoringLog};
use crate::toolkit::groupfile::{
    is_stdin, nonblank_lines, override_request, read_stdin, read_text, take_aside, STDIN_NAME,
};

/// One group of the input.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    pub(super) key: String,
    /// `group_id` from the input, when it has one.
    group_id: Option<Value>,
    /// 1-based input line numbers (one, or several in the one-trajectory-per-line form).
    lines: Vec<usize>,
    body: Result<(ScoreRequest, Map<String, Value>), String>,
}

/// What the writer gets for a unit.
pub(super) enum Outcome {
    Scored(Value, Box<Usage>),
    /// A rejects line, with what the judge spent on it before it failed.
    Rejected(Value, Box<Usage>),
}

/// The input as JSONL text and its name: the file, or the scoring-log rows that match the
/// `--log-*` filters, one request body per line with `group_id` = `log:ID`.
pub(super) async fn read_input(args: &RescoreOptions) -> Result<(String, String), CliError> {
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
    // The CLI requires INPUT without --from-log; a caller of the library may not.
    let Some(path) = args.input.as_deref() else {
        return Err(CliError::Other(
            "nothing to rescore: give INPUT (a file, or - for standard input) or --from-log".into(),
        ));
    };
    if is_stdin(path) {
        return Ok((read_stdin().map_err(CliError::Io)?, STDIN_NAME.to_string()));
    }
    let text = read_text(path).map_err(CliError::Io)?;
    Ok((text, path.display().to_string()))
}

/// A per-trajectory-form group being assembled: its first line's body, line numbers, trajectory
/// values, per-line extras, and the first line's key.
type PendingGroup = (Value, Vec<usize>, Vec<Value>, Vec<Value>, String);

/// Reads the input into units, in input order. Lines that are not JSON objects become units
/// that are rejected with their reason. `rubric` (`--rubric`, read) replaces each group's own.
pub(super) fn read_units(
    text: &str,
    max_group_size: usize,
    args: &RescoreOptions,
    rubric: Option<&RubricArg>,
) -> Result<Vec<Unit>, CliError> {
    let mut units = Vec::new();
    // group_id → (lines, trajectory values, per-line extras) for the per-trajectory form.
    let mut grouped: BTreeMap<String, PendingGroup> = BTreeMap::new();
    let mut group_order: Vec<String> = Vec::new();
    for (line, raw) in nonblank_lines(text) {
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
        // A line's own fields (an eval row's `id`, `labels`) are kept aside, as `score` keeps
        // them, and echoed as `input_meta`.
        let mut req = obj.clone();
        let mut extra = take_aside(&mut req);
        extra.retain(|k, _| k != "group_id");
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
            override_request(req, rubric, args.judge.as_deref());
        }
    }
    Ok(units)
}

/// Whether a unit falls in this worker's shard: by its group id (or first line), hashed, so the
/// split is deterministic and even.
pub(super) fn in_shard(u: &Unit, shard: Option<Shard>) -> bool {
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

pub(super) async fn score_unit(scorer: &Scorer, u: &Unit, file: &str) -> Outcome {
    let mut out = ident(u, file);
    let (req, meta) = match &u.body {
        Ok(b) => b,
        Err(reason) => {
            out.insert("lines".into(), json!(u.lines));
            out.insert("error_type".into(), json!("invalid_input"));
            out.insert("reason".into(), json!(reason));
            out.insert("unit".into(), json!(u.key));
            return Outcome::Rejected(Value::Object(out), Box::default());
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
                ScoreError::Judge(j) => j.error_type().as_str(),
                ScoreError::Store(_) | ScoreError::Prompt(_) => ErrorType::Internal.as_str(),
                // Not an `error.type` of the API: a rejects line's own word for a refusal of
                // its input, which no retry mends.
                _ => "invalid_input",
            };
            out.insert("lines".into(), json!(u.lines));
            out.insert("error_type".into(), json!(kind));
            out.insert("reason".into(), json!(e.to_string()));
            out.insert("unit".into(), json!(u.key));
            Outcome::Rejected(Value::Object(out), Box::new(Usage::failed(e.spent())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn options_without_input_or_log_are_refused_not_a_panic() {
        let opts = RescoreOptions {
            input: None,
            from_log: None,
            log_rubric: None,
            log_since: None,
            log_until: None,
            log_limit: None,
            output: "out.jsonl".into(),
            rubric: None,
            judge: None,
            concurrency: 1,
            shard: None,
            rejects: None,
            retry_rejects: false,
            progress: super::super::ProgressMode::None,
        };
        let err = read_input(&opts).await.unwrap_err().to_string();
        assert!(err.contains("give INPUT"), "{err}");
    }

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
