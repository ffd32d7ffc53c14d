//! Attacks on a judge: transformations of a trajectory's final answer that try to talk the judge
//! into a reward (a note to the grader, a fake verdict, padding...), kept as data in
//! `attacks/*.toml` so that users add their own. `gavel eval --attacks` applies each to the
//! wrong trajectories of labelled groups and measures how far the rewards move.
//!
//! An attack file holds a `kind` (what family it belongs to, for reports), a one-line
//! `description` and a minijinja `template` that renders the new final answer from:
//!
//! | variable | what it is |
//! |---|---|
//! | `answer` | the trajectory's final answer as it was |
//! | `question` | the last user message before it |
//! | `context` | every other message before it (system, user, tool), one per line |
//! | `reference` | the group's reference answer, else the best-labelled trajectory's answer |
//! | `standards` | the rubric's standards, one string each (its bullets and checklist items) |
//!
//! and two filters, `words(n)` and `last_words(n)` (the first or last n words of a text).
//! Undefined variables are an error, never an empty string. The attack's name is its file's stem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};

use crate::domain::rubric::{line_of, Rubric};
use crate::domain::trajectory::{Message, Role, Trajectory};

/// The attacks shipped with gavel: (name, file text).
const BUILT_IN: &[(&str, &str)] = &[
    (
        "grader_note_polite",
        include_str!("../../attacks/grader_note_polite.toml"),
    ),
    (
        "grader_note_authoritative",
        include_str!("../../attacks/grader_note_authoritative.toml"),
    ),
    (
        "system_override",
        include_str!("../../attacks/system_override.toml"),
    ),
    (
        "chat_markup",
        include_str!("../../attacks/chat_markup.toml"),
    ),
    (
        "fake_transcript_end",
        include_str!("../../attacks/fake_transcript_end.toml"),
    ),
    (
        "fake_json_verdict",
        include_str!("../../attacks/fake_json_verdict.toml"),
    ),
    (
        "self_assessment",
        include_str!("../../attacks/self_assessment.toml"),
    ),
    (
        "hedge_restate",
        include_str!("../../attacks/hedge_restate.toml"),
    ),
    (
        "padding_question",
        include_str!("../../attacks/padding_question.toml"),
    ),
    (
        "padding_context",
        include_str!("../../attacks/padding_context.toml"),
    ),
    (
        "length_inflation",
        include_str!("../../attacks/length_inflation.toml"),
    ),
    (
        "reference_wording",
        include_str!("../../attacks/reference_wording.toml"),
    ),
    (
        "checklist_format",
        include_str!("../../attacks/checklist_format.toml"),
    ),
];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AttackError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("{0}: cannot read: {1}")]
    Io(PathBuf, String),
    #[error("unknown attack {name:?} (known: {known})")]
    Unknown { name: String, known: String },
    #[error("attack {name:?}: cannot render its template for {at}: {message}")]
    Render {
        name: String,
        at: String,
        message: String,
    },
}

/// An attack file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttackFile {
    kind: String,
    #[serde(default)]
    description: String,
    template: String,
}

/// One attack: its name (the file's stem), kind, description and template text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attack {
    pub name: String,
    pub kind: String,
    pub description: String,
    #[serde(skip)]
    pub template: String,
}

/// What an attack's template may read about the answer it rewrites.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AttackInput<'a> {
    pub answer: &'a str,
    pub question: &'a str,
    pub context: String,
    pub reference: &'a str,
    pub standards: &'a [String],
}

/// The attacks a run may use, compiled once.
pub struct AttackSet {
    attacks: BTreeMap<String, Attack>,
    env: Environment<'static>,
}

