//! LoRA adapters in PEFT's layout, as the trainer writes them and the local judge reads them:
//! `adapter_config.json` (rank, alpha, target modules, `layers_to_transform`) and
//! `adapter_model.safetensors` (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`
//! …), plus, for an adapter made by `gavel train judge`, `gavel_judge.json`: which positions it
//! changes (the verdict position only), the modes it was trained for, and the base model it was
//! made on, so that an adapter is never run over another base.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Arch, LocalError, ModelFiles, QwenConfig, WeightFiles};

pub const ADAPTER_FILE: &str = "adapter_model.safetensors";
pub const ADAPTER_CONFIG: &str = "adapter_config.json";
/// What `gavel train judge` records beside the PEFT files (see [`JudgeRecord`]).
pub const JUDGE_RECORD: &str = "gavel_judge.json";

/// The projections LoRA can adapt, by their Hugging Face module name.
pub const TARGETS: &[&str] = &[
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// Which projections get adapters and how big they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoraConfig {
    /// Rank r.
    pub r: usize,
    /// α: adapters are scaled by α/r (α/√r with `use_rslora`).
    pub alpha: f64,
    /// Subset of [`TARGETS`].
    pub target_modules: Vec<String>,
    pub use_rslora: bool,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            r: 8,
            alpha: 16.0,
            target_modules: TARGETS.iter().map(|s| s.to_string()).collect(),
            use_rslora: false,
        }
    }
}

impl LoraConfig {
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.alpha / (self.r as f64).sqrt()
        } else {
            self.alpha / self.r as f64
        }
    }

    /// Checks rank and target names; the message names the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if self.r == 0 {
            return Err("lora rank r must be at least 1".into());
        }
        if !self.alpha.is_finite() {
            return Err("lora alpha must be a finite number".into());
        }
        if self.target_modules.is_empty() {
            return Err("lora target_modules is empty".into());
        }
        for t in &self.target_modules {
            if !TARGETS.contains(&t.as_str()) {
                return Err(format!(
                    "unknown lora target module {t:?} (expected some of {})",
                    TARGETS.join(", ")
                ));
            }
        }
        Ok(())
    }

    pub fn targets(&self, module: &str) -> bool {
        self.target_modules.iter().any(|t| t == module)
    }
}

/// The PEFT name of a projection's adapter tensor (`ab` is `A` or `B`).
pub fn peft_name(layer: usize, module: &str, ab: &str) -> String {
    format!(
        "base_model.model.model.layers.{layer}.{}.{module}.lora_{ab}.weight",
        module_group(module)
    )
}

/// `self_attn` for the attention projections, `mlp` for the others.
fn module_group(module: &str) -> &'static str {
    if ["q_proj", "k_proj", "v_proj", "o_proj"].contains(&module) {
        "self_attn"
    } else {
        "mlp"
    }
}

/// `[out, in]` of a projection of a model shaped `cfg`.
pub fn projection_shape(cfg: &QwenConfig, module: &str) -> Option<(usize, usize)> {
    let (h, d, ff) = (cfg.hidden_size, cfg.head_dim(), cfg.intermediate_size);
    let (q, kv) = (cfg.num_attention_heads * d, cfg.num_kv_heads() * d);
    Some(match module {
        "q_proj" => (q, h),
        "k_proj" | "v_proj" => (kv, h),
        "o_proj" => (h, q),
        "gate_proj" | "up_proj" => (ff, h),
        "down_proj" => (h, ff),
        _ => return None,
    })
}

/// Which positions of a sequence an adapter changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reach {
    /// Every position, as PEFT applies an adapter (the trainer's policy adapters).
    All,
    /// The last position of a question alone, where the verdict token is read: the context's keys
    /// and values stay the base model's (see `train::judge`).
    Verdict,
}

/// The base model an adapter was made on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseRecord {
    /// The weights file's (or folder's) name.
    pub file: String,
    pub arch: Arch,
    pub weight_bytes: u64,
    /// See [`fingerprint`].
    pub fingerprint: String,
}

