//! Writing a command's JSONL output so that a failure loses nothing: the lines go to
//! `PATH.tmp`, are synced, and the file is renamed onto `PATH`, so `PATH` is either its old
//! content or the whole new one. A path that is not a regular file (`/dev/null`,
//! `/dev/stdout`, a named pipe) is written in place: renaming onto it would replace the device
//! or pipe with a plain file.
//!
//! [`LineSink`]: a command's lines on standard output as they come, or in its `-o` file.
//!
//! And the format of a report file (`gavel eval -o`, `gavel diff -o`): the one `--format` asks
//! for, else the one the file's name asks for ([`ReportFormat::choose`]).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `lines`, each followed by a newline, to `path` (see the module's note).
pub fn write_lines<I, S>(path: &Path, lines: I) -> std::io::Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    write_with(path, |f| {
        for l in lines {
            f.write_all(l.as_ref().as_bytes())?;
            f.write_all(b"\n")?;
        }
        Ok(())
    })
}

/// Writes `text` as the whole of `path` (a report: `gavel eval -o`, `gavel diff -o`), the
/// same way as [`write_lines`]. The error is one `PATH: cannot write: ...` line.
pub fn write_text(path: &Path, text: &str) -> Result<(), String> {
    write_with(path, |f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

/// Makes the folder `path` will be written into, as `mkdir -p` would: called before a long job
/// (an eval, a diff), so that a folder that cannot be made stops it before any judge call
/// rather than after the last. The error is one `FOLDER: cannot create folder: ...` line.
pub fn make_parent(path: &Path) -> Result<(), String> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: cannot create folder: {e}", dir.display())),
        None => Ok(()),
    }
}

/// `write` into `path`: in place for a device or pipe, else into `PATH.tmp`, synced and
/// renamed onto `PATH`, its folder made first.
fn write_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if in_place(path) {
        let mut f = std::io::BufWriter::new(std::fs::OpenOptions::new().write(true).open(path)?);
        write(&mut f)?;
        return f.flush();
    }
    // Into a folder that does not exist yet: made, as `mkdir -p` would.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Where a command's lines go (`gavel score`, `gavel render`): standard output as each comes,
/// so a pipe sees every group as soon as it is done; or, with `-o`, the file, written whole at
/// the end by [`write_lines`] so that a run that stops half way leaves no half file.
pub struct LineSink {
    path: Option<PathBuf>,
    held: Vec<String>,
    count: usize,
}

impl LineSink {
    /// Lines to `path`, else to standard output.
    pub fn new(path: Option<&Path>) -> LineSink {
        LineSink {
            path: path.map(Path::to_path_buf),
            held: Vec::new(),
            count: 0,
        }
    }

    /// One line (or block of lines) of output, without its final newline.
    pub fn push(&mut self, line: String) {
        self.count += 1;
        match self.path {
            None => println!("{line}"),
            Some(_) => self.held.push(line),
        }
    }

    /// How many lines were pushed.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Writes the held lines to the file, parent folders made; the file written, `None` for
    /// standard output. The error is one `PATH: cannot write: ...` line.
    pub fn finish(self) -> Result<Option<PathBuf>, String> {
        let Some(path) = self.path else {
            return Ok(None);
        };
        write_lines(&path, &self.held)
            .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
        Ok(Some(path))
    }
}

/// How a report is written: a terminal summary, one JSON document, or a self-contained HTML
/// page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
    Html,
}

impl ReportFormat {
    /// The format a report file's name asks for: `.html` or `.htm` an HTML page, `.json` JSON,
    /// anything else (`.txt`, `.md`, none) text.
    pub fn of_path(path: &Path) -> ReportFormat {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("html" | "htm") => ReportFormat::Html,
            Some("json") => ReportFormat::Json,
            _ => ReportFormat::Text,
        }
    }

    /// The format of a report: the one asked for (`--format`), else the output file's
    /// ([`ReportFormat::of_path`]), else text.
    pub fn choose(asked: Option<ReportFormat>, output: Option<&Path>) -> ReportFormat {
        asked
            .or_else(|| output.map(ReportFormat::of_path))
            .unwrap_or(ReportFormat::Text)
    }
}

/// Whether `path` names something that exists and is not a regular file.
fn in_place(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_takes_the_format_asked_for_else_its_file_name() {
        let f = |asked, out: Option<&str>| ReportFormat::choose(asked, out.map(Path::new));
        assert_eq!(f(None, Some("r.html")), ReportFormat::Html);
        assert_eq!(f(None, Some("out/R.HTM")), ReportFormat::Html);
        assert_eq!(f(None, Some("r.json")), ReportFormat::Json);
        assert_eq!(f(None, Some("r.md")), ReportFormat::Text);
        assert_eq!(f(None, Some("report")), ReportFormat::Text);
        assert_eq!(f(None, None), ReportFormat::Text);
        assert_eq!(
            f(Some(ReportFormat::Json), Some("r.html")),
            ReportFormat::Json
        );
    }

    #[test]
    fn devices_are_written_in_place_and_files_replaced_whole() {
        assert!(in_place(Path::new("/dev/null")));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.jsonl");
        assert!(!in_place(&p), "a new file");
        std::fs::write(&p, "old\n").unwrap();
        assert!(!in_place(&p), "an existing file");
        assert!(in_place(dir.path()), "a folder is never renamed over");
        let deep = dir.path().join("new/folder/out.jsonl");
        write_lines(&deep, ["x"]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&deep).unwrap(),
            "x\n",
            "missing folders are made"
        );
        write_lines(&p, ["a", "b"]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
        assert!(!dir.path().join("out.jsonl.tmp").exists());
        // A path under a file cannot be written: an error, and the file keeps its content.
        assert!(write_lines(&p.join("x.jsonl"), ["a"]).is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
    }
}
