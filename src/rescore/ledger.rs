//! The two files rescore writes (output and rejects), and the checkpoints that put every group
//! in exactly one of them exactly once, whenever a run dies.
//!
//! **The invariant.** The store keeps, per job, a set of finished units and two byte offsets.
//! The first `offsets.0` bytes of the output and the first `offsets.1` bytes of the rejects file
//! hold exactly one line for each finished unit, and nothing else. Bytes past an offset are the
//! unfinished write of a run that died: every start, in every mode, cuts both files back to the
//! offsets — and refuses a file shorter than its offset (it lost lines the store counts) rather
//! than pad it with NULs.
//!
//! **Appending** a unit: write its line; `sync_data` each file written since the last
//! checkpoint, so that what a checkpoint counts is on disk before the checkpoint is; then
//! checkpoint the unit with both files' lengths. The lengths are counted by this process as it
//! writes, never read back from the files, so they cover exactly the units the checkpoint marks
//! done (a length read from the file can include a dead run's uncounted tail).
//!
//! **`--retry-rejects`** takes the judge failures out of the rejects file and marks their units
//! unfinished. A rename and a store write cannot be one atomic step, so the store write is the
//! commit point and the file follows it:
//! 1. the rejects file without those lines is written to `REJECTS.retry.tmp` and synced;
//! 2. the store reopens the units and sets the rejects offset to the new file's length (commit);
//! 3. the new file is renamed over the old one, the directory synced, and the file reopened.
//!
//! On start, before anything else, a leftover `REJECTS.retry.tmp` is finished or undone: renamed
//! into place when the checkpoint's rejects offset is its length (step 2 happened), removed
//! otherwise. The two cases cannot be confused: until step 2 the offset is the old file's length,
//! and the new file is shorter than that — it lacks at least one line, and a torn one lacks more.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::crash;
use crate::cli::CliError;
use crate::domain::error_type::ErrorType;
use crate::store::{UnitChange, VerdictStore};

/// Which file a unit's line goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sink {
    Output,
    Rejects,
}

/// One of the two files, open for appending, with the length the ledger has counted for it.
struct Tracked {
    path: PathBuf,
    file: File,
    len: u64,
    /// Written since its last sync.
    dirty: bool,
}

impl Tracked {
    fn open(path: &Path, len: u64) -> Result<Tracked, CliError> {
        Ok(Tracked {
            path: path.to_path_buf(),
            file: open_at(path, len)?,
            len,
            dirty: false,
        })
    }

    fn sync(&mut self) -> Result<(), CliError> {
        if self.dirty {
            self.file
                .sync_data()
                .map_err(|e| io_err(&self.path, "cannot sync", e))?;
            self.dirty = false;
        }
        Ok(())
    }
}

/// The job's files and its checkpoints in the store. After an error the ledger is not to be
/// used again: the run ends, and the next start cuts whatever the failed step left.
pub(super) struct Ledger {
    store: Arc<dyn VerdictStore>,
    job: String,
    out: Tracked,
    rej: Tracked,
}

impl Ledger {
    /// Brings both files back to the job's last checkpoint (first finishing or undoing a retry
    /// rewrite a crash interrupted), reopens the judge failures when `retry_rejects`, and
    /// returns the ledger with the units already finished.
    pub(super) async fn open(
        store: Arc<dyn VerdictStore>,
        job: String,
        output: &Path,
        rejects: &Path,
        retry_rejects: bool,
    ) -> Result<(Ledger, BTreeSet<String>), CliError> {
        let mut progress = store.job_progress(&job).await?;
        let tmp = temp_path(rejects);
        settle_rewrite(&tmp, rejects, progress.offsets.map(|(_, r)| r))?;
        let (out_len, rej_len) = match progress.offsets {
            Some(offsets) => offsets,
            None => {
                // Both files are checked before either is touched: a new job erases no one's.
                for (path, what, flag) in [
                    (output, "output", "-o"),
                    (rejects, "rejects file", "--rejects"),
                ] {
                    if file_len(path) > 0 {
                        return Err(CliError::Other(format!(
                            "{}: exists and is not the {what} of this job (same input, output, \
                             rubric, judge and shard); remove it or choose another {flag}",
                            path.display()
                        )));
                    }
                }
                // Claim the output before the first line goes in: otherwise a crash before the
                // first unit's checkpoint leaves a non-empty file the check above refuses.
                store
                    .job_update(&job, UnitChange::Finish, &[], (0, 0))
                    .await?;
                (0, 0)
            }
        };
        let out = Tracked::open(output, out_len)?;
        let mut rej = Tracked::open(rejects, rej_len)?;
        if retry_rejects {
            let (n, new_len) =
                reopen_judge_failures(store.as_ref(), &job, out_len, rejects, &tmp).await?;
            tracing::info!(groups = n, "retrying groups rejected for judge failures");
            if n > 0 {
                progress = store.job_progress(&job).await?;
                // The rename put a new file at the path; the handle still points at the old one.
                rej = Tracked::open(rejects, new_len)?;
            }
        }
        let ledger = Ledger {
            store,
            job,
            out,
            rej,
        };
        Ok((ledger, progress.done))
    }

