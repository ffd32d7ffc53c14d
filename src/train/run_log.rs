//! What a training run writes as it goes, the same for GRPO and SFT: one JSON line per step
//! (or probe) appended to `metrics.jsonl` in the output folder, and a progress bar.

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
    /// Creates `out` if needed and opens `out/metrics.jsonl`.
    pub fn open(out: &Path) -> Result<MetricsFile, TrainError> {
        std::fs::create_dir_all(out)
            .map_err(|e| TrainError::Io(format!("{}: {e}", out.display())))?;
        let path = out.join("metrics.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| TrainError::Io(format!("{}: {e}", path.display())))?;
        Ok(MetricsFile { file, path })
    }

    /// Appends `line` as one JSON line.
    pub fn write(&mut self, line: &impl Serialize) -> Result<(), TrainError> {
        let text = serde_json::to_string(line).expect("metrics serialise");
        writeln!(self.file, "{text}")
            .map_err(|e| TrainError::Io(format!("{}: {e}", self.path.display())))
    }
}

/// The run's progress bar over `steps`, at `step` (a resumed run starts part way); hidden
/// unless `show`.
pub fn progress_bar(steps: u64, step: u64, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
        )
        .expect("template"),
    );
    bar.set_position(step);
    bar
}
