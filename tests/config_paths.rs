//! Paths as a new user writes them: a `--rubric` that is a file in every command that takes one,
//! and a config whose relative paths are read from its own folder, whatever the directory gavel
//! runs in, with every refusal naming the file and the key.

mod common;

use serde_json::{json, Value};

use common::cli::{judge_toml, run, CliSetup, Out};
use common::{marked_group, MockJudge};

const MARKER: &str = "Reward only answers that cite RUBRIC-FILE-MARKER.";

/// A recorded judge request's messages (system and user), as one text.
fn prompt(req: &Value) -> String {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The judge's prompts so far.
fn prompts(mock: &MockJudge) -> Vec<String> {
    mock.requests().iter().map(prompt).collect()
}

fn ok(out: &Out, what: &str) {
    assert_eq!(
        out.code,
        Some(0),
        "{what}: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
}

/// `--rubric myrubrics/x.toml` (and `y.toml`) reads the file, in render, score, eval, diff and
/// rescore; a name still names a shipped rubric; a path that is no file is refused once, naming
/// it and the known names. Before, each was `unknown rubric "myrubrics/x.toml"`.
#[tokio::test(flavor = "multi_thread")]
async fn a_rubric_argument_is_a_file_or_a_name_in_every_command() {
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"mock\"\n{}",
        judge_toml("mock", &mock, 0)
    ));
    s.write("myrubrics/x.toml", &format!("text = \"{MARKER}\"\n"));
    s.write(
        "y.toml",
        "name = \"why\"\ntext = \"Prefer short answers.\"\n",
    );
    let group = s.write("g.json", &marked_group(&[0.2, 0.8]).to_string());
    let lines = s.write("g.jsonl", &format!("{}\n", marked_group(&[0.3, 0.6])));

    let out = run(s.config_command("render", &["--rubric", "myrubrics/x.toml", &group])).await;
    ok(&out, "render");
    assert!(out.stdout.contains(MARKER), "{}", out.stdout);
    assert!(out.stdout.contains("--- rubric x "), "{}", out.stdout);
    let out = run(s.config_command("render", &["--rubric", "y.toml", &group])).await;
    ok(&out, "render y.toml");
    assert!(out.stdout.contains("--- rubric why "), "{}", out.stdout);
    let out = run(s.config_command("render", &["--rubric", "default", &group])).await;
    ok(&out, "render default");

    let out = run(s.command("score", &["--rubric", "myrubrics/x.toml", &group])).await;
    ok(&out, "score");
    assert_eq!(out.json()["rewards"], json!([0.2, 0.8]));
    assert!(prompts(&mock).iter().all(|p| p.contains(MARKER)));

    let mut labelled = marked_group(&[0.1, 0.9]);
    labelled["labels"] = json!([0, 1]);
    let eval_file = s.write("labelled.jsonl", &format!("{labelled}\n"));
    let args = [
        "--rubric",
        "myrubrics/x.toml",
        "--format",
        "json",
        "--orders",
        "1",
        &eval_file,
    ];
    let out = run(s.command("eval", &args)).await;
    ok(&out, "eval");
    assert_eq!(out.json()["results"][0]["rubric"], "myrubrics/x.toml");

    let args = [
        "--rubric",
        "default",
        "--rubric",
        "myrubrics/x.toml",
        "--format",
        "json",
        &lines,
    ];
    let out = run(s.command("diff", &args)).await;
    ok(&out, "diff");
    let r = out.json();
    assert_eq!(r["sides"]["b"]["label"], "myrubrics/x.toml");
    assert!(r["sides"]["b"]["rubric_version"]
        .as_str()
        .is_some_and(|v| v.starts_with("sha256:")));

    let before = mock.calls();
    let out_file = s.path("rescored.jsonl");
    // A group not judged yet (the diff's verdicts are in the store).
    let fresh = s.write("r.jsonl", &format!("{}\n", marked_group(&[0.15, 0.55])));
    let args = [&fresh, "-o", &out_file, "--rubric", "myrubrics/x.toml"];
    let out = run(s.command("rescore", &args)).await;
    ok(&out, "rescore");
    let calls = mock.requests();
    assert!(calls.len() > before, "rescore judged nothing");
    assert!(prompt(calls.last().unwrap()).contains(MARKER));

    // A path that names no file: one usage line, naming it and the names there are.
    for (cmd, extra) in [
        ("render", vec![]),
        ("score", vec![]),
        ("rescore", vec!["-o", &out_file]),
    ] {
        let mut args = vec!["--rubric", "myrubrics/nope.toml", group.as_str()];
        args.extend(extra);
        let c = if cmd == "render" {
            s.config_command(cmd, &args)
        } else {
            s.command(cmd, &args)
        };
        let out = run(c).await;
        assert_eq!(out.code, Some(2), "{cmd}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("--rubric: myrubrics/nope.toml: no such rubric file")
                && out.stderr.contains("known: default"),
            "{cmd}: {}",
            out.stderr
        );
    }
}

