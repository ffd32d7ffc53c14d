//! Scored-group files: groups with their rewards, as `gavel train --offline` and `gavel select`
//! read them. Plain data and `serde_json` only (no candle), so `select` works in a
//! `--no-default-features` build too.
//!
//! Each nonblank line is one group with its `rewards` (and, optionally, `advantages`), in either
//! form:
//! - self-contained: the group's `trajectories` on the line itself (a request body with its
//!   rewards added);
//! - `gavel rescore` output: `input` (the file rescore read) and `line` or `group_id` say where
//!   the trajectories are; they are read from that file (its path as written, else relative to
//!   the scored file's folder), in any of rescore's input forms.
//!
//! A bad line (not JSON, no rewards, rewards that do not match the trajectories, an input file
//! or line that is not there, a rejects-file line) is `FILE:LINE: problem`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::domain::trajectory::{parse_trajectories, Trajectory, MAX_GROUP_SIZE};
use crate::toolkit::groupfile::nonblank_lines;

/// Why a scored file could not be read; each is one plain line.
#[derive(Debug, thiserror::Error)]
pub enum ScoredError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    /// A line that is not a scored group, or that the caller refused.
    #[error("{file}:{line}: {problem}")]
    Line {
        file: String,
        line: usize,
        problem: String,
    },
}

/// One scored group, resolved to its trajectories.
#[derive(Debug, Clone)]
pub struct ScoredGroup {
    /// 1-based line in the scored file.
    pub line: usize,
    /// The group's `group_id`, when the line has one.
    pub group_id: Option<Value>,
    /// The line of the file that holds the trajectories, when the group is named by its line:
    /// rescore output's `line` (a line of rescore's input), or, for a self-contained line, this
    /// line. `None` for a rescore group found by `group_id`.
    pub source_line: Option<usize>,
    pub trajectories: Vec<Trajectory>,
    /// One per trajectory; `None` is "no reward".
    pub rewards: Vec<Option<f64>>,
    /// The line's own advantages (one per trajectory), when it has them.
    pub advantages: Option<Vec<f64>>,
    /// The group's `tools` (OpenAI tool definitions), when it had any.
    pub tools: Option<Value>,
}

/// Reads a scored file and hands each group, in file order, to `f`; the first problem, whether
/// the reader's or `f`'s, stops the reading and is reported at its line. Taking `f` rather than
/// returning the groups keeps "first bad line wins" whatever `f` checks.
pub fn read_scored_with<T>(
    path: &Path,
    mut f: impl FnMut(ScoredGroup) -> Result<T, String>,
) -> Result<Vec<T>, ScoredError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScoredError::Read {
        file: file.clone(),
        source,
    })?;
    let mut reader = Reader {
        base: path.parent().unwrap_or(Path::new("")).to_path_buf(),
        inputs: HashMap::new(),
    };
    let mut out = Vec::new();
    for (line, raw) in nonblank_lines(&text) {
        let item = reader.parse_line(line, raw).and_then(&mut f);
        out.push(item.map_err(|problem| ScoredError::Line {
            file: file.clone(),
            line,
            problem,
        })?);
    }
    Ok(out)
}

/// Reads every group of a scored file.
pub fn read_scored(path: &Path) -> Result<Vec<ScoredGroup>, ScoredError> {
    read_scored_with(path, Ok)
}

/// The input files rescore read, each parsed once however many lines point into it.
struct Reader {
    base: PathBuf,
    inputs: HashMap<PathBuf, InputFile>,
}

impl Reader {
    fn parse_line(&mut self, line: usize, raw: &str) -> Result<ScoredGroup, String> {
        let v: Value = serde_json::from_str(raw).map_err(|e| format!("not valid JSON: {e}"))?;
        let obj = v.as_object().ok_or("expected a JSON object")?;
        if let Some(kind) = obj.get("error_type") {
            return Err(format!(
                "a rejected group ({kind}), not a scored one: train on the output, not the rejects"
            ));
        }
        let rewards: Vec<Option<f64>> = match obj.get("rewards") {
            // Most often a group file that was never scored: say how to score it.
            None => {
                return Err(
                    "rewards: missing: this group is not scored yet; run `gavel rescore \
                            FILE -o SCORED.jsonl` first and read SCORED.jsonl"
                        .into(),
                )
            }
            Some(r) => serde_json::from_value(r.clone())
                .map_err(|_| "rewards: expected an array of numbers or nulls")?,
        };
        let group_id = obj.get("group_id").filter(|g| !g.is_null()).cloned();
        let (trajectories, tools, source_line) = match obj.get("trajectories") {
            Some(t) => (t.clone(), obj.get("tools").cloned(), Some(line)),
            None => {
                let input = obj
                    .get("input")
                    .and_then(Value::as_str)
                    .ok_or("trajectories: missing (and no \"input\" file to find them in)")?;
                let path = [PathBuf::from(input), self.base.join(input)]
                    .into_iter()
                    .find(|p| p.is_file())
                    .ok_or(format!("input: {input}: no such file"))?;
                if !self.inputs.contains_key(&path) {
                    self.inputs.insert(path.clone(), InputFile::read(&path)?);
                }
                let f = &self.inputs[&path];
                match (obj.get("line"), obj.get("group_id")) {
                    (Some(l), _) => {
                        let n = l.as_u64().ok_or("line: expected a line number")? as usize;
                        let (t, tools) = f.at_line(n)?;
                        (t, tools, Some(n))
                    }
                    (None, Some(g)) => {
                        let (t, tools) = f.by_group(g)?;
                        (t, tools, None)
                    }
                    (None, None) => return Err("input: needs \"line\" or \"group_id\"".into()),
                }
            }
        };
        let trajs = parse_trajectories(&trajectories, MAX_GROUP_SIZE).map_err(|e| e.to_string())?;
        if trajs.len() != rewards.len() {
            return Err(format!(
                "rewards: {} rewards for {} trajectories",
                rewards.len(),
                trajs.len()
            ));
        }
        let advantages = match obj.get("advantages") {
            None | Some(Value::Null) => None,
            Some(a) => {
                let a: Vec<f64> = serde_json::from_value(a.clone())
                    .map_err(|_| "advantages: expected an array of numbers")?;
                if a.len() != rewards.len() {
                    return Err(format!(
                        "advantages: {} for {} trajectories",
                        a.len(),
                        rewards.len()
                    ));
                }
                Some(a)
            }
        };
        Ok(ScoredGroup {
            line,
            group_id,
            source_line,
            trajectories: trajs,
            rewards,
            advantages,
            tools: tools.filter(|t| !t.is_null()),
        })
    }
}

