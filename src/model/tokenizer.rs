//! Tokenizers of local models: Qwen's byte-level BPE from a `tokenizer.json` or rebuilt from
//! GGUF metadata, and the raw bytes of every token (what the local judge's constrained decoding
//! masks by).
//!
//! A byte-level BPE token is a string over GPT-2's byte↔unicode alphabet (256 printable
//! characters, one per byte: `Ġ` is the space); [`token_bytes`] maps it back. Added tokens
//! (`<|im_start|>`, `<tool_call>`, ...) and GGUF's padding tokens get empty bytes, so constrained
//! decoding never picks them.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use candle_core::quantized::gguf_file::Value as GgufValue;
use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::error::{one_line, LocalError};

/// The pre-tokenizer split of Qwen2, Qwen2.5 and Qwen3 (`tokenizer.ggml.pre = "qwen2"`).
pub const QWEN2_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub mod token_type {
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
    pub const UNUSED: i64 = 5;
    pub const BYTE: i64 = 6;
}

/// GPT-2's byte→character table: printable bytes map to themselves, the rest to U+0100 onwards.
pub fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap_or('\0')
        };
    }
    table
}

/// The inverse of [`bytes_to_unicode`].
pub fn unicode_to_bytes() -> HashMap<char, u8> {
    bytes_to_unicode()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

/// The raw bytes of a byte-level BPE token string, or `None` when it has a character outside
/// GPT-2's alphabet (not a byte-level token).
pub fn token_bytes(token: &str, inverse: &HashMap<char, u8>) -> Option<Vec<u8>> {
    token.chars().map(|c| inverse.get(&c).copied()).collect()
}

/// An added token of a tokenizer: matched whole before BPE. `special` ones are control tokens
/// (`<|im_start|>`); the others are plain added words (`<tool_call>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    pub special: bool,
}

/// A Qwen-style `tokenizer.json` (NFC, Qwen2's split regex, byte-level BPE and decoder) over
/// `vocab` (token strings by id, in GPT-2's alphabet), `merges` (`"a b"`) and `added` tokens.
pub fn qwen_tokenizer_json(vocab: &[String], merges: &[String], added: &[AddedToken]) -> Value {
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false
    });
    let vocab: serde_json::Map<String, Value> = vocab
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), json!(id)))
        .collect();
    let added: Vec<Value> = added
        .iter()
        .map(|t| {
            json!({
                "id": t.id, "content": t.content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": t.special
            })
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_REGEX}, "behavior": "Isolated",
             "invert": false},
            byte_level.clone()
        ]},
        "post_processor": byte_level.clone(),
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": merges
        }
    })
}

/// A tokenizer with what the judge needs beside it.
pub struct LoadedTokenizer {
    pub tokenizer: Tokenizer,
    /// Raw bytes per token id, `len` = the model's vocabulary (logits) size; empty for added,
    /// control, unused and padding ids.
    pub vocab_bytes: Vec<Vec<u8>>,
    /// Token ids that end generation, sorted.
    pub eos_ids: Vec<u32>,
    /// Text of the BOS and EOS tokens, for chat templates (`""` when the model has none; a
    /// GGUF's BOS only when it sets `tokenizer.ggml.add_bos_token`).
    pub bos_token: String,
    pub eos_token: String,
}

impl LoadedTokenizer {
    /// Token ids of `text`. Special-token text in it (`<|im_start|>`) becomes the special
    /// token, as a rendered chat prompt needs; no BOS is added (Qwen has none).
    /// The tokens whose probabilities stand for each choice of a question: the first token of each
    /// of its spellings (`["yes", "Yes", " yes"]`), each token counted for the first choice that
    /// names it. An error names a choice none of whose spellings has a token below `vocab`.
    pub fn choice_tokens(
        &self,
        choices: &[Vec<String>],
        vocab: usize,
    ) -> Result<Vec<Vec<u32>>, LocalError> {
        let mut counted = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(choices.len());
        for spellings in choices {
            let mut ids = Vec::new();
            let mut any = false;
            for s in spellings {
                let first = self.encode(s)?.first().copied();
                if let Some(id) = first.filter(|id| (*id as usize) < vocab) {
                    any = true;
                    if counted.insert(id) {
                        ids.push(id);
                    }
                }
            }
            if !any {
                return Err(LocalError::Tokenizer(format!(
                    "no token of the answer {spellings:?} in the model's vocabulary"
                )));
            }
            out.push(ids);
        }
        Ok(out)
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LocalError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LocalError::Tokenizer(one_line(&e.to_string())))
    }

    /// The text of `ids`; `skip_special` leaves special tokens out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, LocalError> {
        self.tokenizer
            .decode(ids, skip_special)
            .map_err(|e| LocalError::Tokenizer(one_line(&e.to_string())))
    }
}