/// `gavel_judge.json`: what `gavel train judge` made and on what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRecord {
    pub reach: Reach,
    /// The judge modes it was trained for (`pointwise`, `pairwise`).
    pub modes: Vec<String>,
    pub base: BaseRecord,
    /// How it was trained (data, steps, figures): for people, not read back.
    #[serde(default)]
    pub training: serde_json::Value,
}

/// Bytes hashed from each end of each weights file by [`fingerprint`].
const FINGERPRINT_BYTES: u64 = 8 << 20;

/// A cheap identity of a model's weights: SHA-256 over each weights file's length and its first
/// and last 8 MiB (a GGUF's header, tokenizer and first tensors, and its last tensors). Hashing
/// the whole file would add seconds to every judge start (7 s for the 1.5B test model); two
/// different checkpoints of one model differ in those bytes too.
pub fn fingerprint(files: &ModelFiles) -> Result<String, LocalError> {
    let paths: Vec<PathBuf> = match &files.weights {
        WeightFiles::Gguf { .. } => vec![files.path.clone()],
        WeightFiles::Safetensors(p) => p.clone(),
    };
    let mut h = Sha256::new();
    for path in &paths {
        let mut f = std::fs::File::open(path).map_err(|e| LocalError::invalid(path, e))?;
        let len = f
            .metadata()
            .map_err(|e| LocalError::invalid(path, e))?
            .len();
        h.update(len.to_le_bytes());
        let head = len.min(FINGERPRINT_BYTES);
        let mut buf = vec![0u8; head as usize];
        f.read_exact(&mut buf)
            .map_err(|e| LocalError::invalid(path, e))?;
        h.update(&buf);
        let tail = len.saturating_sub(head).min(FINGERPRINT_BYTES);
        f.seek(SeekFrom::Start(len - tail))
            .map_err(|e| LocalError::invalid(path, e))?;
        buf.resize(tail as usize, 0);
        f.read_exact(&mut buf)
            .map_err(|e| LocalError::invalid(path, e))?;
        h.update(&buf);
    }
    Ok(hex::encode(h.finalize()))
}

/// The record of `files` as a base model.
pub fn base_record(files: &ModelFiles) -> Result<BaseRecord, LocalError> {
    let info = files.info(&Device::Cpu, DType::F32);
    let file = files
        .path
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    Ok(BaseRecord {
        file,
        arch: files.config.arch,
        weight_bytes: info.weight_bytes,
        fingerprint: fingerprint(files)?,
    })
}

/// What identifies an adapter in use: for logs, `/healthz` and the judge's identity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdapterInfo {
    pub path: PathBuf,
    /// See [`Adapter::identity`].
    pub sha256: String,
    pub reach: Reach,
    /// The judge modes it was trained for (empty: not recorded).
    pub modes: Vec<String>,
}

/// One projection's adapter: A `[r, in]`, B `[out, r]`, f32 on the CPU.
#[derive(Debug, Clone)]
pub struct LoraPair {
    pub a: Tensor,
    pub b: Tensor,
}

/// An adapter folder, read and checked.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub dir: PathBuf,
    pub lora: LoraConfig,
    /// PEFT's `layers_to_transform`: the layers that have adapters (None: all).
    pub layers: Option<Vec<usize>>,
    pub record: Option<JudgeRecord>,
    /// (layer, module) → its adapter.
    pub weights: BTreeMap<(usize, String), LoraPair>,
    /// SHA-256 over the adapter's files: its identity in the verdict cache's keys.
    pub identity: String,
}

fn invalid(path: &Path, m: impl std::fmt::Display) -> LocalError {
    LocalError::invalid(path, m)
}

