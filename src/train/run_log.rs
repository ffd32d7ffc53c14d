//! What a training run writes as it goes, the same for GRPO and SFT: one JSON line per step
//! (or survey) appended to `metrics.jsonl` in the output folder (the progress bar is
//! `toolkit::progress`'s).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::TrainError;

/// `metrics.jsonl`, opened for appending (a resumed run continues the file).
pub struct MetricsFile {
    file: File,
    path: PathBuf,
}

impl MetricsFile {
    /// Creates `out` if needed and opens `out/metrics.jsonl`. A run resumed from step
    /// `resumed_from` (0: a fresh run) first drops the lines of later steps: a run stopped
    /// after its last checkpoint wrote them, and the resumed run writes them again, so without
    /// this the file would hold those steps twice.
    pub fn open(out: &Path, resumed_from: u64) -> Result<MetricsFile, TrainError> {
        std::fs::create_dir_all(out).map_err(TrainError::file(out))?;
        let path = out.join("metrics.jsonl");
        let io = TrainError::file(&path);
        if resumed_from > 0 && path.exists() {
            let text = std::fs::read_to_string(&path).map_err(io)?;
            let kept: String = text
                .lines()
                .filter(|l| !l.trim().is_empty() && step_of(l).is_none_or(|s| s <= resumed_from))
                .map(|l| format!("{l}\n"))
                .collect();
            if kept.len() != text.len() {
                // Whole or not at all: written beside the file, then renamed over it.
                let tmp = out.join("metrics.jsonl.tmp");
                std::fs::write(&tmp, kept).map_err(io)?;
                std::fs::rename(&tmp, &path).map_err(io)?;
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        Ok(MetricsFile { file, path })
    }

    /// Appends `line` as one JSON line.
    pub fn write(&mut self, line: &impl Serialize) -> Result<(), TrainError> {
        let text = serde_json::to_string(line).expect("metrics serialise");
        writeln!(self.file, "{text}").map_err(TrainError::file(&self.path))
    }
}

/// The `step` of a metrics line, if it has one.
fn step_of(line: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()?
        .get("step")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(out: &Path) -> Vec<String> {
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_resumed_run_drops_the_steps_after_its_checkpoint_and_a_fresh_one_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let mut m = MetricsFile::open(&out, 0).unwrap();
        for step in 1..=7u64 {
            m.write(&serde_json::json!({"step": step, "loss": step as f64 / 10.0}))
                .unwrap();
        }
        m.write(&serde_json::json!({"event": "note"})).unwrap();
        drop(m);
        // Stopped after step 7; the last checkpoint was step 5.
        let mut m = MetricsFile::open(&out, 5).unwrap();
        m.write(&serde_json::json!({"step": 6, "loss": 0.6}))
            .unwrap();
        drop(m);
        let got = lines(&out);
        let steps: Vec<Option<u64>> = got.iter().map(|l| step_of(l)).collect();
        assert_eq!(
            steps,
            [Some(1), Some(2), Some(3), Some(4), Some(5), None, Some(6)],
            "{got:?}"
        );
        assert!(!out.join("metrics.jsonl.tmp").exists());
        // A fresh run (0) keeps what is there.
        drop(MetricsFile::open(&out, 0).unwrap());
        assert_eq!(lines(&out), got);
    }
}