/// Reads a Hugging Face `tokenizer.json`, which must be a byte-level BPE as Qwen's is.
pub fn read_tokenizer_json(path: &Path) -> Result<Tokenizer, LocalError> {
    let text = std::fs::read_to_string(path).map_err(|e| LocalError::invalid(path, e))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| LocalError::invalid(path, e))?;
    let model = json["model"]["type"].as_str().unwrap_or("");
    let decoder = &json["decoder"];
    let byte_level = decoder["type"] == "ByteLevel"
        || decoder["decoders"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["type"] == "ByteLevel"));
    if model != "BPE" || !byte_level {
        return Err(LocalError::invalid(
            path,
            format!(
                "not a byte-level BPE tokenizer (model {model:?}, decoder {}); the local judge \
                 needs Qwen's byte-level BPE",
                decoder["type"]
            ),
        ));
    }
    text.parse::<Tokenizer>()
        .map_err(|e| LocalError::invalid(path, e))
}

/// Raw bytes per token id for `n` ids: empty for added tokens, ids the tokenizer does not
/// know, tokens outside GPT-2's alphabet and ids `unusable` names.
pub fn byte_vocab(tokenizer: &Tokenizer, n: usize, unusable: &HashSet<u32>) -> Vec<Vec<u8>> {
    let inverse = unicode_to_bytes();
    let added = tokenizer.get_added_tokens_decoder();
    (0..n as u32)
        .map(|id| {
            if added.contains_key(&id) || unusable.contains(&id) {
                return Vec::new();
            }
            tokenizer
                .id_to_token(id)
                .and_then(|t| token_bytes(&t, &inverse))
                .unwrap_or_default()
        })
        .collect()
}

