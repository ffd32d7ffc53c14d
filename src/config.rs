//! Configuration: `gavel.toml` plus environment. Every option has a documented default; the
//! command line (`--config`, `--addr`, `--store`, each with an env twin) overrides the file.
//!
//! Each part owns its section and its checks (`[judges.NAME]` in `judge::config`, `[server]` in
//! `server::config`, `[store]` in `store::config`, `[openrlhf]` in `openrlhf::config`, `[dedup]`
//! in `dedup`, `train.toml` in `train::config`); this module composes them, loads the file and
//! the environment, and checks what spans sections (the default judge exists, a group fits).
//!
//! Secrets never live in the file: a judge names the environment variable holding its key
//! (`api_key_env`), and the key is kept in a [`Secret`] whose `Debug` and `Display` redact it.
//!
//! Relative paths in the file (`prompts_dir`, `rubrics_dir`, a local judge's `model_path` and
//! `adapter`, `[server] api_keys_file`, `[store] path`) are read from the file's folder, not from
//! the directory gavel runs in, so `--config ../cfg/gavel.toml` finds what the file names from
//! anywhere ([`paths`]). A `model_path` that names nothing there but reads as a Hugging Face id
//! (`ORG/NAME`) stays an id. Paths on the command line or in environment variables (`--store`,
//! `GAVEL_STORE`) and built-in defaults (`./gavel-store`) are read from the current directory.
//! A `prompts_dir` or `rubrics_dir` that is not there is refused when the file is read, naming the
//! file, the key and the path.

mod paths;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::domain::config_path::folder_of;
pub use crate::domain::dedup::DedupSection;
use crate::domain::rubric::line_of;
pub use crate::domain::seconds::{check_seconds, MAX_SECONDS};
pub use crate::domain::secret::Secret;
use crate::judge::cascade::{check_stages, StageKind};
pub use crate::judge::config::{
    is_openai, Backend, CommonSettings, JudgeConfig, LocalConfig, RemoteConfig, StructuredOutput,
    DEFAULT_MODEL, OPENAI_BASE_URL,
};
pub use crate::openrlhf::config::OpenRlhfConfig;
use crate::score::ScorerParts;
pub use crate::server::config::ServerConfig;
pub use crate::store::config::StoreConfig;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}: cannot read: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The judge used when a request names none.
    #[serde(default)]
    pub default_judge: Option<String>,
    /// Extra or replacement judge templates (`NAME.system.jinja` + `NAME.user.jinja`).
    #[serde(default)]
    pub prompts_dir: Option<PathBuf>,
    /// Extra or replacement rubrics (`*.toml`).
    #[serde(default)]
    pub rubrics_dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::judge::deserialize_judges")]
    pub judges: BTreeMap<String, JudgeConfig>,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub dedup: DedupSection,
    #[serde(default)]
    pub openrlhf: OpenRlhfConfig,
    /// The file this configuration was read from (`None`: the environment, or text): errors
    /// about what it configures name it.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// Reads the API keys from `[server] api_keys_file` and `keys_env` (the value of
/// `GAVEL_API_KEYS`). The file's lines are keys; `#` starts a comment line. Errors never quote a
/// key; one that cannot be read names the configuration `file` and the key.
fn resolve_api_keys(
    server: &mut ServerConfig,
    keys_env: Option<&str>,
    file: &str,
) -> Result<(), ConfigError> {
    let mut keys = Vec::new();
    if let Some(path) = &server.api_keys_file {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
            file: file.to_string(),
            message: format!(
                "[server] api_keys_file {}: cannot read: {e}",
                path.display()
            ),
        })?;
        keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(Secret::new),
        );
        if keys.is_empty() {
            return Err(ConfigError::Invalid {
                file: path.display().to_string(),
                message: "api_keys_file holds no keys".into(),
            });
        }
    }
    keys.extend(keys_env.map(key_list).unwrap_or_default());
    server.api_keys = keys;
    Ok(())
}

/// The keys in a comma-separated list.
fn key_list(list: &str) -> Vec<Secret> {
    list.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(Secret::new)
        .collect()
}

impl Config {
    /// The refusal of a judge name the configuration does not have, listing the ones it has.
    pub fn unknown_judge(&self, name: &str) -> String {
        let known: Vec<&str> = self.judges.keys().map(String::as_str).collect();
        format!("unknown judge {name:?} (configured: {})", known.join(", "))
    }

    /// Reads a TOML config file and resolves judge keys from the environment. Its relative
    /// paths are read from its folder (see the module docs), and the folders it names must be
    /// there.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::Io(path.to_path_buf(), e))?;
        let mut cfg = Config::parse(
            &text,
            &path.display().to_string(),
            Some(folder_of(path)),
            &|k| std::env::var(k).ok(),
        )?;
        cfg.file = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// Parses TOML text; `env` looks up environment variables (injectable for tests). Paths
    /// stay as written (relative ones to the current directory), and nothing is looked for on
    /// disk but `[server] api_keys_file`.
    pub fn from_toml(
        text: &str,
        file: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::parse(text, file, None, env)
    }

