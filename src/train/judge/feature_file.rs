//! The features of a split kept on disk, so that a resumed run, or another run on the same data
//! and base model with other settings (learning rate, epochs, rank — what a sweep on the dev
//! split varies), skips the frozen model's pass: on the 2-core CPU that pass is nearly all of a
//! run's time (1.3 s per example on the 0.5B, against about 0.2 s per example for three epochs
//! of training). One safetensors file per split, named by a hash of everything the features
//! are a function of, so a file is only ever read back for the same inputs.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use sha2::{Digest, Sha256};

use super::features::{Context, Features};
use crate::model::adapter::Reach;
use crate::train::TrainError;

/// Bumped whenever what a file holds, or how features are computed, changes.
const FORMAT: &str = "gavel-judge-features-1";

/// What the features of a split are a function of.
pub struct FeatureKey<'a> {
    /// The base model's fingerprint ([`crate::model::adapter::fingerprint`]).
    pub base: &'a str,
    /// The kind of device the frozen pass ran on (`cpu`, `cuda`): a GPU's kernels round
    /// differently from the CPU's, so features made on one are not the other's.
    pub device: &'a str,
    /// The first adapted layer.
    pub first: usize,
    /// What the features keep: the verdict position's context, or every position's hidden state.
    pub reach: Reach,
    /// Per mode, each answer's tokens (the base model's probabilities read them).
    pub choices: &'a [Vec<Vec<u32>>],
    /// Per prompt group (prompts prefilled on one shared prefix): each prompt's tokens and
    /// the index of its mode.
    pub chunks: &'a [Vec<(Vec<u32>, usize)>],
}

impl FeatureKey<'_> {
    /// The file in `dir` for split `what` (`train`, `dev`).
    pub fn path(&self, dir: &Path, what: &str) -> PathBuf {
        let mut h = Sha256::new();
        let mut put = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        put(FORMAT.as_bytes());
        put(self.base.as_bytes());
        // CPU files keep the names they had before the device was part of the key (every file
        // made then was made on the CPU).
        if self.device != "cpu" {
            put(self.device.as_bytes());
        }
        put(&(self.first as u64).to_le_bytes());
        // Likewise, verdict-position files keep their names.
        if self.reach == Reach::All {
            put(b"reach=all");
        }
        let ids = |t: &[u32]| t.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for mode in self.choices {
            put(&(mode.len() as u64).to_le_bytes());
            for answer in mode {
                put(&ids(answer));
            }
        }
        for chunk in self.chunks {
            put(&(chunk.len() as u64).to_le_bytes());
            for (tokens, mode) in chunk {
                put(&(*mode as u64).to_le_bytes());
                put(&ids(tokens));
            }
        }
        let hex: String = h.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        dir.join(format!("{what}-{hex}.safetensors"))
    }
}

