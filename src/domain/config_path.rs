//! Paths written in a configuration file (`gavel.toml`, `train.toml`) are read from the file's
//! folder, as Cargo reads the paths of a `Cargo.toml`: the same file names the same files
//! from whatever directory gavel runs in. Paths given as flags or environment variables are read
//! from the current directory, as a shell user expects.

use std::path::{Path, PathBuf};

/// `value`, written in a configuration file in the folder `base`, as a path to open: a relative
/// path joined to `base`, an absolute one as it is. `base` is the file's parent as given
/// (`../cfg` for `--config ../cfg/gavel.toml`; empty for `gavel.toml`), so the result is still
/// relative to the current directory when the file's path was.
pub fn in_folder(base: &Path, value: &Path) -> PathBuf {
    if value.is_relative() {
        base.join(value)
    } else {
        value.to_path_buf()
    }
}

/// The folder a configuration file's relative paths are read from: its parent as given.
pub fn folder_of(file: &Path) -> &Path {
    file.parent().unwrap_or(Path::new(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_join_the_file_folder_and_absolute_ones_stay() {
        let base = folder_of(Path::new("../cfg/gavel.toml"));
        assert_eq!(
            in_folder(base, Path::new("rubrics")),
            Path::new("../cfg/rubrics")
        );
        assert_eq!(in_folder(base, Path::new("/etc/r")), Path::new("/etc/r"));
        let here = folder_of(Path::new("gavel.toml"));
        assert_eq!(in_folder(here, Path::new("rubrics")), Path::new("rubrics"));
    }
}
