//! The paths a `gavel.toml` names, read from the file's folder ([`crate::domain::config_path`]):
//! `prompts_dir`, `rubrics_dir`, each local judge's `model_path` (unless it is a Hugging Face id)
//! and `adapter`, `[server] api_keys_file` and `[store] path`. The built-in default of a key the
//! file leaves out (`[store] path = "gavel-store"`) and the command line's paths (`--store`,
//! `GAVEL_STORE`) are read from the current directory.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError};
use crate::domain::config_path::in_folder;

impl Config {
    /// Reads every relative path the file (`text`) wrote from `folder`, the file's own.
    pub(super) fn read_paths_from(&mut self, folder: &Path, text: &str) {
        let join = |p: &mut PathBuf| *p = in_folder(folder, p);
        for p in [
            &mut self.prompts_dir,
            &mut self.rubrics_dir,
            &mut self.server.api_keys_file,
        ]
        .into_iter()
        .flatten()
        {
            join(p);
        }
        if writes_store_path(text) {
            join(&mut self.store.path);
        }
        for local in self.judges.values_mut().filter_map(|j| j.as_local_mut()) {
            // Built without the `local` feature, gavel builds no local judge (it says so at
            // start-up), and whether a path reads as a Hugging Face id is the model code's.
            #[cfg(feature = "local")]
            {
                local.model_path = crate::model::hub::config_model_path(folder, &local.model_path);
            }
            if let Some(a) = local.adapter.as_mut() {
                join(a);
            }
        }
    }

    /// Checks that the folders the file names are there, each refusal naming the file, the key
    /// and the path as read.
    pub(super) fn check_folders(&self, file: &str) -> Result<(), ConfigError> {
        for (key, dir) in [
            ("prompts_dir", &self.prompts_dir),
            ("rubrics_dir", &self.rubrics_dir),
        ] {
            let Some(dir) = dir else { continue };
            if !dir.is_dir() {
                let what = if dir.exists() {
                    "is not a folder"
                } else {
                    "no such folder"
                };
                return Err(ConfigError::Invalid {
                    file: file.to_string(),
                    message: format!(
                        "{key} {}: {what} (a relative path in a config file is read from the \
                         file's folder)",
                        dir.display()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Whether the file writes `[store] path` (left out, the default is the current directory's).
fn writes_store_path(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| {
        t.get("store")
            .and_then(|s| s.as_table())
            .is_some_and(|s| s.contains_key("path"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_read_from_the_file_folder() {
        let root = tempfile::tempdir().unwrap();
        let cfg_dir = root.path().join("cfg");
        std::fs::create_dir_all(cfg_dir.join("myrubrics")).unwrap();
        std::fs::create_dir_all(cfg_dir.join("adapters/a")).unwrap();
        std::fs::write(cfg_dir.join("keys"), "k1\n").unwrap();
        let file = cfg_dir.join("gavel.toml");
        std::fs::write(
            &file,
            "rubrics_dir = \"myrubrics\"\n\
             [server]\napi_keys_file = \"keys\"\n\
             [store]\npath = \"store\"\n\
             [judges.l]\nbackend = \"local\"\nmodel_path = \"m.gguf\"\nadapter = \"adapters/a\"\n\
             [judges.h]\nbackend = \"local\"\nmodel_path = \"Qwen/Qwen2.5-0.5B-Instruct\"\n",
        )
        .unwrap();
        let cfg = Config::from_file(&file).unwrap();
        assert_eq!(
            cfg.rubrics_dir.as_deref(),
            Some(cfg_dir.join("myrubrics").as_path())
        );
        assert_eq!(cfg.store.path, cfg_dir.join("store"));
        assert_eq!(
            cfg.server.api_keys.len(),
            1,
            "the keys file was read beside the config"
        );
        let l = cfg.judges["l"].as_local().unwrap();
        assert_eq!(l.model_path, cfg_dir.join("m.gguf"));
        assert_eq!(
            l.adapter.as_deref(),
            Some(cfg_dir.join("adapters/a").as_path())
        );
        let h = cfg.judges["h"].as_local().unwrap();
        assert_eq!(
            h.model_path,
            Path::new("Qwen/Qwen2.5-0.5B-Instruct"),
            "an id stays an id"
        );
        assert_eq!(cfg.file.as_deref(), Some(file.as_path()));

        // Left out, the store's default is the current directory's.
        std::fs::write(&file, "rubrics_dir = \"myrubrics\"\n").unwrap();
        let cfg = Config::from_file(&file).unwrap();
        assert_eq!(cfg.store.path, Path::new("gavel-store"));
    }

    #[test]
    fn a_missing_folder_names_the_file_and_the_key() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("judge_rub.toml");
        std::fs::write(&file, "prompts_dir = \"/\"\nrubrics_dir = \"myrubrics\"\n").unwrap();
        let e = Config::from_file(&file).unwrap_err().to_string();
        let want = format!(
            "{}: rubrics_dir {}: no such folder",
            file.display(),
            root.path().join("myrubrics").display()
        );
        assert!(e.starts_with(&want), "{e}");
        let missing = root.path().join("nope");
        std::fs::write(&file, "[server]\napi_keys_file = \"nope\"\n").unwrap();
        let e = Config::from_file(&file).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: [server] api_keys_file {}: cannot read",
                file.display(),
                missing.display()
            )),
            "{e}"
        );
    }
}