/// The EOS ids: those the model's files name, plus `<|im_end|>` and `<|endoftext|>` when the
/// tokenizer has them (a chat model ends its turn with the first, a base model with the second).
pub fn eos_ids(tokenizer: &Tokenizer, named: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut ids: Vec<u32> = named.into_iter().collect();
    for t in ["<|im_end|>", "<|endoftext|>"] {
        ids.extend(tokenizer.token_to_id(t));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A GGUF metadata value as an integer, whatever its integer type.
pub(crate) fn gguf_int(v: &GgufValue) -> Option<i64> {
    Some(match v {
        GgufValue::U8(x) => *x as i64,
        GgufValue::I8(x) => *x as i64,
        GgufValue::U16(x) => *x as i64,
        GgufValue::I16(x) => *x as i64,
        GgufValue::U32(x) => *x as i64,
        GgufValue::I32(x) => *x as i64,
        GgufValue::U64(x) => i64::try_from(*x).ok()?,
        GgufValue::I64(x) => *x,
        _ => return None,
    })
}

fn gguf_strings(md: &HashMap<String, GgufValue>, key: &str) -> Result<Vec<String>, String> {
    let v = md
        .get(key)
        .ok_or_else(|| format!("no {key} in the GGUF metadata"))?;
    let GgufValue::Array(items) = v else {
        return Err(format!("{key} is not an array"));
    };
    items
        .iter()
        .map(|s| match s {
            GgufValue::String(s) => Ok(s.clone()),
            _ => Err(format!("{key} holds a non-string")),
        })
        .collect()
}

/// Rebuilds the tokenizer of a Qwen GGUF from its metadata (`tokenizer.ggml.*`): a byte-level
/// BPE over `tokens` and `merges`, control tokens (type 3) as special added tokens, user-defined
/// ones (type 4) as plain added tokens, as llama.cpp's converter wrote them from Qwen's
/// `tokenizer.json`. `n_vocab` is the model's vocabulary (embedding rows).
pub fn tokenizer_from_gguf(
    path: &Path,
    md: &HashMap<String, GgufValue>,
    n_vocab: usize,
) -> Result<LoadedTokenizer, LocalError> {
    let bad = |m: String| LocalError::invalid(path, m);
    let model = md
        .get("tokenizer.ggml.model")
        .and_then(|v| v.to_string().ok());
    if model.map(String::as_str) != Some("gpt2") {
        return Err(bad(format!(
            "tokenizer.ggml.model is {model:?}; the local judge needs a byte-level BPE (\"gpt2\") \
             tokenizer as Qwen's"
        )));
    }
    let pre = md
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok());
    if let Some(p) = pre.filter(|p| p.as_str() != "qwen2") {
        return Err(bad(format!(
            "tokenizer.ggml.pre is {p:?}; the local judge knows Qwen's pre-tokenizer \"qwen2\""
        )));
    }
    let tokens = gguf_strings(md, "tokenizer.ggml.tokens").map_err(bad)?;
    let merges = gguf_strings(md, "tokenizer.ggml.merges").map_err(bad)?;
    let types: Vec<i64> = match md.get("tokenizer.ggml.token_type") {
        Some(GgufValue::Array(a)) => a.iter().map(|v| gguf_int(v).unwrap_or(0)).collect(),
        _ => vec![token_type::NORMAL; tokens.len()],
    };
    if types.len() != tokens.len() {
        return Err(bad(format!(
            "tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    if tokens.len() > n_vocab {
        return Err(bad(format!(
            "the tokenizer has {} tokens but token_embd.weight only {n_vocab} rows",
            tokens.len()
        )));
    }
    let unique: HashSet<&String> = tokens.iter().collect();
    if unique.len() != tokens.len() {
        return Err(bad("tokenizer.ggml.tokens has duplicate tokens".into()));
    }
    let added: Vec<AddedToken> = (0..tokens.len())
        .filter(|&i| matches!(types[i], token_type::CONTROL | token_type::USER_DEFINED))
        .map(|i| AddedToken {
            id: i as u32,
            content: tokens[i].clone(),
            special: types[i] == token_type::CONTROL,
        })
        .collect();
    let json = qwen_tokenizer_json(&tokens, &merges, &added);
    let tokenizer: Tokenizer = json.to_string().parse().map_err(|e| {
        bad(format!(
            "cannot build the tokenizer from tokenizer.ggml.*: {e}"
        ))
    })?;

    let unusable: HashSet<u32> = (0..tokens.len())
        .filter(|&i| types[i] != token_type::NORMAL)
        .map(|i| i as u32)
        .collect();
    let vocab_bytes = byte_vocab(&tokenizer, n_vocab, &unusable);
    let id_of = |key: &str| {
        md.get(key)
            .and_then(gguf_int)
            .and_then(|i| u32::try_from(i).ok())
            .filter(|&i| (i as usize) < tokens.len())
    };
    let text_of = |id: Option<u32>| id.map(|i| tokens[i as usize].clone()).unwrap_or_default();
    // As transformers sees it: Qwen's tokenizer_config has no BOS (`bos_token: null`); the
    // converter takes one from config.json but marks it unused (`add_bos_token = false`).
    let adds_bos = matches!(
        md.get("tokenizer.ggml.add_bos_token"),
        Some(GgufValue::Bool(true))
    );
    let bos = id_of("tokenizer.ggml.bos_token_id").filter(|_| adds_bos);
    let eos = id_of("tokenizer.ggml.eos_token_id");
    Ok(LoadedTokenizer {
        eos_ids: eos_ids(&tokenizer, eos),
        bos_token: text_of(bos),
        eos_token: text_of(eos),
        tokenizer,
        vocab_bytes,
    })
}

/// The token text `v` names: a tokenizer_config.json `"<|im_end|>"` or `{"content": ...}`.
pub(crate) fn token_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// Ids from a config's `eos_token_id` (an integer or a list of them).
pub(crate) fn ids_of(v: &Value) -> Vec<u32> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .into_iter()
            .collect(),
        Value::Array(a) => a.iter().flat_map(ids_of).collect(),
        _ => Vec::new(),
    }
}

/// Each answer's probability mass in next-token `logits` (the softmax over the whole
/// vocabulary, summed over the answer's tokens from [`LoadedTokenizer::choice_tokens`]): what
/// the local judge's questions read, and what the judge trainer compares with. The arithmetic is
/// the one every judge shares ([`crate::domain::verdict::answer_masses`]).
pub fn answer_masses(logits: &[f32], answers: &[Vec<u32>]) -> Vec<f64> {
    use crate::domain::verdict;
    let lp = verdict::logprobs_at(logits, answers.iter().flatten().copied());
    verdict::answer_masses(&lp, answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_gpt2s() {
        let t = bytes_to_unicode();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0xA0], 'ł');
        assert_eq!(t[0xAD], 'Ń');
        let inv = unicode_to_bytes();
        assert_eq!(inv.len(), 256);
        assert_eq!(token_bytes("Ġhello", &inv), Some(b" hello".to_vec()));
        assert_eq!(token_bytes("Ã©", &inv), Some("é".as_bytes().to_vec()));
        assert_eq!(token_bytes("▁x", &inv), None);
    }

    #[test]
    fn eos_from_config_values() {
        assert_eq!(ids_of(&json!([151645, 151643])), vec![151645, 151643]);
        assert_eq!(ids_of(&json!(2)), vec![2]);
        assert_eq!(
            token_text(&json!({"content": "<|im_end|>"})).unwrap(),
            "<|im_end|>"
        );
        assert_eq!(token_text(&json!(null)), None);
    }
}
