//! `gavel lint` as a child process: the shipped rubrics and prompts lint clean, and each kind of
//! problem gives exit status 1 with its exact `file:line:` line on stderr.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gavel");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Variables (and clap env twins) that would change what the child does if they leaked in.
const LEAKY_ENV: [&str; 4] = [
    "GAVEL_PROMPTS_DIR",
    "GAVEL_CONFIG",
    "GAVEL_LOG_JSON",
    "RUST_LOG",
];

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `gavel lint ARGS...` run in `dir`.
fn lint_in(dir: &Path, args: &[&str]) -> Out {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir).arg("lint").args(args);
    for var in LEAKY_ENV {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("gavel runs");
    Out {
        code: out.status.code().expect("gavel exits"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Writes `files` (relative paths) into a fresh temp dir and lints `args` there.
fn lint(files: &[(&str, &str)], args: &[&str]) -> Out {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    lint_in(dir.path(), args)
}

/// A clean rubric, for tests that are about templates.
const PLAIN: &str = "text = \"Prefer the correct answer.\"\n";

#[test]
fn shipped_rubrics_and_prompts_lint_clean() {
    let out = lint_in(Path::new(ROOT), &[]);
    assert_eq!(out.stderr, "");
    assert_eq!(
        out.stdout,
        "lint: 4 rubrics, 7 templates checked; 0 problems, 0 warnings\n"
    );
    assert_eq!(out.code, 0);
}

#[test]
fn custom_rubric_and_template_pair_lint_clean() {
    let out = lint_in(
        Path::new(ROOT),
        &[
            "tests/data/lint/rubrics",
            "--prompts",
            "tests/data/lint/prompts",
        ],
    );
    assert_eq!(out.stderr, "");
    assert_eq!(
        out.stdout,
        "lint: 1 rubric, 9 templates checked; 0 problems, 0 warnings\n"
    );
    assert_eq!(out.code, 0);
}

#[test]
fn toml_syntax_error_names_its_line() {
    let out = lint(
        &[("r/bad.toml", "text = \"x\"\n\n[[items]\nid = \"a\"\n")],
        &["r"],
    );
    assert_eq!(
        out.stderr,
        "r/bad.toml:3: unclosed array table, expected `]`\n"
    );
    assert_eq!(
        out.stdout,
        "lint: 1 rubric, 7 templates checked; 1 problem, 0 warnings\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn unknown_field_names_its_line() {
    let out = lint(&[("bad.toml", "text = \"x\"\ncolour = 3\n")], &["bad.toml"]);
    assert!(
        out.stderr
            .starts_with("bad.toml:2: unknown field `colour`, expected one of"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1);
    assert_eq!(out.code, 1);
}

#[test]
fn duplicate_item_id_and_negative_weight() {
    let rubric = "text = \"Be exact.\"\n\n[[items]]\nid = \"a\"\ntext = \"A\"\nweight = -1\n\n\
                  [[items]]\nid = \"a\"\ntext = \"B\"\n";
    let out = lint(&[("r/items.toml", rubric)], &["r"]);
    assert_eq!(
        out.stderr,
        "r/items.toml:6: items[0].weight must be a finite number >= 0, got -1\n\
         r/items.toml:9: items[1].id \"a\" appears twice\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn policy_naming_an_unknown_component() {
    let rubric =
        "text = \"Be exact.\"\n\n[[verifiers]]\ntype = \"answer_line\"\nkind = \"integer\"\n\n\
                  [policy]\ntype = \"weighted\"\nweights = { judge = 1.0, answr_line = 2.0 }\n";
    let out = lint(&[("r/typo.toml", rubric)], &["r"]);
    assert_eq!(
        out.stderr,
        "r/typo.toml:9: policy: weights.answr_line: no component named \"answr_line\" \
         (components: judge, independent_reward, answer_line)\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn verifier_with_a_bad_regex() {
    let rubric = "text = \"Be exact.\"\n\n[[verifiers]]\ntype = \"regex\"\npattern = \"(INV-\"\n";
    let out = lint(&[("r/re.toml", rubric)], &["r"]);
    assert_eq!(
        out.stderr,
        "r/re.toml:5: verifiers[0].pattern: invalid regex (unclosed group)\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn verifier_problem_without_its_key_points_at_its_table() {
    let rubric = "text = \"Be exact.\"\n\n[[verifiers]]\ntype = \"contains\"\n\n\
                  [[verifiers]]\ntype = \"answer_line\"\nkind = \"weekday\"\n";
    let out = lint(&[("r/v.toml", rubric)], &["r"]);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines[0], "r/v.toml:3: verifiers[0].text: missing");
    assert!(
        lines[1].starts_with("r/v.toml:8: verifiers[1].kind: unknown kind \"weekday\""),
        "{}",
        out.stderr
    );
    assert_eq!(lines.len(), 2);
    assert_eq!(out.code, 1);
}

#[test]
fn all_zero_weights() {
    let policy =
        "text = \"Be exact.\"\n\n[policy]\ntype = \"weighted\"\nweights = { judge = 0.0 }\n";
    let items = "text = \"Be exact.\"\n\n[[items]]\nid = \"a\"\ntext = \"A\"\nweight = 0\n";
    let out = lint(&[("r/a.toml", policy), ("r/b.toml", items)], &["r"]);
    assert_eq!(
        out.stderr,
        "r/a.toml:5: policy gives every component weight 0\n\
         r/b.toml:3: every checklist item has weight 0\n"
    );
    assert_eq!(
        out.stdout,
        "lint: 2 rubrics, 7 templates checked; 2 problems, 0 warnings\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn template_using_an_undefined_variable() {
    let out = lint(
        &[
            ("r/plain.toml", PLAIN),
            (
                "p/mine.system.jinja",
                "Standards:\n{{ rubric.text }}\n{{ grading_scale }}\n",
            ),
            (
                "p/mine.user.jinja",
                "{% for t in trajectories %}<trajectory id=\"{{ t.id }}\">{% endfor %}",
            ),
        ],
        &["r", "--prompts", "p"],
    );
    assert_eq!(
        out.stderr,
        "p/mine.system.jinja:3: `grading_scale` is undefined (a template can use n, ids, rubric, \
         context, shared, trajectories, tools, reference, json_values, reply_schema)\n"
    );
    assert_eq!(
        out.stdout,
        "lint: 1 rubric, 9 templates checked; 1 problem, 0 warnings\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn template_pair_missing_its_user_half() {
    let out = lint(
        &[
            ("r/plain.toml", PLAIN),
            ("p/solo.system.jinja", "{{ rubric.text }}"),
        ],
        &["r", "--prompts", "p"],
    );
    assert_eq!(
        out.stderr,
        "p/solo.system.jinja: has no partner solo.user.jinja\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn template_syntax_error_names_its_line() {
    let out = lint(
        &[
            ("r/plain.toml", PLAIN),
            ("p/broken.system.jinja", "Grade them.\n{% if %}\n"),
            ("p/broken.user.jinja", "x"),
        ],
        &["r", "--prompts", "p"],
    );
    assert_eq!(
        out.stderr,
        "p/broken.system.jinja:2: syntax error: unexpected end of block\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn template_that_hides_the_rubric_or_the_trajectories() {
    let out = lint(
        &[
            ("r/plain.toml", PLAIN),
            ("p/blind.system.jinja", "Grade {{ n }} trajectories."),
            (
                "p/blind.user.jinja",
                "{% for t in trajectories %}{{ t.id }}{% endfor %}",
            ),
            ("p/orphan.user.jinja", "{{ trajectories }}"),
        ],
        &["r", "--prompts", "p"],
    );
    assert_eq!(
        out.stderr,
        "p/orphan.user.jinja: has no partner orphan.system.jinja\n\
         p/blind.user.jinja: template does not show the trajectories (no <trajectory id=\"1\">)\n\
         p/blind.system.jinja: template does not include the rubric text\n\
         p/blind.system.jinja: template does not list the checklist items (rubric.items)\n"
    );
    assert_eq!(
        out.stdout,
        "lint: 1 rubric, 10 templates checked; 4 problems, 0 warnings\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn overriding_a_shipped_half_pairs_with_the_shipped_other_half() {
    let user =
        std::fs::read_to_string(Path::new(ROOT).join("prompts/relative.user.jinja")).unwrap();
    let out = lint(
        &[("r/plain.toml", PLAIN), ("p/relative.user.jinja", &user)],
        &["r", "--prompts", "p"],
    );
    assert_eq!(out.stderr, "");
    assert_eq!(
        out.stdout,
        "lint: 1 rubric, 7 templates checked; 0 problems, 0 warnings\n"
    );
    assert_eq!(out.code, 0);
}

#[test]
fn warnings_alone_exit_zero() {
    let rubric =
        "text = \"Be exact.\"\nrequired_cap = 0.3\n\n[[items]]\nid = \"a\"\ntext = \"A\"\n\n\
                  [[items]]\nid = \"b\"\ntext = \"B\"\nweight = 0\nrequired = true\n\n\
                  [[verifiers]]\ntype = \"answer_line\"\nkind = \"date\"\n\n\
                  [policy]\ntype = \"correctness_plus_shaping\"\ncorrectness = \"answer_line\"\n\
                  shaping = { judge = 0.5, independent_reward = 0.25 }\n";
    let out = lint(&[("r/w.toml", rubric)], &["r"]);
    assert_eq!(
        out.stderr,
        "r/w.toml:11: warning: items[1]: required item \"b\" has weight 0: it caps the score \
         when unmet and adds nothing when met\n\
         r/w.toml:21: warning: policy: shaping weights sum to 0.75; shaping this large makes the \
         tiers close\n"
    );
    assert_eq!(
        out.stdout,
        "lint: 1 rubric, 7 templates checked; 0 problems, 2 warnings\n"
    );
    assert_eq!(out.code, 0);
}

#[test]
fn missing_path_is_one_line_and_exit_one() {
    let out = lint(&[], &["no_such_rubrics"]);
    assert_eq!(out.stderr, "no_such_rubrics: no such file or directory\n");
    assert_eq!(
        out.stdout,
        "lint: 0 rubrics, 7 templates checked; 1 problem, 0 warnings\n"
    );
    assert_eq!(out.code, 1);
}

#[test]
fn the_config_names_the_rubrics_and_prompts_to_lint() {
    // Before, `gavel lint --config` ignored the config and linted ./rubrics only.
    let prompts = Path::new(ROOT).join("tests/data/lint/prompts");
    let config = format!(
        "rubrics_dir = \"mine\"\nprompts_dir = \"{}\"\n",
        prompts.display()
    );
    let out = lint(
        &[
            ("gavel.toml", config.as_str()),
            ("mine/good.toml", PLAIN),
            ("mine/bad.toml", "text = 5\n"),
            ("rubrics/other.toml", "text = 6\n"),
        ],
        &["--config", "gavel.toml"],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.starts_with("mine/bad.toml:1:"), "{}", out.stderr);
    assert!(!out.stderr.contains("other.toml"), "{}", out.stderr);
    assert!(
        out.stdout.contains("2 rubrics, 9 templates"),
        "{}",
        out.stdout
    );
    // Paths on the command line still win.
    let out = lint(
        &[
            ("gavel.toml", "rubrics_dir = \"mine\"\n"),
            ("mine/bad.toml", "text = 5\n"),
            ("r/ok.toml", PLAIN),
        ],
        &["--config", "gavel.toml", "r"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
}
