//! Opening a Qwen model from a GGUF file or a Hugging Face model folder. Everything but the
//! tensors is read and checked here, at start-up: a bad path, an unsupported architecture or
//! files that do not fit together fail with one [`LocalError`] line before anything runs.
//!
//! [`ModelFiles::open`] reads each file once; what it holds (the parsed config, tokenizer and
//! template, the GGUF header and its open file, or the safetensors paths) is what the judge's
//! network and the trainer's dense tensors are both built from.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use serde::Serialize;
use serde_json::Value;

use super::chat_template::{template_from_tokenizer_config, ChatTemplate, TemplateOrigin};
use super::config::{md_string, QwenConfig};
use super::device::device_name;
use super::error::LocalError;
use super::files::{read_json, read_json_opt, weight_files};
use super::tokenizer::{
    byte_vocab, eos_ids, ids_of, read_tokenizer_json, token_text, tokenizer_from_gguf,
    LoadedTokenizer,
};
use super::Arch;

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

/// The weights, found and opened but not read.
pub enum WeightFiles {
    /// A GGUF file: its header (metadata, tensor table) and the open file the tensors are read
    /// from (`&File` reads and seeks, so readers need no `&mut`).
    Gguf {
        content: gguf_file::Content,
        file: File,
    },
    /// A folder's safetensors files, in the order their index lists them.
    Safetensors(Vec<PathBuf>),
}

/// A model path opened: see the module docs.
pub struct ModelFiles {
    /// The GGUF file or model folder.
    pub path: PathBuf,
    pub config: QwenConfig,
    pub tokenizer: LoadedTokenizer,
    pub template: ChatTemplate,
    /// `general.name` of a GGUF, `_name_or_path` of a config.json, when present.
    pub name: Option<String>,
    pub weights: WeightFiles,
}

impl ModelFiles {
    /// Opens `path`: a GGUF file or a model folder, or a Hugging Face model id resolved to one
    /// through the Hugging Face cache ([`super::hub::resolve`]: a path that exists wins).
    pub fn open(path: &Path) -> Result<ModelFiles, LocalError> {
        let resolved = super::hub::resolve(path)?;
        let path = resolved.as_path();
        if path.is_dir() {
            return open_folder(path);
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
                    "not a GGUF file (model_path is a GGUF file or a Hugging Face model folder)\
                     {hint}"
                ),
            ));
        }
        open_gguf(path)
    }

    pub fn format(&self) -> ModelFormat {
        match self.weights {
            WeightFiles::Gguf { .. } => ModelFormat::Gguf,
            WeightFiles::Safetensors(_) => ModelFormat::Safetensors,
        }
    }

    /// The compute dtype: `requested`, else f32 on CPU and bf16 on a GPU, for full-precision
    /// weights; always f32 for GGUF (quantized matmuls take f32 activations).
    pub fn compute_dtype(&self, device: &Device, requested: Option<DType>) -> DType {
        match self.weights {
            WeightFiles::Gguf { .. } => DType::F32,
            WeightFiles::Safetensors(_) => requested.unwrap_or(if device.is_cpu() {
                DType::F32
            } else {
                DType::BF16
            }),
        }
    }

    /// What was loaded, with the weights on `device` computing in `dtype`.
    pub fn info(&self, device: &Device, dtype: DType) -> ModelInfo {
        let (dtype, weight_bytes) = match &self.weights {
            WeightFiles::Gguf { content, .. } => (
                content
                    .tensor_infos
                    .get("blk.0.attn_q.weight")
                    .map(|t| format!("{:?}", t.ggml_dtype))
                    .unwrap_or_default(),
                file_size(&self.path),
            ),
            WeightFiles::Safetensors(files) => (
                format!("{dtype:?}").to_lowercase(),
                files.iter().map(|f| file_size(f)).sum(),
            ),
        };
        ModelInfo {
            path: self.path.clone(),
            format: self.format(),
            arch: self.config.arch,
            name: self.name.clone(),
            device: device_name(device),
            dtype,
            vocab_size: self.config.vocab_size,
            context_length: self.config.context_length(),
            num_layers: self.config.num_hidden_layers,
            weight_bytes,
        }
    }
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn open_gguf(path: &Path) -> Result<ModelFiles, LocalError> {
    let mut file = File::open(path).map_err(|e| LocalError::invalid(path, e))?;
    let content = gguf_file::Content::read(&mut file)
        .map_err(|e| LocalError::invalid(path, format!("not a readable GGUF file: {e}")))?;
    let config = QwenConfig::from_gguf(path, &content)?;
    if !content.tensor_infos.contains_key("blk.0.attn_q.weight") {
        return Err(LocalError::invalid(
            path,
            "no tensor blk.0.attn_q.weight in the GGUF file",
        ));
    }
    let md = &content.metadata;
    let tokenizer = tokenizer_from_gguf(path, md, config.vocab_size)?;
    let template = ChatTemplate::from_model(
        md_string(md, "tokenizer.chat_template"),
        TemplateOrigin::Gguf,
        &tokenizer.bos_token,
        &tokenizer.eos_token,
    )?;
    Ok(ModelFiles {
        path: path.to_path_buf(),
        name: md_string(md, "general.name"),
        config,
        tokenizer,
        template,
        weights: WeightFiles::Gguf { content, file },
    })
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

fn open_folder(dir: &Path) -> Result<ModelFiles, LocalError> {
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
    let config = QwenConfig::from_json(&config_path, &raw)?;
    let files = weight_files(dir)?;

    let tokenizer = read_tokenizer_json(&dir.join("tokenizer.json"))?;
    let tok_config = read_json_opt(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gen_config = read_json_opt(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
    let vocab_size = config.vocab_size;
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
    Ok(ModelFiles {
        path: dir.to_path_buf(),
        name: raw["_name_or_path"].as_str().map(str::to_string),
        config,
        tokenizer: LoadedTokenizer {
            tokenizer,
            vocab_bytes,
            eos_ids: eos,
            bos_token,
            eos_token,
        },
        template,
        weights: WeightFiles::Safetensors(files),
    })
}
