//! Loading a Qwen model from a GGUF file or a Hugging Face model folder. Everything is checked
//! here, at start-up: a bad path, an unsupported architecture or files that do not fit together
//! fail with one [`LocalError`] line before the judge serves a request.

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_transformers::models::{qwen2, qwen3};
use serde::Serialize;
use serde_json::{json, Value};

use super::chat_template::{template_from_tokenizer_config, ChatTemplate, TemplateOrigin};
use super::error::LocalError;
use super::qwen::{Qwen, QwenConfig, Source};
use super::tokenizer::{
    byte_vocab, eos_ids, ids_of, read_tokenizer_json, token_text, tokenizer_from_gguf,
    LoadedTokenizer,
};

/// The model families the local judge runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Qwen2 and Qwen2.5.
    Qwen2,
    Qwen3,
}

/// Where the weights came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    Gguf,
    Safetensors,
}

/// What was loaded, for logs, `/healthz` and the judge's identity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    pub path: PathBuf,
    pub format: ModelFormat,
    pub arch: Arch,
    /// `general.name` of a GGUF, `_name_or_path` of a config.json, when present.
    pub name: Option<String>,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// The compute dtype of full-precision weights (`f32`, `bf16`), or the GGUF type of the
    /// attention weights (`Q8_0`, `Q4K`, ...).
    pub dtype: String,
    /// Rows of the embedding: the length of every logits vector.
    pub vocab_size: usize,
    /// Most positions the model takes (prompt and completion).
    pub context_length: usize,
    pub num_layers: usize,
    /// Total size of the weights files.
    pub weight_bytes: u64,
}

pub(crate) struct Loaded {
    pub weights: Qwen,
    pub tok: LoadedTokenizer,
    pub template: ChatTemplate,
    pub info: ModelInfo,
}

fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// Loads `path`: a GGUF file or a model folder. `dtype` overrides the compute dtype of
/// full-precision weights (default: f32 on CPU, bf16 on a GPU).
pub(crate) fn load(
    path: &Path,
    device: &Device,
    dtype: Option<DType>,
) -> Result<Loaded, LocalError> {
    if !path.exists() {
        return Err(LocalError::NotFound(path.to_path_buf()));
    }
    if path.is_dir() {
        let dtype = dtype.unwrap_or(if device.is_cpu() {
            DType::F32
        } else {
            DType::BF16
        });
        return load_folder(path, device, dtype);
    }
    let mut magic = [0u8; 4];
    let is_gguf = File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"GGUF";
    if !is_gguf {
        let hint = match path.extension().and_then(|e| e.to_str()) {
            Some("safetensors" | "json") => "; point model_path at the model folder instead",
            _ => "",
        };
        return Err(LocalError::invalid(
            path,
            format!(
                "not a GGUF file (model_path is a GGUF file or a Hugging Face model folder){hint}"
            ),
        ));
    }
    load_gguf(path, device)
}

fn md_string(
    md: &std::collections::HashMap<String, gguf_file::Value>,
    key: &str,
) -> Option<String> {
    md.get(key).and_then(|v| v.to_string().ok()).cloned()
}