    /// Appends `unit`'s line to `sink` and checkpoints it: written, synced, then counted.
    pub(super) async fn append(
        &mut self,
        sink: Sink,
        unit: String,
        line: &Value,
    ) -> Result<(), CliError> {
        let mut text = serde_json::to_string(line).expect("JSON serialises");
        text.push('\n');
        let t = match sink {
            Sink::Output => &mut self.out,
            Sink::Rejects => &mut self.rej,
        };
        if crash::reached("mid-line") {
            let _ = t.file.write_all(&text.as_bytes()[..text.len() / 2]);
            std::process::abort();
        }
        t.file
            .write_all(text.as_bytes())
            .map_err(|e| io_err(&t.path, "cannot write", e))?;
        t.len += text.len() as u64;
        t.dirty = true;
        crash::point("before-checkpoint");
        self.out.sync()?;
        self.rej.sync()?;
        self.store
            .job_update(
                &self.job,
                UnitChange::Finish,
                &[unit],
                (self.out.len, self.rej.len),
            )
            .await?;
        crash::point("after-checkpoint");
        Ok(())
    }
}

/// Takes the judge failures out of the rejects file (already cut to its checkpoint) and reopens
/// their units, in the three steps of the module doc. Returns how many were reopened and the
/// file's length now.
async fn reopen_judge_failures(
    store: &dyn VerdictStore,
    job: &str,
    out_len: u64,
    rejects: &Path,
    tmp: &Path,
) -> Result<(usize, u64), CliError> {
    let text = std::fs::read(rejects).map_err(|e| io_err(rejects, "cannot read", e))?;
    let (mut keep, mut retry) = (Vec::with_capacity(text.len()), Vec::new());
    // Byte-exact: kept lines go back as they were.
    for line in text.split_inclusive(|&b| b == b'\n') {
        match judge_failure(line) {
            Some(unit) => retry.push(unit),
            None => keep.extend_from_slice(line),
        }
    }
    if retry.is_empty() {
        // Nothing to take out; rewriting would only open a window for a crash.
        return Ok((0, text.len() as u64));
    }
    let new_len = keep.len() as u64;
    let mut f = File::create(tmp).map_err(|e| io_err(tmp, "cannot create", e))?;
    if crash::reached("retry-temp-partial") {
        let _ = f.write_all(&keep[..keep.len() / 2]);
        std::process::abort();
    }
    f.write_all(&keep)
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err(tmp, "cannot write", e))?;
    drop(f);
    crash::point("retry-temp-written");
    store
        .job_update(job, UnitChange::Reopen, &retry, (out_len, new_len))
        .await?;
    crash::point("retry-reopened");
    std::fs::rename(tmp, rejects).map_err(|e| io_err(rejects, "cannot replace", e))?;
    sync_dir(rejects)?;
    crash::point("retry-renamed");
    Ok((retry.len(), new_len))
}

/// The unit of a rejects line that failed for the judge's sake (and so may pass on a retry).
fn judge_failure(line: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let kind = v["error_type"].as_str()?;
    if kind
        .parse::<ErrorType>()
        .is_ok_and(ErrorType::is_judge_failure)
    {
        v["unit"].as_str().map(str::to_string)
    } else {
        None
    }
}