/// The LoRA settings and `layers_to_transform` of an `adapter_config.json` in `dir`.
pub fn read_lora_config(dir: &Path) -> Result<(LoraConfig, Option<Vec<usize>>), LocalError> {
    let path = dir.join(ADAPTER_CONFIG);
    if !path.is_file() {
        return Err(invalid(&path, "missing (not an adapter directory?)"));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| invalid(&path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(&path, e))?;
    let target_modules = serde_json::from_value(v["target_modules"].clone())
        .map_err(|_| invalid(&path, "target_modules: expected a list of module names"))?;
    let lora = LoraConfig {
        r: v["r"].as_u64().unwrap_or(0) as usize,
        alpha: v["lora_alpha"].as_f64().unwrap_or(f64::NAN),
        target_modules,
        use_rslora: v["use_rslora"].as_bool().unwrap_or(false),
    };
    lora.validate().map_err(|m| invalid(&path, m))?;
    if v["fan_in_fan_out"].as_bool() == Some(true) {
        return Err(invalid(&path, "fan_in_fan_out adapters are not supported"));
    }
    let layers = match &v["layers_to_transform"] {
        serde_json::Value::Null => None,
        serde_json::Value::Number(n) => Some(vec![n.as_u64().unwrap_or(0) as usize]),
        other => Some(serde_json::from_value(other.clone()).map_err(|_| {
            invalid(
                &path,
                "layers_to_transform: expected a layer number or a list of them",
            )
        })?),
    };
    Ok((lora, layers))
}

impl Adapter {
    /// Reads the adapter in `dir`; every problem is one line naming the file.
    pub fn read(dir: &Path) -> Result<Adapter, LocalError> {
        let (lora, layers) = read_lora_config(dir)?;
        let record_path = dir.join(JUDGE_RECORD);
        let record: Option<JudgeRecord> = match std::fs::read_to_string(&record_path) {
            Ok(text) => Some(serde_json::from_str(&text).map_err(|e| invalid(&record_path, e))?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(invalid(&record_path, e)),
        };
        let path = dir.join(ADAPTER_FILE);
        let bytes = std::fs::read(&path).map_err(|e| invalid(&path, e))?;
        let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
            .map_err(|e| invalid(&path, e))?;
        let mut halves: BTreeMap<(usize, String), (Option<Tensor>, Option<Tensor>)> =
            BTreeMap::new();
        for (name, t) in tensors {
            let (layer, module, ab) = parse_peft_name(&name)
                .ok_or_else(|| invalid(&path, format!("{name}: not a LoRA tensor name")))?;
            if !lora.targets(&module) {
                return Err(invalid(
                    &path,
                    format!("{name}: {module} is not among target_modules"),
                ));
            }
            let t = t.to_dtype(DType::F32).map_err(|e| invalid(&path, e))?;
            let slot = halves.entry((layer, module)).or_default();
            if ab == 'A' {
                slot.0 = Some(t);
            } else {
                slot.1 = Some(t);
            }
        }
        let mut weights = BTreeMap::new();
        for ((layer, module), pair) in halves {
            let (Some(a), Some(b)) = pair else {
                return Err(invalid(
                    &path,
                    format!("layer {layer} {module}: lora_A and lora_B must come in pairs"),
                ));
            };
            let (ra, rb) = (a.dims2().map(|d| d.0), b.dims2().map(|d| d.1));
            if ra.ok() != Some(lora.r) || rb.ok() != Some(lora.r) {
                return Err(invalid(
                    &path,
                    format!("layer {layer} {module}: rank is not r = {}", lora.r),
                ));
            }
            if layers.as_ref().is_some_and(|l| !l.contains(&layer)) {
                return Err(invalid(
                    &path,
                    format!("layer {layer} {module}: not in layers_to_transform"),
                ));
            }
            weights.insert((layer, module), LoraPair { a, b });
        }
        if weights.is_empty() {
            return Err(invalid(&path, "no adapter tensors"));
        }
        let mut h = Sha256::new();
        for f in [ADAPTER_CONFIG, JUDGE_RECORD] {
            if let Ok(text) = std::fs::read(dir.join(f)) {
                h.update(Sha256::digest(&text));
            }
        }
        h.update(Sha256::digest(&bytes));
        Ok(Adapter {
            dir: dir.to_path_buf(),
            lora,
            layers,
            record,
            weights,
            identity: hex::encode(h.finalize()),
        })
    }

    pub fn info(&self) -> AdapterInfo {
        AdapterInfo {
            path: self.dir.clone(),
            sha256: self.identity.clone(),
            reach: self.reach(),
            modes: self
                .record
                .as_ref()
                .map_or_else(Vec::new, |r| r.modes.clone()),
        }
    }

    /// Which positions it changes: [`Reach::Verdict`] when `gavel train judge` made it.
    pub fn reach(&self) -> Reach {
        self.record.as_ref().map_or(Reach::All, |r| r.reach)
    }

    /// Refuses an adapter made for another base model than `files` (its shapes, or the base
    /// recorded in `gavel_judge.json`), naming both.
    pub fn check_base(&self, files: &ModelFiles) -> Result<(), LocalError> {
        let model = files.path.display();
        let other = |why: String| {
            invalid(
                &self.dir,
                format!("this adapter was made for another base model than {model}: {why}"),
            )
        };
        let cfg = &files.config;
        for ((layer, module), p) in &self.weights {
            if *layer >= cfg.num_hidden_layers {
                return Err(other(format!(
                    "it adapts layer {layer}, the model has {} layers",
                    cfg.num_hidden_layers
                )));
            }
            let (out, inp) = projection_shape(cfg, module).expect("a validated target");
            let (a_in, b_out) = (p.a.dim(1).unwrap_or(0), p.b.dim(0).unwrap_or(0));
            if (a_in, b_out) != (inp, out) {
                return Err(other(format!(
                    "its layer {layer} {module} is [{b_out}, {a_in}], the model's [{out}, {inp}]"
                )));
            }
        }
        if let Some(r) = &self.record {
            let ours = base_record(files)?;
            if r.base.fingerprint != ours.fingerprint || r.base.arch != ours.arch {
                return Err(other(format!(
                    "it was made on {} ({} bytes, fingerprint {}), this is {} ({} bytes, \
                     fingerprint {})",
                    r.base.file,
                    r.base.weight_bytes,
                    short(&r.base.fingerprint),
                    ours.file,
                    ours.weight_bytes,
                    short(&ours.fingerprint)
                )));
            }
        }
        Ok(())
    }
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// (layer, module, `A` or `B`) of a PEFT adapter tensor name.
fn parse_peft_name(name: &str) -> Option<(usize, String, char)> {
    let rest = name.strip_prefix("base_model.model.model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (group, rest) = rest.split_once('.')?;
    let (module, rest) = rest.split_once('.')?;
    let ab = match rest {
        "lora_A.weight" => 'A',
        "lora_B.weight" => 'B',
        _ => return None,
    };
    (TARGETS.contains(&module) && module_group(module) == group)
        .then(|| Some((layer.parse().ok()?, module.to_string(), ab)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peft_names_round_trip() {
        for m in TARGETS {
            for ab in ["A", "B"] {
                let n = peft_name(7, m, ab);
                assert_eq!(
                    parse_peft_name(&n),
                    Some((7, m.to_string(), ab.chars().next().unwrap()))
                );
            }
        }
        assert_eq!(
            peft_name(2, "q_proj", "A"),
            "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight"
        );
        assert_eq!(
            parse_peft_name("base_model.model.model.layers.2.mlp.q_proj.lora_A.weight"),
            None
        );
        assert_eq!(parse_peft_name("model.layers.2.mlp.up_proj.weight"), None);
    }

    #[test]
    fn config_checks_name_the_problem() {
        let mut c = LoraConfig::default();
        assert!(c.validate().is_ok());
        c.target_modules = vec!["qproj".into()];
        assert!(c.validate().unwrap_err().contains("\"qproj\""));
        c.r = 0;
        assert!(c.validate().unwrap_err().contains("rank"));
    }
}