fn bad(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TrainError {
    TrainError::checkpoint_file(path, e)
}

/// Writes `features` (`chunk_of[i]`: the prompt group of example i; examples of one group
/// share one `shared` context), through a temporary file so that a killed run leaves no
/// half-written file behind.
pub fn save(path: &Path, features: &[Features], chunk_of: &[usize]) -> Result<(), TrainError> {
    let t = |e: candle_core::Error| bad(path, e);
    let cpu = Device::Cpu;
    let mut out: HashMap<String, Tensor> = HashMap::new();
    let mut written = std::collections::HashSet::new();
    for (i, (f, &c)) in features.iter().zip(chunk_of).enumerate() {
        let first_of_chunk = written.insert(c);
        match &f.context {
            Context::Verdict {
                hidden,
                shared,
                own,
            } => {
                out.insert(format!("e{i}.hidden"), hidden.clone());
                for (l, (k, v)) in own.iter().enumerate() {
                    out.insert(format!("e{i}.own.{l}.k"), k.clone());
                    out.insert(format!("e{i}.own.{l}.v"), v.clone());
                }
                if first_of_chunk {
                    for (l, (k, v)) in shared.iter().enumerate() {
                        out.insert(format!("c{c}.shared.{l}.k"), k.clone());
                        out.insert(format!("c{c}.shared.{l}.v"), v.clone());
                    }
                }
            }
            Context::All { shared, own } => {
                out.insert(format!("e{i}.own"), own.clone());
                if first_of_chunk {
                    out.insert(format!("c{c}.shared"), shared.as_ref().clone());
                }
            }
        }
    }
    let u32s = |x: Vec<u32>| Tensor::new(x, &cpu).map_err(t);
    out.insert(
        "pos".into(),
        u32s(features.iter().map(|f| f.pos as u32).collect())?,
    );
    out.insert(
        "chunk".into(),
        u32s(chunk_of.iter().map(|&c| c as u32).collect())?,
    );
    let firsts: Vec<f64> = features.iter().map(|f| f.base_first).collect();
    out.insert("base_first".into(), Tensor::new(firsts, &cpu).map_err(t)?);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(TrainError::file(dir))?;
    let tmp = path.with_extension("partial");
    candle_core::safetensors::save(&out, &tmp).map_err(t)?;
    std::fs::rename(&tmp, path).map_err(TrainError::file(path))
}

/// The features `path` holds for `n` examples with `layers` adapted layers of reach `reach`,
/// or None where there is no such file.
pub fn load(
    path: &Path,
    n: usize,
    layers: usize,
    reach: Reach,
) -> Result<Option<Vec<Features>>, TrainError> {
    if !path.is_file() {
        return Ok(None);
    }
    let t = |e: candle_core::Error| bad(path, e);
    let mut file = Stored {
        tensors: candle_core::safetensors::load(path, &Device::Cpu).map_err(t)?,
        path,
    };
    let pos = file.take("pos")?.to_vec1::<u32>().map_err(t)?;
    let chunk = file.take("chunk")?.to_vec1::<u32>().map_err(t)?;
    let firsts = file
        .take("base_first")?
        .to_dtype(DType::F64)
        .and_then(|x| x.to_vec1::<f64>())
        .map_err(t)?;
    if pos.len() != n || chunk.len() != n || firsts.len() != n {
        return Err(bad(path, format!("holds {} examples, not {n}", pos.len())));
    }
    let mut shared_kv: HashMap<u32, Arc<Vec<(Tensor, Tensor)>>> = HashMap::new();
    let mut shared_hidden: HashMap<u32, Arc<Tensor>> = HashMap::new();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let c = chunk[i];
        let context = match reach {
            Reach::Verdict => {
                let shared = match shared_kv.entry(c) {
                    Entry::Occupied(e) => e.get().clone(),
                    Entry::Vacant(e) => e
                        .insert(Arc::new(file.kv(&format!("c{c}.shared"), layers)?))
                        .clone(),
                };
                Context::Verdict {
                    hidden: file.take(&format!("e{i}.hidden"))?,
                    shared,
                    own: file.kv(&format!("e{i}.own"), layers)?,
                }
            }
            Reach::All => {
                let shared = match shared_hidden.entry(c) {
                    Entry::Occupied(e) => e.get().clone(),
                    Entry::Vacant(e) => e
                        .insert(Arc::new(file.take(&format!("c{c}.shared"))?))
                        .clone(),
                };
                Context::All {
                    shared,
                    own: file.take(&format!("e{i}.own"))?,
                }
            }
        };
        out.push(Features {
            context,
            pos: pos[i] as usize,
            base_first: firsts[i],
        });
    }
    Ok(Some(out))
}

/// A features file's tensors, taken out by name.
struct Stored<'a> {
    tensors: HashMap<String, Tensor>,
    path: &'a Path,
}

impl Stored<'_> {
    fn take(&mut self, name: &str) -> Result<Tensor, TrainError> {
        self.tensors.remove(name).ok_or_else(|| {
            bad(
                self.path,
                format!("no tensor {name}: not a complete features file"),
            )
        })
    }

    /// The keys and values `PREFIX.L.k`, `PREFIX.L.v` of `layers` layers.
    fn kv(&mut self, prefix: &str, layers: usize) -> Result<Vec<(Tensor, Tensor)>, TrainError> {
        (0..layers)
            .map(|l| {
                Ok((
                    self.take(&format!("{prefix}.{l}.k"))?,
                    self.take(&format!("{prefix}.{l}.v"))?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_named_by_everything_its_features_depend_on() {
        let choices = vec![vec![vec![9u32], vec![10]]];
        let chunks = vec![vec![(vec![1u32, 2, 3], 0)]];
        let key = |device, first| FeatureKey {
            base: "base-sha",
            device,
            first,
            reach: Reach::Verdict,
            choices: &choices,
            chunks: &chunks,
        };
        let dir = Path::new("f");
        let cpu = key("cpu", 20).path(dir, "train");
        assert_eq!(cpu, key("cpu", 20).path(dir, "train"));
        assert!(cpu.to_string_lossy().starts_with("f/train-"));
        assert_ne!(cpu, key("cuda", 20).path(dir, "train"));
        assert_ne!(cpu, key("cpu", 21).path(dir, "train"));
        assert_ne!(cpu, key("cpu", 20).path(dir, "dev"));
        let all = FeatureKey {
            reach: Reach::All,
            ..key("cpu", 20)
        };
        assert_ne!(cpu, all.path(dir, "train"));
        let other = vec![vec![(vec![1u32, 2, 4], 0)]];
        let changed = FeatureKey {
            chunks: &other,
            ..key("cpu", 20)
        };
        assert_ne!(cpu, changed.path(dir, "train"));
    }
}
