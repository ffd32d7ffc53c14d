//! Errors of loading, prompting and running a local model (the judge's or the trainer's): each
//! is one line that names the file or setting at fault and, where there is one, the fix.

use std::path::{Path, PathBuf};

/// Why a local model could not be loaded, prompted or run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LocalError {
    /// `model_path` does not exist and is not a Hugging Face model id.
    #[error(
        "model_path {0}: no such file or folder (a GGUF file, a Hugging Face model folder, or a \
         model id such as Qwen/Qwen2.5-1.5B-Instruct)"
    )]
    NotFound(PathBuf),
    /// `model_path` is a Hugging Face model id that could not be resolved (`model::hub`).
    #[error("model_path {id}: {message}")]
    Hub { id: String, message: String },
    /// A model folder lacks a file it needs.
    #[error("model_path {dir}: not a model folder: no {file}")]
    MissingFile { dir: PathBuf, file: String },
    /// The model is neither Qwen2 (Qwen2, Qwen2.5) nor Qwen3.
    #[error(
        "{path}: unsupported architecture {found}; the local judge runs qwen2 (Qwen2, Qwen2.5) \
         and qwen3 (Qwen3)"
    )]
    UnsupportedArchitecture { path: PathBuf, found: String },
    /// `model.safetensors.index.json` lists a shard that is not there.
    #[error("{index}: lists weights file {file}, which is missing")]
    MissingShard { index: PathBuf, file: String },
    /// `cuda:N` in a build without the `cuda` feature.
    #[error("device {0:?}: this gavel was built without CUDA; rebuild with --features cuda")]
    NoCuda(String),
    /// A device string that is neither `cpu` nor `cuda:N`, or a GPU that cannot be opened.
    #[error("device {device:?}: {message}")]
    Device { device: String, message: String },
    /// A file that is there but unusable: bad JSON or GGUF, weights that do not match the
    /// configuration, a tokenizer that does not fit the model.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// The chat template does not compile or fails to render.
    #[error("chat template ({source_name}): {message}")]
    Template {
        source_name: String,
        message: String,
    },
    /// Tokenizing or detokenizing failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A forward pass failed, or was asked for at a position the KV cache does not hold.
    #[error("local model: {0}")]
    Forward(String),
}

impl LocalError {
    /// An [`LocalError::Invalid`] for `path`, with the message flattened to one line.
    pub(crate) fn invalid(path: &Path, message: impl std::fmt::Display) -> LocalError {
        LocalError::Invalid {
            path: path.to_path_buf(),
            message: one_line(&message.to_string()),
        }
    }
}

/// Error text on one line: candle and serde errors may carry backtraces or several lines.
pub(crate) fn one_line(s: &str) -> String {
    let first = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    first.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_is_one_line() {
        let e = LocalError::invalid(Path::new("m/config.json"), "bad\nbacktrace:\n  0: x");
        assert_eq!(e.to_string(), "m/config.json: bad");
        let e = LocalError::NoCuda("cuda:0".into());
        assert_eq!(
            e.to_string(),
            "device \"cuda:0\": this gavel was built without CUDA; rebuild with --features cuda"
        );
        assert!(!LocalError::NotFound("x".into()).to_string().contains('\n'));
    }
}