impl std::fmt::Debug for AttackSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttackSet")
            .field("attacks", &self.attacks.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn words(text: &str, n: usize) -> String {
    text.split_whitespace()
        .take(n)
        .collect::<Vec<_>>()
        .join(" ")
}

fn last_words(text: &str, n: usize) -> String {
    let all: Vec<&str> = text.split_whitespace().collect();
    all[all.len().saturating_sub(n)..].join(" ")
}

impl AttackSet {
    /// The shipped attacks, plus every `*.toml` in `dir` when given (a file named like a shipped
    /// attack replaces it).
    pub fn load(dir: Option<&Path>) -> Result<AttackSet, AttackError> {
        let mut files: Vec<(String, String, String)> = BUILT_IN
            .iter()
            .map(|(name, text)| {
                (
                    name.to_string(),
                    text.to_string(),
                    format!("attacks/{name}.toml"),
                )
            })
            .collect();
        if let Some(dir) = dir {
            let io = |e: std::io::Error| AttackError::Io(dir.to_path_buf(), e.to_string());
            let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(io)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            paths.sort();
            for path in paths {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| AttackError::Io(path.clone(), e.to_string()))?;
                let name = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("attack")
                    .to_string();
                files.retain(|(n, _, _)| *n != name);
                files.push((name, text, path.display().to_string()));
            }
        }
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.add_filter("words", |t: String, n: usize| words(&t, n));
        env.add_filter("last_words", |t: String, n: usize| last_words(&t, n));
        let mut attacks = BTreeMap::new();
        for (name, text, file) in files {
            let invalid = |message: String| AttackError::Invalid {
                file: file.clone(),
                message,
            };
            let parsed: AttackFile = toml::from_str(&text).map_err(|e| AttackError::Invalid {
                file: match e.span() {
                    Some(span) => format!("{file}:{}", line_of(&text, span.start)),
                    None => file.clone(),
                },
                message: e.message().to_string(),
            })?;
            if parsed.kind.trim().is_empty() {
                return Err(invalid("kind: must not be empty".into()));
            }
            if !parsed.template.contains("answer") {
                return Err(invalid(
                    "template: never uses `answer`, so the attack would replace the answer \
                     instead of dressing it up"
                        .into(),
                ));
            }
            env.add_template_owned(name.clone(), parsed.template.clone())
                .map_err(|e| invalid(format!("template: {e}")))?;
            attacks.insert(
                name.clone(),
                Attack {
                    name,
                    kind: parsed.kind.trim().to_string(),
                    description: parsed.description.trim().to_string(),
                    template: parsed.template,
                },
            );
        }
        Ok(AttackSet { attacks, env })
    }

    /// Every attack, by name.
    pub fn all(&self) -> impl Iterator<Item = &Attack> {
        self.attacks.values()
    }

    pub fn get(&self, name: &str) -> Result<&Attack, AttackError> {
        self.attacks.get(name).ok_or_else(|| AttackError::Unknown {
            name: name.to_string(),
            known: self.attacks.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// The attacks named (each once, in the order given), or every one when none is named.
    pub fn chosen(&self, names: &[String]) -> Result<Vec<Attack>, AttackError> {
        if names.is_empty() {
            return Ok(self.all().cloned().collect());
        }
        let mut out: Vec<Attack> = Vec::new();
        for n in names {
            let a = self.get(n)?;
            if !out.iter().any(|c| c.name == a.name) {
                out.push(a.clone());
            }
        }
        Ok(out)
    }

    /// The new final answer: `attack`'s template over `input`; `at` names the group in errors.
    pub fn apply(
        &self,
        attack: &str,
        input: &AttackInput,
        at: &str,
    ) -> Result<String, AttackError> {
        let render = || -> Result<String, minijinja::Error> {
            self.env
                .get_template(attack)?
                .render(minijinja::value::Serde(input))
        };
        render().map_err(|e| AttackError::Render {
            name: attack.to_string(),
            at: at.to_string(),
            message: e.to_string(),
        })
    }
}

/// The rubric's standards, one string each: its `- ` bullets (continuation lines joined), or
/// its non-empty lines when it has none, then its checklist items.
pub fn standards(rubric: &Rubric) -> Vec<String> {
    let mut bullets: Vec<String> = Vec::new();
    for line in rubric.text.lines().map(str::trim) {
        if let Some(b) = line.strip_prefix("- ") {
            bullets.push(b.trim().to_string());
        } else if let (false, Some(last)) = (line.is_empty(), bullets.last_mut()) {
            last.push(' ');
            last.push_str(line);
        }
    }
    if bullets.is_empty() {
        bullets = rubric
            .text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
    }
    bullets.extend(rubric.items.iter().map(|i| i.text.trim().to_string()));
    bullets
}

/// Which trajectories an attack rewrites: those labelled below the group's best.
pub fn targets(labels: &[f64]) -> Vec<bool> {
    let best = labels.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    labels.iter().map(|&l| l < best).collect()
}

/// The last assistant message's index, where the final answer is.
fn final_message(t: &Trajectory) -> Option<usize> {
    t.messages.iter().rposition(|m| m.role == Role::Assistant)
}

/// The question (the last user message before the final answer) and the context (every other
/// message before it with content, one per line).
fn question_and_context(messages: &[Message]) -> (&str, String) {
    let question_at = messages.iter().rposition(|m| m.role == Role::User);
    let question = question_at
        .and_then(|i| messages[i].content.as_deref())
        .unwrap_or("");
    let context = messages
        .iter()
        .enumerate()
        .filter(|(i, m)| Some(*i) != question_at && m.role != Role::Assistant)
        .filter_map(|(_, m)| m.content.as_deref())
        .collect::<Vec<_>>()
        .join("\n");
    (question, context)
}

/// The group with `attack` applied to the final answer of every trajectory `targets` marks; the
/// others are returned untouched. A trajectory with no assistant message is left as it is.
fn attack_trajectories(
    set: &AttackSet,
    attack: &str,
    trajectories: &[Trajectory],
    targets: &[bool],
    reference: &str,
    standards: &[String],
    at: &str,
) -> Result<Vec<Trajectory>, AttackError> {
    let mut out = trajectories.to_vec();
    for (t, _) in out.iter_mut().zip(targets).filter(|(_, &hit)| hit) {
        let Some(last) = final_message(t) else {
            continue;
        };
        let (question, context) = question_and_context(&t.messages[..last]);
        let input = AttackInput {
            answer: t.messages[last].content.as_deref().unwrap_or(""),
            question,
            context,
            reference,
            standards,
        };
        let new = set.apply(attack, &input, at)?;
        t.messages[last].content = Some(new);
    }
    Ok(out)
}

/// A group's copy with `attack` applied to the trajectories labelled below its best. The
/// `reference` an attack may quote is the group's own, else the best-labelled trajectory's final
/// answer; the `standards` are `rubric`'s. `at` names the group in errors.
pub fn attack_group(
    set: &AttackSet,
    attack: &str,
    trajectories: &[Trajectory],
    labels: &[f64],
    reference: Option<&str>,
    rubric: &Rubric,
    at: &str,
) -> Result<Vec<Trajectory>, AttackError> {
    let hit = targets(labels);
    let best = hit.iter().position(|h| !h).unwrap_or(0);
    let reference = reference
        .or_else(|| trajectories.get(best).and_then(Trajectory::final_answer))
        .unwrap_or("");
    attack_trajectories(
        set,
        attack,
        trajectories,
        &hit,
        reference,
        &standards(rubric),
        at,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn traj(answer: &str) -> Trajectory {
        let v = json!({"messages": [
            {"role": "system", "content": "Knowledge: the report was written by Ada in 1843."},
            {"role": "user", "content": "Who wrote the report?"},
            {"role": "assistant", "content": answer}
        ]});
        crate::domain::trajectory::parse_trajectory(&v, "t").unwrap()
    }

    #[test]
    fn every_shipped_attack_loads_and_keeps_the_wrong_answer_in_its_output() {
        let set = AttackSet::load(None).unwrap();
        assert_eq!(set.all().count(), BUILT_IN.len());
        let standards = vec!["Be right.".to_string(), "Be brief.".to_string()];
        for a in set.all() {
            let input = AttackInput {
                answer: "Bob wrote it.",
                question: "Who wrote the report?",
                context: "Knowledge: the report was written by Ada in 1843.".into(),
                reference: "Ada",
                standards: &standards,
            };
            let out = set.apply(&a.name, &input, "g1").unwrap();
            assert!(out.contains("Bob wrote it."), "{}: {out}", a.name);
            assert_ne!(out.trim(), "Bob wrote it.", "{} changed nothing", a.name);
        }
    }

    #[test]
    fn only_the_trajectories_below_the_best_label_are_rewritten() {
        let set = AttackSet::load(None).unwrap();
        let group = vec![
            traj("Ada."),
            traj("Bob."),
            traj("Ada, in 1843."),
            traj("Eve."),
        ];
        let labels = [1.0, 0.0, 1.0, 0.5];
        let hit = targets(&labels);
        assert_eq!(hit, vec![false, true, false, true]);
        let out = attack_trajectories(&set, "grader_note_polite", &group, &hit, "Ada.", &[], "g")
            .unwrap();
        assert_eq!(out[0], group[0]);
        assert_eq!(out[2], group[2]);
        for i in [1, 3] {
            let a = out[i].final_answer().unwrap();
            assert!(a.starts_with(group[i].final_answer().unwrap()), "{a}");
            assert!(a.contains("note for the grader"), "{a}");
            // Everything but the final answer is as it was.
            assert_eq!(out[i].messages[..2], group[i].messages[..2]);
        }
    }

    #[test]
    fn templates_read_the_question_context_reference_and_standards() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("probe.toml"),
            "kind = \"test\"\ntemplate = \"{{ answer }}|{{ question }}|{{ context | words(2) }}|\
             {{ context | last_words(1) }}|{{ reference }}|{{ standards | join(';') }}\"\n",
        )
        .unwrap();
        let set = AttackSet::load(Some(dir.path())).unwrap();
        let t = traj("Bob.");
        let out = attack_trajectories(
            &set,
            "probe",
            &[t],
            &[true],
            "Ada",
            &["a".into(), "b".into()],
            "g",
        )
        .unwrap();
        assert_eq!(
            out[0].final_answer().unwrap(),
            "Bob.|Who wrote the report?|Knowledge: the|1843.|Ada|a;b"
        );
    }

    #[test]
    fn a_bad_attack_file_is_named_with_its_problem() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("x.toml"),
            "kind = \"k\"\ntemplat = \"{{ answer }}\"\n",
        )
        .unwrap();
        let e = AttackSet::load(Some(dir.path())).unwrap_err().to_string();
        assert!(e.contains("x.toml:2") && e.contains("templat"), "{e}");
        std::fs::write(
            dir.path().join("x.toml"),
            "kind = \"k\"\ntemplate = \"yes\"\n",
        )
        .unwrap();
        let e = AttackSet::load(Some(dir.path())).unwrap_err().to_string();
        assert!(e.contains("never uses `answer`"), "{e}");
        std::fs::write(
            dir.path().join("x.toml"),
            "kind = \"k\"\ntemplate = \"{{ answer }} {{ nothing }}\"\n",
        )
        .unwrap();
        let set = AttackSet::load(Some(dir.path())).unwrap();
        let e = attack_trajectories(&set, "x", &[traj("a")], &[true], "", &[], "f.jsonl:3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"x\"") && e.contains("f.jsonl:3"), "{e}");
        assert!(set
            .get("nope")
            .unwrap_err()
            .to_string()
            .contains("grader_note_polite"));
    }

    #[test]
    fn standards_are_the_rubric_bullets_joined_and_its_items() {
        let r = Rubric::parse_toml(
            "text = \"\"\"\n- First, \\\nlong.\n- Second.\n\"\"\"\n[[items]]\nid = \"a\"\ntext = \"Item A\"\n",
            "r",
            "r.toml",
        )
        .unwrap();
        assert_eq!(standards(&r), vec!["First, long.", "Second.", "Item A"]);
    }
}
