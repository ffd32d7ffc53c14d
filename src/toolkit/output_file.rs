//! Writing a command's JSONL output so that a failure loses nothing: the lines go to
//! `PATH.tmp`, are synced, and the file is renamed onto `PATH`, so `PATH` is either its old
//! content or the whole new one. A path that is not a regular file (`/dev/null`,
//! `/dev/stdout`, a named pipe) is written in place: renaming onto it would replace the device
//! or pipe with a plain file.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `lines`, each followed by a newline, to `path` (see the module's note).
pub fn write_lines<I, S>(path: &Path, lines: I) -> std::io::Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    if in_place(path) {
        let mut f = std::io::BufWriter::new(std::fs::OpenOptions::new().write(true).open(path)?);
        for l in lines {
            f.write_all(l.as_ref().as_bytes())?;
            f.write_all(b"\n")?;
        }
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
        for l in lines {
            f.write_all(l.as_ref().as_bytes())?;
            f.write_all(b"\n")?;
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether `path` names something that exists and is not a regular file.
fn in_place(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

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
