//! The group file every CLI command reads: `.jsonl`/`.ndjson` hold one group per line (blank
//! lines skipped), anything else one group; `-` is standard input (see [`stdin_is_jsonl`] for
//! how its form is told). A line is a `/v1/score_group` body plus fields the
//! command itself reads (`group_id`; `labels`, `id` and `set` for `gavel eval`), taken off by an
//! [`Extra`] before the body is validated. Every problem is reported as `FILE[:LINE]: problem`,
//! all of them before any judge is called.
//!
//! `score`, `render`, `diff` and `eval` read through [`read_checked`], which also checks every
//! request against the scorer. `rescore` reads the same
//! lines ([`read_text`], [`nonblank_lines`]) but builds its own units from them: a bad line there
//! is a rejected group in its output, not a reason to stop, and one-trajectory lines are grouped
//! by `group_id`. Every command applies `--rubric`/`--judge` with [`override_request`], and
//! `--judge-mode`/`--permutations` with [`override_judging`].
//!
//! `rescore`, `score` and `render` keep a line's fields that are not the request's aside
//! ([`take_aside`], [`KeptAside`]) rather than refusing them, so that a labelled eval row (`id`,
//! `labels`, `set`) or a logged line with fields of its own is scored as the request it holds.

use std::path::Path;

use serde_json::{Map, Value};

use crate::domain::input::{nearest, unknown_field};
use crate::domain::prompt::JudgeMode;
use crate::domain::rubric::RubricArg;
/// `--permutations` is checked as a request's `permutations` is, so the flag and the field
/// refuse alike.
pub use crate::score::request::check_permutations;
use crate::score::request::request_fields;
use crate::score::{RubricRef, ScoreRequest, Scorer};

/// Fields of a line that are not part of the scoring request: taken off the JSON object before
/// validation, then checked against the validated request.
pub trait Extra: Sized {
    /// Removes and parses this command's fields; `Err` is the problem (without the location).
    fn take(obj: &mut Map<String, Value>) -> Result<Self, String>;
    /// Checks the fields against the validated request (e.g. one label per trajectory).
    fn check(&self, _request: &ScoreRequest) -> Result<(), String> {
        Ok(())
    }
}

/// No fields beyond the request (and `group_id`).
impl Extra for () {
    fn take(_: &mut Map<String, Value>) -> Result<(), String> {
        Ok(())
    }
}

/// Removes from `obj` every field that is not a scoring request's, and returns them in their
/// order: what a reader that tolerates fields of its own keeps aside.
pub fn take_aside(obj: &mut Map<String, Value>) -> Map<String, Value> {
    let (request, aside) = std::mem::take(obj)
        .into_iter()
        .partition(|(k, _)| request_fields().contains(&k.as_str()));
    *obj = request;
    aside
}

/// The fields of a line beyond the request, kept aside as [`take_aside`] keeps them (`score`
/// echoes them as `input_meta`, as `rescore` does). A field that is a near miss of a request
/// field (`permutatons`) is still refused with the request's own "did you mean" message: a typo
/// kept aside would silently score the group without what it asked for.
#[derive(Debug, Clone, Default)]
pub struct KeptAside(pub Map<String, Value>);

impl Extra for KeptAside {
    fn take(obj: &mut Map<String, Value>) -> Result<KeptAside, String> {
        let aside = take_aside(obj);
        if let Some(k) = aside
            .keys()
            .find(|k| nearest(k, request_fields()).is_some())
        {
            return Err(format!(
                "{k}: {}",
                unknown_field(k, request_fields(), "known")
            ));
        }
        Ok(KeptAside(aside))
    }
}

/// One group read from the file.
#[derive(Debug, Clone)]
pub struct GroupIn<E = ()> {
    /// 1-based position in the file.
    pub index: usize,
    /// Line in a .jsonl file.
    pub line: Option<usize>,
    /// Where the group is, `FILE:LINE` (or `FILE` for a .json file): what every message about
    /// it starts with.
    pub at: String,
    /// The group's own `group_id`, stripped before validation.
    pub group_id: Option<String>,
    pub label: String,
    pub request: ScoreRequest,
    /// Each trajectory's label: its `metadata.id` or `metadata.name`, else its 1-based position.
    pub trajectory_labels: Vec<String>,
    /// The command's own fields.
    pub extra: E,
}

/// A label from a JSON string or number.
pub fn label_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The whole file as text; the problem is one `FILE: cannot read: ...` line.
pub fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

