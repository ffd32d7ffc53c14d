//! Tests of `gavel train`'s flags (`args.rs`): what each action parses and refuses, the
//! `--use-rslora` switch, and help with a description and a default on every flag.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};

use super::args::*;

/// `gavel train` as the binary nests it.
#[derive(Parser, Debug)]
struct Train {
    #[command(flatten)]
    args: TrainArgs,
}

fn parse(args: &[&str]) -> Result<TrainArgs, clap::Error> {
    Train::try_parse_from(std::iter::once("train").chain(args.iter().copied())).map(|t| t.args)
}

#[test]
fn flags_before_an_action_apply_to_it_and_the_action_s_own_win() {
    let a = parse(&[
        "--config",
        "c.toml",
        "--group-size",
        "4",
        "sample",
        "-o",
        "s.jsonl",
        "--group-size",
        "8",
    ])
    .unwrap();
    let e = a.effective();
    assert_eq!(
        e.base.config.as_deref(),
        Some(std::path::Path::new("c.toml"))
    );
    assert_eq!(e.sampling.group_size, Some(8));
    let Some(TrainAction::Sample(s)) = &a.action else {
        panic!("{a:?}")
    };
    assert_eq!(s.output, PathBuf::from("s.jsonl"));
    // The merge and toy commands of docs/training.md.
    let a = parse(&[
        "--model",
        "base",
        "merge",
        "--adapter",
        "ck",
        "--out",
        "merged",
    ])
    .unwrap();
    assert_eq!(a.effective().base.model, Some(PathBuf::from("base")));
    let a = parse(&[
        "toy",
        "--output-dir",
        "d",
        "--seed",
        "3",
        "--no-train",
        "--quiet",
    ])
    .unwrap();
    let e = a.effective();
    assert_eq!(
        (e.run.output_dir, e.sampling.seed, e.quiet),
        (Some("d".into()), Some(3), true)
    );
    // An action refuses the flags it would ignore.
    for bad in [
        &["toy", "--learning-rate", "1e-3"][..],
        &["merge", "--adapter", "a", "-o", "m", "--group-size", "2"],
        &["sample", "-o", "s", "--sft", "x.jsonl"],
    ] {
        let e = parse(bad).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{bad:?}");
    }
}

#[test]
fn use_rslora_is_a_switch_that_still_takes_a_value() {
    let rs = |args: &[&str]| parse(args).unwrap().config().unwrap().lora.use_rslora;
    assert!(!rs(&[]));
    assert!(rs(&["--use-rslora"]));
    assert!(
        rs(&["--use-rslora", "--steps", "3"]),
        "the switch does not eat the next flag"
    );
    assert!(rs(&["--use-rslora", "true"]));
    assert!(!rs(&["--use-rslora", "false"]));
    assert!(rs(&["sample", "-o", "s", "--use-rslora"]));
}

/// Every flag of `gavel train` and of its actions says what it does and where its default
/// comes from; a flag an action shares with the run says the same in both.
#[test]
fn every_train_flag_has_help_with_its_default() {
    let top = Train::command();
    let help_of = |c: &clap::Command, id: &str| {
        c.get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
    };
    let mut commands = vec![top.clone()];
    commands.extend(top.get_subcommands().cloned());
    for c in &commands {
        for a in c.get_arguments() {
            let id = a.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let h = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(h.len() > 10, "{} --{id}: no description", c.get_name());
            // Switches default to off, and required values have no default.
            let switch = matches!(a.get_action(), clap::ArgAction::SetTrue);
            if !switch && !a.is_required_set() {
                assert!(h.contains("[default: "), "{} --{id}: {h}", c.get_name());
            }
            if c.get_name() != top.get_name() {
                // Toy's flags describe the toy run and judge's the judge's training (neither
                // reads train.toml); every other shared flag is declared once and says what the
                // run's says.
                let differs = ["toy", "judge"].contains(&c.get_name());
                if let (Some(run), false) = (help_of(&top, id), differs) {
                    assert_eq!(h, run, "{} --{id}", c.get_name());
                }
            }
        }
    }
    let lr = help_of(&top, "learning_rate").unwrap();
    assert!(
        lr.ends_with("[default: train.toml's `learning_rate`, else 0.00001]"),
        "{lr}"
    );
    let s = help_of(&top, "schedule").unwrap();
    assert!(s.ends_with("else constant]"), "{s}");
}