/// `cd elsewhere && gavel render --config ../cfg/judge_rub.toml`: the config's `rubrics_dir`
/// and `[store] path` are read from `cfg/`, while `--store` is read from the current directory.
/// Before, `myrubrics` was looked for in `elsewhere/` ("myrubrics: cannot read").
#[tokio::test(flavor = "multi_thread")]
async fn relative_paths_in_a_config_are_read_from_its_folder() {
    let mock = MockJudge::start().await;
    let s = CliSetup::new("");
    s.write(
        "cfg/judge_rub.toml",
        &format!(
            "default_judge = \"mock\"\nrubrics_dir = \"myrubrics\"\n[store]\npath = \"store\"\n\n{}",
            judge_toml("mock", &mock, 0)
        ),
    );
    s.write(
        "cfg/myrubrics/strict.toml",
        &format!("text = \"{MARKER}\"\n"),
    );
    s.write("g.json", &marked_group(&[0.4, 0.7]).to_string());
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let at = |cmd: &str, args: &[&str]| {
        let mut c = s.plain_command(cmd, args);
        c.args(["--config", "../cfg/judge_rub.toml"]);
        c.current_dir(&elsewhere);
        c
    };

    let out = run(at("render", &["--rubric", "strict", "../g.json"])).await;
    ok(&out, "render");
    assert!(out.stdout.contains(MARKER), "{}", out.stdout);

    let out = run(at("score", &["--rubric", "strict", "../g.json"])).await;
    ok(&out, "score");
    assert!(
        s.dir.path().join("cfg/store").is_dir(),
        "the config's store"
    );
    assert!(!elsewhere.join("store").exists());

    // A flag's path is the current directory's.
    let out = run(at("score", &["--store", "mine", "../g.json"])).await;
    ok(&out, "score --store");
    assert!(elsewhere.join("mine").is_dir());
}

/// A folder the config names that is not there, and a local judge's model that is not there:
/// each refusal names the config file, the key and the path as read.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_path_in_a_config_names_the_file_and_the_key() {
    let s = CliSetup::new("");
    s.write("cfg/bad.toml", "rubrics_dir = \"myrubrics\"\n");
    s.write(
        "cfg/local.toml",
        "[judges.l]\nbackend = \"local\"\nmodel_path = \"models/m.gguf\"\n",
    );
    s.write("g.json", &marked_group(&[0.4, 0.7]).to_string());
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let render = |cfg: &str| {
        let mut c = s.plain_command("render", &["../g.json", "--config", cfg]);
        c.current_dir(&elsewhere);
        c
    };
    let out = run(render("../cfg/bad.toml")).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("gavel: ../cfg/bad.toml: rubrics_dir ../cfg/myrubrics: no such folder"),
        "{}",
        out.stderr
    );
    if cfg!(feature = "local") {
        let out = run(render("../cfg/local.toml")).await;
        assert_eq!(out.code, Some(1), "{}", out.stderr);
        let e = &out.stderr;
        assert!(e.starts_with("gavel: ../cfg/local.toml: "), "{e}");
        assert!(
            e.contains("[judges.l]") && e.contains("model_path ../cfg/models/m.gguf"),
            "{e}"
        );
    }
}