fn load_gguf(path: &Path, device: &Device) -> Result<Loaded, LocalError> {
    let mut file = File::open(path).map_err(|e| LocalError::invalid(path, e))?;
    let content = gguf_file::Content::read(&mut file)
        .map_err(|e| LocalError::invalid(path, format!("not a readable GGUF file: {e}")))?;
    let md = &content.metadata;
    let arch_name = md_string(md, "general.architecture").unwrap_or_default();
    let arch = match arch_name.as_str() {
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        _ => {
            return Err(LocalError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: format!("general.architecture {arch_name:?}"),
            })
        }
    };
    let tensor = |name: &str| {
        content
            .tensor_infos
            .get(name)
            .ok_or_else(|| LocalError::invalid(path, format!("no tensor {name} in the GGUF file")))
    };
    let n_vocab = tensor("token_embd.weight")?.shape.dims()[0];
    let dtype = format!("{:?}", tensor("blk.0.attn_q.weight")?.ggml_dtype);
    let int = |key: &str| {
        md.get(key)
            .and_then(super::tokenizer::gguf_int)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| LocalError::invalid(path, format!("no {key} in the GGUF metadata")))
    };
    let context_length = int(&format!("{arch_name}.context_length"))?;
    let num_layers = int(&format!("{arch_name}.block_count"))?;
    let tok = tokenizer_from_gguf(path, md, n_vocab)?;
    let template = ChatTemplate::from_model(
        md_string(md, "tokenizer.chat_template"),
        TemplateOrigin::Gguf,
        &tok.bos_token,
        &tok.eos_token,
    )?;
    let name = md_string(md, "general.name");
    let float = |key: &str, default: f64| {
        md.get(key)
            .and_then(|v| v.to_f32().ok().map(f64::from).or_else(|| v.to_f64().ok()))
            .unwrap_or(default)
    };
    let hidden = int(&format!("{arch_name}.embedding_length"))?;
    let heads = int(&format!("{arch_name}.attention.head_count"))?;
    if heads == 0 {
        return Err(LocalError::invalid(path, "attention.head_count is 0"));
    }
    let cfg = QwenConfig {
        arch,
        hidden,
        heads,
        kv_heads: int(&format!("{arch_name}.attention.head_count_kv")).unwrap_or(heads),
        head_dim: int(&format!("{arch_name}.attention.key_length")).unwrap_or(hidden / heads),
        layers: num_layers,
        intermediate: tensor("blk.0.ffn_up.weight")?.shape.dims()[0],
        rms_eps: float(
            &format!("{arch_name}.attention.layer_norm_rms_epsilon"),
            1e-6,
        ),
        rope_theta: float(&format!("{arch_name}.rope.freq_base"), 10_000.0),
        context: context_length,
        vocab: n_vocab,
    };
    check_heads(path, &cfg)?;
    let src = Source::Gguf {
        content: &content,
        reader: &mut file,
    };
    let weights = Qwen::load(cfg, src, DType::F32, device)
        .map_err(|e| LocalError::invalid(path, format!("cannot load the weights: {e}")))?;
    let info = ModelInfo {
        path: path.to_path_buf(),
        format: ModelFormat::Gguf,
        arch,
        name,
        device: device_name(device),
        dtype,
        vocab_size: n_vocab,
        context_length,
        num_layers,
        weight_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
    };
    Ok(Loaded {
        weights,
        tok,
        template,
        info,
    })
}