/// The lines of a JSONL text that hold something, with their 1-based line numbers (blank lines
/// still count, so a number always points at the line in the file).
pub fn nonblank_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
}

/// Applies `--rubric` and `--judge` to a request: the rubric (sent by name, or a rubric file's
/// inline) and the one judge replace whatever the group asked for.
pub fn override_request(
    request: &mut ScoreRequest,
    rubric: Option<&RubricArg>,
    judge: Option<&str>,
) {
    if let Some(r) = rubric {
        request.rubric = match &r.file_spec {
            Some(spec) => RubricRef::Inline(Box::new(spec.clone())),
            None => RubricRef::Named(r.given.clone()),
        };
    }
    if let Some(j) = judge {
        request.judges = vec![j.to_string()];
    }
}

/// Applies `--judge-mode` and `--permutations` to a request: each, when given, replaces the
/// group's own `judge_mode` or `permutations` (the command line wins, as `--rubric` does).
pub fn override_judging(
    request: &mut ScoreRequest,
    judge_mode: Option<JudgeMode>,
    permutations: Option<u32>,
) {
    if judge_mode.is_some() {
        request.judge_mode = judge_mode;
    }
    if permutations.is_some() {
        request.permutations = permutations;
    }
}

/// Prints each problem on its own stderr line: a file problem, so nothing was scored.
pub fn print_problems(problems: &[String]) -> super::exit::Exit {
    for p in problems {
        eprintln!("{p}");
    }
    super::exit::Exit::Refused
}

/// Reads a group file (see the module docs). A top-level `group_id` (string or number) is taken
/// as the group's label. Only the file's own problems are found here; [`read_checked`] also
/// checks what each group asks of the scorer.
pub fn read_groups<E: Extra>(
    path: &Path,
    max_group_size: usize,
) -> Result<Vec<GroupIn<E>>, Vec<String>> {
    let mut groups = Vec::new();
    let mut problems = Vec::new();
    for g in parse_groups(path, max_group_size).map_err(|p| vec![p])? {
        match g {
            Ok(g) => groups.push(g),
            Err(p) => problems.push(p),
        }
    }
    if problems.is_empty() {
        Ok(groups)
    } else {
        Err(problems)
    }
}

/// Reads a group file and checks, with [`Scorer::check`], every request each group will be
/// scored with: `requests` derives them from the group (its own request with `--rubric` and
/// `--judge` applied, or one per side of a diff or combination of an eval). So every problem
/// of every line, from bad JSON to an unknown rubric, judge or verifier, is known at once, in
/// file order, before any judge is called or any store opened.
pub fn read_checked<E: Extra>(
    path: &Path,
    scorer: &Scorer,
    requests: impl Fn(&GroupIn<E>) -> Vec<ScoreRequest>,
) -> Result<Vec<GroupIn<E>>, Vec<String>> {
    let mut groups = Vec::new();
    let mut problems = Vec::new();
    for g in parse_groups(path, scorer.max_group_size()).map_err(|p| vec![p])? {
        let g = match g {
            Ok(g) => g,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        // One line per distinct problem: the two sides of a diff often share one.
        let mut seen = Vec::new();
        for req in requests(&g) {
            if let Err(e) = scorer.check(&req) {
                let p = format!("{}: {e}", g.at);
                if !seen.contains(&p) {
                    seen.push(p);
                }
            }
        }
        if seen.is_empty() {
            groups.push(g);
        } else {
            problems.extend(seen);
        }
    }
    if problems.is_empty() {
        Ok(groups)
    } else {
        Err(problems)
    }
}

/// Every group of the file in order, each parsed or its problem; `Err` when the file cannot be
/// read or holds no group.
fn parse_groups<E: Extra>(
    path: &Path,
    max_group_size: usize,
) -> Result<Vec<Result<GroupIn<E>, String>>, String> {
    let stdin = is_stdin(path);
    let file = if stdin {
        STDIN_NAME.to_string()
    } else {
        path.display().to_string()
    };
    let text = if stdin {
        read_stdin()?
    } else {
        read_text(path)?
    };
    let jsonl = if stdin {
        stdin_is_jsonl(&text)
    } else {
        matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("jsonl" | "ndjson")
        )
    };
    let name = match path.file_name() {
        Some(n) if !stdin => n.to_string_lossy().into_owned(),
        _ => file.clone(),
    };
    let parse = |src: &str, line: Option<usize>, index: usize| -> Result<GroupIn<E>, String> {
        let at = match line {
            Some(l) => format!("{file}:{l}"),
            None => file.clone(),
        };
        let mut value: Value = serde_json::from_str(src).map_err(|e| match line {
            Some(_) => format!("{at}: not valid JSON: {e}"),
            None => format!("{file}:{}: not valid JSON: {e}", e.line()),
        })?;
        let (group_id, extra) = match value.as_object_mut() {
            Some(obj) => {
                let group_id =
                    match obj.remove("group_id") {
                        None => None,
                        Some(v) => Some(label_of(&v).ok_or_else(|| {
                            format!("{at}: group_id: expected a string or a number")
                        })?),
                    };
                (group_id, E::take(obj).map_err(|p| format!("{at}: {p}"))?)
            }
            None => (
                None,
                E::take(&mut Map::new()).map_err(|p| format!("{at}: {p}"))?,
            ),
        };
        let request =
            ScoreRequest::from_json(&value, max_group_size).map_err(|e| format!("{at}: {e}"))?;
        extra.check(&request).map_err(|p| format!("{at}: {p}"))?;
        let trajectory_labels = request
            .trajectories
            .iter()
            .enumerate()
            .map(|(i, t)| {
                ["id", "name"]
                    .iter()
                    .find_map(|k| t.metadata.get(*k).and_then(label_of))
                    .unwrap_or_else(|| (i + 1).to_string())
            })
            .collect();
        let label = group_id.clone().unwrap_or_else(|| match line {
            Some(l) => format!("line {l}"),
            None => name.clone(),
        });
        Ok(GroupIn {
            index,
            line,
            at,
            group_id,
            label,
            request,
            trajectory_labels,
            extra,
        })
    };
    if !jsonl {
        return Ok(vec![parse(&text, None, 1)]);
    }
    let groups: Vec<_> = nonblank_lines(&text)
        .enumerate()
        .map(|(i, (n, l))| parse(l, Some(n), i + 1))
        .collect();
    if groups.is_empty() {
        return Err(format!("{file}: no groups (the file is empty)"));
    }
    Ok(groups)
}

