//! Rubrics: the grading standards a judge applies, kept in `rubrics/*.toml`.
//!
//! The rubrics shipped in `rubrics/` are compiled into the binary so `gavel` works from any
//! directory; a `rubrics_dir` in the configuration adds rubrics (or replaces shipped ones of the
//! same name) from disk at start-up. A request may also carry a rubric inline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::reward::Policy;
use crate::domain::trajectory::{content_hash, ReasoningRule};

/// Rubrics shipped with gavel: (name, file text).
const BUILT_IN: &[(&str, &str)] = &[
    ("default", include_str!("../../rubrics/default.toml")),
    (
        "rag_faithfulness",
        include_str!("../../rubrics/rag_faithfulness.toml"),
    ),
    (
        "research_report",
        include_str!("../../rubrics/research_report.toml"),
    ),
    (
        "retrieval_qa",
        include_str!("../../rubrics/retrieval_qa.toml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum RubricError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("{0}: cannot read: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("unknown rubric {name:?} (known: {known})")]
    Unknown { name: String, known: String },
}

/// A checklist item (docs/rewards.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChecklistItem {
    pub id: String,
    pub text: String,
    #[serde(default = "one")]
    pub weight: f64,
    #[serde(default)]
    pub required: bool,
}

fn one() -> f64 {
    1.0
}

/// What a rubric file (or an inline rubric) holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = InlineRubric)]
pub struct RubricSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The grading standards, in prose.
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(inline)]
    pub items: Vec<ChecklistItem>,
    /// With checklist items: the judge component's cap when a required item is unmet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_cap: Option<f64>,
    /// Verifiers this rubric applies (their `expected` values usually come with each request,
    /// merged by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub verifiers: Vec<serde_json::Value>,
    /// How judge, verifiers and the caller's reward combine (see `reward::Policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Orders each group is judged in (position-bias control); a request may override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub permutations: Option<u32>,
    /// `"judge"`: before judging a group that brings no `reference`, the judge answers the
    /// task itself (the messages the trajectories share before their first answer) and grades
    /// each trajectory against its own answer, shown as the reference (reference-guided
    /// judging without a gold answer). Unset: only a request's `reference` is shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ReferenceSource>,
    /// With `reference = "judge"`: the system message the judge answers the task under, in
    /// place of the task's own (which asks for the agent's style, not for an answer to grade
    /// against). Unset: the task's own messages, unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_instruction: Option<String>,
    /// Whether the judge sees the reasoning assistant messages carry (`reasoning_content`,
    /// `thinking`, `reasoning`): `"drop"` (unset: the default) or `"show"`. A request's
    /// `reasoning` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningRule>,
}

/// Where a group's reference answer comes from when the request brings none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReferenceSource {
    /// The judge's own answer to the task, made once per task and stored with the verdicts.
    Judge,
}

/// A loaded rubric with its content version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rubric {
    pub name: String,
    pub description: String,
    pub text: String,
    pub items: Vec<ChecklistItem>,
    pub required_cap: f64,
    pub verifiers: Vec<serde_json::Value>,
    pub policy: Option<Policy>,
    pub permutations: Option<u32>,
    pub reference: Option<ReferenceSource>,
    pub reference_instruction: Option<String>,
    pub reasoning: Option<ReasoningRule>,
    /// `sha256:` of everything that changes rewards (not the name or description).
    pub version: String,
    /// `sha256:` of what the judge reads (text and items): part of the verdict cache key, so a
    /// change of policy or verifiers reuses cached verdicts.
    #[serde(skip)]
    pub judge_version: String,
}

