//! Checkpoints: the adapters in PEFT's format (`adapter_model.safetensors` with
//! `base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight` names and
//! `adapter_config.json`, so PEFT and vLLM load them), and beside them the optimizer moments and
//! `trainer_state.json` (step, optimizer step, RNG state) that make `--resume` continue exactly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor, Var};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::lora::LoraConfig;
use super::TrainError;

pub use crate::model::adapter::{ADAPTER_CONFIG, ADAPTER_FILE};
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const STATE_FILE: &str = "trainer_state.json";

/// What besides tensors a resumed run needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    pub step: u64,
    pub adam_t: u64,
    pub rng_state: u64,
    pub seed: u64,
}

fn io(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TrainError {
    TrainError::checkpoint_file(path, e)
}

/// PEFT's adapter_config.json for `lora` on `base`.
pub fn adapter_config(lora: &LoraConfig, base: &Path) -> serde_json::Value {
    json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base.display().to_string(),
        "r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": lora.target_modules,
        "use_rslora": lora.use_rslora,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true
    })
}

/// Writes the adapters (and `adapter_config.json`) into `dir`.
pub fn save_adapters(
    dir: &Path,
    vars: &[(String, Var)],
    lora: &LoraConfig,
    base: &Path,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let tensors: HashMap<String, Tensor> = vars
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect();
    let path = dir.join(ADAPTER_FILE);
    candle_core::safetensors::save(&tensors, &path).map_err(|e| io(&path, e))?;
    let cfg = dir.join(ADAPTER_CONFIG);
    let text = serde_json::to_string_pretty(&adapter_config(lora, base)).expect("json");
    std::fs::write(&cfg, text).map_err(|e| io(&cfg, e))
}

/// Loads adapters saved by [`save_adapters`] into `vars` (names and shapes must match).
pub fn load_adapters(dir: &Path, vars: &[(String, Var)]) -> Result<(), TrainError> {
    let path = dir.join(ADAPTER_FILE);
    if !path.is_file() {
        return Err(io(&path, "missing (not a checkpoint directory?)"));
    }
    let dev = vars
        .first()
        .map(|(_, v)| v.as_tensor().device().clone())
        .unwrap_or(Device::Cpu);
    let saved = candle_core::safetensors::load(&path, &dev).map_err(|e| io(&path, e))?;
    if saved.len() != vars.len() {
        return Err(io(
            &path,
            format!(
                "{} adapter tensors, the model has {} (different lora settings?)",
                saved.len(),
                vars.len()
            ),
        ));
    }
    for (name, var) in vars {
        let t = saved
            .get(name)
            .ok_or_else(|| io(&path, format!("no tensor {name}")))?;
        if t.dims() != var.as_tensor().dims() {
            return Err(io(
                &path,
                format!(
                    "{name} has shape {:?}, the model {:?}",
                    t.dims(),
                    var.as_tensor().dims()
                ),
            ));
        }
        var.set(&t.to_dtype(var.as_tensor().dtype())?)?;
    }
    Ok(())
}

/// The LoRA settings of a checkpoint's (or PEFT's) `adapter_config.json`.
pub fn read_adapter_config(dir: &Path) -> Result<LoraConfig, TrainError> {
    crate::model::adapter::read_lora_config(dir)
        .map(|(lora, _)| lora)
        .map_err(TrainError::Load)
}

/// `--init-adapter`: loads the adapter in `dir` into `vars`, after checking that its
/// `adapter_config.json` is this run's `lora` (rank, alpha, rsLoRA, target modules); names and
/// shapes are then checked tensor by tensor. Every refusal names the file.
pub fn load_init_adapter(
    dir: &Path,
    vars: &[(String, Var)],
    lora: &LoraConfig,
) -> Result<(), TrainError> {
    let saved = read_adapter_config(dir)?;
    let path = dir.join(ADAPTER_CONFIG);
    let mismatch = |what: &str, theirs: String, ours: String| {
        Err(io(
            &path,
            format!(
                "the adapter has {what} {theirs}, this run {ours}: set [lora] to match the \
                 adapter to start from it"
            ),
        ))
    };
    if saved.r != lora.r {
        return mismatch("rank r =", saved.r.to_string(), lora.r.to_string());
    }
    if saved.alpha != lora.alpha || saved.use_rslora != lora.use_rslora {
        return mismatch(
            "scale (alpha, use_rslora) =",
            format!("({}, {})", saved.alpha, saved.use_rslora),
            format!("({}, {})", lora.alpha, lora.use_rslora),
        );
    }
    let sorted = |t: &[String]| {
        let mut t = t.to_vec();
        t.sort();
        t.dedup();
        t
    };
    if sorted(&saved.target_modules) != sorted(&lora.target_modules) {
        return mismatch(
            "target modules",
            sorted(&saved.target_modules).join(","),
            sorted(&lora.target_modules).join(","),
        );
    }
    load_adapters(dir, vars)
}

pub fn save_state(
    dir: &Path,
    state: &TrainerState,
    optimizer: Vec<(String, Tensor)>,
) -> Result<(), TrainError> {
    let opt: HashMap<String, Tensor> = optimizer.into_iter().collect();
    let path = dir.join(OPTIMIZER_FILE);
    candle_core::safetensors::save(&opt, &path).map_err(|e| io(&path, e))?;
    let path = dir.join(STATE_FILE);
    let text = serde_json::to_string_pretty(state).expect("json");
    std::fs::write(&path, text).map_err(|e| io(&path, e))
}

pub fn load_state(dir: &Path) -> Result<(TrainerState, HashMap<String, Tensor>), TrainError> {
    let path = dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
    let state: TrainerState = serde_json::from_str(&text).map_err(|e| io(&path, e))?;
    let path = dir.join(OPTIMIZER_FILE);
    let opt = candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| io(&path, e))?;
    Ok((state, opt))
}

/// `output_dir/checkpoint-STEP`.
pub fn checkpoint_dir(output: &Path, step: u64) -> PathBuf {
    output.join(format!("checkpoint-{step}"))
}