/// How messages name standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// `-` names standard input.
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// All of standard input as text; the problem is one `<stdin>: cannot read: ...` line.
pub fn read_stdin() -> Result<String, String> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
        .map_err(|e| format!("{STDIN_NAME}: cannot read: {e}"))?;
    Ok(text)
}

/// Standard input has no extension to tell JSONL from one JSON group, so its text decides: one
/// JSON value (however many lines it spans) is one group; otherwise it is JSONL when its first
/// line that holds something is a JSON value by itself. Anything else is read as one group, so
/// a broken pretty-printed group gets one error with its line, not one per line.
fn stdin_is_jsonl(text: &str) -> bool {
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() {
        return false;
    }
    nonblank_lines(text)
        .next()
        .is_some_and(|(_, l)| serde_json::from_str::<serde::de::IgnoredAny>(l).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lines_own_fields_are_kept_aside_and_a_typo_refused() {
        let mut obj = json!({"id": "r1", "trajectories": [], "labels": [1, 0], "set": "dev",
                             "permutations": 2})
        .as_object()
        .unwrap()
        .clone();
        let KeptAside(aside) = KeptAside::take(&mut obj).unwrap();
        assert_eq!(
            Value::Object(aside),
            json!({"id": "r1", "labels": [1, 0], "set": "dev"})
        );
        assert_eq!(
            Value::Object(obj),
            json!({"trajectories": [], "permutations": 2})
        );
        let mut typo = json!({"trajectories": [], "rubrik": "default"})
            .as_object()
            .unwrap()
            .clone();
        assert_eq!(
            KeptAside::take(&mut typo).unwrap_err(),
            "rubrik: unknown field, did you mean rubric?"
        );
    }

    #[test]
    fn permutations_are_bounded_as_the_api_bounds_them() {
        assert_eq!(check_permutations(1), Ok(1));
        assert_eq!(check_permutations(16), Ok(16));
        for k in [0, 17, u64::from(u32::MAX) + 1] {
            assert_eq!(
                check_permutations(k),
                Err(format!("expected an integer from 1 to 16, got {k}"))
            );
        }
        // The flag's refusal is the request field's, word for word.
        let t = json!({"messages": [{"role": "user", "content": "q"},
                                    {"role": "assistant", "content": "a"}]});
        let body = json!({"trajectories": [t.clone(), t], "permutations": 17});
        let api = ScoreRequest::from_json(&body, 16).unwrap_err().to_string();
        assert_eq!(
            api,
            format!("permutations: {}", check_permutations(17).unwrap_err())
        );
    }
}