/// Head counts the attention can use: kv heads dividing the query heads, even head size.
fn check_heads(path: &Path, c: &QwenConfig) -> Result<(), LocalError> {
    if c.kv_heads == 0 || c.heads % c.kv_heads != 0 || c.head_dim == 0 || c.head_dim % 2 != 0 {
        return Err(LocalError::invalid(
            path,
            format!(
                "{} attention heads, {} kv heads of size {}: kv heads must divide the heads and \
                 the size must be even",
                c.heads, c.kv_heads, c.head_dim
            ),
        ));
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Value, LocalError> {
    let text = std::fs::read_to_string(path).map_err(|e| LocalError::invalid(path, e))?;
    serde_json::from_str(&text).map_err(|e| LocalError::invalid(path, e))
}

fn read_json_opt(path: &Path) -> Result<Option<Value>, LocalError> {
    if path.exists() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

/// The architecture a config.json names (`model_type`, else `architectures`).
fn folder_arch(config_path: &Path, config: &Value) -> Result<Arch, LocalError> {
    let model_type = config["model_type"].as_str();
    let archs: Vec<&str> = config["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let by_arch = |name: &str| archs.contains(&name);
    match model_type {
        Some("qwen2") => return Ok(Arch::Qwen2),
        Some("qwen3") => return Ok(Arch::Qwen3),
        None if by_arch("Qwen2ForCausalLM") => return Ok(Arch::Qwen2),
        None if by_arch("Qwen3ForCausalLM") => return Ok(Arch::Qwen3),
        _ => {}
    }
    let mut found = Vec::new();
    if let Some(t) = model_type {
        found.push(format!("model_type {t:?}"));
    }
    if !archs.is_empty() {
        found.push(format!("architectures {archs:?}"));
    }
    if found.is_empty() {
        found.push("(config.json names no model_type or architectures)".into());
    }
    Err(LocalError::UnsupportedArchitecture {
        path: config_path.to_path_buf(),
        found: found.join(", "),
    })
}

/// config.json with the defaults `transformers` would apply filled in, so candle's strict
/// configs accept every released Qwen2/Qwen3 config (`sliding_window: null`, no `head_dim`, ...).
pub(crate) fn normalized_config(path: &Path, arch: Arch, raw: &Value) -> Result<Value, LocalError> {
    let mut c = raw.clone();
    let need = |k: &str| {
        raw[k]
            .as_u64()
            .ok_or_else(|| LocalError::invalid(path, format!("no integer {k}")))
    };
    let (hidden, heads, layers) = (
        need("hidden_size")?,
        need("num_attention_heads")?,
        need("num_hidden_layers")?,
    );
    for k in ["vocab_size", "intermediate_size"] {
        need(k)?;
    }
    if heads == 0 || hidden % heads != 0 {
        return Err(LocalError::invalid(
            path,
            format!("hidden_size {hidden} is not a multiple of num_attention_heads {heads}"),
        ));
    }
    let obj = c
        .as_object_mut()
        .ok_or_else(|| LocalError::invalid(path, "not a JSON object"))?;
    let mut default = |k: &str, v: Value| {
        if obj.get(k).is_none_or(Value::is_null) {
            obj.insert(k.to_string(), v);
        }
    };
    let rope_theta = raw["rope_parameters"]["rope_theta"].clone();
    default(
        "rope_theta",
        if rope_theta.is_null() {
            json!(10000.0)
        } else {
            rope_theta
        },
    );
    default("num_key_value_heads", json!(heads));
    default("max_position_embeddings", json!(32768));
    default("max_window_layers", json!(layers));
    default("tie_word_embeddings", json!(false));
    default("rms_norm_eps", json!(1e-6));
    default("use_sliding_window", json!(false));
    default("hidden_act", json!("silu"));
    match arch {
        Arch::Qwen2 => {
            let max_pos = obj["max_position_embeddings"].clone();
            if obj.get("sliding_window").is_none_or(Value::is_null) {
                obj.insert("sliding_window".into(), max_pos);
            }
        }
        Arch::Qwen3 => {
            if obj.get("head_dim").is_none_or(Value::is_null) {
                obj.insert("head_dim".into(), json!(hidden / heads));
            }
            if obj.get("attention_bias").is_none_or(Value::is_null) {
                obj.insert("attention_bias".into(), json!(false));
            }
        }
    }
    Ok(c)
}

/// The safetensors files of a folder: those its index lists, else `model.safetensors`, else
/// every `*.safetensors`.
pub(crate) fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, LocalError> {
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

/// The folder's chat template: tokenizer_config.json's, else `chat_template.jinja`, else
/// `chat_template.json`'s (newer `transformers` save it beside the config).
fn folder_template(dir: &Path, tok_config: &Value) -> Result<Option<String>, LocalError> {
    let cfg_path = dir.join("tokenizer_config.json");
    if let Some(t) =
        template_from_tokenizer_config(tok_config).map_err(|m| LocalError::invalid(&cfg_path, m))?
    {
        return Ok(Some(t));
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|e| LocalError::invalid(&jinja, e));
    }
    let json_path = dir.join("chat_template.json");
    match read_json_opt(&json_path)? {
        Some(j) => {
            template_from_tokenizer_config(&j).map_err(|m| LocalError::invalid(&json_path, m))
        }
        None => Ok(None),
    }
}

fn load_folder(dir: &Path, device: &Device, dtype: DType) -> Result<Loaded, LocalError> {
    for file in ["config.json", "tokenizer.json"] {
        if !dir.join(file).is_file() {
            let gguf = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.extension().is_some_and(|x| x == "gguf"));
            let file = match gguf {
                Some(g) => format!(
                    "{file} (for a GGUF model, point model_path at {})",
                    g.display()
                ),
                None => file.to_string(),
            };
            return Err(LocalError::MissingFile {
                dir: dir.to_path_buf(),
                file,
            });
        }
    }
    let config_path = dir.join("config.json");
    let raw = read_json(&config_path)?;
    let arch = folder_arch(&config_path, &raw)?;
    let config = normalized_config(&config_path, arch, &raw)?;
    let files = weight_files(dir)?;

    let tokenizer = read_tokenizer_json(&dir.join("tokenizer.json"))?;
    let tok_config = read_json_opt(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gen_config = read_json_opt(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
    let vocab_size = config["vocab_size"].as_u64().unwrap_or(0) as usize;
    let tok_ids = tokenizer
        .get_vocab(true)
        .into_values()
        .max()
        .map_or(0, |m| m as usize + 1);
    if tok_ids > vocab_size {
        return Err(LocalError::invalid(
            dir,
            format!(
                "tokenizer.json has ids up to {} but config.json has vocab_size {vocab_size}: the \
                 tokenizer is not this model's",
                tok_ids - 1
            ),
        ));
    }
    let eos_text = token_text(&tok_config["eos_token"]);
    let mut named = ids_of(&gen_config["eos_token_id"]);
    named.extend(ids_of(&raw["eos_token_id"]));
    named.extend(eos_text.as_deref().and_then(|t| tokenizer.token_to_id(t)));
    named.retain(|&i| (i as usize) < vocab_size);
    let eos = eos_ids(&tokenizer, named);
    let eos_token = eos_text
        .or_else(|| eos.first().and_then(|&i| tokenizer.id_to_token(i)))
        .unwrap_or_default();
    let bos_token = token_text(&tok_config["bos_token"]).unwrap_or_default();
    let template = ChatTemplate::from_model(
        folder_template(dir, &tok_config)?,
        TemplateOrigin::TokenizerConfig,
        &bos_token,
        &eos_token,
    )?;
    let vocab_bytes = byte_vocab(&tokenizer, vocab_size, &HashSet::new());
    let tok = LoadedTokenizer {
        tokenizer,
        vocab_bytes,
        eos_ids: eos,
        bos_token,
        eos_token,
    };

    let bad_config = |e: serde_json::Error| LocalError::invalid(&config_path, e);
    let mismatch = |e: candle_core::Error| {
        LocalError::invalid(dir, format!("weights do not fit config.json: {e}"))
    };
    // SAFETY: the weights files are memory-mapped, as every candle loader does; they must not
    // be truncated or rewritten while gavel runs (a changed file means a restart anyway).
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, device) }
        .map_err(|e| LocalError::invalid(dir, format!("unreadable safetensors: {e}")))?;
    // candle's configs check the file (types, required keys); the network is ours.
    let (cfg, tied, bias) = match arch {
        Arch::Qwen2 => {
            let c: qwen2::Config = serde_json::from_value(config).map_err(bad_config)?;
            let cfg = QwenConfig {
                arch,
                hidden: c.hidden_size,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: c.hidden_size / c.num_attention_heads,
                layers: c.num_hidden_layers,
                intermediate: c.intermediate_size,
                rms_eps: c.rms_norm_eps,
                rope_theta: c.rope_theta,
                context: c.max_position_embeddings,
                vocab: c.vocab_size,
            };
            (cfg, c.tie_word_embeddings, true)
        }
        Arch::Qwen3 => {
            let c: qwen3::Config = serde_json::from_value(config).map_err(bad_config)?;
            let cfg = QwenConfig {
                arch,
                hidden: c.hidden_size,
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: c.head_dim,
                layers: c.num_hidden_layers,
                intermediate: c.intermediate_size,
                rms_eps: c.rms_norm_eps,
                rope_theta: c.rope_theta,
                context: c.max_position_embeddings,
                vocab: c.vocab_size,
            };
            (cfg, c.tie_word_embeddings, c.attention_bias)
        }
    };
    check_heads(&config_path, &cfg)?;
    let (context_length, num_layers) = (cfg.context, cfg.layers);
    let src: Source<File> = Source::Safetensors { vb, tied, bias };
    let weights = Qwen::load(cfg, src, dtype, device).map_err(mismatch)?;
    let info = ModelInfo {
        path: dir.to_path_buf(),
        format: ModelFormat::Safetensors,
        arch,
        name: raw["_name_or_path"].as_str().map(str::to_string),
        device: device_name(device),
        dtype: format!("{dtype:?}").to_lowercase(),
        vocab_size,
        context_length,
        num_layers,
        weight_bytes: files
            .iter()
            .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
            .sum(),
    };
    Ok(Loaded {
        weights,
        tok,
        template,
        info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_fill_what_candle_requires() {
        let raw = json!({"model_type": "qwen3", "vocab_size": 10, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "sliding_window": null, "rope_parameters": {"rope_theta": 5e6}});
        let c = normalized_config(Path::new("c.json"), Arch::Qwen3, &raw).unwrap();
        let cfg: qwen3::Config = serde_json::from_value(c).unwrap();
        assert_eq!(
            (cfg.head_dim, cfg.num_key_value_heads, cfg.sliding_window),
            (8, 4, None)
        );
        assert_eq!(cfg.rope_theta, 5e6);
        let raw = json!({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "sliding_window": null, "max_position_embeddings": 128});
        let c = normalized_config(Path::new("c.json"), Arch::Qwen2, &raw).unwrap();
        let cfg: qwen2::Config = serde_json::from_value(c).unwrap();
        assert_eq!((cfg.sliding_window, cfg.max_window_layers), (128, 2));
        let e = normalized_config(
            Path::new("c.json"),
            Arch::Qwen2,
            &json!({"hidden_size": 32}),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "c.json: no integer num_attention_heads");
    }

    #[test]
    fn architecture_comes_from_model_type_or_architectures() {
        let p = Path::new("config.json");
        assert_eq!(
            folder_arch(p, &json!({"model_type": "qwen2"})).unwrap(),
            Arch::Qwen2
        );
        let a = json!({"architectures": ["Qwen3ForCausalLM"]});
        assert_eq!(folder_arch(p, &a).unwrap(), Arch::Qwen3);
        let e = folder_arch(
            p,
            &json!({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(r#"model_type "llama", architectures ["LlamaForCausalLM"]"#),
            "{e}"
        );
        let e = folder_arch(p, &json!({"model_type": "qwen2_moe"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("qwen2_moe"), "{e}");
    }
}