impl Rubric {
    /// Validates a spec and computes its version.
    pub fn from_spec(
        spec: RubricSpec,
        fallback_name: &str,
        file: &str,
    ) -> Result<Rubric, RubricError> {
        let invalid = |message: String| RubricError::Invalid {
            file: file.to_string(),
            message,
        };
        if spec.text.trim().is_empty() {
            return Err(invalid(
                "\"text\" is empty: a rubric states grading standards".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, item) in spec.items.iter().enumerate() {
            if item.id.trim().is_empty() {
                return Err(invalid(format!("items[{i}].id is empty")));
            }
            if !seen.insert(item.id.as_str()) {
                return Err(invalid(format!(
                    "items[{i}].id {:?} appears twice",
                    item.id
                )));
            }
            if !(item.weight.is_finite() && item.weight >= 0.0) {
                return Err(invalid(format!(
                    "items[{i}].weight must be a finite number >= 0"
                )));
            }
        }
        if !spec.items.is_empty() && spec.items.iter().all(|i| i.weight == 0.0) {
            return Err(invalid("every checklist item has weight 0".into()));
        }
        let required_cap = spec.required_cap.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&required_cap) {
            return Err(invalid("required_cap must be within [0, 1]".into()));
        }
        let mut names = std::collections::HashSet::new();
        for (i, v) in spec.verifiers.iter().enumerate() {
            let kind = v.get("type").and_then(serde_json::Value::as_str);
            let name = v.get("name").and_then(serde_json::Value::as_str).or(kind);
            let Some(name) = name else {
                return Err(invalid(format!("verifiers[{i}].type is missing")));
            };
            if !names.insert(name.to_string()) {
                return Err(invalid(format!(
                    "verifiers[{i}]: a second verifier named {name:?} (give one a \"name\")"
                )));
            }
        }
        if let Some(p) = &spec.policy {
            p.check_weights()
                .map_err(|m| invalid(format!("policy: {m}")))?;
        }
        let judge_version = content_hash(&(&spec.text, &spec.items));
        if spec.permutations.is_some_and(|k| k == 0 || k > 16) {
            return Err(invalid("permutations must be 1..=16".into()));
        }
        let changes_rewards = (
            (&spec.text, &spec.items, required_cap),
            (&spec.verifiers, &spec.policy, spec.permutations),
        );
        if let Some(i) = &spec.reference_instruction {
            if spec.reference != Some(ReferenceSource::Judge) {
                return Err(invalid(
                    "reference_instruction needs reference = \"judge\" (it is what the judge \
                     answers the task under)"
                        .into(),
                ));
            }
            if i.trim().is_empty() {
                return Err(invalid("reference_instruction is empty".into()));
            }
        }
        // Unset, the hash is the one rubrics had before `reference` (and then
        // `reference_instruction`) existed.
        let version = match (spec.reference, &spec.reference_instruction) {
            (None, _) => content_hash(&changes_rewards),
            (Some(r), None) => content_hash(&(changes_rewards, r)),
            (Some(r), Some(i)) => content_hash(&(changes_rewards, r, i)),
        };
        // Likewise: a rubric that does not set `reasoning` keeps its version.
        let version = match spec.reasoning {
            None => version,
            Some(r) => content_hash(&(version, "reasoning", r)),
        };
        Ok(Rubric {
            name: spec.name.unwrap_or_else(|| fallback_name.to_string()),
            description: spec.description,
            text: spec.text,
            items: spec.items,
            required_cap,
            verifiers: spec.verifiers,
            policy: spec.policy,
            permutations: spec.permutations,
            reference: spec.reference,
            reference_instruction: spec.reference_instruction,
            reasoning: spec.reasoning,
            version,
            judge_version,
        })
    }

    /// Parses a rubric file's TOML text. Errors name the file and, where TOML knows it, the line.
    pub fn parse_toml(text: &str, fallback_name: &str, file: &str) -> Result<Rubric, RubricError> {
        Rubric::from_spec(parse_spec(text, file)?, fallback_name, file)
    }
}

/// A rubric file's TOML text as a spec, not yet checked.
fn parse_spec(text: &str, file: &str) -> Result<RubricSpec, RubricError> {
    toml::from_str(text).map_err(|e| RubricError::Invalid {
        file: match e.span() {
            Some(span) => format!("{file}:{}", line_of(text, span.start)),
            None => file.to_string(),
        },
        message: e.message().to_string(),
    })
}

/// A rubric argument of the command line (`--rubric`), read: a rubric of the set by name, or a
/// rubric file.
#[derive(Debug, Clone)]
pub struct RubricArg {
    /// The value as given: a report's label for it.
    pub given: String,
    pub rubric: Rubric,
    /// A file's rubric as a spec (its `name` set: the file's, else its stem), to send inline;
    /// `None` for a rubric of the set, sent by name.
    pub file_spec: Option<RubricSpec>,
}

/// Whether a rubric argument is written as a path: it has a path separator or ends in `.toml`.
pub fn looks_like_path(value: &str) -> bool {
    value.contains('/') || value.contains(std::path::MAIN_SEPARATOR) || value.ends_with(".toml")
}

/// 1-based line number of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The named rubrics a scorer knows.
#[derive(Debug, Clone)]
pub struct RubricSet {
    rubrics: BTreeMap<String, Rubric>,
}

impl RubricSet {
    /// The shipped rubrics, plus every `*.toml` in `dir` when given.
    pub fn load(dir: Option<&Path>) -> Result<RubricSet, RubricError> {
        let mut rubrics = BTreeMap::new();
        for (name, text) in BUILT_IN {
            let r = Rubric::parse_toml(text, name, &format!("rubrics/{name}.toml"))?;
            rubrics.insert(r.name.clone(), r);
        }
        if let Some(dir) = dir {
            let entries =
                std::fs::read_dir(dir).map_err(|e| RubricError::Io(dir.to_path_buf(), e))?;
            let mut paths: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            paths.sort();
            for path in paths {
                let text =
                    std::fs::read_to_string(&path).map_err(|e| RubricError::Io(path.clone(), e))?;
                let stem = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("rubric");
                let r = Rubric::parse_toml(&text, stem, &path.display().to_string())?;
                rubrics.insert(r.name.clone(), r);
            }
        }
        Ok(RubricSet { rubrics })
    }