/// Finishes or undoes a retry rewrite that a crash interrupted (see the module doc).
/// `rejects_offset` is the checkpoint's, `None` for a job that never checkpointed (and so never
/// committed a rewrite).
fn settle_rewrite(tmp: &Path, rejects: &Path, rejects_offset: Option<u64>) -> Result<(), CliError> {
    let len = match std::fs::metadata(tmp) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(tmp, "cannot read", e)),
    };
    if rejects_offset == Some(len) {
        tracing::info!(
            file = %rejects.display(),
            "finishing the rejects rewrite of an interrupted --retry-rejects"
        );
        std::fs::rename(tmp, rejects).map_err(|e| io_err(rejects, "cannot replace", e))?;
        sync_dir(rejects)
    } else {
        std::fs::remove_file(tmp).map_err(|e| io_err(tmp, "cannot remove", e))
    }
}

/// `REJECTS.retry.tmp`: next to the rejects file, so the rename stays on one filesystem.
fn temp_path(rejects: &Path) -> PathBuf {
    let mut p = OsString::from(rejects.as_os_str());
    p.push(".retry.tmp");
    PathBuf::from(p)
}

/// Opens `path` for appending, cut back to `len`, the bytes the last checkpoint counts. The cut
/// is synced before anything is appended after it.
fn open_at(path: &Path, len: u64) -> Result<File, CliError> {
    // `-o out/x.jsonl` into a folder that does not exist yet: made, as `mkdir -p` would.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, "cannot create folder", e))?;
    }
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_err(path, "cannot open", e))?;
    let have = f
        .metadata()
        .map_err(|e| io_err(path, "cannot read", e))?
        .len();
    if have < len {
        return Err(CliError::Other(format!(
            "{}: is {have} bytes, but this job's checkpoint counts {len}: it was cut or replaced \
             since; restore it, or start over with another -o",
            path.display()
        )));
    }
    if have > len {
        f.set_len(len)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err(path, "cannot truncate", e))?;
    }
    Ok(f)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Makes a rename into `path`'s directory durable: the rename is an entry in the directory, which
/// syncing the file does not write.
fn sync_dir(path: &Path) -> Result<(), CliError> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(dir, "cannot sync", e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> CliError {
    CliError::Io(format!("{}: {what}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leftover_rewrite_is_finished_only_when_the_checkpoint_counts_it() {
        let dir = tempfile::tempdir().unwrap();
        let (rejects, tmp) = (
            dir.path().join("r.jsonl"),
            dir.path().join("r.jsonl.retry.tmp"),
        );
        let old = "{\"a\":1}\n{\"b\":2}\n";
        let new = "{\"b\":2}\n";
        for (offset, want) in [
            // Committed: the checkpoint counts the new file.
            (Some(new.len() as u64), new),
            // Not committed: the checkpoint still counts the old file.
            (Some(old.len() as u64), old),
            // A job that never checkpointed never committed a rewrite.
            (None, old),
        ] {
            std::fs::write(&rejects, old).unwrap();
            std::fs::write(&tmp, new).unwrap();
            settle_rewrite(&tmp, &rejects, offset).unwrap();
            assert_eq!(
                std::fs::read_to_string(&rejects).unwrap(),
                want,
                "{offset:?}"
            );
            assert!(!tmp.exists(), "{offset:?}");
        }
        // Nothing left over: nothing to do.
        settle_rewrite(&tmp, &rejects, Some(3)).unwrap();
        assert_eq!(std::fs::read_to_string(&rejects).unwrap(), old);
    }

    #[test]
    fn files_are_cut_to_the_checkpoint_and_never_padded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{}\n{\"torn\":").unwrap();
        drop(open_at(&path, 3).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
        let err = open_at(&path, 10).unwrap_err().to_string();
        assert!(err.contains("checkpoint counts 10"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n", "left as it was");
    }

    #[test]
    fn only_judge_failures_are_retried() {
        let line = |t: &str| format!("{{\"error_type\":\"{t}\",\"unit\":\"u\"}}\n");
        assert_eq!(
            judge_failure(line("judge_timeout").as_bytes()),
            Some("u".into())
        );
        assert_eq!(
            judge_failure(line("no_judge_configured").as_bytes()),
            Some("u".into())
        );
        assert_eq!(judge_failure(line("invalid_input").as_bytes()), None);
        assert_eq!(judge_failure(b"not json\n"), None);
    }
}
