//! Reading a model folder's files: JSON files (config, tokenizer config, safetensors index)
//! with errors that name the file, and which safetensors files hold the weights. Shared by the
//! loader and by hub resolution, which checks that a cached snapshot is complete.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::LocalError;

pub(super) fn read_json(path: &Path) -> Result<Value, LocalError> {
    let text = std::fs::read_to_string(path).map_err(|e| LocalError::invalid(path, e))?;
    serde_json::from_str(&text).map_err(|e| LocalError::invalid(path, e))
}

pub(super) fn read_json_opt(path: &Path) -> Result<Option<Value>, LocalError> {
    if path.exists() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

/// The safetensors files of a folder: those its index lists, else `model.safetensors`, else
/// every `*.safetensors`.
pub(super) fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, LocalError> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let json = read_json(&index)?;
        let map = json["weight_map"]
            .as_object()
            .ok_or_else(|| LocalError::invalid(&index, "no weight_map object"))?;
        let files: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
        if files.is_empty() {
            return Err(LocalError::invalid(&index, "weight_map lists no files"));
        }
        return files
            .into_iter()
            .map(|f| {
                let p = dir.join(f);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(LocalError::MissingShard {
                        index: index.clone(),
                        file: f.to_string(),
                    })
                }
            })
            .collect();
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| LocalError::invalid(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(LocalError::MissingFile {
            dir: dir.to_path_buf(),
            file: "*.safetensors weights".into(),
        });
    }
    Ok(files)
}
