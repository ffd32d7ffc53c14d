//! A training run's output folder (`output_dir`; the toy's folder): a run starts in an empty
//! or new folder, continues the run there (`--resume`), or starts again over it
//! (`--overwrite`), and never writes silently beside another run's checkpoints and
//! `metrics.jsonl`, where a new run's steps would restart at 1 in the same file.

use std::path::{Path, PathBuf};

use super::TrainError;

/// Where a resumed run continues from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The last checkpoint in the run's output folder.
    Last,
    /// This checkpoint folder.
    From(PathBuf),
}

/// The last `checkpoint-STEP` folder in `dir`, by step.
pub fn last_checkpoint(dir: &Path) -> Option<(u64, PathBuf)> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("checkpoint-")?.parse::<u64>().ok()?;
            Some((step, e.path()))
        })
        .max_by_key(|(s, _)| *s)
}

/// What a training run writes in its folder: `metrics.jsonl` and the checkpoints.
pub fn is_run_file(name: &str) -> bool {
    name == "metrics.jsonl" || name == "metrics.jsonl.tmp" || name.starts_with("checkpoint-")
}

/// The names in `dir`, sorted (none when it is not there).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `a, b, c and 4 more`.
fn listing(names: &[String]) -> String {
    let shown = names.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
    match names.len() {
        n if n > 4 => format!("{shown} and {} more", n - 4),
        _ => shown,
    }
}

/// Removes what `ours` says gavel wrote in `dir`; other files stay.
fn remove_ours(dir: &Path, ours: fn(&str) -> bool) -> Result<(), TrainError> {
    for name in entries(dir).into_iter().filter(|n| ours(n)) {
        let path = dir.join(&name);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(TrainError::file(&path))?;
    }
    Ok(())
}

/// Readies `dir` for a run of `gavel train` and says where it resumes from: the checkpoint
/// `resume` names (the folder's last for [`Resume::Last`]), or none for a fresh run, which
/// needs the folder empty or new, or `overwrite` (the old run's files are removed first).
pub fn prepare(
    dir: &Path,
    resume: Option<&Resume>,
    overwrite: bool,
) -> Result<Option<PathBuf>, TrainError> {
    let refuse = |m: String| Err(TrainError::Config(m));
    match resume {
        Some(_) if overwrite => {
            refuse("--resume continues a run and --overwrite starts it again: give one".into())
        }
        Some(Resume::From(dir)) => Ok(Some(dir.clone())),
        Some(Resume::Last) => match last_checkpoint(dir) {
            Some((_, c)) => Ok(Some(c)),
            None => refuse(format!(
                "--resume: no checkpoint in {} to continue from (a run saves one every \
                 --save-every steps and at its end)",
                dir.display()
            )),
        },
        None if overwrite => {
            remove_ours(dir, is_run_file)?;
            Ok(None)
        }
        None => {
            let names = entries(dir);
            if names.is_empty() {
                return Ok(None);
            }
            let how = match last_checkpoint(dir) {
                Some((_, c)) => format!(
                    "--resume continues it from {} (or --resume CHECKPOINT from another), \
                     --overwrite starts again (removing metrics.jsonl and the checkpoints)",
                    c.display()
                ),
                None => "--overwrite starts there anyway (removing metrics.jsonl and any \
                         checkpoint; other files stay)"
                    .into(),
            };
            refuse(format!(
                "{} is not empty ({}): {how}, or give another --output-dir",
                dir.display(),
                listing(&names)
            ))
        }
    }
}

/// What `gavel train toy` writes in its folder.
pub fn is_toy_file(name: &str) -> bool {
    matches!(name, "toy-model" | "toy-tasks.jsonl" | "train.toml" | "run")
}

/// Readies the toy's folder `dir`: empty or new for a fresh toy run; with `overwrite`, the old
/// toy's files removed first; with `resume`, the old toy kept (its run continues from the
/// last checkpoint in `dir/run`, which [`prepare`] finds).
pub fn prepare_toy(dir: &Path, resume: bool, overwrite: bool) -> Result<(), TrainError> {
    let names = entries(dir);
    if resume && overwrite {
        return Err(TrainError::Config(
            "--resume continues the toy run and --overwrite starts it again: give one".into(),
        ));
    }
    if resume {
        if !names.iter().any(|n| n == "run") {
            return Err(TrainError::Config(format!(
                "--resume: {} holds no toy run to continue (`gavel train toy` writes one)",
                dir.display()
            )));
        }
        return Ok(());
    }
    if overwrite {
        return remove_ours(dir, is_toy_file);
    }
    if names.is_empty() {
        return Ok(());
    }
    let what = if names.iter().any(|n| is_toy_file(n)) {
        "holds a toy run"
    } else {
        "is not empty"
    };
    Err(TrainError::Config(format!(
        "{} {what} ({}): --resume continues it from its last checkpoint, --overwrite writes \
         the toy again and trains from the start (removing the old toy's files), or give \
         another --output-dir",
        dir.display(),
        listing(&names)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_run_needs_an_empty_folder_or_a_word() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        assert_eq!(prepare(&dir, None, false).unwrap(), None, "a new folder");
        std::fs::create_dir_all(dir.join("checkpoint-5")).unwrap();
        std::fs::create_dir_all(dir.join("checkpoint-10")).unwrap();
        std::fs::write(dir.join("metrics.jsonl"), "{}\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let e = prepare(&dir, None, false).unwrap_err().to_string();
        assert!(
            e.contains("is not empty (checkpoint-10, checkpoint-5, metrics.jsonl, notes.txt)"),
            "{e}"
        );
        assert!(
            e.contains("--resume continues it from") && e.contains("checkpoint-10"),
            "{e}"
        );
        assert_eq!(
            prepare(&dir, Some(&Resume::Last), false).unwrap(),
            Some(dir.join("checkpoint-10"))
        );
        assert!(prepare(&dir, Some(&Resume::Last), true).is_err());
        assert_eq!(prepare(&dir, None, true).unwrap(), None);
        assert_eq!(
            entries(&dir),
            ["notes.txt"],
            "only the run's files are removed"
        );
        let e = prepare(&dir, Some(&Resume::Last), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no checkpoint in"), "{e}");
    }

    #[test]
    fn a_toy_folder_is_refused_kept_or_cleared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("toy");
        prepare_toy(&dir, false, false).unwrap();
        assert!(prepare_toy(&dir, true, false).is_err(), "nothing to resume");
        std::fs::create_dir_all(dir.join("run/checkpoint-3")).unwrap();
        std::fs::write(dir.join("train.toml"), "").unwrap();
        let e = prepare_toy(&dir, false, false).unwrap_err().to_string();
        assert!(e.contains("holds a toy run (run, train.toml)"), "{e}");
        prepare_toy(&dir, true, false).unwrap();
        prepare_toy(&dir, false, true).unwrap();
        assert!(entries(&dir).is_empty());
    }
}