/// Every flag that names a `train.toml` key sets that key: the config a flag makes equals the
/// one made by a file holding only that key, set to the flag's value, and differs from the
/// default (so the flag reaches the config at all).
#[test]
fn every_keyed_flag_sets_the_key_its_help_names() {
    use gavel::train::config::TrainConfig;
    let top = Train::command();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for arg in top.get_arguments() {
        let id = arg.get_id().as_str();
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let Some(key) = help
            .split("train.toml's `")
            .nth(1)
            .and_then(|k| k.split('`').next())
        else {
            continue;
        };
        let flag = format!("--{}", id.replace('_', "-"));
        let mut candidates: Vec<String> = ["3", "true", "0.25,0.5"].map(String::from).to_vec();
        candidates.extend(
            arg.get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string()),
        );
        let made: Vec<TrainConfig> = candidates
            .iter()
            .filter_map(|v| parse(&[&flag, v]).ok()?.config().ok())
            .filter(|c| *c != TrainConfig::default())
            .collect();
        let Some(by_flag) = made.first() else {
            panic!("{flag}: no value changes the config");
        };
        // The file with only `key`, at the flag's value.
        let whole = toml::Value::try_from(by_flag).unwrap();
        let path: Vec<&str> = key.split('.').collect();
        let value = path
            .iter()
            .try_fold(&whole, |v, k| v.get(k))
            .unwrap_or_else(|| panic!("{flag}: `{key}` is not a key of the config"))
            .clone();
        let file = path.iter().rev().fold(value, |v, k| {
            toml::Value::Table(toml::map::Map::from_iter([(k.to_string(), v)]))
        });
        let toml_path = dir.path().join(format!("{id}.toml"));
        std::fs::write(&toml_path, toml::to_string(&file).unwrap()).unwrap();
        let by_file = TrainConfig::from_file(&toml_path).unwrap();
        // A path in the file is read from the file's folder, a flag's from the current one.
        let mut want = by_flag.clone();
        let join = |p: &mut std::path::PathBuf| *p = dir.path().join(&*p);
        match key {
            "model" => join(&mut want.model),
            "output_dir" => join(&mut want.output_dir),
            "tasks" => want.tasks.iter_mut().for_each(join),
            "offline" => want.offline.iter_mut().for_each(join),
            "sft" => want.sft.iter_mut().for_each(join),
            "init_adapter" => want.init_adapter.iter_mut().for_each(join),
            _ => {}
        }
        assert_eq!(by_file, want, "{flag} and train.toml's `{key}`");
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} keyed flags");
}

#[test]
fn filter_flags_turn_the_filter_on() {
    use gavel::train::filter::FilterConfig;
    assert_eq!(TrainArgs::default().config().unwrap().filter, None);
    let a = TrainArgs {
        filter: FilterFlags {
            filter_survey_samples: Some(4),
            filter_pass_rate: Some(vec![0.2, 0.7]),
            ..FilterFlags::default()
        },
        ..TrainArgs::default()
    };
    let want = FilterConfig {
        survey_samples: 4,
        pass_rate: [0.2, 0.7],
        ..FilterConfig::default()
    };
    assert_eq!(a.config().unwrap().filter, Some(want));
    let a = TrainArgs {
        filter: FilterFlags {
            filter_pass_rate: Some(vec![0.2]),
            ..FilterFlags::default()
        },
        ..TrainArgs::default()
    };
    let e = a.config().unwrap_err().to_string();
    assert!(e.starts_with("--filter-pass-rate: expected LO,HI"), "{e}");
}

/// The filter's flags before "probe" meant only the health checks are still taken.
#[test]
fn the_filter_flags_old_names_are_aliases() {
    let old = parse(&["--filter-probe-samples", "4", "--filter-reprobe-every", "5"]).unwrap();
    let new = parse(&[
        "--filter-survey-samples",
        "4",
        "--filter-resurvey-every",
        "5",
    ])
    .unwrap();
    let filter = old.config().unwrap().filter.unwrap();
    assert_eq!((filter.survey_samples, filter.resurvey_every), (4, 5));
    assert_eq!(new.config().unwrap().filter, Some(filter));
}

#[test]
fn every_enum_flag_lists_the_names_train_toml_reads() {
    use gavel::train::grpo::{IsLevel, LossType, TisMode};
    use gavel::train::optim::Schedule;
    // serde's refusal of an unknown name lists every variant's: the flags' lists are those.
    fn serde_names<E: serde::de::DeserializeOwned + std::fmt::Debug>() -> Vec<String> {
        let e = serde_json::from_value::<E>(serde_json::json!("?"))
            .unwrap_err()
            .to_string();
        let (_, list) = e.split_once("expected").unwrap_or_else(|| panic!("{e}"));
        // "`a` or `b`", "one of `a`, `b`, `c`": the quoted names.
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }
    assert_eq!(serde_names::<Schedule>(), SCHEDULES);
    assert_eq!(serde_names::<LossType>(), LOSS_TYPES);
    assert_eq!(serde_names::<IsLevel>(), IS_LEVELS);
    assert_eq!(serde_names::<TisMode>(), TIS_MODES);
    // And each flag reads its names as the file does.
    let c = parse(&[
        "--schedule",
        "cosine",
        "--loss-type",
        "dr_grpo",
        "--tis-mode",
        "mask",
    ])
    .unwrap()
    .config()
    .unwrap();
    assert_eq!(c.schedule, Schedule::Cosine);
    assert_eq!(c.grpo.loss_type, LossType::DrGrpo);
    assert_eq!(c.grpo.tis_mode, TisMode::Mask);
    let e = parse(&["--loss-type", "ppo"]).unwrap_err().to_string();
    assert!(
        e.contains("possible values: grpo, bnpo, dr_grpo, dapo"),
        "{e}"
    );
}

#[test]
fn sft_excludes_tasks_and_offline_and_replaces_the_files_tasks() {
    for other in ["tasks", "offline"] {
        let mut a = TrainArgs::default();
        a.source.sft = Some("s.jsonl".into());
        match other {
            "tasks" => a.sampling.tasks = Some("t.jsonl".into()),
            _ => a.source.offline = Some("o.jsonl".into()),
        }
        let e = a.config().unwrap_err().to_string();
        assert!(e.contains("--sft excludes --tasks and --offline"), "{e}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let toml = tmp.path().join("train.toml");
    std::fs::write(&toml, "model = \"m\"\ntasks = \"t.jsonl\"\n").unwrap();
    let mut a = TrainArgs::default();
    a.source.sft = Some("s2.jsonl".into());
    a.base.config = Some(toml);
    let c = a.config().unwrap();
    assert_eq!((c.tasks, c.sft), (None, Some("s2.jsonl".into())));
}