/// The lines of an input file rescore read, parsed once.
struct InputFile {
    lines: Vec<Option<Value>>,
}

/// A group's trajectories (as JSON, in any of rescore's input forms) and its `tools`.
type Found = (Value, Option<Value>);

impl InputFile {
    fn read(path: &Path) -> Result<InputFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("input {}: cannot read: {e}", path.display()))?;
        Ok(InputFile {
            lines: text.lines().map(|l| serde_json::from_str(l).ok()).collect(),
        })
    }

    /// The group at 1-based `line`.
    fn at_line(&self, line: usize) -> Result<Found, String> {
        let v = self
            .lines
            .get(line.wrapping_sub(1))
            .ok_or(format!("line: the input has no line {line}"))?
            .as_ref()
            .ok_or(format!("line: input line {line} is not valid JSON"))?;
        let t = v
            .get("trajectories")
            .cloned()
            .ok_or(format!("line: input line {line} has no \"trajectories\""))?;
        Ok((t, v.get("tools").cloned()))
    }

    /// Group `id`: a group line with that id, else the one-trajectory lines with that id, in
    /// file order (ids compare as rescore compares them; the tools are the first line's).
    fn by_group(&self, id: &Value) -> Result<Found, String> {
        let key = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let want = key(id);
        let same = |v: &&Value| v.get("group_id").is_some_and(|g| key(g) == want);
        let lines: Vec<&Value> = self.lines.iter().flatten().filter(same).collect();
        if let Some(group) = lines.iter().find(|v| v.get("trajectories").is_some()) {
            return Ok((group["trajectories"].clone(), group.get("tools").cloned()));
        }
        let Some(first) = lines.first() else {
            return Err(format!("group_id: no group {want} in the input"));
        };
        let tools = first.get("tools").cloned();
        Ok((Value::Array(lines.into_iter().cloned().collect()), tools))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const TRAJ: &str =
        r#"{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}"#;

    #[test]
    fn rescore_output_is_resolved_by_line_and_by_group() {
        let dir = tempfile::tempdir().unwrap();
        let input = format!(
            "{{\"trajectories\":[{TRAJ},{TRAJ}],\"tools\":[{{\"type\":\"function\"}}]}}\n\
             {{\"group_id\":\"g\",\"messages\":[{{\"role\":\"user\",\"content\":\"q\"}},{{\"role\":\"assistant\",\"content\":\"a\"}}]}}\n"
        );
        write(dir.path(), "in.jsonl", &input);
        let scored = write(
            dir.path(),
            "scored.jsonl",
            "{\"input\":\"in.jsonl\",\"line\":1,\"rewards\":[1,null]}\n\n\
             {\"input\":\"in.jsonl\",\"group_id\":\"g\",\"rewards\":[0.5],\"advantages\":[0]}\n",
        );
        let g = read_scored(&scored).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].line, g[0].source_line), (1, Some(1)));
        assert_eq!(g[0].rewards, vec![Some(1.0), None]);
        assert!(g[0].tools.is_some());
        assert_eq!((g[1].line, g[1].source_line), (3, None));
        assert_eq!(g[1].group_id, Some(Value::from("g")));
        assert_eq!(g[1].advantages, Some(vec![0.0]));
        assert!(g[1].tools.is_none());
    }

    #[test]
    fn a_bad_line_is_named_with_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("{{\"trajectories\":[{TRAJ}],\"rewards\":[1]}}\n{{\"trajectories\":[{TRAJ}],\"rewards\":[1,2]}}\n");
        let scored = write(dir.path(), "s.jsonl", &text);
        let e = read_scored(&scored).unwrap_err().to_string();
        assert!(
            e.ends_with("s.jsonl:2: rewards: 2 rewards for 1 trajectories"),
            "{e}"
        );
        // The caller's own refusal is placed at its line too.
        let e = read_scored_with(&scored, |_| Err::<(), _>("no".to_string()))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("s.jsonl:1: no"), "{e}");
    }
}