    /// [`Config::from_toml`], with the relative paths read from `folder` and the named folders
    /// checked when a file's `folder` is given.
    fn parse(
        text: &str,
        file: &str,
        folder: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            file: match e.span() {
                Some(span) => format!("{file}:{}", line_of(text, span.start)),
                None => file.to_string(),
            },
            message: e.message().to_string(),
        })?;
        if let Some(folder) = folder {
            cfg.read_paths_from(folder, text);
            cfg.check_folders(file)?;
        }
        for r in cfg
            .judges
            .values_mut()
            .filter_map(JudgeConfig::as_remote_mut)
        {
            r.api_key = env(&r.api_key_env)
                .filter(|k| !k.is_empty())
                .map(Secret::new);
        }
        cfg.validate(file)?;
        resolve_api_keys(&mut cfg.server, env("GAVEL_API_KEYS").as_deref(), file)?;
        Ok(cfg)
    }

    /// The configuration used with no file: one judge named `default` from `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY`, `GAVEL_JUDGE_MODEL` and `GAVEL_JUDGE_STRUCTURED_OUTPUT`. A key is
    /// required only by OpenAI's own API: a server of one's own may need none.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let base_url = env("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_BASE_URL.to_string());
        let mut judge = RemoteConfig::new(
            base_url.clone(),
            env("OPENAI_API_KEY")
                .filter(|k| !k.is_empty())
                .map(Secret::new),
        );
        judge.common.model = env("GAVEL_JUDGE_MODEL").unwrap_or_else(|| DEFAULT_MODEL.to_string());
        judge.key_required = is_openai(&base_url);
        if let Some(v) = env("GAVEL_JUDGE_STRUCTURED_OUTPUT").filter(|v| !v.trim().is_empty()) {
            judge.common.structured_output =
                StructuredOutput::parse(&v).ok_or_else(|| ConfigError::Invalid {
                    file: "GAVEL_JUDGE_STRUCTURED_OUTPUT".into(),
                    message: format!(
                        "{v:?} is not one of auto, json_schema, json_object, json_mode, off"
                    ),
                })?;
        }
        let judge = JudgeConfig::Remote(judge);
        Ok(Config {
            default_judge: Some("default".into()),
            prompts_dir: None,
            rubrics_dir: None,
            judges: BTreeMap::from([("default".to_string(), judge)]),
            server: ServerConfig {
                api_keys: env("GAVEL_API_KEYS")
                    .as_deref()
                    .map(key_list)
                    .unwrap_or_default(),
                ..ServerConfig::default()
            },
            store: StoreConfig::default(),
            dedup: DedupSection::default(),
            openrlhf: OpenRlhfConfig::default(),
            file: None,
        })
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: file.to_string(),
            message,
        };
        if let Some(d) = &self.default_judge {
            if !self.judges.contains_key(d) {
                return Err(invalid(format!(
                    "default_judge {d:?} is not a [judges.NAME] table"
                )));
            }
        }
        for (name, j) in &self.judges {
            j.validate()
                .map_err(|why| invalid(format!("[judges.{name}]: {why}")))?;
        }
        // A cascade's stages: judges of this file, all but the last giving a confidence.
        let kind_of = |stage: &str| {
            self.judges.get(stage).map(|j| match j.effective_mode() {
                None => StageKind::Cascade,
                Some(mode) => StageKind::Judge {
                    confidence: mode.reads_probabilities(),
                },
            })
        };
        for (name, c) in self
            .judges
            .iter()
            .filter_map(|(n, j)| Some((n, j.as_cascade()?)))
        {
            check_stages(c, kind_of).map_err(|why| invalid(format!("[judges.{name}]: {why}")))?;
        }
        self.server
            .validate()
            .map_err(|why| invalid(format!("[server] {why}")))?;
        let o = &self.openrlhf;
        o.validate(self.server.max_group_size)
            .map_err(|why| invalid(format!("[openrlhf] {why}")))?;
        if let Some(j) = o.judge.as_ref().filter(|j| !self.judges.contains_key(*j)) {
            return Err(invalid(format!(
                "[openrlhf] judge {j:?} is not a [judges.NAME] table"
            )));
        }
        self.store.validate().map_err(invalid)
    }

    /// The judge used when a request names none: `default_judge`, else the only judge.
    /// What the scorer reads of this configuration (`Scorer::new`).
    pub fn scorer_parts(&self) -> ScorerParts<'_> {
        ScorerParts {
            judges: &self.judges,
            default_judge: self.default_judge_name(),
            rubrics_dir: self.rubrics_dir.as_deref(),
            prompts_dir: self.prompts_dir.as_deref(),
            min_shared_chars: self.dedup.min_shared_chars,
            max_group_size: self.server.max_group_size,
            max_prompt_bytes: self.server.max_prompt_bytes,
        }
    }

    pub fn default_judge_name(&self) -> Option<&str> {
        match &self.default_judge {
            Some(d) => Some(d),
            None if self.judges.len() == 1 => self.judges.keys().next().map(String::as_str),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests;