    pub fn get(&self, name: &str) -> Result<&Rubric, RubricError> {
        self.rubrics.get(name).ok_or_else(|| RubricError::Unknown {
            name: name.to_string(),
            known: self.rubrics.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rubric> {
        self.rubrics.values()
    }

    /// A rubric argument (`--rubric`): a value written as a path ([`looks_like_path`]) that
    /// names an existing file is that file's rubric (a relative path is read from the current
    /// directory); any other value is a name of this set (a shipped rubric or one of
    /// `rubrics_dir`). A path-like value that is neither is refused, naming both.
    pub fn resolve_arg(&self, value: &str) -> Result<RubricArg, RubricError> {
        let path = Path::new(value);
        if looks_like_path(value) && path.is_file() {
            let text = std::fs::read_to_string(path)
                .map_err(|e| RubricError::Io(path.to_path_buf(), e))?;
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("rubric");
            let mut spec = parse_spec(&text, value)?;
            let rubric = Rubric::from_spec(spec.clone(), stem, value)?;
            spec.name = Some(rubric.name.clone());
            return Ok(RubricArg {
                given: value.to_string(),
                rubric,
                file_spec: Some(spec),
            });
        }
        match self.get(value) {
            Ok(r) => Ok(RubricArg {
                given: value.to_string(),
                rubric: r.clone(),
                file_spec: None,
            }),
            Err(RubricError::Unknown { known, .. }) if looks_like_path(value) => {
                let cwd = std::env::current_dir()
                    .map_or_else(|_| ".".into(), |d| d.display().to_string());
                Err(RubricError::Invalid {
                    file: value.to_string(),
                    message: format!(
                        "no such rubric file (read from {cwd}), and no rubric of that name \
                         (known: {known})"
                    ),
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// The judge component of a checklist verdict: the weighted fraction of items met, capped at
/// `required_cap` when a required item is unmet.
pub fn checklist_score(
    items: &[ChecklistItem],
    met: &BTreeMap<String, bool>,
    required_cap: f64,
) -> f64 {
    let total: f64 = items.iter().map(|i| i.weight).sum();
    let got: f64 = items
        .iter()
        .filter(|i| met.get(&i.id) == Some(&true))
        .map(|i| i.weight)
        .sum();
    let frac = if total > 0.0 { got / total } else { 0.0 };
    if items
        .iter()
        .any(|i| i.required && met.get(&i.id) != Some(&true))
    {
        frac.min(required_cap)
    } else {
        frac
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn checklist_fraction_with_required_cap() {
        let items = vec![
            ChecklistItem {
                id: "a".into(),
                text: "".into(),
                weight: 2.0,
                required: true,
            },
            ChecklistItem {
                id: "b".into(),
                text: "".into(),
                weight: 1.0,
                required: false,
            },
            ChecklistItem {
                id: "c".into(),
                text: "".into(),
                weight: 1.0,
                required: false,
            },
        ];
        let met = |a, b, c| {
            BTreeMap::from([
                ("a".to_string(), a),
                ("b".to_string(), b),
                ("c".to_string(), c),
            ])
        };
        assert_eq!(checklist_score(&items, &met(true, true, false), 0.0), 0.75);
        assert_eq!(checklist_score(&items, &met(false, true, true), 0.3), 0.3);
        assert_eq!(checklist_score(&items, &met(false, false, true), 0.3), 0.25);
    }

    use super::*;

    #[test]
    fn shipped_rubrics_load_and_have_versions() {
        let set = RubricSet::load(None).unwrap();
        let d = set.get("default").unwrap();
        assert!(d.text.contains("partial credit"));
        assert!(d.version.starts_with("sha256:") && d.version.len() == 71);
    }

    #[test]
    fn version_follows_content_not_name() {
        let a = Rubric::parse_toml("text = \"be exact\"", "a", "a.toml").unwrap();
        let b = Rubric::parse_toml("name = \"b\"\ntext = \"be exact\"", "x", "b.toml").unwrap();
        let c = Rubric::parse_toml("text = \"be brief\"", "a", "c.toml").unwrap();
        assert_eq!(a.version, b.version);
        assert_ne!(a.version, c.version);
        assert_eq!(b.name, "b");
    }

    #[test]
    fn bad_rubrics_are_refused_with_file_and_line() {
        let e =
            Rubric::parse_toml("text = \"x\"\ncolour = 3\n", "r", "rubrics/r.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rubrics/r.toml:2: unknown field `colour`"),
            "{e}"
        );
        let e = Rubric::parse_toml("text = \"  \"", "r", "r.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "r.toml: \"text\" is empty: a rubric states grading standards"
        );
        let e = Rubric::parse_toml(
            "text = \"x\"\n[[items]]\nid = \"a\"\ntext = \"t\"\n[[items]]\nid = \"a\"\ntext = \"u\"\n",
            "r",
            "r.toml",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "r.toml: items[1].id \"a\" appears twice");
    }

    #[test]
    fn unknown_rubric_names_the_known_ones() {
        let set = RubricSet::load(None).unwrap();
        assert_eq!(
            set.get("nope").unwrap_err().to_string(),
            "unknown rubric \"nope\" (known: default, rag_faithfulness, research_report, retrieval_qa)"
        );
    }

    #[test]
    fn a_rubric_argument_is_a_file_or_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("strict.toml");
        std::fs::write(&file, "text = \"only exact answers\"").unwrap();
        let set = RubricSet::load(None).unwrap();
        let a = set.resolve_arg(file.to_str().unwrap()).unwrap();
        assert_eq!(
            (a.rubric.name.as_str(), a.rubric.text.as_str()),
            ("strict", "only exact answers")
        );
        assert_eq!(a.file_spec.unwrap().name.as_deref(), Some("strict"));
        let d = set.resolve_arg("default").unwrap();
        assert!(d.file_spec.is_none() && d.rubric.name == "default");
        let missing = dir.path().join("nope.toml");
        let e = set
            .resolve_arg(missing.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope.toml: no such rubric file"), "{e}");
        assert!(e.contains("(known: default, rag_faithfulness"), "{e}");
        // A bad file is refused with its name and line.
        std::fs::write(&file, "text = \"x\"\ncolour = 1\n").unwrap();
        let e = set
            .resolve_arg(file.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("strict.toml:2: unknown field `colour`"), "{e}");
        assert!(looks_like_path("a.toml") && looks_like_path("x/y") && !looks_like_path("default"));
    }

    #[test]
    fn directory_rubrics_are_added() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("strict.toml"),
            "text = \"only exact answers\"",
        )
        .unwrap();
        let set = RubricSet::load(Some(dir.path())).unwrap();
        assert_eq!(set.get("strict").unwrap().text, "only exact answers");
        assert!(set.get("default").is_ok());
    }
}
